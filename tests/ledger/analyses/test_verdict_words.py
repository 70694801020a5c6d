"""Verdicts whose words match their numbers (issue 35): the rule that decided a row, banners that agree with the
rows they sum up, every row under a family control, counts that never differ "significantly" against a
zero-variance floor, and the sample-size hint of an undecided headline.

Expected values come from the rules written out here or from textbooks (Cohen's power tables), never from the
code under test."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from ledger.analyses import metrics
from ledger.analyses.compare import _evidence_banners
from ledger.analyses.evidence import Floor
from ledger.analyses.metrics import MetricRow, Settings, Spec, control_headlines, judge
from ledger.analyses.power import power, runs_for_power


def _row(name: str, family: str, p: float | None, verdict: str, *, ratio: float = 1.2, headline: bool = False,
         ci: tuple[float, float] = (1.1, 1.3), sd: float | None = None, df: int | None = None) -> MetricRow:
    return MetricRow(name, family, "", "higher", 1.0, ratio, ratio - 1, ratio, ci, "ratio", p,
                     None if p is None else "t-test", (3, 3), 0.05, "ratio", verdict, headline=headline,
                     sd=sd, df=df)


def _speed_and_loss(p_speed: float, p_loss: float, ratio: float = 1.12, ci: tuple[float, float] = (1.0, 1.26),
                    verdict: str = "better") -> list[MetricRow]:
    rows = [_row("tokens/s per device", "throughput", p_speed, verdict, ratio=ratio, ci=ci, headline=True,
                 sd=0.05, df=4),
            _row("loss @ matched tokens", "loss", p_loss, "no significant difference", ratio=1.0, ci=(0.99, 1.01),
                 headline=True)]
    return control_headlines(rows, 0.05)


# ----------------------------------------------------------------------------------------- the rule
def test_a_verdict_names_the_level_it_was_tested_at() -> None:
    """Issue 35: "no significant throughput difference: 1.12x (95% CI [1.00, 1.26], 3 vs 3 runs)" with p = 0.048:
    significant at 0.05, not at the 0.04 the speed family is tested at beside the loss. The rule says so."""
    speed, _ = _speed_and_loss(0.048, 0.5)
    assert speed.verdict == "no significant difference"
    # weighted Holm by hand: speed weighs 4 of 5, so 0.05 x 4/5 = 0.04 first
    assert speed.level == pytest.approx(0.04)
    assert speed.rule == "p = 0.048 > 0.04, the speed family's level (Holm over 2 headline families)"
    # significant: the rule names both conditions
    speed, _ = _speed_and_loss(0.001, 0.5)
    assert speed.verdict == "better"
    assert speed.rule == ("p = 0.001 < 0.04, the speed family's level (Holm over 2 headline families), and 1.12x "
                          "exceeds the 5% minimum change")


def test_a_significant_change_below_the_minimum_says_it_is_below_the_minimum() -> None:
    """Issue 35: a true A/A pair read "1.05x (95% CI [1.01, 1.09])" and "no significant difference" without
    saying why: the interval excludes 1, and it is the 5% minimum change that decided."""
    spec = Spec("tokens/s per device", "throughput", "tokens/s", "higher", 0.05)
    row = judge(spec, [100.0, 101.0, 99.0], [104.0, 105.0, 103.0], Settings(), 0.05)
    assert row.p_value is not None and row.p_value < 0.05 and row.ci is not None and row.ci[0] > 1.0
    assert row.verdict == "no significant difference"
    assert row.rule is not None and row.rule.startswith("1.04x is below the 5% minimum change (p = ")


def test_rules_of_untested_rows() -> None:
    spec = Spec("x", "throughput", "tokens/s", "higher", 0.05)
    assert judge(spec, [1.0], [2.0], Settings(), 0.05).rule == ("no between-run test: one run per side and no noise "
                                                                 "floor")
    assert judge(spec, [1.0, 2.0], [2.0, 1.0], Settings(), 0.05).rule == "equal values on both sides"
    memory = Spec("peak device memory", "memory", "GiB", "lower", 0.02, statistic="value", deterministic=True)
    assert judge(memory, [10.0], [12.0], Settings(), 0.02).rule == ("deterministic, one run per side: 1.2x exceeds "
                                                                     "the 2% minimum change")


# --------------------------------------------------------------------------- rows outside the headlines
def test_rows_outside_the_headlines_share_an_alpha_of_their_own() -> None:
    """Tested each at 0.05, 20 rows of two runs of one configuration call something different most of the time;
    Holm over them holds that at 0.05. By hand with 4 rows: 0.004 < 0.05/4, then 0.02 >= 0.05/3 stops."""
    rows = [_row("tokens/s per device", "throughput", 0.5, "no significant difference", headline=True),
            _row("load CV", "routing", 0.004, "lower"), _row("peak host memory", "memory", 0.02, "higher"),
            _row("goodput", "goodput", 0.03, "lower"), _row("time: expert", "timing", 0.3, "no significant difference")]
    got = {r.name: r for r in control_headlines(rows, 0.05)}
    assert got["load CV"].verdict == "lower" and got["load CV"].level == pytest.approx(0.0125)
    assert got["peak host memory"].verdict == got["goodput"].verdict == "no significant difference"
    assert got["peak host memory"].level == pytest.approx(0.05 / 3)
    assert "share alpha 0.05 (Holm)" in got["goodput"].note
    assert got["goodput"].rule == "p = 0.03 > 0.025, its share of alpha 0.05 among 4 rows outside the headlines (Holm)"
    assert got["time: expert"].rule is not None and got["time: expert"].rule.startswith("p = 0.3 > ")


def test_a_zero_variance_floor_never_makes_a_count_difference_significant() -> None:
    """Issue 35: a noise floor learned from runs that all had 0 loss spikes made 0 vs 1 "worse" with p = 0.0."""
    spec = Spec("loss spikes", "stability", "steps", "lower", 0.5, scale="delta", statistic="count")
    floor = Floor(0.0, 6, 3, 9, False)  # every run of the floor's groups: 0 spikes
    row = judge(spec, [0.0], [1.0], Settings(), 0.5, floor=floor)
    assert row.verdict == "no significant difference"
    assert row.p_value is not None and row.p_value > 0.4  # the E-test of 1 event against 0 in one run each
    # a real burst of spikes still counts, with replicates: 0, 0, 1 against 9, 11, 10
    burst = judge(spec, [0.0, 0.0, 1.0], [9.0, 11.0, 10.0], Settings(), 0.5)
    assert burst.verdict == "worse"


# ------------------------------------------------------------------------------------------ banners
def test_banners_agree_with_the_rows_they_sum_up() -> None:
    """Issue 35: "inconclusive: one run per side and no noise floor" above headline rows judged with a floor,
    because a side row was inconclusive."""
    rows = [_row("tokens/s per device", "throughput", 0.3, "no significant difference", headline=True),
            replace(_row("peak host memory", "memory", None, "inconclusive"), ci=None)]
    (banner,) = _evidence_banners(rows)
    assert not banner.startswith("inconclusive")
    assert banner == ("1 row(s) outside the headlines are inconclusive (peak host memory): no noise floor for them on "
                      "this hardware and drivers; the headline rows (tokens/s per device) were judged")
    heads = _evidence_banners([replace(rows[0], verdict="inconclusive", p_value=None, ci=None)])
    assert heads[0].startswith("inconclusive: tokens/s per device had one run per side and no noise floor")
    # two undecided headlines are named in a list; more than six side rows are cut to six and a count
    two = _evidence_banners([replace(rows[0], verdict="inconclusive", p_value=None, ci=None),
                             replace(rows[0], name="loss at matched steps", verdict="inconclusive", p_value=None,
                                     ci=None)])
    assert two[0].startswith("inconclusive: tokens/s per device, loss at matched steps had one run per side")
    side = [replace(rows[1], name=f"m{i}") for i in range(8)]
    (many,) = _evidence_banners(side)
    assert many.startswith("8 row(s) outside the headlines are inconclusive (m0, m1, m2, m3, m4, m5 and 2 more): ")


# ----------------------------------------------------------------------------------- sample-size hint
def test_power_matches_cohens_tables() -> None:
    """Cohen (1988), Table 2.4.1, two-sided alpha 0.05, power 0.80: d = 0.5 needs 64 per group, d = 0.8 26,
    d = 1.0 17 (the same as G*Power's t test)."""
    for d, n in ((0.5, 64), (0.8, 26), (1.0, 17)):
        change = math.exp(d * 0.05) - 1  # a log-scale change of d SDs at an SD of 0.05
        assert runs_for_power(0.05, change, 0.05) == n, d
    # a 15% change at 3 vs 3 with a 5% between-run SD: the noncentral t gives 0.73 (73%; issue 35 saw 27/40)
    assert power(3, 0.05, 0.15, 0.05) == pytest.approx(0.727, abs=0.002)
    assert runs_for_power(float("nan"), 0.05, 0.05) is None and runs_for_power(0.5, 0.01, 0.05) is None


def test_an_undecided_headline_says_how_many_runs_would_decide_it() -> None:
    """The 3 vs 3 case of issue 35: a 12% speed-up whose 95% CI [1.00, 1.26] still holds changes of 5% or more
    (and less): the runs per side for 80% power for the 5% minimum change at the measured SD (5%, with the
    sides' own 4 df and no floor) at the 0.04 the speed was tested at."""
    speed, _ = _speed_and_loss(0.06, 0.5, verdict="no significant difference")
    assert speed.runs_for_power == runs_for_power(0.05, 0.05, 0.04) == 19
    decided, _ = _speed_and_loss(0.001, 0.5, ci=(1.08, 1.16))
    assert decided.runs_for_power is None  # called better: nothing to add
    within, _ = _speed_and_loss(0.6, 0.5, ratio=1.0, ci=(0.97, 1.03), verdict="no significant difference")
    assert within.runs_for_power is None  # the CI already rules out a 5% change


def test_metrics_module_exports_the_words() -> None:
    assert metrics.ratio_words(0.9, "e10") == "0.90x the speed of e10 (10% slower)"
    assert metrics.ratio_words(1.31) == "1.31x the speed of A (31% faster)"
    assert metrics.ratio_words(1.002) == "1.00x the speed of A"


def test_a_missed_15_percent_speed_up_at_3_vs_3_says_how_many_runs_would_find_it() -> None:
    """Issue 35: a 15% speed-up at 3 vs 3 without a noise floor was found 27 of 40 times, and the other 13 did not
    say how many runs would find it. Every one not called better now carries the runs per side that give 80%
    power for the 5% minimum change at its measured noise, and that many runs do have that power there."""
    import calibration as cal
    import numpy as np

    from ledger.analyses import builtin_metrics
    from ledger.analyses.attribution import BUILTIN_HEADLINES

    rng = np.random.default_rng(35)
    heads = [h.metric for h in BUILTIN_HEADLINES]
    missed = 0
    for _ in range(40):
        a = [cal.run_data(cal.series(rng, "a", s, steps=60)) for s in range(3)]
        b = [cal.run_data(cal.series(rng, "b", s, 1.15, steps=60)) for s in range(3)]
        rows = builtin_metrics.compare_all(a, b, Settings(), (), heads)
        speed = next(r for r in rows if r.name == "tokens/s per device")
        if speed.verdict == "better":
            continue
        missed += 1
        assert speed.runs_for_power is not None and speed.sd is not None and speed.level is not None
        n = speed.runs_for_power
        assert power(n, speed.sd, 0.05, speed.level) >= 0.8
        assert n == 2 or power(n - 1, speed.sd, 0.05, speed.level) < 0.8
    assert missed > 0  # the 3 vs 3 design misses some (73% power): the case the hint is for
