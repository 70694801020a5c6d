"""Goodput and badput of a logical run (all its attempts): the figures and how they are computed.

Definitions (DESIGN.md):

- wall time: from the first attempt's start to the last attempt's end (the wrapper's clock: process
  start-up included), downtime between attempts included;
- productive time: the time of the steps whose results survive. A step computed again after a restart
  counts once, at its last computation; its earlier computations are *progress lost to disruption*;
- goodput = productive time / wall time.

Every second of the wall time lands in exactly one bucket, so productive time and the badput buckets add
up to the wall time. Where intervals overlap, the first of this order wins: step computations
(productive, then lost), checkpoint restore, checkpoint save, eval, data loading, start-up, other,
downtime. So a checkpoint written asynchronously while steps run costs nothing, as it should.

- start-up: from an attempt's start to its last ``init_end`` event (any rank; ``_stop`` is accepted for
  every ``_end``, as MLPerf logs spell them); without one, to its first
  step; without steps, the whole attempt. Restore inside it counts as restore.
- checkpoint save / restore, eval, data loading: ``<kind>_start`` .. ``<kind>_end`` event pairs
  (``checkpoint_save``, ``checkpoint_restore``, ``eval``, ``data_wait``) of each rank, paired in the
  order they were recorded; a ``data_wait`` event with ``{"seconds": s}`` in its detail covers the s
  seconds before it; a timing phase named ``data``/``data_wait``/``data_loading``/``dataloader`` is
  carved out of its (surviving) step. A start left open when an attempt ends (a crash inside a save)
  lasts to the attempt's end.
- downtime: the gaps between one attempt's end and the next one's start.
- other: the rest of the attempts' time (logging, shutdown, the moments between steps, the crash).

Token goodput = useful tokens / processed tokens, where each logged step processed its cumulative
``tokens`` minus those of the previous logged step, useful tokens are those of surviving, not skipped
steps. Steady-state step time: the median of the step times within median + 3 MAD (the raw median
absolute deviation, not scaled to a standard deviation; one-sided, so only slow outliers are dropped).

Steps: only the lowest rank that logged steps in an attempt is read (others would look like recomputed
steps). A logged row that stands for several steps (``log_every`` > 1) covers them all with its own
step time, and the result says so. Events out of time order are reported in ``problems``, never
reordered; a pair whose end precedes its start is left out of the buckets.

Reading a run from the index is :mod:`ledger.analyses.goodput_index`; the timeline picture and the tables
are drawn by :mod:`ledger.report.goodput`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.analyses.stats import median, sorted_median
from schemas import Receipt

BUCKETS = (
    "startup",
    "data_loading",
    "checkpoint_save",
    "checkpoint_restore",
    "progress_lost",
    "downtime",
    "eval",
    "other",
)
"""The badput buckets, in the order reports list them."""

PAIRS: dict[str, tuple[str, str]] = {
    "checkpoint_restore": ("checkpoint_restore_start", "checkpoint_restore_end"),
    "checkpoint_save": ("checkpoint_save_start", "checkpoint_save_end"),
    "eval": ("eval_start", "eval_end"),
    "data_loading": ("data_wait_start", "data_wait_end"),
}
"""Buckets measured by start/end event pairs."""

_PRIORITY = ("checkpoint_restore", "checkpoint_save", "eval", "data_loading", "startup", "other", "downtime")
"""Who wins an overlap, after the steps themselves."""

DATA_PHASES = ("data", "data_wait", "data_loading", "dataloader")
"""Timing phases that are data-loading time inside a step."""

_OPENERS = {start: bucket for bucket, (start, _) in PAIRS.items()}
_CLOSERS = {end: bucket for bucket, (_, end) in PAIRS.items()}
_CLOSERS |= {end.removesuffix("_end") + "_stop": bucket for end, bucket in list(_CLOSERS.items())}
"""``_stop`` closes like ``_end`` (MLPerf logs say eval_stop, init_stop)."""
_INIT_END = ("init_end", "init_stop")
TIMELINE_BINS = 400


@dataclass(frozen=True)
class AttemptSpan:
    """One attempt on the run's clock (seconds from the first attempt's start)."""

    id: str
    attempt: int
    status: str
    start_s: float
    end_s: float
    steps_computed: int
    """Logged step rows of this attempt."""
    steps_lost: int
    """Of those, rows computed again by a later computation."""
    first_step: int | None
    last_step: int | None
    restored_step: int | None
    """Step of the checkpoint this attempt restored (checkpoint_restore_end), if any."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Segment:
    """A stretch of the timeline in one badput bucket (seconds from the first attempt's start)."""

    start_s: float
    end_s: float
    bucket: str


