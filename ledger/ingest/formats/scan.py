"""Reading a log's lines through the formats, cheaply and in bounded memory, and turning the parsed rows
into metric tables.

:class:`LineCapture` is a consumer: ``feed(bytes)`` any chunks of output, ``close()`` at the end. It cuts
lines itself (``\\n``; ``\\r`` separates progress-bar redraws), keeps at most :data:`MAX_LINE` bytes of a
line (of a longer line, however long, only its last segment is read, when that fits: a step line logged after a
progress bar's redraws on the same stream; otherwise the line is counted and skipped), and offers a line to the
formats only when it contains one of a few words (:data:`_WORDS`), found by ``bytes.find`` over whole blocks:
the rest of the output costs no Python work per line.

Rows of one format are merged by step (the first value of each metric wins: launchers that print the same
line on every rank add nothing). The steps table of a log comes from the format that gave the most steps;
the others are reported, never mixed in (two formats would number steps differently).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ledger import _native
from ledger.ingest.common import strip_rank, table
from ledger.ingest.formats import LINE_FORMATS, columns
from ledger.ingest.formats.base import BAD, INT_COLUMNS, STEP_COLUMNS, Format, Parsed
from ledger.ingest.formats.keyvalue import NAME as GENERIC
from ledger.ingest.formats.template import Templates, agrees, checks
from schemas.tables import EXTRA

MAX_LINE = 1 << 16
"""Longest line (bytes) offered to the formats; longer lines are skipped and counted."""
BLOCK = 1 << 20
BLOCK_MIN = 1 << 16
"""Blocks of complete lines larger than this are read by templates as columns; smaller ones line by line."""
_WORDS = (b"loss", b"Loss", b"LOSS", b"step", b"Step", b"STEP", b"iter", b"Iter", b"'eval_")
"""A line is offered to the formats only when it holds one of these (every format's step lines do)."""
_HINT_PATTERN = "|".join(re.escape(w.decode()) for w in _WORDS)
"""The hint words as one pattern (RE2 syntax)."""
_MEGATRON = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|")
_ESCAPES = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])")
r"""ECMA-48 escape sequences, which a terminal acts on rather than shows: control sequences (``ESC [`` parameters,
final byte: colours, cursor moves), operating-system commands (``ESC ]`` up to ``BEL`` or ``ESC \``: titles,
hyperlinks) and the other escapes (``ESC`` intermediates, final byte). A line's are removed before the formats see
it: torchtitan colours its step lines unless told not to (``\x1b[31mstep:  1  \x1b[32mloss: ...\x1b[39m``), and a
launch at a terminal gets one (:mod:`ledger.record.streams`), so colouring loggers colour. The log keeps them."""


@cache
def _hints() -> Any:
    """The hint words as one RE2 pattern (one scan of a block finds the lines holding any of them)."""
    import re2

    return re2.compile(_HINT_PATTERN.encode())


Column = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]", "npt.NDArray[np.float64]"]
"""One metric's observations: (line number, step, value), each an array."""
_INT64 = 1 << 63
COMPACT_ROWS = 1 << 16
"""Rows read as columns that are merged by step once this many (or as many as already merged) are pending."""


@dataclass
class Merged:
    """Rows merged by step: the sorted distinct steps and, per metric, its values and where it was given."""

    steps: npt.NDArray[np.int64]
    values: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]]


