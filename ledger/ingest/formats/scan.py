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

import math
import re
import time
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
from ledger.ingest.formats.base import (
    BAD,
    EPOCH,
    INT_COLUMNS,
    RANK,
    RESERVED,
    STEP_COLUMNS,
    TOTAL,
    Format,
    Parsed,
    labelled,
)
from ledger.ingest.formats.identity import Identity, Observations, agree, decimals, identify
from ledger.ingest.formats.keyvalue import NAME as GENERIC
from ledger.ingest.formats.template import Templates, agrees, checks
from ledger.ingest.formats.trail import WRITE_S, Trail
from schemas.tables import EXTRA

ADOPT_LINES = 3
"""A line without a step number up to this many lines after one with a step number is that step (see
:meth:`LineCapture._add`)."""
MAX_LINE = 1 << 16
"""Longest line (bytes) offered to the formats; longer lines are skipped and counted."""
BLOCK = 1 << 20
BLOCK_MIN = 1 << 16
"""Blocks of complete lines larger than this are read by templates as columns; smaller ones line by line."""
_WORDS = (b"loss", b"Loss", b"LOSS", b"step", b"Step", b"STEP", b"iter", b"Iter", b"'eval_", b"update")
"""A line is offered to the formats only when it holds one of these. Every format's step lines do, but for the
key-value counter ``it N`` on a line without a loss (``it 5 lr 0.1``): ``it`` is too common a word to look for.
``update`` is here for the key-value counters ``update N`` and ``num_updates N`` on lines with no loss
(``update 5 lr 0.1 grad_norm 1.2``)."""
_HINT_PATTERN = "|".join(re.escape(w.decode()) for w in _WORDS)
"""The hint words as one pattern (RE2 syntax)."""
_MEGATRON = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|")
_COUNTER = re.compile(r"(\d+)/(\d+) \[")
"""A tqdm bar's counter (its default ``{n_fmt}/{total_fmt} [{elapsed}<{remaining}...``), looked for only in the
segments of a line that holds a ``\r``: a bar's redraws."""
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
"""Chunks of rows read as columns are joined into one once this many rows (or as many as already joined) are
pending: a long log leaves a few large arrays, not one small chunk per block."""
Chunk = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int64]",
              dict[str, tuple["npt.NDArray[np.float64]", "npt.NDArray[np.bool_]"]]]
"""Observations: their line numbers, printed steps and, per metric, its values and where it was given (a NaN a
line printed, a diverged loss, is given; a metric a line did not print is not)."""


@dataclass(frozen=True)
class Derived:
    """What the capture derived for a steps table beyond what its source printed (see :meth:`Rows.tables`)."""

    columns: dict[str, str] = field(default_factory=dict)
    """Column -> how it was derived."""


@dataclass
class Merged:
    """The steps of one source after step identity (:mod:`.identity`), one row per step, in the order printed."""

    steps: npt.NDArray[np.int64]
    """The step of the run of each row."""
    lines: npt.NDArray[np.int64]
    """The line that printed each row first (its time is that line's arrival)."""
    printed: npt.NDArray[np.int64]
    """The counter as that line printed it."""
    generation: npt.NDArray[np.int64]
    """0, or the restarts before the row (a restart's rows repeat earlier steps)."""
    values: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]]
    """Per metric (``epoch`` included, the reserved ``@`` names not): its value on each row and whether given."""
    evals: list[tuple[int, int, str | None, str, float]]
    """(line, step of the run, split, metric, value), in the order printed."""
    identity: dict[str, int | None]
    """What step identity decided: lines, merged, differing, segments, restarts, epochs, planned_steps."""
    offset: bool = False
    """Some row's step is not its printed counter (epochs offset the counter)."""