@dataclass
class Goodput:
    """Goodput of one logical run. Times are seconds; ``buckets`` plus ``productive_s`` = ``wall_s``."""

    run_id: str
    name: str | None
    start: float
    """Unix time of the first attempt's start (MLPerf's run_start)."""
    wall_s: float
    productive_s: float
    buckets: dict[str, float]
    attempts: list[AttemptSpan]
    steps_computed: int
    """Step rows computed, all attempts (a row standing for several steps counts once)."""
    steps_useful: int
    """Distinct logged steps (each counted once, at its last computation)."""
    steps_recomputed: int
    """Step rows whose result was thrown away by a restart."""
    tokens_processed: int | None
    tokens_useful: int | None
    step_time_median_s: float | None
    step_time_mad_s: float | None
    steady_step_time_s: float | None
    steady_steps: int
    checkpoints_saved: int
    checkpoints_useful: int
    """Completed saves whose state survives (their step was not computed again by a later attempt)."""
    run_start: float | None = None
    """Unix time of the first attempt's ``run_start`` event (MLPerf logs), if any: where MLPerf's clock
    starts (see :func:`ledger.analyses.gates.clock_start`)."""
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list, repr=False)
    bin_edges_s: list[float] = field(default_factory=list, repr=False)
    bin_productive_s: list[float] = field(default_factory=list, repr=False)
    bin_lost_s: list[float] = field(default_factory=list, repr=False)
    # surviving computations by step (for gates: interpolation between evals); not serialised
    surviving_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    surviving_times: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def goodput(self) -> float | None:
        """productive / wall time; None for a run of no duration."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    @property
    def badput_s(self) -> float:
        return sum(self.buckets.values())

    @property
    def token_goodput(self) -> float | None:
        if not self.tokens_processed or self.tokens_useful is None:
            return None
        return self.tokens_useful / self.tokens_processed

    @property
    def end(self) -> float:
        """Unix time of the last attempt's end."""
        return self.start + self.wall_s

    def shares(self) -> dict[str, float]:
        """Each bucket as a share of the wall time."""
        return {k: (v / self.wall_s if self.wall_s > 0 else 0.0) for k, v in self.buckets.items()}

    def to_json(self) -> dict[str, Any]:
        """JSON-ready figures (``ledger goodput --json``; no timeline arrays)."""
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (no timeline arrays)."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "wall_s": self.wall_s,
            "productive_s": self.productive_s,
            "goodput": self.goodput,
            "badput_s": self.buckets,
            "badput_share": self.shares(),
            "token_goodput": self.token_goodput,
            "tokens_processed": self.tokens_processed,
            "tokens_useful": self.tokens_useful,
            "steps_computed": self.steps_computed,
            "steps_useful": self.steps_useful,
            "steps_recomputed": self.steps_recomputed,
            "step_time_median_s": self.step_time_median_s,
            "step_time_mad_s": self.step_time_mad_s,
            "steady_step_time_s": self.steady_step_time_s,
            "steady_steps": self.steady_steps,
            "checkpoints_saved": self.checkpoints_saved,
            "checkpoints_useful": self.checkpoints_useful,
            "run_start_s": None if self.run_start is None else self.run_start - self.start,
            "attempts": [
                {
                    "id": a.id,
                    "attempt": a.attempt,
                    "status": a.status,
                    "start_s": a.start_s,
                    "end_s": a.end_s,
                    "duration_s": a.duration_s,
                    "steps_computed": a.steps_computed,
                    "steps_lost": a.steps_lost,
                    "first_step": a.first_step,
                    "last_step": a.last_step,
                    "restored_step": a.restored_step,
                }
                for a in self.attempts
            ],
            "notes": self.notes,
            "problems": self.problems,
        }


