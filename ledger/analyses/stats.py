"""Statistics for comparing runs: rank tests, bootstrap intervals, outlier filtering, spikes (numpy only).

Every random draw comes from a seeded :class:`numpy.random.Generator` passed in by the caller, so the
same inputs give the same intervals on every machine.

- **Rank tests.** :func:`mann_whitney` (two independent samples, e.g. step times of two runs) and
  :func:`wilcoxon_signed_rank` (paired differences, e.g. losses at matched token counts). Exact null
  distributions for small samples without ties; otherwise the normal approximation with tie and continuity
  corrections (as scipy's ``method="asymptotic"``).
- **Bootstrap.** :func:`bootstrap_quantile` draws from the *exact* bootstrap distribution of a sample
  quantile: the k-th smallest of n draws with replacement from the sorted sample is ``sorted[floor(n U)]``
  with ``U ~ Beta(k, n + 1 - k)`` (the k-th order statistic of n uniforms), so a draw costs O(1) after one
  partial sort, and a million-step run is as cheap as a small one. :func:`bootstrap_mean` and
  :func:`paired_bootstrap_means` resample (up to :data:`MEAN_RESAMPLE_MAX` observations, or
  :data:`PAIRED_RESAMPLE_MAX` shared points; above that they draw from the bootstrap's normal limit).
- **Pooled t-test** for groups of runs (between-run variance): :func:`pooled_t`.
- **Medians.** :func:`median` is :func:`numpy.median` computed from a sorted copy (faster, the same value).
- **Outliers.** :func:`mad_keep` keeps observations whose modified z-score ``0.6745 |x - median| / MAD``
  is at most 3.5 (Iglewicz and Hoaglin).
- **Spikes.** :func:`spikes` compares each observation with the median of the previous block.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

MAD_Z = 3.5
"""Modified z-score above which an observation is an outlier (Iglewicz and Hoaglin)."""
MEAN_RESAMPLE_MAX = 10_000
"""Above this many observations, :func:`bootstrap_mean` draws from the bootstrap's normal limit."""
EXACT_MAX = 20
"""Rank tests use their exact null distribution up to this many observations (when there are no ties)."""
PAIRED_RESAMPLE_MAX = 500
"""Above this many shared points, :func:`paired_bootstrap_means` draws from the bootstrap's normal limit."""


def as_float(values: ArrayLike) -> FloatArray:
    """A 1-D float64 array of the finite values."""
    x = np.asarray(values, dtype=np.float64).ravel()
    return x[np.isfinite(x)]


# ------------------------------------------------------------------------------------- robust summaries
def sorted_median(s: NDArray[Any]) -> float:
    """The median of an ascending sorted 1-D array (NaNs last, as :func:`numpy.sort` puts them), exactly as
    :func:`numpy.median` computes it from the unsorted values: the mean of the middle one or two values,
    NaN when there is a NaN (or no value)."""
    n = s.size
    if n == 0 or (s.dtype.kind == "f" and math.isnan(s[-1])):
        return math.nan
    k = n // 2
    return float(np.mean(s[k - 1 : k + 1] if n % 2 == 0 else s[k : k + 1]))


def median(x: ArrayLike) -> float:
    """:func:`numpy.median` of a 1-D array, computed from a sorted copy (numpy's vectorised sort beats its
    partition on large arrays); the same value bit for bit."""
    return sorted_median(np.sort(np.asarray(x).ravel()))


def mad(x: ArrayLike) -> float:
    """Median absolute deviation from the median (raw, not scaled to a standard deviation)."""
    a = as_float(x)
    if a.size == 0:
        return math.nan
    return median(np.abs(a - median(a)))


