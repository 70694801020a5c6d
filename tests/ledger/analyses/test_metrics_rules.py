"""The rules of :mod:`ledger.analyses.metrics` at and around their thresholds: the words of a verdict (its size,
its minimum change, the ratio in words), the rule that decided it, Holm's step-down over the headline families
and over the rows outside them, and the runs-for-power hint of an undecided headline.

Expected values are worked out by hand here or come from scipy.stats directly (the Poisson E-test, the
noncentral t), never from the code under test."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from ledger.analyses import metrics
from ledger.analyses.metrics import (
    NO_DIFFERENCE,
    MetricRow,
    Settings,
    Spec,
    control_headlines,
    is_big,
    judge,
    ratio_words,
    rule_text,
    undecided,
)


def _row(name: str = "x", family: str = "routing", p: float | None = 0.01, verdict: str = "higher", *,
         a: float | None = 1.0, b: float | None = 1.2, scale: str = "ratio", threshold: float = 0.05,
         ci: tuple[float, float] | None = (1.1, 1.3), ci_of: str | None = "ratio", unit: str = "",
         headline: bool = False, note: str = "", n: tuple[int, int] = (3, 3), sd: float | None = None,
         df: int | None = None, level: float | None = None) -> MetricRow:
    ratio = None if a is None or b is None or a <= 0 else b / a
    delta = None if a is None or b is None else b - a
    return MetricRow(name, family, unit, "higher", a, b, delta, ratio, ci, ci_of,  # type: ignore[arg-type]
                     p, None if p is None else "t-test", n, threshold, scale, verdict,  # type: ignore[arg-type]
                     note=note, headline=headline, sd=sd, df=df, level=level)


# ------------------------------------------------------------------------------- the words of a verdict
def test_size_in_words() -> None:
    assert metrics._size("ratio", 2.0, 3.0, "tokens/s") == "1.5x"
    assert metrics._size("ratio", 2.0, 0.0, "tokens/s") == "0x"
    # a ratio needs a positive A: otherwise the difference, with its unit
    assert metrics._size("ratio", 0.0, 1.0, "GiB") == "+1 GiB"
    assert metrics._size("ratio", -1.0, 1.0, "GiB") == "+2 GiB"
    assert metrics._size("delta", 1.0, 3.0, "steps") == "+2 steps"
    assert metrics._size("delta", 3.0, 1.0, "steps") == "-2 steps"
    # a loss or a ratio has no unit worth saying, and an empty unit says nothing
    assert metrics._size("delta", 1.0, 3.0, "loss") == "+2"
    assert metrics._size("delta", 1.0, 3.0, "ratio") == "+2"
    assert metrics._size("delta", 1.0, 3.0, "") == "+2"


def test_threshold_in_words() -> None:
    assert metrics._threshold_text("ratio", 0.05, "tokens/s") == "5% minimum change"
    assert metrics._threshold_text("ratio", 0.5, "tokens/s") == "50% minimum change"
    assert metrics._threshold_text("delta", 2.0, "steps") == "2 steps minimum change"
    for unitless in ("loss", "ratio", "fraction", ""):
        assert metrics._threshold_text("delta", 0.02, unitless) == "0.02 minimum change"


def test_ratio_in_words() -> None:
    """Issue 35: "0.90x the speed of A (10% slower)", never "0.90x slower"."""
    assert ratio_words(0.9) == "0.90x the speed of A (10% slower)"
    assert ratio_words(1.1) == "1.10x the speed of A (10% faster)"
    assert ratio_words(2.0) == "2.00x the speed of A (100% faster)"
    assert ratio_words(1.5, of="B") == "1.50x the speed of B (50% faster)"
    # under half a percent either way is no change worth a word
    assert ratio_words(1.004) == "1.00x the speed of A"
    assert ratio_words(0.996) == "1.00x the speed of A"
    assert ratio_words(1.006) == "1.01x the speed of A (1% faster)"
    # anything but the speed is higher or lower
    assert ratio_words(1.1, what="the loss") == "1.10x the loss of A (10% higher)"
    assert ratio_words(0.8, what="the loss") == "0.80x the loss of A (20% lower)"


def test_is_big_at_its_threshold() -> None:
    assert not is_big(_row(a=None, b=1.0))
    assert not is_big(_row(a=1.0, b=None))
    # ratio scale, on the log scale: 1.06x exceeds 5%, 1.04x does not; 0.95x exceeds it too (1/0.95 > 1.05)
    assert is_big(_row(a=1.0, b=1.06))
    assert not is_big(_row(a=1.0, b=1.04))
    assert is_big(_row(a=0.5, b=0.4755))  # 0.951x; linear: |-0.0245| is not above 0.05 x 0.5
    assert is_big(_row(a=2.0, b=1.9))
    assert not is_big(_row(a=2.0, b=1.95))
    # no ratio without a positive A: the difference against the threshold times |A|
    assert is_big(_row(a=0.0, b=1.0))
    assert is_big(_row(a=-1.0, b=1.0))
    assert not is_big(_row(a=-2.0, b=-1.95))  # 0.05 is not above 0.05 x 2
    assert is_big(_row(a=-2.0, b=-1.85))
    # delta scale: the absolute threshold, exceeded strictly
    assert not is_big(_row(a=1.0, b=1.5, scale="delta", threshold=1.0))
    assert not is_big(_row(a=0.0, b=1.0, scale="delta", threshold=1.0))
    assert is_big(_row(a=0.0, b=1.5, scale="delta", threshold=1.0))
    assert not is_big(_row(a=100.0, b=101.0, scale="delta", threshold=2.0))


def test_rule_text_by_case() -> None:
    assert rule_text(_row(p=0.06), 0.05) == "p = 0.06 > 0.05"
    assert rule_text(_row(p=0.05), 0.05) == "p = 0.05 >= 0.05"
    assert rule_text(_row(p=0.06), 0.05, "the loss family's level") == "p = 0.06 > 0.05, the loss family's level"
    assert rule_text(_row(p=0.001, b=1.04), 0.05) == "1.04x is below the 5% minimum change (p = 0.001 < 0.05)"
    assert rule_text(_row(p=0.001, b=1.2), 0.05) == "p = 0.001 < 0.05, and 1.2x exceeds the 5% minimum change"
    delta = _row(p=0.001, a=10.0, b=13.0, scale="delta", threshold=2.0, unit="steps", ci_of="delta")
    assert rule_text(delta, 0.05) == "p = 0.001 < 0.05, and +3 steps exceeds the 2 steps minimum change"


# ------------------------------------------------------------------------------------------ judge
def test_judge_identical_and_untested_rows() -> None:
    spec = Spec("x", "throughput", "tokens/s", "higher", 0.05)
    same = judge(spec, [1.0, 2.0], [2.0, 1.0], Settings(), 0.05)
    assert (same.verdict, same.rule, same.a, same.b) == ("identical", "equal values on both sides", 1.5, 1.5)
    single = judge(spec, [1.0], [2.0], Settings(), 0.05)
    assert single.verdict == "inconclusive"
    assert single.rule == "no between-run test: one run per side and no noise floor"


def test_judge_deterministic_rows_by_the_threshold_alone() -> None:
    memory = Spec("peak device memory", "memory", "GiB", "lower", 0.05, statistic="value", deterministic=True)
    within = judge(memory, [10.0], [10.4], Settings(), 0.05)
    assert within.verdict == NO_DIFFERENCE
    assert within.rule == "deterministic, one run per side: 1.04x is within the 5% minimum change"
    # 0.951x exceeds 5% on the log scale (1/0.951 > 1.05), though 0.0245 is not above 5% of 0.5
    down = judge(memory, [0.5], [0.4755], Settings(), 0.05)
    assert down.verdict == "better"
    assert down.rule == "deterministic, one run per side: 0.951x exceeds the 5% minimum change"
    # no ratio from zero: +1 GiB against 5% of nothing
    zero = judge(memory, [0.0], [1.0], Settings(), 0.05)
    assert zero.verdict == "worse"
    assert zero.rule == "deterministic, one run per side: +1 GiB exceeds the 5% minimum change"
    steps = Spec("steps", "stability", "steps", "none", 2.0, scale="delta", statistic="value", deterministic=True)
    assert judge(steps, [10.0], [11.0], Settings(), 2.0).rule == ("deterministic, one run per side: +1 steps is "
                                                                   "within the 2 steps minimum change")


def test_judge_tested_row_its_sd_test_and_evidence() -> None:
    spec = Spec("tokens/s per device", "throughput", "tokens/s", "higher", 0.05)
    va, vb = [100.0, 110.0, 90.0], [150.0, 160.0]
    row = judge(spec, va, vb, Settings(), 0.05)
    la, lb = np.log(va), np.log(vb)
    pooled = math.sqrt((la.var(ddof=1) * 2 + lb.var(ddof=1)) / 3)
    assert row.sd == pytest.approx(pooled)
    assert row.df == 3 and row.test == "t-test" and row.evidence == "3 vs 2 runs"
    assert row.n == (3, 2) and row.level == 0.05
    p = 2 * sps.t.sf(abs(lb.mean() - la.mean()) / (pooled * math.sqrt(1 / 3 + 1 / 2)), 3)
    assert row.p_value == pytest.approx(p)
    assert row.verdict == "better"
    assert row.rule == f"p = {p:.2g} < 0.05, and {155 / 100:.3g}x exceeds the 5% minimum change"
    # two runs against one: the between-run test rests on A's runs alone, still a t-test between runs
    assert judge(spec, [100.0, 110.0], [150.0], Settings(), 0.05).test == "t-test"


def test_judge_within_run_intervals_with_one_run_per_side() -> None:
    spec = Spec("tokens/s per device", "throughput", "tokens/s", "higher", 0.05)
    rng = np.random.default_rng(1)
    sa, sb = rng.normal(100, 1, 400), rng.normal(101, 1, 400)
    row = judge(spec, [100.0, 101.0], [102.0, 101.5], Settings(), 0.05, samples_a=sa, samples_b=sb)
    assert row.ci_a is not None and row.ci_b is not None
    assert row.ci_a[0] < np.median(sa) < row.ci_a[1]


def test_poisson_p_against_scipy() -> None:
    """The E-test of Krishnamoorthy and Thomson from scipy directly (two-sided: the order of the sides does not
    change its p)."""
    assert metrics._poisson_p([0.0, 0.0], [0.0]) == 1.0
    want = sps.poisson_means_test(22, 3, 7, 2).pvalue
    assert metrics._poisson_p([3.0, 4.0], [10.0, 12.0, 0.0]) == pytest.approx(want)
    # equal counts on both sides are not evidence of nothing: 5 vs 5 in one run each
    assert metrics._poisson_p([5.0], [5.0]) == pytest.approx(sps.poisson_means_test(5, 1, 5, 1).pvalue)
    assert metrics._poisson_p([0.0], [4.0]) == pytest.approx(sps.poisson_means_test(4, 1, 0, 1).pvalue)


# -------------------------------------------------------------------------------------------- undecided
def test_undecided_at_its_bounds() -> None:
    assert not undecided(_row(verdict="better", ci=(0.5, 2.0)))
    assert not undecided(_row(verdict=NO_DIFFERENCE, ci=None))
    assert not undecided(_row(verdict=NO_DIFFERENCE, a=None, ci=(0.5, 2.0)))
    # ratio CI against 1.05 and 1/1.05, strictly
    bound = 1 + 0.05
    assert not undecided(_row(verdict=NO_DIFFERENCE, ci=(1 / bound, 1.0)))
    assert not undecided(_row(verdict=NO_DIFFERENCE, ci=(1.0, bound)))
    assert undecided(_row(verdict=NO_DIFFERENCE, ci=(0.95, 1.0)))
    assert undecided(_row(verdict=NO_DIFFERENCE, ci=(1.0, 1.06)))
    assert not undecided(_row(verdict=NO_DIFFERENCE, ci=(0.99, 1.01), a=0.1))
    # a delta CI: the threshold times |A| on a ratio scale, the threshold itself on a delta scale
    assert not undecided(_row(verdict=NO_DIFFERENCE, a=100.0, ci=(-1.0, 5.0), ci_of="delta"))
    assert not undecided(_row(verdict=NO_DIFFERENCE, a=100.0, ci=(-5.0, 1.0), ci_of="delta"))
    assert undecided(_row(verdict=NO_DIFFERENCE, a=100.0, ci=(-5.1, 1.0), ci_of="delta"))
    assert undecided(_row(verdict=NO_DIFFERENCE, a=-100.0, ci=(-1.0, 5.1), ci_of="delta"))
    assert not undecided(_row(verdict=NO_DIFFERENCE, a=100.0, b=101.0, scale="delta", threshold=2.0,
                              ci=(-2.0, 2.0), ci_of="delta"))
    assert undecided(_row(verdict=NO_DIFFERENCE, a=100.0, b=101.0, scale="delta", threshold=2.0,
                          ci=(-3.0, 1.0), ci_of="delta"))


# ------------------------------------------------------------------------------------- power hint
def _runs_for_power(sd: float, change: float, alpha: float, prior: int, log_scale: bool = True) -> int | None:
    """The fewest runs per side with 80% power, from scipy's noncentral t."""
    effect = math.log1p(change) if log_scale else change
    for n in range(2, 201):
        df = 2 * n - 2 + prior
        nc = effect / (sd * math.sqrt(2 / n))
        crit = sps.t.ppf(1 - alpha / 2, df)
        if sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc) >= 0.8:
            return n
    return None