@dataclass
class Rows:
    """What one format (or file) gave: every step line it read, with its line number, and the evals.

    Lines read by a format's parser come one by one (:meth:`add`); the lines of a block read by a template come
    as columns (:meth:`add_columns`), kept as numpy arrays, never one Python object per line. Nothing is merged as
    lines come: :meth:`merged` decides once, over every line in the order printed, which lines are one step and
    which step of the run each is (:func:`.identity.identify`)."""

    name: str
    unparsed: list[int] = field(default_factory=list)
    ordinal: bool = False
    last_step: int | None = None
    """The counter of the latest step line added one by one."""
    _count: int = 0
    _slow_lines: list[int] = field(default_factory=list)
    _slow_steps: list[int] = field(default_factory=list)
    _slow_metrics: list[dict[str, float]] = field(default_factory=list)
    _slow_shapes: list[int] = field(default_factory=list)
    """Per slow line: 0, or 1 for a line of another format that joined this one (:meth:`LineCapture._add`)."""
    _raw_evals: list[tuple[int, int | None, str | None, str, float]] = field(default_factory=list)
    _names: dict[str, None] = field(default_factory=dict)
    _chunks: list[Chunk] = field(default_factory=list)
    _pending: int = 0
    _joined: int = 0
    _merged: Merged | None = None

    def add(self, parsed: Parsed, where: int = 0, joined: bool = False) -> None:
        """One parsed line (``where``: its line number, for problems and for the order of lines; ``joined``: a line
        of another format, without a counter of its own, that joined this format's step)."""
        step = parsed.step
        if parsed is BAD or (step is not None and not -_INT64 <= step < _INT64):  # a step no table can hold
            self.unparsed.append(where)
            return
        if parsed.metrics and set(parsed.metrics) - RESERVED:
            if step is None:  # a format that prints no step number: number the lines
                self._count += 1
                step, self.ordinal = self._count, True
            self._slow_lines.append(where)
            self._slow_steps.append(step)
            self._slow_metrics.append(parsed.metrics)
            self._slow_shapes.append(int(joined))
            self._names.update(dict.fromkeys(parsed.metrics))
            self.last_step = step
            self._merged = None
        if parsed.evals:
            self._raw_evals.extend((where, step, split, metric, value) for split, metric, value in parsed.evals)
            self._merged = None

    def add_columns(self, lines: npt.NDArray[np.int64], steps: npt.NDArray[np.int64],
                    values: Mapping[str, npt.NDArray[np.float64]]) -> None:
        """Lines read as columns: their line numbers (increasing), steps and each metric's values."""
        if not len(lines) or not set(values) - RESERVED:
            return
        if self._pending >= max(COMPACT_ROWS, self._joined):
            self._join()
        every = np.ones(len(lines), np.bool_)
        self._chunks.append((lines, steps, {name: (column, every) for name, column in values.items()}))
        self._names.update(dict.fromkeys(values))
        self._pending += len(lines)
        self._merged = None

    def _join(self) -> None:
        """The chunks read so far as one (concatenated, nothing merged)."""
        if len(self._chunks) > 1:
            self._chunks = [_concat(self._chunks, list(self._names))]
        self._joined = sum(len(c[0]) for c in self._chunks)
        self._pending = 0

    def observations(self) -> Observations:
        """Every step line read, in the order printed."""
        names = list(self._names)
        parts = list(self._chunks)
        if self._slow_lines:
            n = len(self._slow_lines)
            slow: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
            for name in names:
                given = np.fromiter((name in m for m in self._slow_metrics), np.bool_, n)
                if given.any():
                    slow[name] = (np.fromiter((m.get(name, math.nan) for m in self._slow_metrics), np.float64, n),
                                  given)
            parts.insert(0, (np.asarray(self._slow_lines, np.int64), np.asarray(self._slow_steps, np.int64), slow))
        if not parts:
            return Observations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                np.zeros(0), {})
        lines, steps, values = parts[0] if len(parts) == 1 else _concat(parts, names)
        if lines.size > 1 and not (lines[1:] >= lines[:-1]).all():  # the slow lines and the columns interleave
            order = np.argsort(lines, kind="stable")
            lines, steps = lines[order], steps[order]
            values = {k: (v[order], p[order]) for k, (v, p) in values.items()}
        rank = values.pop(RANK, None)
        total = values.pop(TOTAL, None)
        labels = np.full(lines.size, -1, np.int64)
        if rank is not None:
            ok = rank[1] & np.isfinite(rank[0])
            labels[ok] = rank[0][ok].astype(np.int64)
        totals = np.full(lines.size, math.nan)
        if total is not None:
            totals[total[1]] = total[0][total[1]]
        shapes = None
        if any(self._slow_shapes):
            shapes = np.zeros(lines.size, np.int64)
            shapes[np.isin(lines, np.asarray(self._slow_lines, np.int64)[np.asarray(self._slow_shapes, bool)])] = 1
        return Observations(lines=lines, steps=steps, labels=labels, totals=totals, values=values, shapes=shapes)

    def merged(self) -> Merged:
        """The steps after step identity (:func:`.identity.identify`), with the evals at their steps."""
        if self._merged is not None:
            return self._merged
        obs = self.observations()
        ident = identify(obs)
        n_rows = ident.step.size
        values: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
        one_to_one = n_rows == obs.lines.size  # each line a step of its own (most logs): the columns as read
        for name, (column, present) in obs.values.items():
            if not present.any():
                continue
            if one_to_one:
                values[name] = (column, present)
                continue
            at = np.flatnonzero(present)  # observations in line order: the first reading of each row wins
            rows_at, first = np.unique(ident.row[at], return_index=True)
            out = np.full(n_rows, math.nan)
            given = np.zeros(n_rows, np.bool_)
            out[rows_at] = column[at[first]]
            given[rows_at] = True
            if obs.shapes is not None:  # two shapes of one step: the more precise printing of a value both gave
                later = np.delete(at, first)
                if later.size:
                    held = out[ident.row[later]]
                    finer = (decimals(column[later]) > decimals(held)) & agree(column[later], held, True)
                    out[ident.row[later[finer]]] = column[later[finer]]
            values[name] = (out, given)
        totals = obs.totals[np.isfinite(obs.totals)]
        planned = int(totals.max()) if totals.size and not ident.epochs else None
        facts: dict[str, int | None] = {
            "lines": int(obs.lines.size), "merged": ident.merged, "differing": ident.differing,
            "segments": ident.segments, "restarts": ident.restarts, "epochs": ident.epochs, "planned_steps": planned}
        lines = obs.lines[ident.first] if n_rows else np.zeros(0, np.int64)
        evals = _place_evals(self._raw_evals, obs, ident, lines)
        self._merged = Merged(ident.step, lines, ident.printed, ident.generation, values, evals, facts,
                              ident.offset)
        return self._merged

    def frozen(self) -> Rows:
        """These rows as :meth:`merged` has them, without the lines they were merged from (what the output's parser
        process sends back). Nothing may be added to them."""
        merged = self.merged()
        return replace(self, _chunks=[], _slow_lines=[], _slow_steps=[], _slow_metrics=[], _slow_shapes=[],
                       _raw_evals=[], _pending=0, _merged=merged)

    def step_count(self) -> int:
        """Steps (rows after step identity)."""
        if self._merged is not None:
            return len(self._merged.steps)
        if not self._chunks and not self._slow_lines:
            return 0
        return len(self.merged().steps)

    @property
    def evals(self) -> list[tuple[int, str | None, str, float]]:
        """The evals as (step of the run, split, metric, value), in the order printed."""
        if self._merged is None and not self._raw_evals:
            return []
        return [(step, split, metric, value) for _, step, split, metric, value in self.merged().evals]

    @property
    def steps(self) -> dict[int, dict[str, float]]:
        """The steps as ``{step: {metric: value}}`` (the first row of a step repeated by a restart; built on
        demand: for tests and small files)."""
        m = self.merged()
        out: dict[int, dict[str, float]] = {}
        rows: dict[int, int] = {}
        for i, s in enumerate(m.steps.tolist()):
            if s not in out:
                out[s], rows[i] = {}, s
        for name, (column, present) in m.values.items():
            for at in np.flatnonzero(present).tolist():
                if at in rows:
                    out[rows[at]][name] = float(column[at])
        return out

    def columns(self) -> list[str]:
        """Metric names of the steps, columns first, in a stable order (``epoch`` among them; the names that label
        a line, ``@total`` and ``@rank``, not)."""
        names = [n for n in self._names if n not in (TOTAL, RANK)] if self._merged is None or self._names else \
            [n for n in self._merged.values if n not in (TOTAL, RANK)]
        known = [c for c in ("loss", "lr", "grad_norm") if c in names]
        return known + sorted(n for n in names if n not in known)

    def identity(self) -> dict[str, int | None]:
        """What step identity decided (see :class:`Merged`)."""
        return dict(self.merged().identity)

    def tables(self) -> dict[str, pa.Table]:
        """The steps and evals tables (rank 0) as the source printed them: no time, nothing derived."""
        return self.build_tables()[0]

    def build_tables(self, times: npt.NDArray[np.float64] | None = None, tokens_per_step: float | None = None
                     ) -> tuple[dict[str, pa.Table], Derived]:
        """The steps and evals tables (rank 0), and what was derived.

        ``times``: the arrival time of each row's first line (:meth:`Merged.lines` through the output's clock,
        NaN where unknown): the ``time`` column, and, where the source printed no step time, ``step_time_s``
        from the time between two rows divided by the steps between them (rows that arrived together, the output
        buffered, share the time since the previous arrival over all their steps). ``tokens_per_step``: tokens of
        one step (from the configuration), making the ``tokens`` column (the step of the run times it) where the
        source printed none."""
        m = self.merged()
        n = len(m.steps)
        derived: dict[str, str] = {}
        cols: dict[str, pa.Array] = {"rank": pa.array(np.zeros(n, np.int32)), "step": pa.array(m.steps)}
        values = dict(m.values)
        if times is not None and n and np.isfinite(times).any():
            spread = spread_arrivals(m.steps, times, m.generation)
            cols["time"] = pa.array(spread, mask=~np.isfinite(spread))
            derived["time"] = ("when the line arrived (output timing); lines that arrived together (a launch that "
                               "buffers its output) spread over the time since the arrival before, by their steps")
            if "step_time_s" not in values:
                dt = step_times(m.steps, times, m.generation)
                if np.isfinite(dt).any():
                    values["step_time_s"] = (dt, np.isfinite(dt))
                    derived["step_time_s"] = ("time between the lines of two steps, divided by the steps between "
                                              "them (output timing)")
        if tokens_per_step is not None and tokens_per_step > 0 and "tokens" not in values and n:
            values["tokens"] = (m.steps.astype(np.float64) * tokens_per_step, m.steps > 0)
        if m.offset:
            cols["printed_step"] = pa.array(m.printed)
        if EPOCH in values:
            column, present = values.pop(EPOCH)
            cols["epoch"] = pa.array(column, mask=~present)
        for name in sorted(STEP_COLUMNS):
            if name not in values:
                continue
            column, present = values[name]
            if name in INT_COLUMNS:
                ok = present & np.isfinite(column)
                cols[name] = pa.array(np.where(ok, column, 0).astype(np.int64), mask=~ok)
            else:
                cols[name] = pa.array(column, mask=~present)
        extra = [name for name in values if name not in STEP_COLUMNS and name not in RESERVED]
        if extra:
            present = np.stack([values[name][1] for name in extra], axis=1)
            if present.all():  # every custom metric on every step (most logs): no search for where
                rows_at = np.repeat(np.arange(n), len(extra))
                names_at = np.tile(np.arange(len(extra)), n)
            else:
                rows_at, names_at = np.nonzero(present)  # row-major: each row's names in order
            items = np.stack([values[name][0] for name in extra], axis=1)[rows_at, names_at]
            offsets = np.zeros(n + 1, np.int32)
            np.cumsum(present.sum(axis=1), out=offsets[1:])
            cols["extra"] = pa.MapArray.from_arrays(
                pa.array(offsets), pa.array(extra, pa.string()).take(pa.array(names_at)), pa.array(items, pa.float64()),
                type=EXTRA, mask=pa.array(~present.any(axis=1)))
        evals = m.evals
        eval_times = None
        if times is not None and evals and n:
            eval_times = _eval_times(evals, m.lines, times)
        ev_cols: dict[str, list[object]] = {
            "rank": [0] * len(evals), "step": [e[1] for e in evals], "split": [e[2] for e in evals],
            "metric": [e[3] for e in evals], "value": [e[4] for e in evals],
        }
        if eval_times is not None:
            ev_cols["time"] = [None if not math.isfinite(t) else t for t in eval_times]
        return {"steps": table("steps", cols), "evals": table("evals", ev_cols)}, Derived(derived)


