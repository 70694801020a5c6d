"""Statistics of `ledger compare`: the between-run t test (against scipy and by hand), within-run batch-means
intervals (their construction; their coverage is in test_calibration), MAD, spikes."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.analyses import stats


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(20, 80), st.lists(st.floats(100.0, 1000.0), min_size=1, max_size=4))
def test_mad_filter_removes_planted_outliers(seed: int, n: int, outliers: list[float]) -> None:
    # unimodal inliers (a bimodal sample has a MAD that flags one of its modes, as it should)
    inliers = list(10.0 + 0.3 * np.clip(np.random.default_rng(seed).standard_normal(n), -2.5, 2.5))
    x = np.array(inliers + outliers)
    keep = stats.mad_keep(x)
    assert not keep[len(inliers):].any()
    # |z| <= 2.5 SD stays below the modified z of 3.5 (MAD ~ 0.6745 SD) unless the MAD is far off
    if stats.mad(inliers) > 0.6745 * 0.3 * 0.75:
        assert keep[: len(inliers)].all()


def test_mad_filter_with_a_zero_mad_keeps_all_but_outliers() -> None:
    x = np.array([1.0] * 10 + [1.1, 50.0])
    keep = stats.mad_keep(x)
    assert keep[:10].all() and not keep[-1]


def test_t_test_matches_a_hand_computed_example() -> None:
    # x = 1,2,3 (mean 2, SS 2); y = 2,4,5,6 (mean 4.25, SS 8.75); s2 = 10.75/5 = 2.15
    # se = sqrt(2.15 * (1/3 + 1/4)) = 1.11991; t = 2.25 / 1.11991 = 2.00909, df = 5
    t = stats.t_test([1.0, 2.0, 3.0], [2.0, 4.0, 5.0, 6.0])
    assert t is not None and t.df == 5
    assert t.estimate == 2.25 and t.sd == pytest.approx(math.sqrt(2.15))
    assert t.p_value == pytest.approx(0.100760, abs=1e-5)  # 2 * P(T5 > 2.00909)
    assert t.ci[0] == pytest.approx(2.25 - 2.570582 * 1.119903, abs=1e-4)
    assert stats.t_test([1.0], [2.0]) is None  # one run per side and no floor: no degrees of freedom


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=6), st.lists(st.floats(-5, 5), min_size=2, max_size=6))
def test_t_test_without_a_floor_is_scipys_pooled_t_test(x: list[float], y: list[float]) -> None:
    from scipy import stats as sps

    if np.var(x) + np.var(y) < 1e-6:
        return  # constant samples: scipy returns NaN, ours p = 0 or 1
    ours = stats.t_test(x, y)
    with warnings.catch_warnings():  # scipy warns about nearly constant samples; the values still compare
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = sps.ttest_ind(y, x)
    assert ours is not None and ours.p_value == pytest.approx(float(ref.pvalue), rel=1e-6, abs=1e-12)
    ci = ref.confidence_interval(0.95)
    assert ours.ci == pytest.approx((float(ci.low), float(ci.high)), rel=1e-6, abs=1e-9)


def test_a_noise_floor_adds_its_degrees_of_freedom() -> None:
    # one run per side, floor SD 0.1 with 10 df: se = 0.1 sqrt 2, t = 0.3 / se, df = 10
    t = stats.t_test([0.0], [0.3], prior_sd=0.1, prior_df=10)
    assert t is not None and t.df == 10 and t.sd == pytest.approx(0.1)
    from scipy import stats as sps

    assert t.p_value == pytest.approx(2 * sps.t.sf(0.3 / (0.1 * math.sqrt(2)), 10))
    # with replicates too, the variances pool by their degrees of freedom
    both = stats.t_test([0.0, 0.2], [0.3, 0.5], prior_sd=0.1, prior_df=10)
    own_ss = 0.04  # each side: (0.1^2 + 0.1^2) = 0.02
    assert both is not None and both.df == 12
    assert both.sd == pytest.approx(math.sqrt((own_ss + 10 * 0.01) / 12))


def test_within_run_intervals_are_batch_means_of_data_chosen_length() -> None:
    from arch.bootstrap import optimal_block_length
    from scipy import stats as sps

    rng = np.random.default_rng(0)
    x = np.cumsum(rng.standard_normal(400)) * 0.05 + 10.0  # strongly autocorrelated
    iv = stats.within_run_interval(x)
    assert iv is not None
    block = float(optimal_block_length(x)["stationary"].iloc[0])
    assert iv.block == pytest.approx(max(1.0, block))
    assert stats.MIN_BATCHES <= iv.batches <= stats.MAX_BATCHES
    assert 400 // iv.batches >= min(400 // stats.MIN_BATCHES, math.ceil(stats.BLOCK_MULTIPLE * iv.block))
    size = 400 // iv.batches
    means = np.array([x[i * size:(i + 1) * size].mean() for i in range(iv.batches)])
    half = sps.t.ppf(0.975, iv.batches - 1) * means.std(ddof=1) / math.sqrt(iv.batches)
    assert iv.value == pytest.approx(x.mean()) and iv.high - iv.low == pytest.approx(2 * half)
    assert stats.within_run_interval(x[:19]) is None


def test_spikes() -> None:
    rng = np.random.default_rng(0)
    smooth = 1.0 + 0.01 * rng.normal(size=500)
    assert not stats.spikes(smooth, block=20, ratio=3.0).any()
    spiky = smooth.copy()
    spiky[[100, 300]] = 5.0
    assert stats.spikes(spiky, block=20, ratio=3.0).nonzero()[0].tolist() == [100, 300]
    assert not stats.spikes(spiky[:15], block=20).any()  # too short to judge
