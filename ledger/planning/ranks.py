"""Rank correlations in numpy: Spearman's rho (Pearson on average ranks) and Kendall's tau-b."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def ranks(x: ArrayLike) -> np.ndarray:
    """Average ranks (1-based; ties share the mean of their positions)."""
    a = np.asarray(x, dtype=float)
    order = np.argsort(a, kind="mergesort")
    r = np.empty(a.size)
    r[order] = np.arange(1, a.size + 1)
    for v in np.unique(a):
        tie = a == v
        if tie.sum() > 1:
            r[tie] = r[tie].mean()
    return r


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho; nan with fewer than 2 points or a constant side."""
    rx, ry = ranks(x), ranks(y)
    if rx.size < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def kendall(x: ArrayLike, y: ArrayLike) -> float:
    """Kendall's tau-b; nan with fewer than 2 points or a constant side."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.size < 2:
        return float("nan")
    i, j = np.triu_indices(a.size, 1)
    sa, sb = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
    concordant_minus_discordant = float((sa * sb).sum())
    n_a, n_b = float((sa != 0).sum()), float((sb != 0).sum())
    if n_a == 0 or n_b == 0:
        return float("nan")
    return concordant_minus_discordant / float(np.sqrt(n_a * n_b))


def discordant_pairs(x: ArrayLike, y: ArrayLike) -> list[tuple[int, int]]:
    """Index pairs ordered one way by x and the other by y."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    i, j = np.triu_indices(a.size, 1)
    bad = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) < 0
    return [(int(p), int(q)) for p, q in zip(i[bad], j[bad], strict=True)]
