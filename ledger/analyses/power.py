"""How many runs a verdict needs: the sample-size hint of an undecided headline.

A headline that is not decided (inconclusive, or no significant difference while its interval still holds
changes as large as the minimum change) says how many runs per side would give the between-run t test of
:func:`ledger.analyses.stats.t_test` 80% power for the metric's minimum change at the noise measured between
runs (the pooled SD of its test, or the ledger's noise floor). Power is that of the two-sided two-sample t
test with ``2n - 2`` degrees of freedom plus the floor's (the floor pools into the test): the noncentral t
(:data:`scipy.stats.nct`). `ledger ab --until-verdict` takes the same number as its cap by default, and a report
that prints an interval too wide to mean anything says "too few runs" with the number its row needs
(:func:`runs_needed`, :mod:`ledger.report.intervals`).

The figures match the textbook: at a between-run SD of 5% (log scale) and a 5% minimum change (Cohen's
d = 0.98), 80% power at alpha 0.05 takes 18 runs per side (16.5 by the normal approximation, one or two more
with the t test's own degrees of freedom); a 15% change at 3 vs 3 runs without a floor has 73% power (issue
35 measured 27 in 40).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal, Protocol


class Judged(Protocol):
    """What :func:`runs_needed` reads of a row of a comparison (:class:`ledger.analyses.metrics.MetricRow`)."""

    @property
    def ci(self) -> tuple[float, float] | None: ...
    @property
    def ci_of(self) -> Literal["ratio", "delta"] | None: ...
    @property
    def n(self) -> tuple[int, int]: ...
    @property
    def df(self) -> int | None: ...
    @property
    def threshold(self) -> float: ...

POWER = 0.8
"""The power the hint is sized for."""
MAX_RUNS = 200
"""Beyond this many runs per side the hint says "more than 200" (None)."""


def power(n: int, sd: float, change: float, alpha: float, prior_df: int = 0, log_scale: bool = True) -> float:
    """Power of the two-sided two-sample t test with ``n`` runs per side (and ``prior_df`` degrees of freedom
    from a noise floor) to detect a relative ``change`` (on the log scale: ``log(1 + change)``; else an
    absolute change) when one run's SD is ``sd`` (noncentral t)."""
    from scipy import stats

    df = 2 * n - 2 + prior_df
    if df <= 0 or sd <= 0:
        return math.nan
    effect = math.log1p(change) if log_scale else change
    nc = effect / (sd * math.sqrt(2 / n))
    crit = float(stats.t.ppf(1 - alpha / 2, df))
    found = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if math.isnan(found):  # scipy's noncentral t fails far in its tail: the normal approximation is exact there
        found = float(stats.norm.sf(crit - abs(nc)) + stats.norm.cdf(-crit - abs(nc)))
    return found


@lru_cache(maxsize=256)
def runs_for_power(sd: float, change: float, alpha: float, target: float = POWER, prior_df: int = 0,
                   log_scale: bool = True) -> int | None:
    """The fewest runs per side (at least 2) whose t test has ``target`` power for ``change`` at noise ``sd``
    (:func:`power`); None when ``sd`` is not a positive number or more than :data:`MAX_RUNS` would be needed."""
    if not (sd > 0 and math.isfinite(sd)) or change <= 0:
        return None
    for n in range(2, MAX_RUNS + 1):
        if power(n, sd, change, alpha, prior_df, log_scale) >= target:
            return n
    return None


MOST = 1000
"""Runs per side beyond which :func:`runs_per_side` says "more than this" (None)."""


def runs_per_side(effect: float, sd: float, alpha: float = 0.05, target: float = POWER, extra_df: int = 0,
                  most: int = MOST) -> int | None:
    """The fewest runs per side (at least 2) for which the test finds an absolute difference ``effect`` between
    runs that differ by ``sd`` with probability ``target`` (:func:`power` on a delta scale); None when more than
    ``most`` would be needed or the inputs say nothing (no spread, no effect). Bisection: power grows with n."""
    if not (effect > 0 and sd > 0 and math.isfinite(effect) and math.isfinite(sd)):
        return None

    def reached(n: int) -> bool:
        return power(n, sd, effect, alpha, extra_df, log_scale=False) >= target

    if reached(2):
        return 2
    lo, hi = 2, 4
    while not reached(hi):
        if hi >= most:
            return None
        lo, hi = hi, min(2 * hi, most)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reached(mid):
            hi = mid
        else:
            lo = mid
    return hi


def runs_needed(row: Judged, level: float = 0.95, alpha: float = 0.05) -> int | None:
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


__all__ = ["MAX_RUNS", "MOST", "POWER", "Judged", "power", "runs_for_power", "runs_needed", "runs_per_side"]
