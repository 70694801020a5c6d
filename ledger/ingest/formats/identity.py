"""Step identity: which printed lines are one step, and which step of the run each is.

A training loop prints a counter beside its metrics. The counter is not always the run's step: it restarts
every epoch (``epoch 2 iter 20/50``), it goes back after a restart from a checkpoint, several ranks print it,
and one step may be printed twice in two shapes (a callback's line, then the trainer's dict). This module reads
the sequence of printed counters of one source, in the order the lines were printed, and decides for each line:

- **a new step** while the counter rises;
- **the same step** when the counter repeats a step of the current stretch (a *segment*) with the same values
  (another rank, another shape, the same line again): its metrics are merged into that step, a metric given
  twice keeping its first reading (a reading that differs is counted, never silently taken);
- **a new segment** when the counter goes back, or repeats a step with other values:

  - back to (or below) the segment's first step: a new **epoch** (or cycle). Its steps follow the last one's:
    the step of the run is the printed counter plus the length of the epochs before, an epoch's length being the
    total printed beside the counter (``20/50`` -> 50), else its last printed counter (plus the counter's spacing
    when it counts from 0);
  - back into the middle of the segment, to a step printed before with other values: a **restart** from a
    checkpoint. The counter is the run's step again (the steps computed again keep their numbers), in a new
    *generation*: both computations are kept as rows, the later in time (goodput counts the earlier as progress
    lost).

A counter printed by several ranks is followed rank by rank when the lines name their rank (``[rank3]:``, the
capture's ``@rank``): a rank that lags behind another is not a counter going back. Two lines of two ranks at the
same step and generation are one step.

Values of two lines of one shape agree when they are equal: a shape prints a figure with fixed precision, so a
difference is another computation (or another rank's figure). Values of two lines of different shapes (a line a
format read, and a line without a counter of another format that joined it: :meth:`.scan.LineCapture._add`)
agree when they are equal to the precision of the less precise printing (``2.1235`` and ``2.123456789`` agree;
``2.1240`` and ``2.123456789`` do not). When both lines give a loss, the loss decides; otherwise every metric
they share.

Everything is numpy over the whole sequence when the counter only rises (most logs); a Python loop visits only
the lines where it does not (each epoch's first line, each repeat).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

LOSS = "loss"
MAX_DECIMALS = 12


@dataclass(frozen=True)
class Observations:
    """What one source printed, one entry per step line, in the order printed (line numbers increasing)."""

    lines: Ints
    """Line number of each observation in its log (1-based)."""
    steps: Ints
    """The counter each printed."""
    labels: Ints
    """Who printed it (a rank), -1 when the line names nobody."""
    totals: Floats
    """The total printed beside the counter (``20/50``: 50), NaN when none."""
    values: dict[str, tuple[Floats, Bools]]
    """Per metric: its value on each observation and whether the observation gave it."""
    shapes: Ints | None = None
    """Which shape printed each observation (0: the source's own; another number: a line of another format that
    joined it); None: all the source's own."""


@dataclass(frozen=True)
class Identity:
    """The steps the observations are, and what was decided on the way."""

    row: Ints
    """Per observation: the index of the step (row) it belongs to. Rows are numbered in the order of their first
    observation."""
    first: Ints
    """Per row: the observation that printed it first."""
    step: Ints
    """Per row: its step in the run."""
    printed: Ints
    """Per row: the counter as its first observation printed it."""
    generation: Ints
    """Per row: 0, or the number of restarts before it (rows of a restart repeat earlier steps)."""
    merged: int
    """Observations that joined a step printed before (another rank, shape, or the same line again)."""
    differing: int
    """Of those, the ones whose values differed from the step's first reading on a metric both gave."""
    segments: int
    """Stretches of the counter (1 when it never went back; over every label, the most any label had)."""
    restarts: int
    """Segments that were restarts (the most any label had)."""
    epochs: int
    """Segments that were new epochs or cycles (the most any label had)."""

    @property
    def offset(self) -> bool:
        """Whether some row's step is not its printed counter (epochs offset the counter)."""
        return bool((self.step != self.printed).any())