def mad_keep(x: ArrayLike, z: float = MAD_Z) -> NDArray[np.bool_]:
    """Mask of the observations that are not outliers: modified z-score ``0.6745 |x - med| / MAD <= z``.

    When more than half the values are equal (MAD = 0), the mean absolute deviation stands in for it
    (``MAD ~ 0.7979 x meanAD`` for normal data); when that is 0 too, everything is kept."""
    a = np.asarray(x, dtype=np.float64).ravel()
    finite = np.isfinite(a)
    if not finite.any():
        return finite
    med = median(a[finite])
    dev = np.abs(a - med)
    scale = median(dev[finite])
    if scale == 0.0:
        scale = 0.7979 * float(np.mean(dev[finite]))
    if scale == 0.0:
        return finite
    return finite & (0.6745 * dev / scale <= z)


def quantile(x: ArrayLike, q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    a = as_float(x)
    return float(np.quantile(a, q)) if a.size else math.nan


# ------------------------------------------------------------------------------------------ rank tests
@dataclass(frozen=True)
class RankTest:
    """A rank test's result."""

    statistic: float
    """U (Mann-Whitney, of the second sample) or W+ (Wilcoxon signed-rank)."""
    p_value: float
    """Two-sided p-value."""
    n: tuple[int, ...]
    """Sample sizes used (after dropping non-finite values, and zero differences for Wilcoxon)."""
    method: str
    """exact or normal."""


def rankdata(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Average ranks (1-based, ties share their mean rank) and the sizes of the tie groups."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    counts = np.diff(np.r_[starts, xs.size])
    mean_rank = starts + (counts + 1) / 2.0
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, counts)
    return ranks, counts.astype(np.float64)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@cache
def _mw_counts(n1: int, n2: int) -> tuple[int, ...]:
    """Number of arrangements giving each U = 0..n1*n2 (no ties): the exact null distribution."""
    # f(i, j)[u]: arrangements of i x's and j y's with u (x, y) pairs where y < x
    prev = [[1] + [0] * (n1 * n2) for _ in range(n2 + 1)]
    for _ in range(n1):
        cur = [[0] * (n1 * n2 + 1) for _ in range(n2 + 1)]
        cur[0][0] = 1
        for j in range(1, n2 + 1):
            # the largest element is an x (it beats all j y's) or a y
            a, b, c = prev[j], cur[j - 1], cur[j]
            for u in range(n1 * n2 + 1):
                c[u] = (a[u - j] if u >= j else 0) + b[u]
        prev = cur
    return tuple(prev[n2])


def mann_whitney(x: ArrayLike, y: ArrayLike) -> RankTest:
    """Two-sided Mann-Whitney U test of two independent samples (U counts pairs with y > x, ties half)."""
    a, b = as_float(x), as_float(y)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return RankTest(math.nan, math.nan, (n1, n2), "none")
    ranks, ties = rankdata(np.concatenate([a, b]))
    u = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    mean = n1 * n2 / 2.0
    has_ties = bool((ties > 1).any())
    if n1 + n2 <= EXACT_MAX and not has_ties:
        counts = _mw_counts(n1, n2)
        total = sum(counts)
        k = int(round(min(u, n1 * n2 - u)))
        p = min(1.0, 2.0 * sum(counts[: k + 1]) / total)
        return RankTest(u, p, (n1, n2), "exact")
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - float((ties**3 - ties).sum()) / (n * (n - 1)))
    if var <= 0:
        return RankTest(u, 1.0, (n1, n2), "normal")
    z = (abs(u - mean) - 0.5) / math.sqrt(var)
    return RankTest(u, min(1.0, 2.0 * _normal_sf(max(z, 0.0))), (n1, n2), "normal")


@cache
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """Number of sign patterns giving each W+ = 0..n(n+1)/2 (ranks 1..n, no ties)."""
    top = n * (n + 1) // 2
    counts = [1] + [0] * top
    for r in range(1, n + 1):
        for w in range(top, r - 1, -1):
            counts[w] += counts[w - r]
    return tuple(counts)