def _undecided_head(sd: float, df: int, **kw: object) -> MetricRow:
    row = _row("tokens/s per device", "throughput", 0.3, NO_DIFFERENCE, ci=(0.9, 1.2), headline=True, sd=sd,
               df=df)
    return replace(row, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("sd", "df", "level", "want"), [
    (0.03, 4, 0.05, 8),  # no floor: 2n - 2 degrees of freedom
    (0.025, 4, 0.05, 6),
    (0.02, 16, 0.05, 3),  # a floor adds its 12 degrees of freedom
    (0.03, 4, None, 8),  # no level: alpha 0.05
    (0.03, 4, 0.01, 11),
])
def test_runs_for_power_against_the_noncentral_t(sd: float, df: int, level: float | None, want: int) -> None:
    row = metrics._with_power(_undecided_head(sd, df, level=level))
    assert _runs_for_power(sd, 0.05, level or 0.05, df - 4) == want
    assert row.runs_for_power == want


def test_runs_for_power_on_a_delta_scale_and_only_for_undecided_headlines() -> None:
    delta = _undecided_head(0.3, 4, threshold=0.5, ci=(-1.0, 1.0), ci_of="delta", a=10.0, scale="delta",
                            level=0.05)
    assert _runs_for_power(0.3, 0.5, 0.05, 0, log_scale=False) == 7
    assert metrics._with_power(delta).runs_for_power == 7
    ratio = _undecided_head(0.3, 4, threshold=0.5, ci=(0.5, 2.0), level=0.05)
    assert _runs_for_power(0.3, 0.5, 0.05, 0) == 10
    assert metrics._with_power(ratio).runs_for_power == 10
    for quiet in (replace(ratio, headline=False), replace(ratio, sd=None), replace(ratio, df=None),
                  replace(ratio, verdict="better"), replace(ratio, ci=(0.99, 1.01))):
        assert metrics._with_power(quiet).runs_for_power is None


