"""Runs per side for 80% power (ledger.analyses.power): the published table of the two-sample t test (Cohen
1988, as G*Power computes it: two-sided, alpha 0.05), and a simulation of the tests themselves."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ledger.analyses.power import power, runs_per_side


@pytest.mark.parametrize(("d", "n"), [(0.2, 394), (0.5, 64), (0.8, 26), (1.0, 17), (2.0, 6)])
def test_runs_per_side_match_the_published_table(d: float, n: int) -> None:
    assert runs_per_side(d * 0.05, 0.05) == n  # an effect of d SDs
    assert power(n, 1.0, d, 0.05, log_scale=False) >= 0.8 > power(n - 1, 1.0, d, 0.05, log_scale=False)


def test_nothing_to_say_without_an_effect_a_spread_or_within_reach() -> None:
    assert runs_per_side(0.0, 1.0) is None and runs_per_side(1.0, 0.0) is None
    assert runs_per_side(0.01, 1.0) is None  # 157,000 per side: beyond the 1000 it answers
    assert runs_per_side(20.0, 1.0) == 2
    assert runs_per_side(2.0, 1.0, extra_df=20) == 5 < runs_per_side(2.0, 1.0) == 6  # a noise floor's df help


def test_power_is_what_simulated_t_tests_find() -> None:
    rng = np.random.default_rng(7)
    n, d, trials = 17, 1.0, 4000
    a = rng.normal(0.0, 1.0, (trials, n))
    b = rng.normal(d, 1.0, (trials, n))
    found = float((stats.ttest_ind(a, b, axis=1).pvalue < 0.05).mean())
    assert abs(found - power(n, 1.0, d, 0.05, log_scale=False)) < 0.03  # binomial SD at 4000 trials: 0.006