def wilcoxon_signed_rank(d: ArrayLike) -> RankTest:
    """Two-sided Wilcoxon signed-rank test that paired differences are centred on 0 (zeros dropped)."""
    a = as_float(d)
    a = a[a != 0.0]
    n = a.size
    if n == 0:
        return RankTest(0.0, 1.0, (0,), "exact")
    ranks, ties = rankdata(np.abs(a))
    w = float(ranks[a > 0].sum())
    top = n * (n + 1) / 2.0
    if n <= EXACT_MAX and not (ties > 1).any():
        counts = _signed_rank_counts(n)
        k = int(round(min(w, top - w)))
        p = min(1.0, 2.0 * sum(counts[: k + 1]) / 2.0**n)
        return RankTest(w, p, (n,), "exact")
    mean = top / 2.0
    var = n * (n + 1) * (2 * n + 1) / 24.0 - float((ties**3 - ties).sum()) / 48.0
    if var <= 0:
        return RankTest(w, 1.0, (n,), "normal")
    z = (abs(w - mean) - 0.5) / math.sqrt(var)
    return RankTest(w, min(1.0, 2.0 * _normal_sf(max(z, 0.0))), (n,), "normal")


# ------------------------------------------------------------------------------------------- bootstrap
def percentile_interval(draws: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` interval of bootstrap draws (percentile method)."""
    a = as_float(draws)
    if a.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(a, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def bootstrap_quantile(x: ArrayLike, q: float, rng: np.random.Generator, n_boot: int) -> FloatArray:
    """``n_boot`` draws from the exact bootstrap distribution of the q-quantile of ``x``.

    The q-quantile (numpy's linear interpolation) of a resample of size n is
    ``s_(j) + f (s_(j+1) - s_(j))`` with ``h = (n - 1) q``, ``j = floor(h)``, ``f = h - j`` in terms of
    the resample's order statistics (0-based). The (j+1)-th smallest of n uniforms is
    ``U ~ Beta(j + 1, n - j)`` and the next one is ``U + (1 - U) Beta(1, n - j - 1)``; the resample's
    order statistics are then ``sorted(x)[floor(n U)]``. Only the band of ``x`` the draws reach is sorted."""
    a = as_float(x)
    n = a.size
    if n == 0:
        return np.full(n_boot, math.nan)
    if n == 1:
        return np.full(n_boot, a[0])
    h = (n - 1) * q
    j = int(math.floor(h))
    frac = h - j
    u1 = rng.beta(j + 1, n - j, size=n_boot)
    if frac > 0 and j + 1 < n:
        u2 = u1 + (1.0 - u1) * rng.beta(1, n - j - 1, size=n_boot)
    else:
        u2 = u1
    i1 = np.minimum((u1 * n).astype(np.int64), n - 1)
    i2 = np.minimum((u2 * n).astype(np.int64), n - 1)
    lo, hi = int(min(i1.min(), i2.min())), int(max(i1.max(), i2.max()))
    band = np.sort(a)[lo : hi + 1]  # numpy's vectorised sort beats a partition at [lo, hi] and a sort of the band
    v1, v2 = band[i1 - lo], band[i2 - lo]
    return np.asarray(v1 + frac * (v2 - v1), dtype=np.float64)


def bootstrap_mean(x: ArrayLike, rng: np.random.Generator, n_boot: int) -> FloatArray:
    """``n_boot`` bootstrap draws of the mean of ``x`` (resampled; above :data:`MEAN_RESAMPLE_MAX`
    observations, drawn from the bootstrap's normal limit ``N(mean, var / n)``)."""
    a = as_float(x)
    n = a.size
    if n == 0:
        return np.full(n_boot, math.nan)
    if n > MEAN_RESAMPLE_MAX:
        sd = float(a.std()) / math.sqrt(n)
        return np.asarray(float(a.mean()) + sd * rng.standard_normal(n_boot), dtype=np.float64)
    out = np.empty(n_boot, dtype=np.float64)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = a[idx].mean(axis=1)
    return out


def paired_bootstrap_means(columns: FloatArray, rng: np.random.Generator, n_boot: int) -> FloatArray:
    """Bootstrap draws of the column means of a (points x series) matrix, resampling rows jointly
    (the points are shared, e.g. a common token grid): shape (n_boot, series). Above
    :data:`PAIRED_RESAMPLE_MAX` points, the draws come from the bootstrap's normal limit (the means'
    covariance over ``n``)."""
    m = np.asarray(columns, dtype=np.float64)
    n = m.shape[0]
    if n == 0:
        return np.full((n_boot, m.shape[1]), math.nan)
    if n > PAIRED_RESAMPLE_MAX:
        cov = np.atleast_2d(np.cov(m, rowvar=False, bias=True)) / n
        vals, vecs = np.linalg.eigh(cov)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
        return np.asarray(m.mean(axis=0) + rng.standard_normal((n_boot, m.shape[1])) @ root.T, dtype=np.float64)
    out = np.empty((n_boot, m.shape[1]), dtype=np.float64)
    chunk = max(1, 2_000_000 // (n * max(1, m.shape[1])))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = m[idx].mean(axis=1)
    return out


# --------------------------------------------------------------------------------------------- t-test
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Survival function P(T > t) of Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on :func:`t_sf`)."""
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class TTest:
    """A two-sample t-test of the difference of means ``mean(y) - mean(x)``."""

    difference: float
    """mean(y) - mean(x)."""
    ci: tuple[float, float]
    """Confidence interval of the difference."""
    p_value: float
    """Two-sided p-value."""
    df: int
    """Degrees of freedom (n_x + n_y - 2)."""


def pooled_t(x: ArrayLike, y: ArrayLike, level: float = 0.95) -> TTest | None:
    """Student's two-sample t-test with a pooled variance (replicates share one variance); None when there
    are fewer than 3 observations in all (no degree of freedom)."""
    a, b = as_float(x), as_float(y)
    df = a.size + b.size - 2
    if a.size == 0 or b.size == 0 or df < 1:
        return None
    diff = float(b.mean() - a.mean())
    ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
    se = math.sqrt(ss / df * (1.0 / a.size + 1.0 / b.size))
    if se == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
        return TTest(diff, (diff, diff), p, df)
    tq = t_quantile((1 + level) / 2, df)
    p = min(1.0, 2.0 * t_sf(abs(diff) / se, df))
    return TTest(diff, (diff - tq * se, diff + tq * se), p, df)


# ---------------------------------------------------------------------------------------------- spikes
def spikes(x: ArrayLike, *, block: int = 50, ratio: float = 2.0, z: float = 6.0) -> NDArray[np.bool_]:
    """Spike mask of a series: an observation is a spike when it exceeds the median ``m`` of the previous
    block of ``block`` observations by more than ``max(z x 1.4826 x MAD, (ratio - 1) x |m|)`` of that
    block. The first block has no reference and is never a spike; non-finite values are not spikes
    (they are counted separately)."""
    a = np.asarray(x, dtype=np.float64).ravel()
    n = a.size
    out = np.zeros(n, dtype=np.bool_)
    nblocks = n // block
    if nblocks < 1 or n <= block:
        return out
    full = a[: nblocks * block].reshape(nblocks, block)
    if np.isfinite(full).all():
        # np.median along rows, from sorted rows (numpy's vectorised sort beats its partition here)
        mid = slice((block - 1) // 2, block // 2 + 1)
        med = np.mean(np.sort(full, axis=1)[:, mid], axis=1)
        dev = np.mean(np.sort(np.abs(full - med[:, None]), axis=1)[:, mid], axis=1)
    else:
        masked = np.where(np.isfinite(full), full, np.nan)
        with warnings.catch_warnings():  # a block of only non-finite values has no median: NaN, no spikes
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(masked, axis=1)
            dev = np.nanmedian(np.abs(masked - med[:, None]), axis=1)
    ref_med = np.repeat(med, block)[: n - block]
    ref_dev = np.repeat(dev, block)[: n - block]
    tail = a[block:]
    margin = np.maximum(z * 1.4826 * ref_dev, (ratio - 1.0) * np.abs(ref_med))
    with np.errstate(invalid="ignore"):
        hit = np.isfinite(tail) & np.isfinite(ref_med) & (tail > ref_med + margin)
    out[block:] = hit
    return out