# ------------------------------------------------------------------------------------------- helpers
def _col(table: pa.Table, name: str, dtype: Any, fill: float | int = np.nan) -> np.ndarray:
    """A column as a numpy array, nulls as ``fill`` (a missing column is all ``fill``)."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype=dtype)
    column = table.column(name)
    if column.null_count:
        if isinstance(fill, float) and math.isnan(fill):
            column = column.cast(pa.float64())
        column = pc.fill_null(column, fill)
    return np.asarray(column.to_numpy(), dtype=dtype)


def _constant(table: pa.Table, name: str) -> bool:
    """Does the column (nulls as 0, a missing column all 0) hold one value in every row?"""
    if name not in table.column_names or table.num_rows == 0:
        return True
    column = table.column(name)
    if column.null_count == table.num_rows:
        return True
    if column.null_count:
        return False
    bounds = pc.min_max(column)
    return bool(bounds["min"].as_py() == bounds["max"].as_py())


def _attempt_index(table: pa.Table, ids: Sequence[str]) -> np.ndarray:
    """Position of each row's receipt_id in ``ids`` (-1 for other receipts)."""
    if table.num_rows == 0:
        return np.zeros(0, np.int64)
    column = table.column("receipt_id")
    value_set = pa.array(list(ids), pa.string())
    if pa.types.is_dictionary(column.type):
        # look up the few distinct ids once, then map each row's dictionary index (no string per row)
        parts = []
        for chunk in column.chunks:
            found = pc.fill_null(pc.index_in(chunk.dictionary.cast(pa.string()), value_set=value_set), -1)
            lookup = np.append(np.asarray(found.to_numpy(), dtype=np.int64), -1)
            indices = chunk.indices
            at = np.asarray(pc.fill_null(indices, -1).to_numpy(), dtype=np.int64) if indices.null_count else \
                np.asarray(indices.to_numpy(), dtype=np.int64)
            parts.append(lookup[at])
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    idx = pc.index_in(column, value_set=value_set)
    return np.asarray(pc.fill_null(idx, -1).to_numpy(), dtype=np.int64)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted intervals covering the same points as the given ones (empty ones dropped)."""
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.ones(starts.size, bool)
    new[1:] = starts[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    out_s = starts[new]
    out_e = np.zeros(out_s.size)
    np.maximum.at(out_e, group, reach)
    return out_s, out_e


class _Cover:
    """Measure of a set of disjoint sorted intervals inside any [a, b]."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = starts, ends
        self.before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def upto(self, x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(self.ends, x, side="right")
        partial = np.zeros(x.shape)
        inside = j < self.starts.size
        partial[inside] = np.maximum(0.0, x[inside] - self.starts[j[inside]])
        out: np.ndarray = self.before[j] + partial
        return out

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.starts.size == 0:
            return np.zeros(a.shape)
        out: np.ndarray = self.upto(b) - self.upto(a)
        return out


def _inside(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For disjoint sorted intervals: is each x inside one of them?"""
    if starts.size == 0:
        return np.zeros(x.shape, bool)
    j = np.searchsorted(starts, x, side="right") - 1
    ok = j >= 0
    out = np.zeros(x.shape, bool)
    out[ok] = x[ok] < ends[j[ok]]
    return out


def _last_occurrence(values: np.ndarray) -> np.ndarray:
    """Mask of the last occurrence of each value (values in time order)."""
    n = values.size
    if n > 1 and bool((values[1:] > values[:-1]).all()):
        return np.ones(n, bool)  # no value repeats (no step was computed again)
    keep = np.zeros(n, bool)
    if n == 0:
        return keep
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * n + 1024:
        last = np.full(hi - lo + 1, -1, np.int64)
        np.maximum.at(last, values - lo, np.arange(n))
        keep[last[last >= 0]] = True
    else:
        _, first_in_reversed = np.unique(values[::-1], return_index=True)
        keep[n - 1 - first_in_reversed] = True
    return keep


def _unique_positions(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each value's index among them). Step numbers are dense, so a bitmap beats
    sorting (and numpy's hash-based ``unique``) by far; sparse values fall back to a sort."""
    n = values.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if n > 1 and bool((values[1:] > values[:-1]).all()):
        return values, np.arange(n, dtype=np.int64)  # already sorted and distinct
    lo, hi = int(values.min()), int(values.max())
    if hi - lo <= 4 * n + 1024:
        present = np.zeros(hi - lo + 1, bool)
        present[values - lo] = True
        rank = np.cumsum(present) - 1
        return np.flatnonzero(present) + lo, rank[values - lo]
    ordered = np.sort(values)
    distinct = np.empty(n, bool)
    distinct[0] = True
    distinct[1:] = ordered[1:] != ordered[:-1]
    uniq = ordered[distinct]
    return uniq, np.searchsorted(uniq, values)


def _robust_steady(dt: np.ndarray) -> tuple[float | None, float | None, float | None, int]:
    """(median, MAD, median of the values <= median + 3 MAD, how many those are)."""
    finite = np.isfinite(dt)
    if not finite.all():
        dt = dt[finite]
    if dt.size == 0:
        return None, None, None, 0
    ordered = np.sort(dt)  # one sort serves the median and the kept values (a prefix of it)
    med = sorted_median(ordered)
    dev = np.subtract(ordered, med)
    np.abs(dev, out=dev)
    dev.sort()
    mad = sorted_median(dev)
    kept = ordered[: int(np.searchsorted(ordered, med + 3 * mad, side="right"))]
    return med, mad, sorted_median(kept), int(kept.size)


# ------------------------------------------------------------------------------------------- compute
def compute(
    attempts: Sequence[Receipt],
    steps: pa.Table,
    events: pa.Table,
    timing: pa.Table | None = None,
    *,
    bins: int = TIMELINE_BINS,
) -> Goodput:
    """Goodput of the logical run made of ``attempts`` (receipts, any order; they must not overlap).

    ``steps``, ``events`` and ``timing`` are the index's tables (each with ``receipt_id``), restricted to
    those receipts or not; ``events`` must be in recorded order per receipt and rank. ``timing`` is only
    read for data-loading phases (it may hold just those rows)."""
    from ledger.store.attempts import check_attempts, unix

    check_attempts(attempts)
    notes: list[str] = []
    problems: list[str] = []

    # ------------------------------------------------------------------ attempt windows
    ids = [r.id for r in attempts]
    s_aid = _attempt_index(steps, ids)
    s_time = _col(steps, "time", np.float64)
    e_aid = _attempt_index(events, ids)
    e_time = _col(events, "time", np.float64)
    windows: list[tuple[float, float]] = []
    for i, r in enumerate(attempts):
        start, end = unix(r.started_at), unix(r.ended_at)
        if start is None or end is None:
            seen = np.concatenate([s_time[(s_aid == i) & np.isfinite(s_time)],
                                   e_time[(e_aid == i) & np.isfinite(e_time)]])
            if seen.size == 0:
                raise _bad(f"attempt {r.attempt} ({r.id[:12]}) has no start or end time and no timed rows")
            notes.append(f"attempt {r.attempt} has no {'start' if start is None else 'end'} time: "
                         "taken from its first/last timed row")
            start = float(seen.min()) if start is None else start
            end = float(seen.max()) if end is None else end
        windows.append((start, max(start, end)))
    order = sorted(range(len(attempts)), key=lambda i: (windows[i][0], attempts[i].attempt))
    attempts = [attempts[i] for i in order]
    windows = [windows[i] for i in order]
    remap = np.empty(len(order), np.int64)
    remap[np.asarray(order, np.int64)] = np.arange(len(order))
    if order != sorted(order):  # attempts were not given in time order: renumber their rows
        s_aid = np.where(s_aid >= 0, remap[np.maximum(s_aid, 0)], -1)
        e_aid = np.where(e_aid >= 0, remap[np.maximum(e_aid, 0)], -1)
    w_start = np.array([w[0] for w in windows])
    w_end = np.array([w[1] for w in windows])
    # from here on, times are seconds from the first attempt's start: Unix times (~1.8e9) carry only
    # ~2e-7 s of precision, and step lengths must add up to the timers' figures
    origin = float(w_start[0])
    s_time = s_time - origin
    e_time = e_time - origin
    w_start, w_end = w_start - origin, w_end - origin
    windows = [(a - origin, b - origin) for a, b in windows]
    t0, t1 = 0.0, float(w_end.max())
    wall = t1 - t0

    # ------------------------------------------------------------------ steps
    rows = s_aid >= 0
    if rows.any() and not _constant(steps, "rank"):  # one rank throughout: none is higher
        rank = _col(steps, "rank", np.int64, 0)
        low = np.full(len(attempts), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(low, s_aid[rows], rank[rows])
        others = rows & (rank != low[np.maximum(s_aid, 0)])
        if others.any():
            notes.append(f"{int(others.sum())} step rows of higher ranks ignored (the lowest rank's steps are read)")
            rows &= ~others
    untimed = rows & ~np.isfinite(s_time)
    if untimed.any():
        notes.append(f"{int(untimed.sum())} step rows carry no time and are left out of the timeline")
        rows &= ~untimed
    every = bool(rows.all())  # the usual case: no row left out, so no copy through an index
    sel = np.flatnonzero(rows) if not every else None

    def pick(values: np.ndarray) -> np.ndarray:
        return values if sel is None else values[sel]

    aid = pick(s_aid)
    t_end = pick(s_time)
    step = pick(_col(steps, "step", np.int64, 0))
    dt = pick(_col(steps, "step_time_s", np.float64))
    tokens = pick(_col(steps, "tokens", np.float64))
    skipped = pick(_col(steps, "skipped", np.bool_, False)) if "skipped" in steps.column_names else None
    if aid.size > 1:
        a0, a1 = aid[:-1], aid[1:]
        sorted_ok = bool(np.all((a1 > a0) | ((a1 == a0) & (t_end[1:] >= t_end[:-1]))))
    else:
        sorted_ok = True
    if not sorted_ok:
        back = [a for a in range(len(attempts)) if np.any(np.diff(t_end[aid == a]) < 0)]
        if back:
            notes.append("step rows of attempt(s) " + ", ".join(str(attempts[a].attempt) for a in back)
                         + " were not in time order; they are taken in time order")
        perm = np.lexsort((t_end, aid))
        aid, t_end, step, dt, tokens = aid[perm], t_end[perm], step[perm], dt[perm], tokens[perm]
        skipped = skipped[perm] if skipped is not None else None
    n = step.size

    # steps each row stands for: since the previous logged step number (any attempt)
    uniq, pos = _unique_positions(step)
    prev_step = np.where(pos > 0, uniq[np.maximum(pos - 1, 0)], np.minimum(step - 1, 0))
    width = np.maximum(step - prev_step, 1)
    if n:  # an attempt's first row may follow steps nobody logged (resumed from elsewhere): one interval
        first_of_attempt = np.ones(n, bool)
        first_of_attempt[1:] = aid[1:] != aid[:-1]
        typical = max(1, int(median(width)))
        width = np.where(first_of_attempt, np.minimum(width, typical), width)
    if n and width.max() > 1:
        notes.append(f"steps are logged every {int(median(width))} steps or so: a logged row stands for the "
                     "steps since the previous one, each taking the logged step's time")
    measured_dt = dt  # step_time_s is one step's time even where a row stands for several (dt is replaced below)
    missing_dt = ~np.isfinite(dt)
    if missing_dt.any():
        gap = np.empty(n)
        gap[0] = np.nan
        gap[1:] = np.where(aid[1:] == aid[:-1], t_end[1:] - t_end[:-1], np.nan)
        dt = np.where(missing_dt, gap / width, dt)
        still = ~np.isfinite(dt)
        dt[still] = 0.0
        notes.append(f"{int(missing_dt.sum())} step rows have no step_time_s: taken from the time since the "
                     f"previous row ({int(still.sum())} with no previous row count as 0 s)")
    if len(attempts) == 1:  # one window: the same bounds for every row
        a_lo: np.ndarray | float = float(w_start[0])
        a_hi: np.ndarray | float = float(w_end[0])
    else:
        a_lo = w_start[aid] if n else np.zeros(0)
        a_hi = w_end[aid] if n else np.zeros(0)
    end = np.clip(t_end, a_lo, a_hi)
    start = np.clip(end - width * dt, a_lo, a_hi)
    if n > 1:
        start[1:] = np.maximum(start[1:], end[:-1])
    length = np.maximum(end - start, 0.0)

    surviving = _last_occurrence(step)
    lost = ~surviving
    all_survive = bool(surviving.all())  # no step computed again (the usual case): no masked copies
    data_in_steps = np.zeros(n)
    if timing is not None and timing.num_rows and n:
        data_in_steps = _data_phases(timing, ids, order, aid, step, surviving, length)
    productive = float((length if all_survive else length[surviving]).sum() - data_in_steps.sum())
    lost_s = 0.0 if all_survive else float(length[lost].sum())

    # tokens
    tokens_processed: int | None = None
    tokens_useful: int | None = None
    if n and np.isfinite(tokens).all():
        if n < 2 or bool((step[1:] > step[:-1]).all()):  # steps rising: the previous step is the previous row
            per_row = np.empty(n)
            per_row[0] = tokens[0] - 0.0
            np.subtract(tokens[1:], tokens[:-1], out=per_row[1:])
        else:
            cum_by_step = np.zeros(uniq.size)
            cum_by_step[pos[surviving]] = tokens[surviving]
            per_row = tokens - np.where(pos > 0, cum_by_step[np.maximum(pos - 1, 0)], 0.0)
        np.maximum(per_row, 0.0, out=per_row)
        tokens_processed = int(per_row.sum())
        useful_rows = surviving if skipped is None else surviving & ~skipped
        tokens_useful = int((per_row if bool(useful_rows.all()) else per_row[useful_rows]).sum())
        if skipped is not None and skipped.any():
            notes.append(f"{int(skipped.sum())} skipped steps (non-finite gradients) count as processed, not useful "
                         "tokens")
    elif n:
        notes.append("some step rows have no token count: token goodput not computed")

    med, mad, steady, steady_n = _robust_steady(measured_dt)

    # ------------------------------------------------------------------ events -> intervals
    ev_rows = np.flatnonzero(e_aid >= 0)
    kinds = events.column("kind").to_pylist() if events.num_rows else []
    ev_rank = _col(events, "rank", np.int64, 0)
    ev_step = _col(events, "step", np.float64)
    details = events.column("detail").to_pylist() if "detail" in events.column_names and events.num_rows else []
    intervals: dict[str, list[tuple[float, float]]] = {b: [] for b in _PRIORITY}
    init_end: dict[int, float] = {}
    restored: dict[int, int] = {}
    run_start: float | None = None
    saves: list[tuple[int, int]] = []  # (attempt position, step) of checkpoint_save_end
    last_time: dict[tuple[int, int], tuple[float, str]] = {}
    open_: dict[tuple[int, int, str], tuple[float, int | None]] = {}
    for row in ev_rows:
        a, rk, t, kind = int(e_aid[row]), int(ev_rank[row]), float(e_time[row]), kinds[row]
        who = f"attempt {attempts[a].attempt} rank {rk}"
        st = None if math.isnan(ev_step[row]) else int(ev_step[row])
        prev = last_time.get((a, rk))
        if prev is not None and t < prev[0]:
            problems.append(f"{who}: {kind} at {t - t0:.3f} s is recorded after {prev[1]} at {prev[0] - t0:.3f} s "
                            "(events out of time order; kept in recorded order)")
        last_time[(a, rk)] = (t, kind)
        if kind in _INIT_END:
            init_end[a] = max(init_end.get(a, -math.inf), t)
        elif kind == "run_start" and a == 0 and run_start is None:
            run_start = t
        elif kind == "checkpoint_restore_end" and st is not None:
            restored[a] = st
        if kind == "checkpoint_save_end" and st is not None:
            saves.append((a, st))
        if kind in _OPENERS:
            bucket = _OPENERS[kind]
            key = (a, rk, bucket)
            if key in open_:
                problems.append(f"{who}: {kind} at {t - t0:.3f} s while the previous one is still open "
                                f"(its end is missing); the earlier one is dropped")
            open_[key] = (t, st)
        elif kind in _CLOSERS:
            bucket = _CLOSERS[kind]
            key = (a, rk, bucket)
            opened = open_.pop(key, None)
            if opened is None:
                problems.append(f"{who}: {kind} at {t - t0:.3f} s has no matching start; left out")
            elif t < opened[0]:
                problems.append(f"{who}: {kind} at {t - t0:.3f} s precedes its start at {opened[0] - t0:.3f} s "
                                "(events out of order); left out")
            else:
                intervals[bucket].append((opened[0], t))
        elif kind == "data_wait":
            seconds = _detail_seconds(details[row] if details else None)
            if seconds is not None and seconds > 0:
                intervals["data_loading"].append((t - seconds, t))
    for (a, rk, bucket), (t, _st) in open_.items():
        intervals[bucket].append((t, windows[a][1]))
        notes.append(f"attempt {attempts[a].attempt} rank {rk}: {PAIRS[bucket][0]} at {t - t0:.3f} s never ended; "
                     "counted to the attempt's end")

    first_step_start = {}
    for a in range(len(attempts)):
        mine = np.flatnonzero(aid == a)
        if mine.size:
            first_step_start[a] = float(start[mine[0]])
    for a, (ws, we) in enumerate(windows):
        up_to = init_end.get(a, first_step_start.get(a, we))
        intervals["startup"].append((ws, min(max(up_to, ws), we)))
        intervals["other"].append((ws, we))
    for a in range(1, len(windows)):
        gap_start = float(w_end[:a].max())
        if windows[a][0] > gap_start:
            intervals["downtime"].append((gap_start, windows[a][0]))

    # ------------------------------------------------------------------ partition
    timed = length > 0
    cover = _Cover(start, end) if bool(timed.all()) else _Cover(start[timed], end[timed])
    cats = []
    for bucket in _PRIORITY:
        spans = np.array(intervals[bucket], dtype=np.float64).reshape(-1, 2)
        cats.append(_union(np.clip(spans[:, 0], t0, t1), np.clip(spans[:, 1], t0, t1)))
    points = np.unique(np.concatenate([np.concatenate([s, e]) for s, e in cats] + [np.array([t0, t1])]))
    seg_a, seg_b = points[:-1], points[1:]
    mid = (seg_a + seg_b) / 2
    owner = np.full(mid.size, -1, np.int64)
    for k, (s, e) in enumerate(cats):
        hit = (owner < 0) & _inside(s, e, mid)
        owner[hit] = k
    free = np.maximum((seg_b - seg_a) - cover.within(seg_a, seg_b), 0.0)
    sums = np.bincount(owner[owner >= 0], weights=free[owner >= 0], minlength=len(_PRIORITY))
    buckets = {b: 0.0 for b in BUCKETS}
    for k, bucket in enumerate(_PRIORITY):
        buckets[bucket] += float(sums[k])
    buckets["progress_lost"] = lost_s
    buckets["data_loading"] += float(data_in_steps.sum())

    # segments for the timeline (not "other": that is the background)
    segments: list[Segment] = []
    keep = owner >= 0
    for a_, b_, k in zip(seg_a[keep], seg_b[keep], owner[keep], strict=True):
        bucket = _PRIORITY[int(k)]
        if bucket == "other":
            continue
        if segments and segments[-1].bucket == bucket and abs(segments[-1].end_s - (a_ - t0)) < 1e-9:
            segments[-1] = Segment(segments[-1].start_s, float(b_ - t0), bucket)
        else:
            segments.append(Segment(float(a_ - t0), float(b_ - t0), bucket))

    # step activity per timeline bin
    nb = max(1, bins)
    edges = np.linspace(0.0, wall if wall > 0 else 1.0, nb + 1)
    if n:
        if nb == 1:  # one bin holds every row
            b_idx = np.zeros(n, np.int64)
        else:
            centre = (start + end) / 2 - t0
            b_idx = np.clip(((centre / (edges[-1] or 1.0)) * nb).astype(np.int64), 0, nb - 1)
        if all_survive:
            bin_prod: np.ndarray = np.bincount(b_idx, weights=length, minlength=nb)
            bin_lost: np.ndarray = np.zeros(nb)
        else:
            bin_prod = np.bincount(b_idx[surviving], weights=length[surviving], minlength=nb)
            bin_lost = np.bincount(b_idx[lost], weights=length[lost], minlength=nb)
    else:
        bin_prod = np.zeros(nb)
        bin_lost = np.zeros(nb)

    # checkpoints whose state survives: the surviving computation of their step belongs to their attempt
    useful = 0
    if saves:
        owner_of_step = np.full(uniq.size, -1, np.int64)
        owner_of_step[pos[surviving]] = aid[surviving]
    for a, st in saves:
        j = int(np.searchsorted(uniq, st, side="right")) - 1
        if j < 0 or owner_of_step[j] <= a:
            useful += 1

    spans_out = []
    for a, r in enumerate(attempts):
        mine = aid == a
        steps_a = step if len(attempts) == 1 and bool(mine.all()) else step[mine]
        spans_out.append(
            AttemptSpan(
                id=r.id,
                attempt=r.attempt,
                status=r.status,
                start_s=windows[a][0] - t0,
                end_s=windows[a][1] - t0,
                steps_computed=int(mine.sum()),
                steps_lost=0 if all_survive else int((mine & lost).sum()),
                first_step=int(steps_a.min()) if steps_a.size else None,
                last_step=int(steps_a.max()) if steps_a.size else None,
                restored_step=restored.get(a),
            )
        )
    # surviving rows by step (a stable sort; none needed when they already are, as usual)
    surv_idx: np.ndarray | None = None if all_survive else np.flatnonzero(surviving)
    surv_steps = step if surv_idx is None else step[surv_idx]
    if surv_steps.size > 1 and not bool((surv_steps[1:] >= surv_steps[:-1]).all()):
        by_step = np.argsort(surv_steps, kind="stable")
        surv_idx = by_step if surv_idx is None else surv_idx[by_step]
    return Goodput(
        run_id=attempts[0].links.attempt_of or attempts[0].id,
        name=next((r.name for r in reversed(attempts) if r.name), None),
        start=origin,
        wall_s=wall,
        productive_s=productive,
        buckets=buckets,
        attempts=spans_out,
        steps_computed=n,
        steps_useful=int(surviving.sum()),
        steps_recomputed=int(lost.sum()),
        tokens_processed=tokens_processed,
        tokens_useful=tokens_useful,
        step_time_median_s=med,
        step_time_mad_s=mad,
        steady_step_time_s=steady,
        steady_steps=steady_n,
        checkpoints_saved=len(saves),
        checkpoints_useful=useful,
        run_start=None if run_start is None else run_start + origin,
        notes=notes,
        problems=problems,
        segments=segments,
        bin_edges_s=edges.tolist(),
        bin_productive_s=bin_prod.tolist(),
        bin_lost_s=bin_lost.tolist(),
        surviving_steps=np.array(step, dtype=np.int64) if surv_idx is None else step[surv_idx],
        surviving_times=(end if surv_idx is None else end[surv_idx]) + origin,
    )


def _bad(message: str) -> Exception:
    from ledger.errors import BadInput

    return BadInput(message)


def _detail_seconds(detail: str | None) -> float | None:
    if not detail:
        return None
    try:
        value = json.loads(detail).get("seconds")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _data_phases(
    timing: pa.Table,
    ids: Sequence[str],
    order: Sequence[int],
    aid: np.ndarray,
    step: np.ndarray,
    surviving: np.ndarray,
    length: np.ndarray,
) -> np.ndarray:
    """Seconds of data-loading phases inside each surviving step row (capped at the row's length)."""
    mask = pc.is_in(timing.column("phase"), value_set=pa.array(DATA_PHASES))
    timing = timing.filter(mask)
    out = np.zeros(step.size)
    if timing.num_rows == 0:
        return out
    t_aid = _attempt_index(timing, ids)
    remap = {old: new for new, old in enumerate(order)}
    t_rank = _col(timing, "rank", np.int64, 0)
    t_step = _col(timing, "step", np.int64, 0)
    t_sec = _col(timing, "seconds", np.float64, 0.0)
    low: dict[int, int] = {}
    for a, r in zip(t_aid, t_rank, strict=True):
        if a >= 0:
            low[int(a)] = min(low.get(int(a), int(r)), int(r))
    by_key: dict[tuple[int, int], float] = {}
    for a, r, s, sec in zip(t_aid, t_rank, t_step, t_sec, strict=True):
        if a >= 0 and r == low[int(a)]:
            key = (remap[int(a)], int(s))
            by_key[key] = by_key.get(key, 0.0) + float(sec)
    for i in np.flatnonzero(surviving):
        sec = by_key.get((int(aid[i]), int(step[i])))
        if sec:
            out[i] = min(sec, float(length[i]))
    return out


__all__ = ["BUCKETS", "DATA_PHASES", "PAIRS", "TIMELINE_BINS", "AttemptSpan", "Goodput", "Segment", "compute"]