# ------------------------------------------------------------------------- Holm over the side rows
def _side(rows: list[MetricRow]) -> list[MetricRow]:
    head = _row("tokens/s per device", "throughput", 0.5, NO_DIFFERENCE, headline=True)
    return control_headlines([head, *rows], 0.05)[1:]


def test_side_rows_step_down_by_hand() -> None:
    """Holm over 4 rows (listed out of order): 0.004 < 0.05/4; 0.02 >= 0.05/3 stops; 0.03 and 0.3 then keep no
    verdict, each judged at its own share (0.05/2, 0.05/1)."""
    whose = "its share of alpha 0.05 among 4 rows outside the headlines (Holm)"
    out = _side([_row("goodput", "goodput", 0.03, "lower", note="per step"),
                 _row("peak host memory", "memory", 0.02, "higher"),
                 _row("time: expert", "timing", 0.3, NO_DIFFERENCE),
                 _row("load CV", "routing", 0.004, "lower")])
    goodput, memory, timing, load = out
    assert load.verdict == "lower" and load.level == pytest.approx(0.0125)
    assert load.rule == f"p = 0.004 < 0.013, {whose}, and 1.2x exceeds the 5% minimum change"
    assert memory.verdict == NO_DIFFERENCE and memory.level == pytest.approx(0.05 / 3)
    assert memory.rule == f"p = 0.02 > 0.017, {whose}"
    assert memory.note == ("not significant once the 4 rows outside the headlines share alpha 0.05 (Holm): "
                           "p=0.02 against 0.0167")
    assert goodput.verdict == NO_DIFFERENCE and goodput.level == pytest.approx(0.025)
    assert goodput.rule == f"p = 0.03 > 0.025, {whose}"
    assert goodput.note == ("per step; not significant once the 4 rows outside the headlines share alpha 0.05 "
                            "(Holm): p=0.03 against 0.025")
    assert timing.verdict == NO_DIFFERENCE and timing.level == pytest.approx(0.05)
    assert timing.rule == f"p = 0.3 > 0.05, {whose}"


