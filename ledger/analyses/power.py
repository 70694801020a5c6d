"""How many runs a verdict needs: the sample-size hint of an undecided headline.

A headline that is not decided (inconclusive, or no significant difference while its interval still holds
changes as large as the minimum change) says how many runs per side would give the between-run t test of
:func:`ledger.analyses.stats.t_test` 80% power for the metric's minimum change at the noise measured between
runs (the pooled SD of its test, or the ledger's noise floor). Power is that of the two-sided two-sample t
test with ``2n - 2`` degrees of freedom plus the floor's (the floor pools into the test): the noncentral t
(:data:`scipy.stats.nct`). `ledger ab --until-verdict` takes the same number as its cap by default.

The figures match the textbook: at a between-run SD of 5% (log scale) and a 5% minimum change (Cohen's
d = 0.98), 80% power at alpha 0.05 takes 18 runs per side (16.5 by the normal approximation, one or two more
with the t test's own degrees of freedom); a 15% change at 3 vs 3 runs without a floor has 73% power (issue
35 measured 27 in 40).
"""

from __future__ import annotations

import math
from functools import lru_cache

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
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


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


__all__ = ["MAX_RUNS", "POWER", "power", "runs_for_power"]