@dataclass
class Rows:
    """What one format (or file) gave: steps merged by step (the first value of each metric in file order
    wins), evals, unparsed line numbers.

    Lines read by a format's parser come one by one (:meth:`add`); the lines of a block read by a template
    come as columns (:meth:`add_columns`), kept as numpy arrays, never one Python object per line."""

    name: str
    evals: list[tuple[int, str | None, str, float]] = field(default_factory=list)
    unparsed: list[int] = field(default_factory=list)
    ordinal: bool = False
    last_step: int | None = None
    _count: int = 0
    _slow: dict[int, dict[str, tuple[float, int]]] = field(default_factory=dict)
    _names: dict[str, None] = field(default_factory=dict)
    _chunks: list[dict[str, Column]] = field(default_factory=list)
    _pending: int = 0
    _compacted: int = 0
    _last_line: int = -1
    _fast_last: tuple[int, int] | None = None
    _merged: Merged | None = None

    def add(self, parsed: Parsed, where: int = 0) -> None:
        """One parsed line (``where``: its line number, for problems and for the order of values)."""
        step = parsed.step
        if parsed is BAD or (step is not None and not -_INT64 <= step < _INT64):  # a step no table can hold
            self.unparsed.append(where)
            return
        if parsed.metrics and set(parsed.metrics) - {"epoch"}:
            if step is None:  # a format that prints no step number: number the lines
                self._count += 1
                step, self.ordinal = self._count, True
            row = self._slow.setdefault(step, {})
            for k, v in parsed.metrics.items():
                if k not in row:
                    row[k] = (v, where)
                    self._names.setdefault(k)
            self.last_step, self._last_line = step, where
            self._merged = None
        if parsed.evals:
            at = step if step is not None else self._step_before(where)
            if at is None:
                at = 0
            self.evals.extend((at, split, metric, value) for split, metric, value in parsed.evals)

    def add_columns(self, lines: npt.NDArray[np.int64], steps: npt.NDArray[np.int64],
                    values: Mapping[str, npt.NDArray[np.float64]]) -> None:
        """Lines read as columns: their line numbers (increasing), steps and each metric's values."""
        if not len(lines) or not set(values) - {"epoch"}:
            return
        if self._chunks:  # the latest chunk is always as read (lines increasing): its last row is the latest
            last_lines, last_steps, _ = next(iter(self._chunks[-1].values()))
            self._fast_last = (int(last_lines[-1]), int(last_steps[-1]))
        if self._pending >= max(COMPACT_ROWS, self._compacted):
            self._compact()
        self._chunks.append({name: (lines, steps, column) for name, column in values.items()})
        self._names.update(dict.fromkeys(values))
        self._pending += len(lines)
        self._merged = None

    def _step_before(self, where: int) -> int | None:
        """The latest step seen before line ``where`` (evals printed without a step belong to it)."""
        best = (self._last_line, self.last_step) if self.last_step is not None and self._last_line < where else None
        fast = self._fast_last
        if self._chunks:
            lines, steps, _ = next(iter(self._chunks[-1].values()))
            i = int(np.searchsorted(lines, where)) - 1
            if i >= 0:
                fast = (int(lines[i]), int(steps[i]))
        if fast is not None and fast[0] < where and (best is None or fast[0] > best[0]):
            best = fast
        return None if best is None else best[1]

    def _compact(self) -> None:
        """Merge the columns read so far by step (first in file order wins), keeping where each value came from."""
        merged: dict[str, Column] = {}
        for name in self._names:
            parts = [chunk[name] for chunk in self._chunks if name in chunk]
            if parts:
                merged[name] = _first_by_step(parts)
        self._chunks = [merged] if merged else []
        self._compacted = max((len(c[1]) for c in merged.values()), default=0)
        self._pending = 0

    def merged(self) -> Merged:
        """All rows merged by step."""
        if self._merged is not None:
            return self._merged
        columns: dict[str, list[Column]] = {name: [chunk[name] for chunk in self._chunks if name in chunk]
                                            for name in self._names}
        slow: dict[str, tuple[list[int], list[int], list[float]]] = {}
        for step, row in self._slow.items():
            for k, (v, line) in row.items():
                lines, steps, vals = slow.setdefault(k, ([], [], []))
                lines.append(line)
                steps.append(step)
                vals.append(v)
        for k, (line_list, step_list, value_list) in slow.items():  # first: the lines read one by one are
            columns.setdefault(k, []).insert(0, (  # mostly the first of the log (before a template is learned)
                np.asarray(line_list, np.int64), np.asarray(step_list, np.int64), np.asarray(value_list, np.float64)))
        firsts = {name: _first_by_step(columns[name])[1:] for name in self._names if columns.get(name)}
        all_steps = [steps for steps, _ in firsts.values()]
        every = bool(all_steps) and all(np.array_equal(all_steps[0], other) for other in all_steps[1:])
        if every:
            distinct = all_steps[0]  # every metric on every step (most logs): the steps as merged
        else:
            distinct = _distinct(np.concatenate(all_steps)) if all_steps else np.empty(0, np.int64)
        values: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
        for name, (first_steps, first_values) in firsts.items():
            if every:  # each metric's values already one per step, in the steps' order
                values[name] = (first_values, np.ones(len(distinct), bool))
                continue
            column = np.full(len(distinct), np.nan)
            present = np.zeros(len(distinct), bool)
            at = np.searchsorted(distinct, first_steps)
            column[at] = first_values
            present[at] = True
            values[name] = (column, present)
        self._merged = Merged(distinct, values)
        return self._merged

    def frozen(self) -> Rows:
        """These rows as :meth:`merged` has them, without the columns and lines they were merged from (what the
        output's parser process sends back: about half the bytes). Nothing may be added to them."""
        return replace(self, _chunks=[], _slow={}, _pending=0, _merged=self.merged())

    def step_count(self) -> int:
        """Distinct steps."""
        if self._merged is not None:
            return len(self._merged.steps)
        if not self._chunks:
            return len(self._slow)
        return len(self.merged().steps)

    @property
    def steps(self) -> dict[int, dict[str, float]]:
        """The steps as ``{step: {metric: value}}`` (built on demand: for tests and small files)."""
        m = self.merged()
        out: dict[int, dict[str, float]] = {int(s): {} for s in m.steps}
        for name, (column, present) in m.values.items():
            for i in np.flatnonzero(present):
                out[int(m.steps[i])][name] = float(column[i])
        return out

    def columns(self) -> list[str]:
        """Metric names of the steps, columns first, in a stable order."""
        names = self._names
        known = [c for c in ("loss", "lr", "grad_norm") if c in names]
        return known + sorted(n for n in names if n not in known)

    def tables(self) -> dict[str, pa.Table]:
        """The steps and evals tables (rank 0, no wall time: a log line has none we can trust)."""
        m = self.merged()
        n = len(m.steps)
        cols: dict[str, pa.Array] = {"rank": pa.array(np.zeros(n, np.int32)), "step": pa.array(m.steps)}
        for name in sorted(STEP_COLUMNS):
            if name not in m.values:
                continue
            column, present = m.values[name]
            if name in INT_COLUMNS:
                ok = present & np.isfinite(column)
                cols[name] = pa.array(np.where(ok, column, 0).astype(np.int64), mask=~ok)
            else:
                cols[name] = pa.array(column, mask=~present)
        extra = [name for name in m.values if name not in STEP_COLUMNS]
        if extra:
            present = np.stack([m.values[name][1] for name in extra], axis=1)
            if present.all():  # every custom metric on every step (most logs): no search for where
                rows_at = np.repeat(np.arange(n), len(extra))
                names_at = np.tile(np.arange(len(extra)), n)
            else:
                rows_at, names_at = np.nonzero(present)  # row-major: each row's names in order
            items = np.stack([m.values[name][0] for name in extra], axis=1)[rows_at, names_at]
            offsets = np.zeros(n + 1, np.int32)
            np.cumsum(present.sum(axis=1), out=offsets[1:])
            cols["extra"] = pa.MapArray.from_arrays(
                pa.array(offsets), pa.array(extra, pa.string()).take(pa.array(names_at)), pa.array(items, pa.float64()),
                type=EXTRA, mask=pa.array(~present.any(axis=1)))
        evals = self.evals
        ev_cols: dict[str, list[object]] = {
            "rank": [0] * len(evals), "step": [e[0] for e in evals], "split": [e[1] for e in evals],
            "metric": [e[2] for e in evals], "value": [e[3] for e in evals],
        }
        return {"steps": table("steps", cols), "evals": table("evals", ev_cols)}