def test_side_rows_after_a_stop_keep_no_verdict_even_below_their_share() -> None:
    """0.03 >= 0.05/2 stops; 0.04 is below its share 0.05, but Holm stops at the first failure."""
    first, second = _side([_row("a", "routing", 0.03, "higher"), _row("b", "memory", 0.04, "higher", note="n")])
    assert first.verdict == NO_DIFFERENCE and first.level == pytest.approx(0.025)
    assert second.verdict == NO_DIFFERENCE and second.level == pytest.approx(0.05)
    assert second.rule == ("p = 0.04, but a smaller p before it did not pass its share (Holm over 2 rows outside the "
                           "headlines)")
    assert second.note == ("n; not significant once the 2 rows outside the headlines share alpha 0.05 (Holm): "
                           "p=0.04 against 0.05")


def test_side_rows_at_their_share_exactly_and_passing_in_turn() -> None:
    # p equal to its share does not pass
    at, after = _side([_row("a", "routing", 0.025, "higher"), _row("b", "memory", 0.03, "higher")])
    assert after.verdict == at.verdict == NO_DIFFERENCE
    assert at.rule == "p = 0.025 >= 0.025, its share of alpha 0.05 among 2 rows outside the headlines (Holm)"
    # both pass: 0.01 < 0.025, then 0.04 < 0.05
    first, second = _side([_row("a", "routing", 0.01, "higher"), _row("b", "memory", 0.04, "higher")])
    assert (first.verdict, second.verdict) == ("higher", "higher")
    assert (first.level, second.level) == (pytest.approx(0.025), pytest.approx(0.05))
    assert second.rule == ("p = 0.04 < 0.05, its share of alpha 0.05 among 2 rows outside the headlines (Holm), and "
                           "1.2x exceeds the 5% minimum change")
    # untested and unavailable rows take no share
    alone, untested, missing = _side([_row("a", "routing", 0.01, "higher"), _row("b", "memory", None, "inconclusive"),
                                      _row("c", "timing", 0.5, "unavailable")])
    assert alone.verdict == "higher" and alone.level == pytest.approx(0.05)
    assert alone.rule == "p = 0.01 < 0.05, and 1.2x exceeds the 5% minimum change"
    assert (untested.level, missing.level, missing.rule) == (None, None, None)