def _arrivals(times: npt.NDArray[np.float64], generation: npt.NDArray[np.int64]
              ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The arrivals of rows in line order: runs of rows with one known time and one generation (the lines of one
    read). Whether each row's time is known, and the first and last row of each arrival."""
    n = times.size
    ok = np.isfinite(times)
    new = np.ones(n, np.bool_)
    new[1:] = (times[1:] != times[:-1]) | (generation[1:] != generation[:-1]) | ~ok[1:] | ~ok[:-1]
    start = np.flatnonzero(new)
    end = np.r_[start[1:], n] - 1  # last row of each arrival
    return ok, start, end


def spread_arrivals(steps: npt.NDArray[np.int64], times: npt.NDArray[np.float64],
                    generation: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Each row's time: when its line arrived, except that rows whose lines arrived together (one read of a launch
    that buffers its output) are spread evenly by step between the arrival before and theirs, the last at the
    arrival itself. The first arrival, a restart's and rows whose steps do not rise keep the time they arrived."""
    out = np.array(times, dtype=np.float64, copy=True)
    if steps.size < 2:
        return out
    ok, start, end = _arrivals(times, generation)
    for k in np.flatnonzero(end > start).tolist():  # arrivals of several rows (rare unless buffered)
        a, b = int(start[k]), int(end[k])
        if a == 0 or not ok[a] or generation[a - 1] != generation[a] or not ok[a - 1]:
            continue
        t0, s0 = float(times[a - 1]), float(steps[a - 1])
        span = float(steps[b]) - s0
        rows = steps[a:b + 1].astype(np.float64)
        if span <= 0 or not (rows[1:] > rows[:-1]).all() or rows[0] <= s0:
            continue
        out[a:b + 1] = t0 + (float(times[b]) - t0) * (rows - s0) / span
    return out


def step_times(steps: npt.NDArray[np.int64], times: npt.NDArray[np.float64],
               generation: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Seconds per step from when each row's line arrived: between two arrivals, the time over the steps between
    them; rows that arrived together (output buffered by the launch) share that figure. NaN for the first arrival,
    across a restart, where the steps do not rise, and where a time is unknown."""
    n = steps.size
    out = np.full(n, math.nan)
    if n < 2:
        return out
    ok, start, end = _arrivals(times, generation)
    t = times[start]
    last_step = steps[end]
    dt = np.full(start.size, math.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = t[1:] - t[:-1]
        rose = last_step[1:] - last_step[:-1]
        same_gen = generation[start[1:]] == generation[end[:-1]]
        good = (rose > 0) & (gap >= 0) & same_gen & np.isfinite(gap)
        dt[1:] = np.where(good, gap / np.where(rose > 0, rose, 1), math.nan)
    which = np.repeat(np.arange(start.size), end - start + 1)  # each row's arrival
    out[:] = dt[which]
    out[~ok] = math.nan
    return out


def _eval_times(evals: list[tuple[int, int, str | None, str, float]], row_lines: npt.NDArray[np.int64],
                row_times: npt.NDArray[np.float64]) -> list[float]:
    """The time of each eval: that of its own line when a step row was printed on it, else of the latest step row
    printed before it (the capture's clock times step rows; an eval's own line time is not kept)."""
    at = np.searchsorted(row_lines, np.asarray([e[0] for e in evals], np.int64), side="right") - 1
    return [float(row_times[i]) if i >= 0 else math.nan for i in at.tolist()]


def _concat(parts: list[Chunk], names: list[str]) -> Chunk:
    """Chunks as one (a metric a chunk lacks is not given there)."""
    lines = np.concatenate([p[0] for p in parts])
    steps = np.concatenate([p[1] for p in parts])
    values: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
    for name in names:
        if not any(name in p[2] for p in parts):
            continue
        values[name] = (
            np.concatenate([p[2][name][0] if name in p[2] else np.full(len(p[0]), math.nan) for p in parts]),
            np.concatenate([p[2][name][1] if name in p[2] else np.zeros(len(p[0]), np.bool_) for p in parts]))
    return lines, steps, values


def _place_evals(raw: list[tuple[int, int | None, str | None, str, float]], obs: Observations, ident: Identity,
                 row_lines: npt.NDArray[np.int64]) -> list[tuple[int, int, str | None, str, float]]:
    """Each eval at its step of the run: the step of the latest step line printed at or before its line (an eval
    printed without a step belongs to the step before it); an eval that printed its own counter gets it with the
    offset of the segment in force there. 0 when no step line came before."""
    if not raw:
        return []
    where = np.asarray([e[0] for e in raw], np.int64)
    at = np.searchsorted(obs.lines, where, side="right") - 1
    out = []
    for (line, printed, split, metric, value), i in zip(raw, at.tolist(), strict=True):
        if i < 0:
            step = printed if printed is not None else 0
        else:
            row = int(ident.row[i])
            base = int(ident.step[row]) - int(ident.printed[row])
            step = int(ident.step[row]) if printed is None else printed + base
        out.append((line, step, split, metric, value))
    return out


class LineCapture:
    """Feed it output, get rows per format. ``formats`` defaults to all line formats (autodetection);
    ``hint=False`` offers every line (a user's pattern may match lines without the usual words);
    ``fast=False`` reads every line with the formats' parsers (no templates: :mod:`.template`)."""

    def __init__(self, formats: Mapping[str, Format] | None = None, *, hint: bool = True, fast: bool = True,
                 trail: Trail | None = None) -> None:
        self.formats = dict(LINE_FORMATS if formats is None else formats)
        self.trail = trail
        """What a live capture has read so far, written for readers of the run in progress (None: not live)."""
        self._flushed = time.monotonic()
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
        self._real: tuple[str, int, int] | None = None
        """The latest line read one by one that printed a step number: its format, step and line number."""
        self._block_real: list[tuple[str, npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        """The step lines of the block being read that were read as columns: format, line numbers, steps."""
        self._counter: tuple[int, int, float] | None = None
        """The progress bar's counter last printed: (line number, count, total)."""
        self.templates = Templates(self.formats, enabled=fast)
        self._spread = True
        """Whether most lines of the last block read as columns had no template's shape."""

    def feed(self, data: bytes) -> None:
        """A chunk of output (any size, lines may span chunks). Small chunks are gathered up to
        :data:`BLOCK` bytes first: reading a block costs a few calls whatever its size (a regular expression
        compiled and its automaton built per call), so larger blocks are cheaper per byte."""
        self._queue.append(data)
        self._queued += len(data)
        if self._queued >= BLOCK or (self.trail is not None and time.monotonic() - self._flushed >= WRITE_S):
            self._flush()  # a live capture reads what came at least every WRITE_S, however little
            if self.trail is not None and self.trail.due():
                self.trail.write()

    def idle(self) -> None:
        """The output paused: read what is queued and write the trail (a live capture)."""
        self._flush()
        if self.trail is not None:
            self.trail.write()

    def _flush(self) -> None:
        self._flushed = time.monotonic()
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
                parsed = Parsed(step=int(got.steps[j]), metrics={**{k: float(v[j]) for k, v in got.values.items()},
                                                                 **dict(template.constants)})
                if not agrees(parsed, self.templates.parse(template.format, line)):
                    template.dead = True
                    template.uses = uses + j + 1
                    got = got.head(checked + 1)  # the lines since the last agreeing check go to the parsers
                    break
                checked = j
            if len(got.lines):
                values = got.values if not template.constants else {
                    **got.values, **{k: np.full(len(got.lines), v) for k, v in template.constants}}
                self.rows[template.format].add_columns(got.lines + (first + 1), got.steps, values)
                self._block_real.append((template.format, got.lines + (first + 1), got.steps))
                if self.trail is not None:
                    self.trail.add_columns(template.format, got.lines + (first + 1), got.steps, values)
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
        if self._block_real:  # the block's last step line read as columns is the latest real step from now on
            fmt, lines, steps = max(self._block_real, key=lambda r: int(r[1][-1]))
            if self._real is None or int(lines[-1]) > self._real[2]:
                self._real = (fmt, int(steps[-1]), int(lines[-1]))
            self._block_real = []

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
        if b"\r" not in raw:
            self.offer(raw.decode("utf-8", "replace"), lineno)
            return
        for segment in raw.split(b"\r"):
            if segment:
                text = segment.decode("utf-8", "replace")
                counter = _COUNTER.search(text) if " [" in text else None
                if counter is not None:
                    self._counter = (lineno, int(counter.group(1)), float(counter.group(2)))
                self.offer(text, lineno)

    def offer(self, line: str, lineno: int) -> None:
        """One line (without its line end) to the formats; the first that recognises it keeps it. A launcher's rank
        prefix is a label of the line (:data:`.base.RANK`), never part of what the formats read. A line of a format
        that prints no step number (``ordinal``: the Hugging Face Trainer's dicts) printed after a progress bar's
        counter (tqdm's ``20/1352 [``) on the same physical line, or on the one before, takes the counter as its step
        and the counter's total as ``@total`` (:meth:`_counted`)."""
        fast = self.templates.read(line)
        if fast is not None:
            read = fast[1]
            self._add(fast[0], self._counted(read, lineno) if read.ordinal else read, lineno)
            return
        rank, text = strip_rank(line)
        if "iteration" in text and _MEGATRON.search(text):
            return  # Megatron-LM's own parser reads these
        last = self._last
        if last is not None:  # a log keeps to its format: try the last specific one that read a line first
            parsed = self.formats[last](text)
            if parsed is not None and parsed is not BAD:
                parsed = labelled(parsed, rank)
                counted = self._counted(parsed, lineno) if parsed.ordinal else parsed
                self._add(last, counted, lineno)
                if counted is parsed:  # a step from another segment's counter: the line's shape has no step
                    self.templates.learn(last, line, parsed)
                return
        for name, parse in self.formats.items():
            parsed = parse(text)
            if parsed is not None:
                parsed = labelled(parsed, rank)
                counted = self._counted(parsed, lineno) if parsed.ordinal else parsed
                self._add(name, counted, lineno)
                if parsed is not BAD:
                    if name != GENERIC:
                        self._last = name
                    if counted is parsed:
                        self.templates.learn(name, line, parsed)
                return

    def _add(self, name: str, parsed: Parsed, lineno: int) -> None:
        """A parsed line to its format's rows. A line that prints no step number right after one of another format
        that did (within :data:`ADOPT_LINES` lines: LlamaFactory's callback line, then the Trainer's dict of the
        same step) is that step, in that line's format, so that step identity merges the two; evals printed
        without a step belong to the latest step any format read, in that format's rows. Otherwise a line without a
        step number is numbered by its own format in the order printed."""
        real = self._real_before(lineno)
        if parsed.step is None and parsed is not BAD and real is not None and real[0] != name:
            if parsed.metrics and lineno - real[2] <= ADOPT_LINES:
                self.rows[real[0]].add(replace(parsed, step=real[1], ordinal=False), lineno, joined=True)
                if self.trail is not None:
                    self.trail.add(real[0], lineno, real[1], parsed.metrics)
                return
            if parsed.evals and not parsed.metrics:
                self.rows[real[0]].add(parsed, lineno)
                return
        if parsed.step is not None and parsed.metrics and parsed is not BAD:
            self._real = (name, parsed.step, lineno)
        rows = self.rows[name]
        rows.add(parsed, lineno)
        if self.trail is not None and parsed.metrics and rows.last_step is not None and parsed is not BAD:
            self.trail.add(name, lineno, rows.last_step, parsed.metrics)

    def _real_before(self, lineno: int) -> tuple[str, int, int] | None:
        """The latest line before ``lineno`` that printed a step number with training metrics: read one by one, or as
        columns in the block being read (whose lines are read before its other lines). An eval line printed with its
        own step is not one: evals are placed at steps, they do not start one, so a step-less line after it still
        joins the training step before it."""
        best = self._real if self._real is not None and self._real[2] < lineno else None
        for fmt, lines, steps in self._block_real:
            i = int(np.searchsorted(lines, lineno)) - 1
            if i >= 0 and (best is None or int(lines[i]) > best[2]):
                best = (fmt, int(steps[i]), int(lines[i]))
        return best

    def _counted(self, parsed: Parsed, lineno: int) -> Parsed:
        """``parsed`` (a line without a step number) with the step of the progress bar's counter printed last on its
        physical line or the one before (:data:`_COUNTER`), when there is one: the Trainer writes its dict between
        two redraws of its bar (``tqdm.write``), and LlamaFactory's callback prints its dict on the bar's line, the
        Trainer's own on the next."""
        counter = self._counter
        if counter is None or counter[0] < lineno - 1 or parsed.step is not None or not parsed.metrics:
            return parsed
        return Parsed(step=counter[1], metrics={**parsed.metrics, TOTAL: counter[2]}, evals=parsed.evals)

    def close(self) -> None:
        """End of output: a last line without a line end is read too (and the trail written a last time)."""
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
        if self.trail is not None:
            self.trail.write()

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