def _distinct(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Sorted distinct values (by sorting: numpy's hashing ``unique`` is far slower on a million steps)."""
    if len(values) > 1 and (values[1:] > values[:-1]).all():  # already distinct and sorted: one step a line
        return values
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _first_by_step(parts: list[Column]) -> Column:
    """Observations merged by step: per step, the value of the lowest line number (sorted by step)."""
    lines = np.concatenate([p[0] for p in parts])
    steps = np.concatenate([p[1] for p in parts])
    vals = np.concatenate([p[2] for p in parts])
    if len(lines) > 1 and (lines[1:] > lines[:-1]).all() and (steps[1:] > steps[:-1]).all():
        return lines, steps, vals  # in file order, each step once, increasing: already merged
    order = np.argsort(lines, kind="stable")
    distinct, first = np.unique(steps[order], return_index=True)
    pick = order[first]
    return lines[pick], distinct, vals[pick]


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
        self._tail: bytes | None = b""
        """While skipping an overlong line: its bytes since its last ``\r`` (None: more than MAX_LINE of them)."""
        self._queue: list[bytes] = []
        self._queued = 0
        self._last: str | None = None
        self.templates = Templates(self.formats, enabled=fast)
        self._spread = True
        """Whether most lines of the last block read as columns had no template's shape."""

    def feed(self, data: bytes) -> None:
        """A chunk of output (any size, lines may span chunks). Small chunks are gathered up to
        :data:`BLOCK` bytes first: reading a block costs a few calls whatever its size (a regular expression
        compiled and its automaton built per call), so larger blocks are cheaper per byte."""
        self._queue.append(data)
        self._queued += len(data)
        if self._queued >= BLOCK:
            self._flush()

    def _flush(self) -> None:
        if not self._queue:
            return
        data = self._queue[0] if len(self._queue) == 1 else b"".join(self._queue)
        self._queue, self._queued = [], 0
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if self._skipping:  # the rest of an overlong line: only its last segment may still be read
            end = data.find(b"\n")
            if end < 0:
                self._keep_tail(data)
                return
            self._skipping = False
            self._keep_tail(data[:end])
            self._last_segment()
            data = data[end + 1:]
        last = data.rfind(b"\n")
        if last >= 0:
            self._lines(data, last + 1)
        rest = len(data) - (last + 1)
        if rest > MAX_LINE:  # counted once it ends (:meth:`_last_segment`)
            self._skipping = True
            self._tail = b""
            self._keep_tail(data[last + 1:])
        elif rest:
            self._pending = data[last + 1:]

    def _keep_tail(self, data: bytes) -> None:
        """Keep what follows the last ``\r`` of an overlong line's bytes so far, while it fits in MAX_LINE."""
        cut = data.rfind(b"\r")
        if cut >= 0:
            self._tail = data[cut + 1:]
        elif self._tail is not None:
            self._tail += data
        if self._tail is not None and len(self._tail) > MAX_LINE:
            self._tail = None

    def _last_segment(self) -> None:
        """The end of an overlong line: its last segment (after its last ``\r``) is read as a line of its own, as
        any other (:meth:`_lines`: escape sequences, hint words); a line without one that fits is counted in
        :attr:`long_lines`."""
        tail, self._tail = self._tail, b""
        if tail is None:
            self.long_lines += 1
            self.lines += 1
        else:
            self._lines(tail + b"\n", len(tail) + 1)

    def _lines(self, data: bytes, size: int) -> None:
        """The complete lines of ``data[:size]``: lines of the log's usual step shapes are read a block at a
        time, as columns (:meth:`_blocks`); of the others, only those holding a hint word are looked at (found
        by one RE2 scan of the block or, in a block read as columns, of its other lines: the other lines cost
        no Python work). Escape sequences (:data:`_ESCAPES`) are removed first, from a block that has any."""
        if data.find(b"\x1b", 0, size) >= 0:
            data = _ESCAPES.sub(b"", data[:size])
            size = len(data)
        for _ in range(4):  # no template ready yet: the first lines one by one, then the rest as columns
            if size <= BLOCK_MIN or not self.templates.enabled or self.templates.for_blocks():
                break
            cut = data.rfind(b"\n", 0, BLOCK_MIN // 2) + 1
            if cut <= 0:
                break
            self._scan(data, cut)
            data, size = data[cut:size], size - cut
        if size > BLOCK_MIN and self.templates.for_blocks():
            self._blocks(data[:size] if size < len(data) else data)
            return
        self._scan(data, size)

    def _scan(self, data: bytes, size: int) -> None:
        """The lines of ``data[:size]`` one by one: those holding a hint word (all with ``hint=False``)."""
        first = self.lines
        if not self.hint:
            starts = None
        else:
            starts = []
            find, rfind, search = data.find, data.rfind, _hints().search
            text = data if size == len(data) else data[:size]
            m = search(text)
            while m is not None:  # one RE2 scan of the block for all the words
                start = rfind(b"\n", 0, m.start()) + 1
                end = find(b"\n", m.end() - 1, size)
                starts.append((start, end))
                m = search(text, end + 1) if end + 1 < size else None
        if starts is None:
            starts = []
            pos = 0
            while pos < size:
                end = data.find(b"\n", pos, size)
                starts.append((pos, end))
                pos = end + 1
        base = first
        counted = 0
        count = data.count
        for start, end in starts:
            base += count(b"\n", counted, start)
            counted = start
            self._line(data, start, end, base + 1)
        self.lines = base + count(b"\n", counted, size)

    def _blocks(self, data: bytes) -> None:
        """Read the complete lines of ``data`` (the first is line ``self.lines + 1``): those that have a checked
        template's shape as columns (:mod:`.columns`), the most used template first; then, of the lines left,
        those holding a hint word (all with ``hint=False``) one by one. A template is checked against its
        format's parser on every line :func:`.template.checked` names: one disagreement drops it, from that
        line on."""
        first = self.lines
        block = columns.Block.of(data)
        unread: npt.NDArray[np.bool_] | None = None  # None: every line of the block
        # Most lines of the last block had no template's shape: look for hint words in every line on another
        # core (Arrow leaves the interpreter lock) while the Python templates read theirs, rather than after. Not
        # with the compiled reader: it reads a block in a few milliseconds, less than that search's first call
        # in a process (Arrow's set-up, holding up the first block of a log of step lines only).
        early = _Hints(block) if self.hint and self._spread and _native.columns() is None else None
        for template in self.templates.for_blocks():
            shape = template.shape()
            if shape is None:  # a shape that cannot be cut into columns: read by the pattern, line by line
                text = block.emptied(unread).decode("utf-8", "replace")
                _, read = template.read_block(text, partial(self.templates.parse, template.format))
                if read:
                    rows = self.rows[template.format]
                    for index, parsed in read:
                        rows.add(parsed, first + index + 1)
                    unread = block.mark_read(unread, np.fromiter((i for i, _ in read), np.int64, len(read)))
                continue
            got = columns.read(shape, block, unread, ahead=not self._spread)
            if got is None:  # a number that does not parse: this block line by line (a third time: always)
                template.failures += 1
                if template.failures >= 3:
                    template.no_columns()
                continue
            if not len(got.lines):
                continue
            uses = template.uses
            template.uses += len(got.lines)
            checked = -1
            for j in checks(uses, len(got.lines)):
                line = block.line(int(got.lines[j])).decode("utf-8", "replace")
                parsed = Parsed(step=int(got.steps[j]), metrics={k: float(v[j]) for k, v in got.values.items()})
                if not agrees(parsed, self.templates.parse(template.format, line)):
                    template.dead = True
                    template.uses = uses + j + 1
                    got = got.head(checked + 1)  # the lines since the last agreeing check go to the parsers
                    break
                checked = j
            if len(got.lines):
                self.rows[template.format].add_columns(got.lines + (first + 1), got.steps, got.values)
                unread = block.mark_read(unread, got.lines)
            if template.dead:
                break
        if early is not None:
            others = early.lines(unread)
        else:
            others = block.hinted(_HINT_PATTERN, unread) if self.hint else block.left(unread)
        self._spread = unread is None or 2 * int(np.count_nonzero(unread)) > block.count
        data = block.data
        offsets = block.offsets
        for i in others.tolist():
            self._line(data, int(offsets[i]), int(offsets[i + 1]) - 1, first + i + 1)
        self.lines = first + block.count

    def _line(self, data: bytes, start: int, end: int, lineno: int) -> None:
        """One line: each of its segments (``\r`` separates a progress bar's redraws) offered. Of a line longer
        than MAX_LINE, only its last segment, when that fits: a progress bar redrawn for minutes without a newline,
        then a step line logged on the same stream, makes one such line."""
        if end - start > MAX_LINE:
            cut = data.rfind(b"\r", start, end)
            if cut < 0 or end - cut - 1 > MAX_LINE:
                self.long_lines += 1
                return
            start = cut + 1
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
        self._flush()
        if self._pending and not self._skipping:
            self.ended_without_newline = True
            data, self._pending = self._pending + b"\n", b""
            self._lines(data, len(data))
        if self._skipping:
            self.ended_without_newline = True
            self._skipping = False
            self._last_segment()
        self._pending = b""

    def feed_file(self, path: Path) -> None:
        """The whole file, block by block (a :mod:`ledger.progress` task: a bar on a terminal)."""
        from ledger import progress

        with path.open("rb") as f, progress.task(f"reading {path.name}", path.stat().st_size, "bytes") as advance:
            for block in iter(lambda: f.read(BLOCK), b""):
                self.feed(block)
                advance(f.tell())
        self.close()

    def best(self) -> Rows | None:
        """The format that gave the most steps (then evals); None when no format gave anything."""
        found = [r for r in self.rows.values() if r.step_count() or r.evals]
        if not found:
            return None
        return max(found, key=lambda r: (r.step_count(), len(r.evals)))

    def others(self) -> list[Rows]:
        """Formats that also matched some lines but were not chosen."""
        best = self.best()
        return [r for r in self.rows.values() if (r.step_count() or r.evals) and r is not best]


class _Hints:
    """The lines of a block that hold a hint word, looked for in a thread of their own (one Arrow RE2 pass over
    every line, which leaves the interpreter lock)."""

    def __init__(self, block: columns.Block) -> None:
        import threading

        self.block = block
        self.found: npt.NDArray[np.bool_] | None = None
        self.thread = threading.Thread(target=self._run, name="ledger-hints", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import pyarrow.compute as pc

        try:
            self.found = pc.match_substring_regex(self.block.lines, _HINT_PATTERN).to_numpy(zero_copy_only=False)
        except Exception:  # looked for again in this thread: :meth:`lines`
            self.found = None

    def lines(self, unread: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.int64]:
        """Indexes of the ``unread`` lines (None: all) that hold a hint word."""
        self.thread.join()
        if self.found is None:
            return self.block.hinted(_HINT_PATTERN, unread)
        hit: npt.NDArray[np.int64] = np.flatnonzero(self.found if unread is None else self.found & unread)
        return hit


def rows_of(name: str, parsed: Iterable[Parsed]) -> Rows:
    """Rows of a file format."""
    rows = Rows(name)
    for i, p in enumerate(parsed, start=1):
        rows.add(p, i)
    return rows


__all__ = ["BLOCK", "MAX_LINE", "LineCapture", "Rows", "rows_of"]