# ------------------------------------------------------------------------ Holm over the headlines
def test_one_headline_family_is_tested_at_alpha() -> None:
    speed, step = control_headlines([_row("tokens/s per device", "throughput", 0.001, "better", headline=True),
                                     _row("step time", "step time", 0.01, "better"),
                                     _row("step time p90", "step time", None, NO_DIFFERENCE)], 0.05)[:2]
    assert speed.level == 0.05 and speed.verdict == "better"
    assert speed.rule == "p = 0.001 < 0.05, the speed family's level, and 1.2x exceeds the 5% minimum change"
    assert step.verdict == "better" and step.level == 0.05
    assert step.rule == "p = 0.01 < 0.05, the speed family's level, and 1.2x exceeds the 5% minimum change"


def test_headline_families_by_weighted_holm() -> None:
    """Speed weighs 4, the loss 1: speed first at 0.05 x 4/5 = 0.04; once rejected, the loss at 0.05."""
    whose = "family's level (Holm over 2 headline families)"
    speed, step, loss = control_headlines([
        _row("tokens/s per device", "throughput", 0.03, "better", headline=True),
        _row("step time", "step time", 0.045, "better"),
        _row("loss @ matched tokens", "loss", 0.045, "better", headline=True)], 0.05)
    assert speed.level == pytest.approx(0.04) and speed.verdict == "better"
    assert loss.level == pytest.approx(0.05) and loss.verdict == "better"
    assert loss.rule == f"p = 0.045 < 0.05, the loss {whose}, and 1.2x exceeds the 5% minimum change"
    # the step time row is gated at the level its headline met
    assert step.verdict == NO_DIFFERENCE and step.level == pytest.approx(0.04)
    assert step.rule == f"p = 0.045 > 0.04, the speed {whose}"
    # speed not rejected: its other rows say why, naming their headline
    speed, step, loss = control_headlines([
        _row("tokens/s per device", "throughput", 0.045, "better", headline=True),
        _row("step time", "step time", 0.001, "better"),
        _row("loss @ matched tokens", "loss", 0.5, NO_DIFFERENCE, headline=True)], 0.05)
    assert speed.verdict == step.verdict == NO_DIFFERENCE
    assert speed.rule == f"p = 0.045 > 0.04, the speed {whose}"
    assert step.rule == ("its headline tokens/s per device is not significant (p = 0.045 >= 0.04, the speed "
                         f"{whose})")


