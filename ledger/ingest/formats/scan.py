"""Reading a log's lines through the formats, cheaply and in bounded memory, and turning the parsed rows
into metric tables.

:class:`LineCapture` is a consumer: ``feed(bytes)`` any chunks of output, ``close()`` at the end. It cuts
lines itself (``\\n``; ``\\r`` separates progress-bar redraws), keeps at most :data:`MAX_LINE` bytes of a
line (a longer line is counted and skipped, however long it is), and offers a line to the formats only
when it contains one of a few words (:data:`_HINT`): the cost of the rest of the output is one regular
expression search per line.

Rows of one format are merged by step (the first value of each metric wins: launchers that print the same
line on every rank add nothing). The steps table of a log comes from the format that gave the most steps;
the others are reported, never mixed in (two formats would number steps differently).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ledger.ingest.common import strip_rank, table
from ledger.ingest.formats import LINE_FORMATS
from ledger.ingest.formats.base import BAD, INT_COLUMNS, STEP_COLUMNS, Format, Parsed

MAX_LINE = 1 << 16
"""Longest line (bytes) offered to the formats; longer lines are skipped and counted."""
BLOCK = 1 << 20
_HINT = re.compile(rb"[Ll]oss|LOSS|[Ss]tep|STEP|[Ii]ter|'eval_")
_MEGATRON = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|")


@dataclass
class Rows:
    """What one format (or file) gave: steps merged by step, evals, unparsed line numbers."""

    name: str
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    evals: list[tuple[int, str | None, str, float]] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)
    ordinal: bool = False
    last_step: int | None = None
    _count: int = 0

    def add(self, parsed: Parsed, where: int = 0) -> None:
        """One parsed line (``where``: its line number, for problems)."""
        if parsed is BAD:
            self.unparsed.append(where)
            return
        step = parsed.step
        if parsed.metrics and set(parsed.metrics) - {"epoch"}:
            if step is None:  # a format that prints no step number: number the lines
                self._count += 1
                step, self.ordinal = self._count, True
            row = self.steps.setdefault(step, {})
            for k, v in parsed.metrics.items():
                row.setdefault(k, v)
            self.last_step = step
        if parsed.evals:
            at = step if step is not None else self.last_step
            if at is None:
                at = 0
            self.evals.extend((at, split, metric, value) for split, metric, value in parsed.evals)

    def columns(self) -> list[str]:
        """Metric names of the steps, columns first, in a stable order."""
        names: dict[str, None] = {}
        for row in self.steps.values():
            names.update(dict.fromkeys(row))
        known = [c for c in ("loss", "lr", "grad_norm") if c in names]
        return known + sorted(n for n in names if n not in known)

    def tables(self) -> dict[str, pa.Table]:
        """The steps and evals tables (rank 0, no wall time: a log line has none we can trust)."""
        steps = sorted(self.steps.items())
        cols: dict[str, list[object]] = {"rank": [0] * len(steps), "step": [s for s, _ in steps]}
        for name in sorted(STEP_COLUMNS):
            values = [row.get(name) for _, row in steps]
            if any(v is not None for v in values):
                cols[name] = [None if v is None else (_int(v) if name in INT_COLUMNS else v) for v in values]
        extras: list[object] = [[(k, v) for k, v in row.items() if k not in STEP_COLUMNS] or None for _, row in steps]
        if any(extras):
            cols["extra"] = extras
        evals = self.evals
        ev_cols: dict[str, list[object]] = {
            "rank": [0] * len(evals), "step": [e[0] for e in evals], "split": [e[1] for e in evals],
            "metric": [e[2] for e in evals], "value": [e[3] for e in evals],
        }
        return {"steps": table("steps", cols), "evals": table("evals", ev_cols)}


def _int(v: float) -> int | None:
    return int(v) if math.isfinite(v) else None


class LineCapture:
    """Feed it output, get rows per format. ``formats`` defaults to all line formats (autodetection);
    ``hint=False`` offers every line (a user's pattern may match lines without the usual words)."""

    def __init__(self, formats: Mapping[str, Format] | None = None, *, hint: bool = True) -> None:
        self.formats = dict(LINE_FORMATS if formats is None else formats)
        self.hint = hint
        self.rows = {name: Rows(name) for name in self.formats}
        self.lines = 0
        self.long_lines = 0
        self.ended_without_newline = False
        self._pending = b""
        self._skipping = False

    def feed(self, data: bytes) -> None:
        """A chunk of output (any size, lines may span chunks)."""
        if self._pending:
            data = self._pending + data
            self._pending = b""
        start = 0
        find = data.find
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._line(data, start, end)
            start = end + 1
        rest = len(data) - start
        if rest > MAX_LINE:
            if not self._skipping:
                self.long_lines += 1
                self.lines += 1
            self._skipping = True
        elif rest and not self._skipping:
            self._pending = data[start:]

    def _line(self, data: bytes, start: int, end: int) -> None:
        self.lines += 1
        if end - start > MAX_LINE:
            self.long_lines += 1
            return
        if self.hint and not _HINT.search(data, start, end):
            return
        raw = data[start:end]
        for segment in raw.split(b"\r") if b"\r" in raw else (raw,):
            if segment:
                self.offer(segment.decode("utf-8", "replace"), self.lines)

    def offer(self, line: str, lineno: int) -> None:
        """One line (without its line end) to the formats; the first that recognises it keeps it."""
        _, text = strip_rank(line)
        if "iteration" in text and _MEGATRON.search(text):
            return  # Megatron-LM's own parser reads these
        for name, parse in self.formats.items():
            parsed = parse(text)
            if parsed is not None:
                self.rows[name].add(parsed, lineno)
                return

    def close(self) -> None:
        """End of output: a last line without a line end is read too."""
        if self._pending and not self._skipping:
            self.ended_without_newline = True
            data, self._pending = self._pending, b""
            self._line(data, 0, len(data))
        self._pending = b""

    def feed_file(self, path: Path) -> None:
        """The whole file, block by block."""
        with path.open("rb") as f:
            for block in iter(lambda: f.read(BLOCK), b""):
                self.feed(block)
        self.close()

    def best(self) -> Rows | None:
        """The format that gave the most steps (then evals); None when no format gave anything."""
        found = [r for r in self.rows.values() if r.steps or r.evals]
        if not found:
            return None
        return max(found, key=lambda r: (len(r.steps), len(r.evals)))

    def others(self) -> list[Rows]:
        """Formats that also matched some lines but were not chosen."""
        best = self.best()
        return [r for r in self.rows.values() if (r.steps or r.evals) and r is not best]


def rows_of(name: str, parsed: Iterable[Parsed]) -> Rows:
    """Rows of a file format."""
    rows = Rows(name)
    for i, p in enumerate(parsed, start=1):
        rows.add(p, i)
    return rows


__all__ = ["BLOCK", "MAX_LINE", "LineCapture", "Rows", "rows_of"]
