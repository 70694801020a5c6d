"""Matched checkpoints: curves compared at equal tokens seen or equal wall time, never at equal steps.

Two runs are compared over the **window** at the end of their common range: the last
:data:`WINDOW` (20%) of ``[max(starts), min(ends)]``. Each curve is interpolated linearly at the same grid
points there — the token counts (or times) one run logged, at most :data:`MAX_POINTS` of them, evenly
spaced — so the values pair up point by point. "Loss at matched tokens" is the mean over that window: a
smoothed loss at the last token count both runs reached, with pairs for a signed-rank test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ledger.analyses.series import RunData

WINDOW = 0.2
"""Share of the common range, at its end, over which matched values are compared."""
MAX_POINTS = 2000
"""At most this many grid points (evenly spaced) in a window."""
MIN_POINTS = 5
"""Fewer grid points than this in the window: the window grows towards the start of the common range."""

Axis = str  # "tokens", "time" or "steps"


@dataclass(frozen=True)
class Curve:
    """A metric against tokens or training time (finite points only, sorted by x)."""

    x: NDArray[np.float64]
    y: NDArray[np.float64]


@dataclass(frozen=True)
class Grid:
    """Common grid points of several curves."""

    x: NDArray[np.float64]
    """Points, in the window at the end of the common range."""
    lo: float
    """Start of the window."""
    hi: float
    """End of the common range (the last matched token count or time)."""


def curve(run: RunData, axis: Axis, column: str = "loss") -> Curve | str:
    """The run's ``column`` against ``axis`` ("tokens", "time" or "steps"), or why there is none. A point logged
    twice (a step computed again after a restart) counts once, at its last computation."""
    if run.n_steps == 0:
        return "no step rows"
    if axis == "tokens":
        x = np.asarray(run.steps["tokens"], dtype=np.float64)
        if not np.isfinite(x).any():
            return "tokens not logged"
    elif axis == "steps":
        x = np.asarray(run.steps["step"], dtype=np.float64)
    else:
        x = run.train_time
        if not np.isfinite(x).any():
            return "step times not logged"
    y = np.asarray(run.steps[column], dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    finite = int(np.count_nonzero(ok))
    if finite < 2:
        return f"fewer than 2 finite {column} values"
    xs, ys = (x, y) if finite == ok.size else (x[ok], y[ok])  # every point finite: no copy of a million
    if not (xs[1:] > xs[:-1]).all():  # logged out of order or repeated: sort, one value per x (the last logged)
        order = np.argsort(xs, kind="mergesort")
        xs, ys = xs[order], ys[order]
        keep = np.r_[xs[1:] > xs[:-1], True]
        xs, ys = xs[keep], ys[keep]
    return Curve(xs, ys)


def common_grid(curves: Sequence[Curve], reference: Curve | None = None, window: float = WINDOW) -> Grid | str:
    """Grid points in the last ``window`` of the range all curves cover, taken from ``reference`` (default:
    the first curve), or why there is none."""
    if not curves:
        return "no curves"
    lo = max(float(c.x[0]) for c in curves)
    hi = min(float(c.x[-1]) for c in curves)
    if not hi > lo:
        return "the runs share no range"
    ref = reference if reference is not None else curves[0]
    # a curve's x ascends strictly (:func:`curve`): the points in [lo, hi], then those from the window's start,
    # found by bisection (views, not masks over every point)
    inside = ref.x[np.searchsorted(ref.x, lo, "left"):np.searchsorted(ref.x, hi, "right")]
    start = hi - window * (hi - lo)
    points = inside[np.searchsorted(inside, start, "left"):]
    if points.size < MIN_POINTS:
        points = inside[-MIN_POINTS:]
    if points.size < 2:
        points = np.linspace(lo, hi, MIN_POINTS)
    if points.size > MAX_POINTS:
        points = points[np.linspace(0, points.size - 1, MAX_POINTS).round().astype(np.int64)]
    return Grid(np.asarray(points, dtype=np.float64), float(points[0]), hi)


def at(c: Curve, x: NDArray[np.float64]) -> NDArray[np.float64]:
    """The curve interpolated linearly at ``x`` (inside its range)."""
    return np.asarray(np.interp(x, c.x, c.y), dtype=np.float64)


def matched_values(curves: Sequence[Curve], grid: Grid) -> NDArray[np.float64]:
    """(points x curves) matrix of each curve at the grid points."""
    return np.stack([at(c, grid.x) for c in curves], axis=1) if curves else np.empty((grid.x.size, 0))


def describe(axis: Axis, grid: Grid) -> str:
    """Where the values were matched, e.g. 'mean over 49,152..61,440 tokens'."""
    if axis == "tokens":
        return f"mean over {grid.lo:,.0f}..{grid.hi:,.0f} tokens"
    if axis == "steps":
        return (f"mean over steps {grid.lo:,.0f}..{grid.hi:,.0f} (tokens unknown: equal work only where the "
                "batches are equal)")
    return f"mean over {_secs(grid.lo)}..{_secs(grid.hi)} of training"


def _secs(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    return f"{s:.1f} s" if s < 600 else f"{s / 3600:.2f} h"
