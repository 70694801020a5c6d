"""A reader for the small YAML subset of Megatron-LM CI ``model_config.yaml`` files: nested mappings by
indentation, scalars, ``- item`` lists, ``#`` comments, quoted strings. PyYAML is not a dependency of the
ledger; this is enough for those files, and anything outside the subset raises :class:`YamlError` with
the line number rather than being misread.

Scalars stay text except ``true``/``false``/``null``: launch flags are text, and YAML 1.1's number rules
(``1e-2`` is a string, ``.01`` a float) are exactly what a flag reader should not depend on.
"""

from __future__ import annotations

import re
from typing import Any


class YamlError(ValueError):
    """Text outside the supported subset."""


_KEY = re.compile(r"^(?P<key>[^\s#'\"][^:#]*?|'[^']*'|\"[^\"]*\")\s*:(?:\s+(?P<value>.*))?$")


def _strip_comment(line: str) -> str:
    out, quote = [], ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def scalar(text: str) -> Any:
    """A scalar: quotes removed; true/false/null recognised; everything else kept as text."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "~", ""):
        return None
    if t[:1] == "[" and t[-1:] == "]":
        return [scalar(x) for x in t[1:-1].split(",") if x.strip()]
    return t


def load(text: str) -> dict[str, Any]:
    """Parse the subset into nested dicts/lists."""
    lines = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise YamlError(f"line {n}: tabs in indentation")
        line = _strip_comment(raw)
        if line.strip() and line.strip() != "---":
            lines.append((n, len(line) - len(line.lstrip()), line.strip()))
    value, pos = _block(lines, 0, 0)
    if pos != len(lines):
        raise YamlError(f"line {lines[pos][0]}: unexpected indentation")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise YamlError("the document is not a mapping")
    return value


def _block(lines: list[tuple[int, int, str]], pos: int, indent: int) -> tuple[Any, int]:
    if pos >= len(lines):
        return None, pos
    n, ind, text = lines[pos]
    if ind < indent:
        return None, pos
    if text.startswith("- ") or text == "-":
        items = []
        while pos < len(lines) and lines[pos][1] == ind and (lines[pos][2].startswith("- ") or lines[pos][2] == "-"):
            items.append(scalar(lines[pos][2][1:]))
            pos += 1
        return items, pos
    mapping: dict[str, Any] = {}
    while pos < len(lines):
        n, ind2, text = lines[pos]
        if ind2 < ind:
            break
        if ind2 > ind:
            raise YamlError(f"line {n}: unexpected indentation")
        m = _KEY.match(text)
        if not m:
            raise YamlError(f"line {n}: expected 'key: value', found {text[:40]!r}")
        key = str(scalar(m.group("key")))
        pos += 1
        if m.group("value") is not None and m.group("value").strip():
            value = m.group("value").strip()
            if value[:1] in "|>":
                raise YamlError(f"line {n}: block scalars are not supported")
            mapping[key] = scalar(value)
        else:
            child, pos = _block(lines, pos, ind + 1)
            mapping[key] = child
    return mapping, pos


__all__ = ["YamlError", "load", "scalar"]
