"""How many runs a comparison needs: the two-sample t test's power (scipy's noncentral t), for the "too few runs"
a report prints where an interval is too wide to mean anything (:mod:`ledger.report.intervals`); a metric row's
between-run SD is the one its interval implies (:func:`runs_needed`).

A temporary home: issue 35 adds the ledger's sample-size hint (runs per side for 80% power) to the analyses; this
module is the same calculation, to be merged with it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.analyses.metrics import MetricRow

POWER = 0.8
MOST = 1000
"""Runs per side beyond which the answer is "more than this"."""


def power(n: int, effect: float, sd: float, alpha: float = 0.05, extra_df: int = 0) -> float:
    """The probability that a two-sided two-sample t test (pooled variance, ``n`` runs per side, ``2n - 2 +
    extra_df`` degrees of freedom: ``extra_df`` from a noise floor pooled in) finds a true difference ``effect``
    between two configurations whose runs differ by ``sd``, at level ``alpha``."""
    from scipy import stats

    df = 2 * n - 2 + extra_df
    if df < 1 or sd <= 0:
        return math.nan
    nc = effect / (sd * math.sqrt(2.0 / n))
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    found = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if math.isnan(found):  # scipy's noncentral t fails far in its tail: the normal approximation is exact there
        found = float(stats.norm.sf(crit - abs(nc)) + stats.norm.cdf(-crit - abs(nc)))
    return found


def runs_per_side(effect: float, sd: float, alpha: float = 0.05, target: float = POWER, extra_df: int = 0,
                  most: int = MOST) -> int | None:
    """The fewest runs per side (at least 2) for which the test finds ``effect`` with probability ``target``;
    None when more than ``most`` would be needed or the inputs say nothing (no spread, no effect)."""
    if not (effect > 0 and sd > 0 and math.isfinite(effect) and math.isfinite(sd)):
        return None
    if power(2, effect, sd, alpha, extra_df) >= target:
        return 2
    lo, hi = 2, 4  # power grows with n: doubling to a bracket, then bisection to the smallest n
    while power(hi, effect, sd, alpha, extra_df) < target:
        if hi >= most:
            return None
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(mid, effect, sd, alpha, extra_df) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def runs_needed(row: MetricRow, level: float = 0.95, alpha: float = 0.05) -> int | None:
    """Runs per side for 80% power to find the row's smallest change worth reporting, with the between-run SD its
    interval implies (half-width = t quantile x SD x sqrt(1/na + 1/nb)); None when it cannot be said."""
    from scipy import stats

    if row.ci is None or min(row.n) < 1:
        return None
    na, nb = row.n
    df = row.df if row.df is not None else na + nb - 2
    if df < 1:
        return None
    lo, hi = row.ci
    if row.ci_of == "ratio":
        if lo <= 0 or hi <= 0:
            return None
        half, effect = (math.log(hi) - math.log(lo)) / 2, math.log1p(row.threshold)
    else:
        half, effect = (hi - lo) / 2, row.threshold
    sd = half / float(stats.t.ppf(0.5 + level / 2, df)) / math.sqrt(1 / na + 1 / nb)
    return runs_per_side(effect, sd, alpha, extra_df=max(0, df - (na + nb - 2)))