def decimals(values: Floats) -> Ints:
    """The fewest decimals that represent each value exactly (as printed: ``2.1234`` -> 4), at most 12; 12 for
    values that need more (or are not finite)."""
    out = np.full(values.shape, MAX_DECIMALS, np.int64)
    finite = np.isfinite(values)
    left = finite.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        for d in range(MAX_DECIMALS):
            hit = left & (np.round(values, d) == values)
            out[hit] = d
            left &= ~hit
            if not left.any():
                break
    return out


def agree(a: Floats, b: Floats, rounded: Bools | bool = True) -> Bools:
    """Whether each pair of values is the same figure: equal (NaN agrees with NaN), or, where ``rounded``, equal to
    the precision of the less precise printing: closer than half a unit of its last decimal (an exact half is
    another figure)."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
        same = (a == b) | (diff <= 1e-12 * np.maximum(np.abs(a), np.abs(b))) | (np.isnan(a) & np.isnan(b))
        need = ~same & rounded
        if np.any(need):  # only pairs of two shapes that differ need their printed precision
            at = np.flatnonzero(need)
            digits = np.minimum(decimals(a[at]), decimals(b[at]))
            same[at] = diff[at] < 0.5 * np.power(10.0, -digits) * (1 - 1e-9)
    return np.asarray(same, dtype=np.bool_)


def identify(obs: Observations) -> Identity:
    """The step of the run each observation is (see the module docs)."""
    n = obs.lines.size
    if n == 0:
        empty = np.zeros(0, np.int64)
        return Identity(empty, empty, empty, empty, empty, 0, 0, 1, 0, 0)
    if (obs.labels == obs.labels[0]).all() and (obs.steps[1:] > obs.steps[:-1]).all():
        every = np.arange(n, dtype=np.int64)  # one printer, a rising counter (most logs): each line a step
        return Identity(row=every, first=every, step=obs.steps, printed=obs.steps, generation=np.zeros(n, np.int64),
                        merged=0, differing=0, segments=1, restarts=0, epochs=0)
    glob = np.empty(n, np.int64)
    gen = np.zeros(n, np.int64)
    segments = restarts = epochs = 0
    for label in np.unique(obs.labels):
        idx = np.flatnonzero(obs.labels == label)
        g, r, seg, rst, ep = _follow(obs, idx)
        glob[idx], gen[idx] = g, r
        segments, restarts, epochs = max(segments, seg), max(restarts, rst), max(epochs, ep)
    # rows: one per (generation, step), in the order of their first observation
    key_order = np.lexsort((glob, gen))
    k_gen, k_glob = gen[key_order], glob[key_order]
    new_key = np.ones(n, np.bool_)
    new_key[1:] = (k_gen[1:] != k_gen[:-1]) | (k_glob[1:] != k_glob[:-1])
    key_id = np.cumsum(new_key) - 1
    keys = np.empty(n, np.int64)
    keys[key_order] = key_id
    n_rows = int(key_id[-1]) + 1
    first = np.full(n_rows, n, np.int64)
    np.minimum.at(first, keys, np.arange(n, dtype=np.int64))  # observations are in line order: the earliest
    by_appearance = np.argsort(first, kind="stable")
    renumber = np.empty(n_rows, np.int64)
    renumber[by_appearance] = np.arange(n_rows, dtype=np.int64)
    row = renumber[keys]
    first = first[by_appearance]
    joined = np.ones(n, np.bool_)
    joined[first] = False
    differing = _differing(obs, row, first, joined)
    return Identity(row=row, first=first, step=glob[first], printed=obs.steps[first], generation=gen[first],
                    merged=int(joined.sum()), differing=differing, segments=segments + 1, restarts=restarts,
                    epochs=epochs)


def _follow(obs: Observations, idx: Ints) -> tuple[Ints, Ints, int, int, int]:
    """One label's observations (indexes ``idx``, in line order): the step of the run and generation of each, and
    the counts of segments after the first, restarts and epochs."""
    s = obs.steps[idx]
    n = s.size
    back = np.flatnonzero(s[1:] <= s[:-1]) + 1
    if not back.size:  # the counter only rises: every line a step, the counter the step (most logs)
        return s.copy(), np.zeros(n, np.int64), 0, 0, 0
    offset = 0
    generation = 0
    seg_start = 0  # index (in this label's sequence) of the current segment's first observation
    seen: dict[int, int] = {}  # printed step -> the index of its first observation in the current segment
    filled = 0  # observations up to here are in `seen` or decided
    segments = restarts = epochs = 0
    # from each line where the counter does not rise on (and from the first line): the offset and generation in
    # force, which every line up to the next such line shares
    in_force = np.zeros((2, back.size + 1), np.int64)
    for k, i in enumerate(back.tolist(), start=1):
        _remember(seen, s, filled, i)  # the rising run before this line: new steps of the segment
        filled = i + 1
        step = int(s[i])
        earlier = seen.get(step)
        first_step = int(s[seg_start])
        same = earlier is not None and _same_values(obs, int(idx[i]), int(idx[earlier]))
        # printed again at once with other values (per-rank figures): merged too, the first reading kept (the
        # differing count says so)
        repeat = earlier is not None and step == int(s[i - 1]) and step > first_step
        if not (same or repeat):  # a new segment
            segments += 1
            if step <= first_step:  # back to the start: a new epoch (or cycle) after this one
                epochs += 1
                offset += _epoch_length(obs, idx, seg_start, i, s)
            else:  # back into the middle, other values: a restart from a checkpoint
                restarts += 1
                generation += 1
            seg_start = i
            seen = {step: i}
        # else the same step again (another rank, another shape, the same line): the segment in force goes on
        in_force[:, k] = offset, generation
    which = np.searchsorted(np.concatenate(([0], back)), np.arange(n), side="right") - 1
    return s + in_force[0, which], in_force[1, which], segments, restarts, epochs


def _remember(seen: dict[int, int], s: Ints, start: int, end: int) -> None:
    """Add the rising run ``s[start:end]`` to the current segment's steps (first observation of each)."""
    if end > start:
        for step, i in zip(s[start:end].tolist(), range(start, end), strict=True):
            seen.setdefault(step, i)


