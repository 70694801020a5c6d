"""The statistics against independent computations: the between-run t test against scipy's, with a noise
floor's degrees of freedom against a hand-pooled variance; the within-run interval's width and coverage
against simulation; the outlier rule exactly at its threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ledger.analyses.stats import (
    INTERVAL_MIN_SAMPLES,
    MAD_Z,
    as_float,
    block_length,
    mad,
    mad_keep,
    median,
    percentile_interval,
    quantile,
    sorted_median,
    spikes,
    t_test,
    within_run_interval,
)


def test_t_test_without_a_floor_is_scipys_pooled_t_test() -> None:
    a = [10.0, 10.4, 9.9, 10.2]
    b = [10.9, 11.3, 11.0]
    got = t_test(a, b)
    ref = sps.ttest_ind(b, a, equal_var=True)
    assert got is not None
    assert got.estimate == pytest.approx(np.mean(b) - np.mean(a), rel=1e-12)
    assert got.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert got.df == 5
    ci = ref.confidence_interval(0.95)
    assert got.ci == pytest.approx((ci.low, ci.high), rel=1e-9)


def test_a_noise_floor_adds_its_degrees_of_freedom_at_its_variance() -> None:
    a, b = np.array([1.00, 1.10]), np.array([1.30, 1.36])
    prior_sd, prior_df = 0.08, 6
    got = t_test(a, b, prior_sd=prior_sd, prior_df=prior_df)
    # by hand: pooled SS = 0.005 + 0.0018 + 6 x 0.0064 = 0.0452 over 1 + 1 + 6 = 8 df
    ss = 0.005 + 0.0018 + prior_df * prior_sd**2
    sd = math.sqrt(ss / 8)
    se = sd * math.sqrt(1 / 2 + 1 / 2)
    t = (1.33 - 1.05) / se
    assert got is not None and got.df == 8
    assert got.sd == pytest.approx(sd, rel=1e-12)
    assert got.p_value == pytest.approx(2 * sps.t.sf(t, 8), rel=1e-9)
    half = sps.t.ppf(0.975, 8) * se
    assert got.ci == pytest.approx((0.28 - half, 0.28 + half), rel=1e-9)


def test_one_run_per_side_without_a_floor_gives_no_test() -> None:
    assert t_test([1.0], [2.0]) is None
    assert t_test([1.0], [2.0], prior_sd=0.1, prior_df=1) is not None


def test_within_run_interval_needs_its_minimum_samples_exactly() -> None:
    rng = np.random.default_rng(3)
    assert within_run_interval(rng.normal(size=INTERVAL_MIN_SAMPLES - 1)) is None
    assert within_run_interval(rng.normal(size=INTERVAL_MIN_SAMPLES)) is not None


@pytest.mark.slow
def test_within_run_interval_width_and_coverage_against_simulation() -> None:
    """Independent normal samples (sigma 1, n 240): batch means of k batches give a half-width whose mean is
    t(0.975, k-1) x c4(k) x sigma / sqrt(n) (c4: E[s] / sigma for k values); the 95% interval covers the
    true mean 0 between the binomial 99% bounds of 400 tries."""
    rng = np.random.default_rng(20261201)
    n, sims = 240, 400
    halves, covered, ks = [], 0, set()
    for _ in range(sims):
        x = rng.normal(size=n)
        iv = within_run_interval(x)
        assert iv is not None
        assert iv.value == pytest.approx(float(np.mean(x)), rel=1e-12)
        assert iv.high - iv.value == pytest.approx(iv.value - iv.low, rel=1e-9)
        halves.append(iv.high - iv.value)
        covered += iv.low <= 0.0 <= iv.high
        ks.add(iv.batches)
    expected = []
    for k in ks:
        c4 = math.sqrt(2 / (k - 1)) * math.gamma(k / 2) / math.gamma((k - 1) / 2)
        m = n // k
        expected.append(sps.t.ppf(0.975, k - 1) * c4 / math.sqrt(m * k))
    assert min(expected) * 0.9 <= float(np.mean(halves)) <= max(expected) * 1.1
    lo, hi = sps.binom.ppf([0.005, 0.995], sims, 0.95)
    assert lo <= covered <= hi


def test_percentile_interval_by_hand() -> None:
    assert percentile_interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))
    assert percentile_interval(np.arange(101.0), 0.5) == pytest.approx((25.0, 75.0))
    assert all(math.isnan(v) for v in percentile_interval([], 0.9))


def test_mad_keep_exactly_at_the_threshold() -> None:
    # median 0, MAD 1 (half the values at distance 1); the last value's modified z is exactly the threshold
    base = [-1.0, -1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    edge = MAD_Z / 0.6745
    assert 0.6745 * edge / 1.0 == MAD_Z  # exactly at the threshold in floating point
    keep = mad_keep([*base, edge])
    assert keep[-1]  # kept: the rule is "at most"
    assert keep[:-1].all()
    beyond = np.nextafter(edge, np.inf) * 1.0001
    assert not mad_keep([*base, beyond])[-1]


def test_median_is_numpys_bit_for_bit_at_every_size_and_with_nans() -> None:
    rng = np.random.default_rng(5)
    for n in range(0, 9):
        x = rng.normal(size=n)
        got = median(x)
        assert (math.isnan(got) and n == 0) or got == float(np.median(x)), n
        ints = rng.integers(0, 100, size=n)
        assert n == 0 or median(ints) == float(np.median(ints)), n
    assert math.isnan(median([1.0, float("nan"), 2.0]))
    assert sorted_median(np.array([1, 2, 3, 4])) == 2.5  # an integer array: no NaN test on it
    assert math.isnan(sorted_median(np.array([])))


def test_quantile_and_mad_by_hand() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0
    assert quantile([1.0, float("nan"), 3.0], 0.5) == 2.0  # non-finite values left out
    assert math.isnan(quantile([], 0.5))
    # median 3, deviations 2, 1, 0, 1, 7 -> MAD 1
    assert mad([1.0, 2.0, 3.0, 4.0, 10.0]) == 1.0
    assert mad([3.0]) == 0.0
    assert math.isnan(mad([]))


def test_block_length_is_archs_and_at_least_one() -> None:
    from arch.bootstrap import optimal_block_length

    assert block_length(np.array([1.0, 2.0])) == 1.0  # too short to estimate
    assert block_length(np.full(50, 3.0)) == 1.0  # constant: no autocorrelation to measure
    rng = np.random.default_rng(8)
    x = np.empty(400)
    x[0] = 0.0
    for i in range(1, x.size):  # AR(1), phi 0.8: blocks well above 1
        x[i] = 0.8 * x[i - 1] + rng.normal()
    expected = float(optimal_block_length(x)["stationary"].iloc[0])
    assert expected > 2.0
    assert block_length(x) == pytest.approx(expected, rel=1e-12)


def spikes_by_hand(x: list[float], block: int, ratio: float, z: float) -> list[bool]:
    """The spike rule written out from the docstring, one observation at a time."""
    out = []
    for i, v in enumerate(x):
        b = i // block
        if b == 0:
            out.append(False)
            continue
        ref = np.array(x[(b - 1) * block : b * block])
        ref = ref[np.isfinite(ref)]
        if ref.size == 0 or not math.isfinite(v):
            out.append(False)
            continue
        m = float(np.median(ref))
        dev = float(np.median(np.abs(ref - m)))
        out.append(v > m + max(z * 1.4826 * dev, (ratio - 1) * abs(m)))
    return out


@pytest.mark.parametrize("nonfinite", [False, True])
def test_spikes_against_the_rule_written_out(nonfinite: bool) -> None:
    rng = np.random.default_rng(11)
    x = list(1.0 + 0.05 * rng.normal(size=47))
    x[13], x[21], x[30], x[44] = 2.5, 1.9, 5.0, 2.05  # spikes and near misses
    if nonfinite:
        x[3], x[17], x[33] = float("nan"), float("inf"), float("nan")
        x[10:15] = [float("nan")] * 5  # a whole block without a finite value: no reference for the next
    got = spikes(x, block=5, ratio=2.0, z=6.0)
    assert got.dtype == np.bool_
    assert got.tolist() == spikes_by_hand(x, 5, 2.0, 6.0)
    assert got.any()


def test_spikes_exactly_at_the_margin_are_not_spikes() -> None:
    # previous block: median 1, MAD 0 -> margin (ratio - 1) x 1 = 1: 2.0 is at the margin, not above it
    x = [1.0, 1.0, 1.0, 1.0, 2.0, np.nextafter(2.0, 3.0)]
    assert spikes(x, block=4, ratio=2.0).tolist() == [False] * 5 + [True]
    assert not spikes([1.0, 2.0, 3.0], block=4).any()  # shorter than a block: no reference


def test_t_test_edges() -> None:
    assert t_test([], [1.0, 2.0]) is None and t_test([1.0, 2.0], []) is None
    assert t_test([1.0], [2.0], prior_sd=0.1) is None  # a floor without degrees of freedom adds nothing
    # no spread at all: the difference is exact
    same = t_test([1.0, 1.0], [1.0, 1.0])
    assert same is not None
    assert (same.estimate, same.p_value, same.ci, same.df, same.sd) == (0.0, 1.0, (0.0, 0.0), 2, 0.0)
    apart = t_test([1.0, 1.0], [3.0, 3.0])
    assert apart is not None and (apart.estimate, apart.p_value, apart.ci, apart.df, apart.sd) == (
        2.0, 0.0, (2.0, 2.0), 2, 0.0)


def test_as_float_keeps_finite_float64_values() -> None:
    out = as_float([[1, 2], [3, float("nan")]])
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0, 3.0]


def test_percentile_interval_default_level_is_95() -> None:
    assert percentile_interval(np.arange(201.0)) == pytest.approx((5.0, 195.0))


def test_mad_keep_away_from_zero_and_without_a_mad() -> None:
    # median 10, MAD 2: modified z of 20 is 0.6745 x 10 / 2 = 3.37 (kept), of 21 is 3.71 (dropped)
    x = [8.0, 8.0, 10.0, 10.0, 10.0, 12.0, 12.0]
    assert mad_keep([*x, 20.0]).tolist() == [True] * 8
    assert mad_keep([*x, 21.0]).tolist() == [True] * 7 + [False]
    # more than half equal: MAD 0, the mean absolute deviation stands in (0.7979 x 0.8 = 0.638):
    # 9 is 0.6745 x 4 / 0.638 = 4.2 away (dropped)
    assert mad_keep([5, 5, 5, 5, 9]).tolist() == [True, True, True, True, False]
    assert mad_keep([5, 5, 5, 5, 5]).all()
    assert mad_keep([float("nan"), float("inf")]).tolist() == [False, False]


def test_block_length_of_white_noise_is_archs_between_one_and_two() -> None:
    from arch.bootstrap import optimal_block_length

    x = np.random.default_rng(4).normal(size=300)
    found = float(optimal_block_length(x)["stationary"].iloc[0])
    assert 1.0 < found < 2.0
    assert block_length(x) == pytest.approx(found, rel=1e-12)


@pytest.mark.parametrize("block", [4, 5, 6])
def test_spikes_near_the_mad_margin_against_the_rule_written_out(block: int) -> None:
    # ratio 1: the margin is the MAD term alone, and z 2 puts many observations near it
    x = list(1.0 + 0.05 * np.random.default_rng(block).normal(size=10 * block + 3))
    got = spikes(x, block=block, ratio=1.0, z=2.0)
    expected = spikes_by_hand(x, block, 1.0, 2.0)
    assert got.tolist() == expected
    assert 0 < sum(expected) < len(x) - block
