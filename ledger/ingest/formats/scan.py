"""Reading a log's lines through the formats, cheaply and in bounded memory, and turning the parsed rows
into metric tables.

:class:`LineCapture` is a consumer: ``feed(bytes)`` any chunks of output, ``close()`` at the end. It cuts
lines itself (``\\n``; ``\\r`` separates progress-bar redraws), keeps at most :data:`MAX_LINE` bytes of a
line (a longer line is counted and skipped, however long it is), and offers a line to the formats only
when it contains one of a few words (:data:`_WORDS`), found by ``bytes.find`` over whole blocks: the rest of
the output costs no Python work per line.

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
from ledger.ingest.formats.keyvalue import NAME as GENERIC
from ledger.ingest.formats.template import Templates

MAX_LINE = 1 << 16
"""Longest line (bytes) offered to the formats; longer lines are skipped and counted."""
BLOCK = 1 << 20
_WORDS = (b"loss", b"Loss", b"LOSS", b"step", b"Step", b"STEP", b"iter", b"Iter", b"'eval_")
"""A line is offered to the formats only when it holds one of these (every format's step lines do)."""
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
    ``hint=False`` offers every line (a user's pattern may match lines without the usual words);
    ``fast=False`` reads every line with the formats' parsers (no templates: :mod:`.template`)."""

    def __init__(self, formats: Mapping[str, Format] | None = None, *, hint: bool = True, fast: bool = True) -> None:
        self.formats = dict(LINE_FORMATS if formats is None else formats)
        self.hint = hint
        self.rows = {name: Rows(name) for name in self.formats}
        self.lines = 0
        self.long_lines = 0
        self.ended_without_newline = False
        self._pending = b""
        self._skipping = False
        self._last: str | None = None
        self.templates = Templates(self.formats, enabled=fast)

    def feed(self, data: bytes) -> None:
        """A chunk of output (any size, lines may span chunks)."""
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if self._skipping:  # the rest of an overlong line
            end = data.find(b"\n")
            if end < 0:
                return
            self._skipping = False
            data = data[end + 1:]
        last = data.rfind(b"\n")
        if last >= 0:
            self._lines(data, last + 1)
        rest = len(data) - (last + 1)
        if rest > MAX_LINE:
            self.long_lines += 1
            self.lines += 1
            self._skipping = True
        elif rest:
            self._pending = data[last + 1:]

    def _lines(self, data: bytes, size: int) -> None:
        """The complete lines of ``data[:size]``: lines of the log's usual step shape are read a block at a
        time (:meth:`Template.read_block`); of the others, only those holding a hint word are looked at (found
        by ``bytes.find`` over the whole block, so the other lines cost nothing)."""
        fast = self.templates.for_blocks()
        read: list[tuple[int, Parsed]] = []
        if fast is not None and size > 1 << 16:
            text = data[:size].decode("utf-8", "replace")
            rest, read = fast.read_block(text, lambda line: self.templates.parse(fast.format, line))
            if read:
                data = rest.encode("utf-8")
                size = len(data)
        if not self.hint:
            starts = None
        else:
            found: dict[int, int] = {}
            find, rfind = data.find, data.rfind
            for word in _WORDS:
                at = find(word, 0, size)
                while at >= 0:
                    start = rfind(b"\n", 0, at) + 1
                    end = find(b"\n", at, size)
                    found[start] = end
                    at = find(word, end, size)
            starts = sorted(found.items())
        if starts is None:
            starts = []
            pos = 0
            while pos < size:
                end = data.find(b"\n", pos, size)
                starts.append((pos, end))
                pos = end + 1
        first = self.lines
        base = first
        counted = 0
        count = data.count
        rows = self.rows[fast.format] if read and fast is not None else None
        i = 0
        for start, end in starts:
            base += count(b"\n", counted, start)
            counted = start
            while rows is not None and i < len(read) and first + read[i][0] < base:  # file order: first wins
                rows.add(read[i][1], first + read[i][0] + 1)
                i += 1
            self._line(data, start, end, base + 1)
        if rows is not None:
            for index, parsed in read[i:]:
                rows.add(parsed, first + index + 1)
        self.lines = base + count(b"\n", counted, size)

    def _line(self, data: bytes, start: int, end: int, lineno: int) -> None:
        if end - start > MAX_LINE:
            self.long_lines += 1
            return
        raw = data[start:end]
        for segment in raw.split(b"\r") if b"\r" in raw else (raw,):
            if segment:
                self.offer(segment.decode("utf-8", "replace"), lineno)

    def offer(self, line: str, lineno: int) -> None:
        """One line (without its line end) to the formats; the first that recognises it keeps it."""
        fast = self.templates.read(line)
        if fast is not None:
            self.rows[fast[0]].add(fast[1], lineno)
            return
        _, text = strip_rank(line)
        if "iteration" in text and _MEGATRON.search(text):
            return  # Megatron-LM's own parser reads these
        last = self._last
        if last is not None:  # a log keeps to its format: try the last specific one that read a line first
            parsed = self.formats[last](text)
            if parsed is not None and parsed is not BAD:
                self.rows[last].add(parsed, lineno)
                self.templates.learn(last, line, parsed)
                return
        for name, parse in self.formats.items():
            parsed = parse(text)
            if parsed is not None:
                self.rows[name].add(parsed, lineno)
                if parsed is not BAD:
                    if name != GENERIC:
                        self._last = name
                    self.templates.learn(name, line, parsed)
                return

    def close(self) -> None:
        """End of output: a last line without a line end is read too."""
        if self._pending and not self._skipping:
            self.ended_without_newline = True
            data, self._pending = self._pending + b"\n", b""
            self._lines(data, len(data))
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
