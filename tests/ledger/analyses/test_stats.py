"""Statistics of `ledger compare`: rank tests against brute force, the exact bootstrap, MAD, t, spikes."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.analyses import stats

distinct_floats = st.lists(st.integers(-1000, 1000), min_size=2, max_size=9, unique=True).map(
    lambda xs: [x / 7.0 for x in xs])


def brute_mann_whitney(x: list[float], y: list[float]) -> float:
    """Two-sided p: the share of all splits of the pooled values whose U is at least as far from its mean."""
    pooled = x + y
    n1, n2 = len(x), len(y)

    def u(ys: list[float], xs: list[float]) -> float:
        return sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in xs for b in ys)

    observed = abs(u(y, x) - n1 * n2 / 2)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), n2):
        ys = [pooled[i] for i in idx]
        xs = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += abs(u(ys, xs) - n1 * n2 / 2) >= observed - 1e-12
    return hits / total


@settings(max_examples=60, deadline=None)
@given(distinct_floats, st.integers(1, 8))
def test_mann_whitney_exact_matches_brute_force(values: list[float], split: int) -> None:
    split = min(split, len(values) - 1)
    x, y = values[:split], values[split:]
    result = stats.mann_whitney(x, y)
    assert result.method == "exact"
    assert result.p_value == pytest.approx(brute_mann_whitney(x, y), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30),
       st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_mann_whitney_is_symmetric(x: list[float], y: list[float]) -> None:
    xy, yx = stats.mann_whitney(x, y), stats.mann_whitney(y, x)
    assert xy.p_value == pytest.approx(yx.p_value)
    assert xy.statistic + yx.statistic == pytest.approx(len(x) * len(y))
    assert 0.0 <= xy.p_value <= 1.0


def test_mann_whitney_reference_values() -> None:
    # two-sided p-values from scipy.stats.mannwhitneyu (exact for 8 + 8, asymptotic for 15 + 15)
    small = stats.mann_whitney(np.arange(8.0), np.arange(8.0) + 3.5)
    assert small.method == "exact" and small.statistic == 54.0
    assert small.p_value == pytest.approx(0.020668220668220667, rel=1e-9)
    large = stats.mann_whitney(np.arange(15.0), np.arange(15.0) + 5.5)
    assert large.method == "normal" and large.statistic == 180.0
    assert large.p_value == pytest.approx(0.005452139856940547, rel=1e-9)
    rng = np.random.default_rng(3)
    assert stats.mann_whitney(rng.normal(size=200), rng.normal(1, size=200)).p_value < 1e-6
    assert stats.mann_whitney([1.0, 2.0, 3.0] * 10, [1.0, 2.0, 3.0] * 10).p_value == 1.0


def brute_signed_rank(d: list[float]) -> float:
    ranks = {v: r + 1 for r, v in enumerate(sorted(abs(x) for x in d))}
    n = len(d)
    mean = n * (n + 1) / 4
    observed = abs(sum(ranks[abs(x)] for x in d if x > 0) - mean)
    hits = 0
    for signs in itertools.product((0, 1), repeat=n):
        w = sum(ranks[abs(x)] for x, s in zip(d, signs, strict=True) if s)
        hits += abs(w - mean) >= observed - 1e-12
    return hits / 2**n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 500), min_size=1, max_size=10, unique=True), st.lists(st.booleans(), min_size=10,
                                                                                      max_size=10))
def test_wilcoxon_exact_matches_brute_force(magnitudes: list[int], negative: list[bool]) -> None:
    d = [m / 3.0 * (-1 if s else 1) for m, s in zip(magnitudes, negative, strict=False)]
    result = stats.wilcoxon_signed_rank(d)
    assert result.method == "exact"
    assert result.p_value == pytest.approx(brute_signed_rank(d), abs=1e-12)


def test_wilcoxon_drops_zero_differences() -> None:
    assert stats.wilcoxon_signed_rank([0.0, 0.0, 0.0]).p_value == 1.0
    assert stats.wilcoxon_signed_rank([0.0, 1.0, 2.0]).n == (2,)


def test_bootstrap_quantile_matches_resampling() -> None:
    rng = np.random.default_rng(11)
    x = rng.lognormal(size=301)
    for q in (0.5, 0.9):
        exact = stats.bootstrap_quantile(x, q, np.random.default_rng(0), 20_000)
        brute = np.quantile(x[rng.integers(0, x.size, size=(20_000, x.size))], q, axis=1)
        assert exact.mean() == pytest.approx(brute.mean(), rel=0.005)
        assert exact.std() == pytest.approx(brute.std(), rel=0.05)
        # the same distribution over the sample's values: the order statistics drawn agree
        ranks = np.searchsorted(np.sort(x), [np.percentile(exact, p) for p in (2.5, 50, 97.5)])
        brute_ranks = np.searchsorted(np.sort(x), [np.percentile(brute, p) for p in (2.5, 50, 97.5)])
        assert np.abs(ranks - brute_ranks).max() <= 3


def test_bootstrap_is_seeded_and_deterministic() -> None:
    x = np.arange(1000, dtype=float) ** 1.5
    a = stats.bootstrap_quantile(x, 0.5, np.random.default_rng(5), 500)
    b = stats.bootstrap_quantile(x, 0.5, np.random.default_rng(5), 500)
    assert np.array_equal(a, b)
    assert np.array_equal(stats.bootstrap_mean(x, np.random.default_rng(5), 300),
                          stats.bootstrap_mean(x, np.random.default_rng(5), 300))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=60), st.floats(0.0, 1.0))
def test_bootstrap_quantile_draws_lie_within_the_sample(x: list[float], q: float) -> None:
    draws = stats.bootstrap_quantile(x, q, np.random.default_rng(1), 200)
    assert draws.min() >= min(x) - 1e-9 and draws.max() <= max(x) + 1e-9


def test_bootstrap_mean_centre_and_spread() -> None:
    rng = np.random.default_rng(2)
    for n in (500, 50_000):  # resampled, then the normal limit
        x = rng.normal(10, 2, size=n)
        draws = stats.bootstrap_mean(x, np.random.default_rng(0), 4000)
        assert draws.mean() == pytest.approx(x.mean(), abs=0.01)
        assert draws.std() == pytest.approx(x.std() / math.sqrt(n), rel=0.1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(9.0, 11.0), min_size=20, max_size=80),
       st.lists(st.floats(100.0, 1000.0), min_size=1, max_size=4))
def test_mad_filter_removes_planted_outliers(inliers: list[float], outliers: list[float]) -> None:
    x = np.array(inliers + outliers)
    keep = stats.mad_keep(x)
    assert not keep[len(inliers):].any()
    # inliers spread over [9, 11] stay unless more than half of them sit on one value (then MAD is tiny)
    if stats.mad(inliers) > 0.2:
        assert keep[: len(inliers)].all()


def test_mad_filter_with_a_zero_mad_keeps_all_but_outliers() -> None:
    x = np.array([1.0] * 10 + [1.1, 50.0])
    keep = stats.mad_keep(x)
    assert keep[:10].all() and not keep[-1]


def test_pooled_t_matches_a_hand_computed_example() -> None:
    # x = 1,2,3 (mean 2, SS 2); y = 2,4,5,6 (mean 4.25, SS 8.75); s2 = 10.75/5 = 2.15
    # se = sqrt(2.15 * (1/3 + 1/4)) = 1.11991; t = 2.25 / 1.11991 = 2.00909, df = 5
    t = stats.pooled_t([1.0, 2.0, 3.0], [2.0, 4.0, 5.0, 6.0])
    assert t is not None and t.df == 5
    assert t.difference == 2.25
    assert t.p_value == pytest.approx(0.100760, abs=1e-5)  # 2 * P(T5 > 2.00909)
    assert t.ci[0] == pytest.approx(2.25 - 2.570582 * 1.119903, abs=1e-4)
    assert stats.pooled_t([1.0], [2.0]) is None


def test_t_quantiles() -> None:
    assert stats.t_quantile(0.975, 4) == pytest.approx(2.776445, abs=1e-5)
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-4)
    assert stats.t_quantile(0.025, 30) == pytest.approx(-2.042272, abs=1e-5)
    assert stats.t_sf(0.0, 7) == pytest.approx(0.5)


def test_spikes() -> None:
    rng = np.random.default_rng(0)
    smooth = 1.0 + 0.01 * rng.normal(size=500)
    assert not stats.spikes(smooth, block=20, ratio=3.0).any()
    spiky = smooth.copy()
    spiky[[100, 300]] = 5.0
    assert stats.spikes(spiky, block=20, ratio=3.0).nonzero()[0].tolist() == [100, 300]
    assert not stats.spikes(spiky[:15], block=20).any()  # too short to judge
