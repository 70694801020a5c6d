"""A user's own pattern (``--parse``): a regular expression with named groups, searched in every line.

The group ``step`` (a whole number) is required; groups named like a step column (``loss``, ``lr``,
``grad_norm``, ``tokens``, ``step_time_s``, ``tokens_per_s``... or an alias such as ``learning_rate``) fill
it; every other group is a custom metric in ``extra``. A group that did not take part in a match is
left empty; a group that matched text which is not a number makes the line unparsed.
"""

from __future__ import annotations

import re

from ledger.errors import BadInput
from ledger.ingest.formats.base import BAD, Format, Parsed, number, put

NAME = "pattern"


def compile_pattern(text: str) -> re.Pattern[str]:
    """The pattern, or a one-line BadInput saying what is wrong with it."""
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise BadInput(f"--parse {text!r}: not a valid regular expression ({exc})") from exc
    if "step" not in pattern.groupindex:
        raise BadInput(f"--parse {text!r}: needs a named group for the step, e.g. 'step (?P<step>\\d+) loss "
                       "(?P<loss>\\S+)'")
    if len(pattern.groupindex) < 2:
        raise BadInput(f"--parse {text!r}: name at least one metric besides the step, e.g. (?P<loss>\\S+)")
    return pattern


def line_format(pattern: re.Pattern[str]) -> Format:
    """The pattern as a line format."""
    names = [n for n in pattern.groupindex if n != "step"]

    def parse_line(line: str) -> Parsed | None:
        m = pattern.search(line)
        if not m:
            return None
        raw_step = (m.group("step") or "").replace(",", "")
        if not raw_step.isdigit():
            return BAD
        metrics: dict[str, float] = {}
        for name in names:
            raw = m.group(name)
            if raw is None:
                continue
            value = number(raw)
            if value is None:
                return BAD
            put(metrics, name, value)
        return Parsed(step=int(raw_step), metrics=metrics)

    return parse_line


__all__ = ["NAME", "compile_pattern", "line_format"]