def _epoch_length(obs: Observations, idx: Ints, seg_start: int, end: int, s: Ints) -> int:
    """The length of the segment that ends before ``end``: the total printed beside its counter, else its last
    counter (plus the counter's spacing when the counter counts from 0)."""
    totals = obs.totals[idx[seg_start:end]]
    totals = totals[np.isfinite(totals)]
    if totals.size:
        return int(totals[-1])
    counters = s[seg_start:end]
    last = int(counters.max())
    if int(counters.min()) == 0:
        spacing = np.diff(np.unique(counters))
        return last + (int(np.median(spacing)) if spacing.size else 1)
    return max(last, 1)


def _same_values(obs: Observations, i: int, j: int) -> bool:
    """Whether observations ``i`` and ``j`` agree: on the loss when both give one, else on every metric both give
    (no metric in common: they agree)."""
    rounded = obs.shapes is not None and obs.shapes[i] != obs.shapes[j]
    loss = obs.values.get(LOSS)
    if loss is not None and loss[1][i] and loss[1][j]:
        return bool(agree(loss[0][i:i + 1], loss[0][j:j + 1], rounded)[0])
    for name, (values, present) in obs.values.items():
        if name.startswith("@") or not (present[i] and present[j]):
            continue
        if not agree(values[i:i + 1], values[j:j + 1], rounded)[0]:
            return False
    return True


def _differing(obs: Observations, row: Ints, first: Ints, joined: Bools) -> int:
    """Observations that joined a step and differ from its first reading on a metric both gave."""
    if not joined.any():
        return 0
    at = np.flatnonzero(joined)
    head = first[row[at]]
    rounded = None if obs.shapes is None else obs.shapes[at] != obs.shapes[head]
    differs = np.zeros(at.size, np.bool_)
    for name, (values, present) in obs.values.items():
        if name.startswith("@"):
            continue
        a, b = values[at], values[head]
        equal = (a == b) | (np.isnan(a) & np.isnan(b))  # one shape printed it twice: equal, or it differs
        check = ~equal & present[at] & present[head]
        if rounded is not None and check.any():  # two shapes: to the precision of the less precise printing
            some = np.flatnonzero(check)
            check[some] = ~agree(a[some], b[some], rounded[some])
        differs |= check
    return int(differs.sum())


__all__ = ["Identity", "Observations", "agree", "decimals", "identify"]
