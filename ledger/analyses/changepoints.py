"""Change points in a series by E-divisive means (Matteson and James 2014, "A nonparametric approach for
multiple change point analysis of multivariate data", JASA 109(505)): the method of MongoDB's and Apache
Otava's (formerly DataStax Hunter's) performance-regression detection.

Hierarchical: the split that maximises the energy-statistic divergence between a segment's two sides,

    Q(X, Y) = 2 / (m + n) sum |x - y|  -  2n / ((m + n)(m - 1)) sum_{i<k} |x_i - x_k|
                                        -  2m / ((m + n)(n - 1)) sum_{j<k} |y_j - y_k|

(``X`` the ``m`` values before the split, ``Y`` the ``n`` values from it to an end ``kappa`` that is maximised
too), over every segment between the change points found so far, is tested by a permutation test: the values
are shuffled within each segment, the largest ``Q`` found again, ``R`` times; ``p = (1 + #{Q_perm >= Q}) /
(R + 1)``. A significant split becomes a change point and the search goes on; the first that is not ends it.
Under a stationary series the first test alone decides whether any change point is reported, so a history
gets a false change point with probability at most ``alpha``. Each side of a split holds at least two values
(their within-side distances need two).

Written here with numpy, because neither maintained implementation installs beside this project:
``signal-processing-algorithms`` (MongoDB) requires numpy < 2 and setuptools < 71 (this project builds with
setuptools >= 77), and ``apache-otava`` pins numpy 2.2.0 and scipy < 1.17 and brings BigQuery, Postgres and Slack
clients. The statistic is the one both compute (Otava's ``PairDistanceCalculator``); the pairwise sums come
from a 2-D prefix sum, so every split of a segment is one vectorised expression.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

PERMUTATIONS = 199
"""Permutations per test (p-values in steps of 1/200)."""
MIN_SIZE = 2
"""Values on each side of a split, at least."""
TIE = 1e-9
"""Relative difference under which a permutation's divergence is the observed one: a permutation that only reorders
the values within each side of the best split gives the same divergence, up to the rounding of its sums (a 4 + 4
segment does so once in 35 permutations), and a tie counts as exceeding (``Q_perm >= Q``)."""


@dataclass(frozen=True)
class Split:
    """A change point: ``index`` is the position of the first value after it."""

    index: int
    q: float
    """The divergence of the split."""
    p_value: float
    """Permutation p-value of the test that accepted it."""


def _prefix(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """2-D prefix sums of the pairwise distance matrix: ``P[i, j] = sum |x[:i] - x[:j]|``."""
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((x.size + 1, x.size + 1))
    p[1:, 1:] = d.cumsum(axis=0).cumsum(axis=1)
    return p


def _block(p: NDArray[np.float64], a: NDArray[np.int64] | int, b: NDArray[np.int64] | int,
           c: NDArray[np.int64] | int, d: NDArray[np.int64] | int) -> NDArray[np.float64]:
    """Sum of the distances between ``x[a:b]`` and ``x[c:d]``."""
    return np.asarray(p[b, d] - p[a, d] - p[b, c] + p[a, c], dtype=np.float64)


def best_split(p: NDArray[np.float64], start: int, end: int) -> tuple[int, float] | None:
    """The split of ``x[start:end]`` with the largest divergence (over its end ``kappa`` too), or None when the
    segment is too short to split."""
    taus = np.arange(start + MIN_SIZE, end - MIN_SIZE + 1)
    if taus.size == 0:
        return None
    kappas = np.arange(start + 2 * MIN_SIZE, end + 1)
    t, k = np.meshgrid(taus, kappas, indexing="ij")
    valid = k >= t + MIN_SIZE
    t, k = t[valid], k[valid]
    m, n = (t - start).astype(np.float64), (k - t).astype(np.float64)
    between = _block(p, start, t, t, k)
    within_x = _block(p, start, t, start, t) / 2
    within_y = _block(p, t, k, t, k) / 2
    q = 2 * between / (m + n) - 2 * n * within_x / ((m + n) * (m - 1)) - 2 * m * within_y / ((m + n) * (n - 1))
    i = int(np.argmax(q))
    return int(t[i]), float(q[i])


def _best(p: NDArray[np.float64], bounds: list[int]) -> tuple[int, float] | None:
    found = [s for a, b in zip(bounds, bounds[1:], strict=False) if (s := best_split(p, a, b)) is not None]
    return max(found, key=lambda s: s[1]) if found else None


def e_divisive(values: NDArray[np.float64] | list[float], alpha: float = 0.05, permutations: int = PERMUTATIONS,
               rng: np.random.Generator | None = None) -> list[Split]:
    """The change points of a series (module docstring), in order of position."""
    x = np.asarray(values, dtype=np.float64)
    if not np.isfinite(x).all():
        raise ValueError("e_divisive takes finite values only")
    rng = rng or np.random.default_rng(0)
    found: list[Split] = []
    bounds = [0, x.size]
    p = _prefix(x)
    while True:
        candidate = _best(p, bounds)
        if candidate is None or not candidate[1] > 0:
            break
        index, q = candidate
        exceed = 0
        for _ in range(permutations):
            shuffled = x.copy()
            for a, b in zip(bounds, bounds[1:], strict=False):
                shuffled[a:b] = rng.permutation(shuffled[a:b])
            again = _best(_prefix(shuffled), bounds)
            exceed += again is not None and again[1] >= q * (1 - TIE)
            if (1 + exceed) / (permutations + 1) > alpha:  # not significant, whatever the other permutations give
                break
        p_value = (1 + exceed) / (permutations + 1)
        if p_value > alpha:
            break
        found.append(Split(index, q, p_value))
        bounds = sorted([*bounds, index])
    return sorted(found, key=lambda s: s.index)


def segments(n: int, splits: list[Split]) -> list[tuple[int, int]]:
    """The ``[start, end)`` segments the change points cut ``n`` values into."""
    cuts = [0, *(s.index for s in splits), n]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


__all__ = ["MIN_SIZE", "PERMUTATIONS", "TIE", "Split", "best_split", "e_divisive", "segments"]