# ------------------------------------------------------------------------------ values, ratios, draws
def test_summary_statistics_by_hand() -> None:
    x = np.array([1.0, 2.0, 3.0, 10.0])
    assert metrics.summary_statistic(x, "count") == 16.0
    assert metrics.summary_statistic(x, "mean") == 4.0
    assert metrics.summary_statistic(x, "median") == 2.5
    assert metrics.summary_statistic(np.arange(11.0), "p90") == pytest.approx(9.0)


def test_ratio_only_of_a_positive_a() -> None:
    assert metrics._ratio(2.0, 3.0) == 1.5
    assert metrics._ratio(0.5, 1.0) == 2.0
    assert metrics._ratio(0.5, 0.0) == 0.0
    for a, b in ((None, 1.0), (1.0, None), (0.0, 1.0), (-1.0, 1.0), (-1.0, -2.0), (1.0, -1.0)):
        assert metrics._ratio(a, b) is None


def test_rows_keep_direction_and_scale() -> None:
    spec = Spec("load CV", "routing", "", "lower", 0.05)
    row = judge(spec, [1.0, 1.01], [1.3, 1.31], Settings(), 0.05)
    assert (row.direction, row.delta, row.ci_of) == ("lower", pytest.approx(0.3), "ratio")
    assert row.verdict == "worse"
    # a zero on a ratio scale: no log scale, the CI is of the difference
    zero = judge(spec, [0.0, 0.1], [1.3, 1.4], Settings(), 0.05)
    assert zero.ci_of == "delta"
    missing = metrics._row(spec, None, None, None, None, None, None, (0, 0), 0.0, "unavailable", "gone", "")
    assert (missing.delta, missing.ratio, missing.direction) == (None, None, "lower")


def test_within_run_intervals_of_the_metric_statistic_only() -> None:
    rng = np.random.default_rng(3)
    sa, sb = rng.exponential(1.0, 400), rng.exponential(1.0, 400)
    p90 = Spec("step time p90", "step time", "s", "lower", 0.05, statistic="p90")
    got = metrics._within(p90, sa, sb, 0.95)
    # the interval is of the 90th percentile (about 2.3), not of the mean (about 1)
    assert got["ci_a"][0] < np.quantile(sa, 0.9) < got["ci_a"][1] and got["ci_a"][0] > 1.5
    assert got["ci_b"][0] < np.quantile(sb, 0.9) < got["ci_b"][1]
    count = Spec("skipped steps", "stability", "steps", "lower", 1.0, scale="delta", statistic="count")
    assert metrics._within(count, sa, sb, 0.95) == {}
    assert metrics._within(p90, sa[:10], None, 0.95) == {}


def test_each_metric_draws_from_its_own_reproducible_stream() -> None:
    first = Settings().rng("tokens/s per device").random(3)
    assert np.array_equal(first, Settings().rng("tokens/s per device").random(3))
    assert not np.array_equal(first, Settings().rng("loss @ matched tokens").random(3))
    assert not np.array_equal(first, Settings(seed=1).rng("tokens/s per device").random(3))


# ------------------------------------------------------------------------ runs, samples, the floor
def _runs(*ids: str) -> list[Any]:
    return [SimpleNamespace(id=i, label=i) for i in ids]


def test_one_run_per_side_gets_a_floor_from_the_groups_and_samples_only_then() -> None:
    """Two replicate groups of 3 (log SDs by hand) give one run per side a t test against the noise floor;
    within-run samples are used only with one run on each side."""
    rng = np.random.default_rng(5)
    value = {"a": 100.0, "b": 130.0, "a2": 101.0, "g1": 100.0, "g2": 104.0, "g3": 98.0, "h1": 50.0, "h2": 51.0,
             "h3": 49.0}
    metric = metrics.RunMetric(Spec("tokens/s per device", "throughput", "tokens/s", "higher", 0.05),
                               lambda run: metrics.Observation(value[run.id], rng.normal(value[run.id], 1, 50)))
    groups = [_runs("g1", "g2", "g3"), _runs("h1", "h2", "h3")]
    row = metrics.compare_metric(metric, _runs("a"), _runs("b"), Settings(), groups)
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in (np.log([100.0, 104.0, 98.0]), np.log([50.0, 51.0, 49.0])))
    assert row.test == "t-test (noise floor)" and row.df == 4
    assert row.sd == pytest.approx(math.sqrt(ss / 4))
    assert row.ci_a is not None and row.ci_b is not None
    two = metrics.compare_metric(metric, _runs("a", "a2"), _runs("b"), Settings(), groups)
    assert two.ci_a is None and two.ci_b is None
