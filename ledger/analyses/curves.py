"""Curves for plots: B - A along the whole matched range, and a display smoothing.

Descriptive, not tests: the difference is B's loss minus A's at the same token counts (each side's runs
averaged point by point, :func:`ledger.analyses.matched.at`), over the range every run covers; its band is
the spread of that difference over the replicate pairs (every A run against every B run), so there is a
band only when a side has replicates. The verdict on a difference stays with :mod:`ledger.analyses.compare`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ledger.analyses.matched import Axis, Curve, at, curve
from ledger.analyses.series import RunData

POINTS = 200
"""Grid points of a difference curve (evenly spaced over the common range)."""


@dataclass(frozen=True)
class Difference:
    """B - A of a metric at matched x."""

    x: NDArray[np.float64]
    diff: NDArray[np.float64]
    """mean over B runs minus mean over A runs, at each x."""
    lo: NDArray[np.float64] | None
    """Smallest B_j - A_i over the replicate pairs at each x (None with one run per side)."""
    hi: NDArray[np.float64] | None
    pairs: int
    """Replicate pairs the band spans."""


def difference(runs_a: Sequence[RunData], runs_b: Sequence[RunData], axis: Axis = "tokens", column: str = "loss",
               points: int = POINTS) -> Difference | str:
    """B - A of ``column`` against ``axis`` over the range all runs cover, or why there is none."""
    sides: list[list[Curve]] = []
    for runs in (runs_a, runs_b):
        curves = [c for c in (curve(r, axis, column) for r in runs) if isinstance(c, Curve)]
        if not curves:
            return f"no {column} curve on side {'AB'[len(sides)]}"
        sides.append(curves)
    every = [c for side in sides for c in side]
    lo = max(float(c.x[0]) for c in every)
    hi = min(float(c.x[-1]) for c in every)
    if not hi > lo:
        return "the runs share no range"
    x = np.linspace(lo, hi, points)
    a = np.stack([at(c, x) for c in sides[0]])
    b = np.stack([at(c, x) for c in sides[1]])
    diff = b.mean(axis=0) - a.mean(axis=0)
    pairs = b[:, None, :] - a[None, :, :]
    n = pairs.shape[0] * pairs.shape[1]
    if n < 2:
        return Difference(x, diff, None, None, n)
    flat = pairs.reshape(n, points)
    return Difference(x, diff, flat.min(axis=0), flat.max(axis=0), n)


def smooth(y: NDArray[np.float64], window: int) -> NDArray[np.float64]:
    """Centred moving mean over ``window`` points (shrinking at the ends), NaN kept out of the means."""
    y = np.asarray(y, dtype=np.float64)
    if window <= 1 or y.size < 3:
        return y.copy()
    ok = np.isfinite(y)
    values = np.where(ok, y, 0.0)
    csum = np.concatenate([[0.0], np.cumsum(values)])
    ccount = np.concatenate([[0], np.cumsum(ok)])
    half = window // 2
    idx = np.arange(y.size)
    start, end = np.clip(idx - half, 0, y.size), np.clip(idx + half + 1, 0, y.size)
    count = ccount[end] - ccount[start]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (csum[end] - csum[start]) / count
    return np.asarray(np.where(count > 0, out, np.nan), dtype=np.float64)
