"""Statistics of runs: within-run intervals, the between-run test, robust summaries, outliers, spikes.

Distributions and tests come from :mod:`scipy.stats`, block lengths from :mod:`arch.bootstrap`; what is
written here is how the project uses them.

- **Within-run intervals** (:func:`within_run_interval`): the samples of one run (step times, tokens/s) are
  autocorrelated, so an interval that treats them as independent is far too narrow. Batch means: the
  series is cut into 5 to 8 contiguous batches of at least 4 x the Politis-White stationary-bootstrap block
  length (:func:`arch.bootstrap.optimal_block_length`, chosen from the data); the batch statistics are
  nearly independent and a Student t interval with (batches - 1) degrees of freedom is centred on the
  run's statistic. Calibrated in the tests: 95% nominal covers the mean of AR(1) series (phi 0.6-0.8,
  180 steps) 92-98% of the time. Such an interval describes one run; it is never evidence that two
  *configurations* differ (that needs the between-run variance, :mod:`ledger.analyses.evidence`).
- **Between runs** (:func:`t_test`): a two-sample t test of per-run values with a pooled variance that
  may include prior degrees of freedom (a noise floor learned from other replicate groups), p and the
  interval from :data:`scipy.stats.t`.
- **Medians.** :func:`median` is :func:`numpy.median` computed from a sorted copy (faster, the same value).
- **Outliers.** :func:`mad_keep` keeps observations whose modified z-score ``0.6745 |x - median| / MAD``
  is at most 3.5 (Iglewicz and Hoaglin).
- **Spikes.** :func:`spikes` compares each observation with the median of the previous block.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

MAD_Z = 3.5
"""Modified z-score above which an observation is an outlier (Iglewicz and Hoaglin)."""
MIN_BATCHES = 5
MAX_BATCHES = 8
BLOCK_MULTIPLE = 4
"""Batches hold at least this many Politis-White block lengths."""
INTERVAL_MIN_SAMPLES = 20
"""Fewer samples than this give no within-run interval."""
BLOCK_LENGTH_MAX_SAMPLES = 20_000
"""The block length is estimated on at most this many leading samples (the estimate is O(n))."""


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



# ---------------------------------------------------------------------------------- within-run intervals
@dataclass(frozen=True)
class Interval:
    """A within-run interval of one run's statistic."""

    value: float
    low: float
    high: float
    batches: int
    """Batches the series was cut into."""
    block: float
    """The Politis-White block length the batch size was derived from."""


def block_length(x: FloatArray) -> float:
    """The Politis-White (2004, corrected 2009) optimal block length of the stationary bootstrap, from
    :func:`arch.bootstrap.optimal_block_length` (at least 1)."""
    from arch.bootstrap import optimal_block_length

    from ledger.analyses.blas import one_thread

    head = x[:BLOCK_LENGTH_MAX_SAMPLES]
    if head.size < 3 or float(np.std(head)) == 0.0:
        return 1.0
    with one_thread():  # its dot products of a few thousand values: far quicker on one BLAS thread
        found = float(optimal_block_length(head)["stationary"].iloc[0])
    return max(1.0, found) if math.isfinite(found) else 1.0


def within_run_interval(samples: ArrayLike, statistic: Callable[[FloatArray], float] = np.mean,
                        level: float = 0.95) -> Interval | None:
    """Batch-means interval of ``statistic`` over one run's autocorrelated samples (module docstring);
    None with fewer than :data:`INTERVAL_MIN_SAMPLES` finite samples."""
    from scipy import stats

    x = as_float(samples)
    n = x.size
    if n < INTERVAL_MIN_SAMPLES:
        return None
    block = block_length(x)
    size = max(1, math.ceil(BLOCK_MULTIPLE * block))
    k = int(min(MAX_BATCHES, max(MIN_BATCHES, n // size)))
    size = n // k
    batches = np.array([statistic(x[i * size : (i + 1) * size]) for i in range(k)])
    value = float(statistic(x))
    half = float(stats.t.ppf((1 + level) / 2, k - 1) * batches.std(ddof=1) / math.sqrt(k))
    return Interval(value, value - half, value + half, k, block)


# ----------------------------------------------------------------------------------------- between runs
@dataclass(frozen=True)
class TTest:
    """A two-sample t test of per-run values."""

    estimate: float
    """mean(y) - mean(x)."""
    p_value: float
    ci: tuple[float, float]
    df: int
    sd: float
    """The pooled standard deviation of one run's value."""


def t_test(x: ArrayLike, y: ArrayLike, level: float = 0.95, prior_sd: float | None = None,
           prior_df: int = 0) -> TTest | None:
    """Two-sample t test of per-run values with a pooled variance: the sides' own replicates, plus
    ``prior_df`` degrees of freedom at ``prior_sd`` when a noise floor is given. None when there are no
    degrees of freedom at all (one run per side and no floor)."""
    from scipy import stats

    a, b = as_float(x), as_float(y)
    if a.size == 0 or b.size == 0:
        return None
    ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
    df = a.size - 1 + b.size - 1
    if prior_sd is not None and prior_df > 0:
        ss += prior_df * prior_sd**2
        df += prior_df
    if df <= 0:
        return None
    sd = math.sqrt(ss / df)
    estimate = float(b.mean() - a.mean())
    se = sd * math.sqrt(1 / a.size + 1 / b.size)
    if se == 0.0:
        p = 1.0 if estimate == 0.0 else 0.0
        return TTest(estimate, p, (estimate, estimate), df, sd)
    t = estimate / se
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf((1 + level) / 2, df) * se)
    return TTest(estimate, p, (estimate - half, estimate + half), df, sd)


def percentile_interval(draws: ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """The central ``level`` interval of draws (percentile method)."""
    a = as_float(draws)
    if a.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(a, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


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
