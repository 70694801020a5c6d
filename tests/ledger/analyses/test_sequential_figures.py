"""`ledger ab --until-verdict`'s figures against independent computations: the mixture test
(ledger.analyses.sequential) against a reference written from the module's formulas, whose confidence set is
found by root-finding (scipy's brentq) rather than by the closed-form radius, on every kind of sequence
Hypothesis draws; the verdicts and rules at their edges, word for word; and the loop
(ledger.replay.until_verdict): when it stops, its cap, its cost in device-hours, its summary. The runs are
synthetic with constant step times, so each run's speed is known exactly (tokens per step / step time) and each
loss curve flat (its matched loss is its value)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import calibration as cal
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from ledger.analyses.metrics import SPEED_WEIGHT
from ledger.analyses.power import runs_for_power
from ledger.analyses.sequential import (
    LOSS,
    MIN_ROUNDS,
    PHI,
    SPEED,
    Headline,
    alphas,
    bayes_factor,
    finished,
    interval_text,
    judge,
    judge_headline,
    mixture_test,
    radius,
    speed_of,
    speed_ratio,
)
from ledger.errors import BadInput, LedgerError
from ledger.replay.until_verdict import MIN_CAP, NOISE_ROUNDS, Options, Result, _state, until_verdict

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None)


# ------------------------------------------------------------------------------------------ the reference
def bf_by_hand(t: float, nu: int, r: float) -> float:
    """The docstring's closed form, written out: sqrt(r) ((1 + t^2/nu) / (1 + r t^2/nu)) ^ ((nu + 1) / 2)."""
    return float(math.sqrt(r) * ((1 + t * t / nu) / (1 + r * t * t / nu)) ** ((nu + 1) / 2))


@dataclass
class Ref:
    estimate: float
    p_value: float
    interval: tuple[float, float]
    sd: float
    df: int


def reference(xa: Sequence[float], xb: Sequence[float], alpha: float, phi: float = PHI) -> Ref | None:
    """After each round k >= 2: the pooled t statistic of the first k values per side, the Bayes factor of no
    difference, and the set of differences delta0 whose Bayes factor stays below 1/alpha (its edge found by
    brentq); the largest factor and the running intersection over the rounds."""
    n = min(len(xa), len(xb))
    if n < 2:
        return None
    best, low, high = 0.0, -math.inf, math.inf
    estimate = sd = 0.0
    nu = 0
    for k in range(2, n + 1):
        a, b = np.array(xa[:k]), np.array(xb[:k])
        nu = 2 * k - 2
        sd = math.sqrt((((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()) / nu)
        estimate = float(b.mean() - a.mean())
        r = phi / (phi + k / 2)  # n_A n_B / (n_A + n_B) = k / 2
        se = sd / math.sqrt(k / 2)
        if se == 0:
            best = max(best, r ** (-nu / 2) if estimate else math.sqrt(r))
            half = 0.0 if r ** (-nu / 2) > 1 / alpha else math.inf
        else:
            best = max(best, bf_by_hand(estimate / se, nu, r))
            if r ** (-nu / 2) <= 1 / alpha:  # the factor's supremum: no difference is ever excluded
                half = math.inf
            else:
                half = se * optimize.brentq(lambda t, nu=nu, r=r: bf_by_hand(t, nu, r) - 1 / alpha, 0.0, 1e6,
                                            xtol=1e-13, rtol=1e-13)
        low, high = max(low, estimate - half), min(high, estimate + half)
    if low > high:
        low = high = estimate
    return Ref(estimate, min(1.0, 1 / best), (low, high), sd, nu)


def close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-7, abs_tol=1e-12)


VALUES = st.lists(st.sampled_from([-0.2, -0.05, 0.0, 0.01, 0.03, 0.1, 0.25, 0.5]), min_size=0, max_size=9)


@FAST
@given(VALUES, VALUES, st.sampled_from([0.01, 0.04, 0.05, 0.2]), st.sampled_from([0.5, 1.0, 3.0]))
def test_the_mixture_test_is_the_reference(xa: list[float], xb: list[float], alpha: float, phi: float) -> None:
    got = mixture_test(xa, xb, alpha, phi)
    want = reference(xa, xb, alpha, phi)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert close(got.estimate, want.estimate) and close(got.p_value, want.p_value), (got, want)
    assert close(got.sd, want.sd) and got.df == want.df and isinstance(got.df, int)
    assert close(got.interval[0], want.interval[0]) and close(got.interval[1], want.interval[1]), (got, want)


def test_a_sequence_that_decides_by_the_reference() -> None:
    """Log speeds with a 20% planted change: the p-value falls below 0.04 and the interval shrinks round by round
    as the reference says; a test starts at round 2."""
    rng = np.random.default_rng(4)
    xa = (0.03 * rng.standard_normal(8)).tolist()
    xb = (math.log(1.2) + 0.03 * rng.standard_normal(8)).tolist()
    for k in range(2, 9):
        got, want = mixture_test(xa[:k], xb[:k], 0.04), reference(xa[:k], xb[:k], 0.04)
        assert got is not None and want is not None
        assert close(got.p_value, want.p_value) and close(got.interval[0], want.interval[0])
        assert close(got.interval[1], want.interval[1])
    final = mixture_test(xa, xb, 0.04)
    assert final is not None and final.p_value < 0.04 and final.interval[0] > 0
    assert mixture_test(xa[:1], xb[:1], 0.04) is None and MIN_ROUNDS == 2
    assert mixture_test(xa[:3], xb, 0.04) == mixture_test(xa[:3], xb[:3], 0.04)  # rounds both sides have
    assert mixture_test(xa, xb, 0.04, start=9) is None


def test_an_empty_running_intersection_keeps_the_last_estimate() -> None:
    """Two rounds of equal values (an interval tight around no change), then ten rounds of B a whole unit higher:
    the later intervals exclude the first (at alpha 0.5 the sets are narrow), and the interval reported is the last
    estimate, 10/12 (B's mean (0.001 + 10) / 12 less A's 0.001 / 12)."""
    a, b = [0.0, 0.001] + [0.0] * 10, [0.0, 0.001] + [1.0] * 10
    lows, highs = [], []
    for k in range(2, 13):
        ref = reference(a[:k], b[:k], 0.5)
        assert ref is not None
        lows.append(ref.interval[0])
        highs.append(ref.interval[1])
    assert max(lows) > min(highs)  # empty
    got = mixture_test(a, b, 0.5)
    assert got is not None and got.interval == pytest.approx((10 / 12, 10 / 12), rel=1e-12)
    assert got.estimate == pytest.approx(10 / 12, rel=1e-12)


def test_the_bayes_factor_at_its_limits() -> None:
    assert bayes_factor(math.inf, 4, 0.25) == 0.25 ** -2  # no variance and a difference: r^(-nu/2)
    assert bayes_factor(0.0, 4, 0.25) == pytest.approx(0.5)  # no difference at all: sqrt(r)
    assert bayes_factor(9.0, 6, 0.2) == pytest.approx(bf_by_hand(3.0, 6, 0.2), rel=1e-12)
    assert bayes_factor(1e300, 200, 1e-6) == math.exp(700.0)  # held below overflow
    assert radius(0.02, 1, 0.9, 0.04) == math.inf
    # c = (alpha^2 r)^(1/(nu+1)) = (0.25 x 0.25)^(1/2) = 0.25 = r exactly: the edge where nothing is excluded yet
    assert radius(0.02, 1, 0.25, 0.5) == math.inf
    half = radius(0.02, 10, 0.5 / 3.5, 0.04)
    edge = optimize.brentq(lambda t: bf_by_hand(t, 10, 0.5 / 3.5) - 25.0, 0.0, 1e6, xtol=1e-14)
    assert half == pytest.approx(0.02 * edge, rel=1e-9)


# ------------------------------------------------------------------------------------------ verdicts in words
def _speeds(base: float, change: float, noise: list[float]) -> list[float]:
    return [base * change * math.exp(e) for e in noise]


NOISE_A = [0.01, -0.008, 0.004, -0.003, 0.006, -0.005]
NOISE_B = [-0.006, 0.009, -0.002, 0.005, -0.007, 0.001]


@pytest.mark.parametrize(("change", "direction", "verdict"), [(1.3, "higher", "better"), (0.7, "higher", "worse"),
                                                              (1.3, "lower", "worse"), (0.7, "lower", "better")])
def test_a_change_beyond_the_minimum_is_better_or_worse_by_its_direction(change: float, direction: str,
                                                                        verdict: str) -> None:
    xa, xb = _speeds(100, 1, NOISE_A), _speeds(100, change, NOISE_B)
    h = judge_headline(SPEED, xa, xb, 0.04, 0.05, direction)
    want = reference(np.log(xa).tolist(), np.log(xb).tolist(), 0.04)
    assert want is not None
    lo, hi = math.exp(want.interval[0]), math.exp(want.interval[1])
    assert (h.status, h.verdict, h.decided) == ("significant", verdict, True)
    assert h.ratio == pytest.approx(math.exp(want.estimate), rel=1e-12)
    assert h.interval == pytest.approx((lo, hi), rel=1e-7) and h.p_value == pytest.approx(want.p_value, rel=1e-7)
    assert h.sd == pytest.approx(want.sd, rel=1e-12) and (h.a, h.b) == (xa, xb)
    assert h.rule == (f"always-valid p = {want.p_value:.2g} <= 0.04, its share of alpha; 96% confidence sequence "
                      f"[{lo:.3f}, {hi:.3f}]")


def test_a_real_change_below_the_minimum_is_no_significant_difference() -> None:
    """2% faster with 0.2% noise: the test rejects no change, but 2% is below the 5% minimum."""
    xa, xb = _speeds(100, 1, [e / 5 for e in NOISE_A]), _speeds(100, 1.02, [e / 5 for e in NOISE_B])
    h = judge_headline(SPEED, xa, xb, 0.04, 0.05, "higher")
    want = reference(np.log(xa).tolist(), np.log(xb).tolist(), 0.04)
    assert want is not None and want.p_value <= 0.04
    lo, hi = math.exp(want.interval[0]), math.exp(want.interval[1])
    assert (h.status, h.verdict) == ("significant", "no significant difference")
    assert h.rule == (f"always-valid p = {want.p_value:.2g} <= 0.04, its share of alpha; 96% confidence sequence "
                      f"[{lo:.3f}, {hi:.3f}]; {math.exp(want.estimate):.3f}x is below the 5% minimum change")


def test_futility_the_interval_within_the_minimum_change_either_way() -> None:
    xa, xb = _speeds(100, 1, [e / 5 for e in NOISE_A]), _speeds(100, 1.0, [e / 5 for e in NOISE_B])
    h = judge_headline(SPEED, xa, xb, 0.04, 0.05, "higher")
    want = reference(np.log(xa).tolist(), np.log(xb).tolist(), 0.04)
    assert want is not None and want.p_value > 0.04
    assert -math.log(1.05) <= want.interval[0] and want.interval[1] <= math.log(1.05)
    lo, hi = math.exp(want.interval[0]), math.exp(want.interval[1])
    assert (h.status, h.verdict, h.decided) == ("futile", "no significant difference", True)
    assert h.rule == f"the 96% confidence sequence [{lo:.3f}, {hi:.3f}] lies within the 5% minimum change either way"
    # the same rounds with a minimum change smaller than the interval reaches: still open
    narrow = judge_headline(SPEED, xa, xb, 0.04, 0.001, "higher")
    assert (narrow.status, narrow.verdict, narrow.decided) == ("undecided", "inconclusive", False)
    assert narrow.rule == (f"always-valid p = {want.p_value:.2g} > 0.04, its share of alpha, and the 96% confidence "
                           f"sequence [{lo:.3f}, {hi:.3f}] still holds changes beyond the 0.1% minimum change")


def test_a_p_value_exactly_at_its_share_of_alpha_decides() -> None:
    """No noise, twice the speed, phi = 1, two rounds: r = 1 / (1 + 1) = 0.5, nu = 2, the Bayes factor is its limit
    r^(-nu/2) = 2 exactly, so p = 0.5; at alpha 0.5 that is significant (p <= alpha)."""
    h = judge_headline(SPEED, [100.0, 100.0], [200.0, 200.0], 0.5, 0.05, "higher", phi=1.0)
    assert (h.status, h.verdict, h.p_value) == ("significant", "better", 0.5)
    assert h.rule == "always-valid p = 0.5 <= 0.5, its share of alpha; 50% confidence sequence (unbounded yet)"
    below = judge_headline(SPEED, [100.0, 100.0], [200.0, 200.0], 0.49, 0.05, "higher", phi=1.0)
    assert below.status == "undecided"


def test_identical_values_and_too_few_rounds() -> None:
    same = judge_headline(LOSS, [3.0, 3.1, 2.9], [3.0, 3.1, 2.9], 0.01, 0.01, "lower", role="loss")
    assert (same.status, same.verdict, same.rule, same.role) == ("identical", "identical",
                                                                 "equal values in every round", "loss")
    assert same.decided and same.ratio is None and same.interval is None
    one = judge_headline(SPEED, [100.0], [130.0], 0.04, 0.05, "higher")
    assert (one.status, one.verdict, one.rule, one.decided) == ("undecided", "inconclusive",
                                                                "no test before 2 rounds", False)
    early = judge_headline(SPEED, [100.0, 110.0], [105.0, 98.0], 0.04, 0.05, "higher")
    assert early.interval == (0.0, math.inf) and "(unbounded yet)" in early.rule


def test_shares_of_alpha_texts_and_ratios() -> None:
    assert SPEED_WEIGHT == 4.0
    assert alphas(0.05) == pytest.approx({"speed": 0.04, "loss": 0.01}, rel=1e-12)
    assert alphas(0.1) == pytest.approx({"speed": 0.08, "loss": 0.02}, rel=1e-12)
    assert interval_text((0.9124, 1.0336)) == "[0.912, 1.034]"
    assert interval_text((0.0, 2.0)) == "(unbounded yet)" and interval_text((0.5, math.inf)) == "(unbounded yet)"
    assert interval_text((0.5, math.nan)) == "(unbounded yet)" and interval_text((-1.0, 2.0)) == "(unbounded yet)"
    h = Headline("step time (median)", "speed", 0.04, 0.05, "lower", "significant", "better", "r", ratio=0.8)
    assert speed_ratio(h) == pytest.approx(1.25)
    assert speed_ratio(Headline(SPEED, "speed", 0.04, 0.05, "higher", "significant", "better", "r",
                                ratio=1.25)) == 1.25
    assert speed_ratio(Headline(SPEED, "speed", 0.04, 0.05, "higher", "undecided", "inconclusive", "r")) is None
    loss = Headline(LOSS, "loss", 0.01, 0.01, "lower", "undecided", "inconclusive", "r")
    assert speed_of([loss, h]) is h and finished([loss, h]) and not finished([h.__class__(
        SPEED, "speed", 0.04, 0.05, "higher", "undecided", "inconclusive", "r"), loss])
    assert Headline(SPEED, "speed", 0.04, 0.05, "higher", "unavailable", "unavailable", "r").decided is False
    assert h.to_json() == {"name": "step time (median)", "role": "speed", "alpha": 0.04, "level": 0.96,
                           "threshold": 0.05, "status": "significant", "verdict": "better", "rule": "r",
                           "ratio": 0.8, "interval": None, "p_value": None, "sd": None, "a": [], "b": []}
    assert Headline(SPEED, "speed", 0.04, 0.05, "higher", "significant", "better", "r",
                    interval=(1.1, 1.3)).to_json()["interval"] == [1.1, 1.3]


# ------------------------------------------------------------------------------------------ runs and the loop
def run(speed: float, loss: float = 3.0, steps: int = 12, seconds: float | None = None, gpus: int = 0) -> Any:
    """A run whose every step takes the same time (its speed: tokens per step / step time, per device) and whose
    loss is flat."""
    s = cal.Series("x", 0, np.arange(1, steps + 1), np.full(steps, cal.TOKENS_PER_STEP / speed), np.full(steps, loss))
    data = cal.run_data(s)
    receipt = data.receipt
    if seconds is not None or gpus:
        stack = receipt.stack.model_copy(update={"hardware": receipt.stack.hardware.model_copy(
            update={"gpu_count": gpus, "gpu_model": "NVIDIA H100" if gpus else None})})
        receipt = receipt.model_copy(update={"duration_s": seconds, "stack": stack})
        data = data.__class__(data.id, receipt, data.steps, data.evals, data.routing, data.timing)
    return data


def test_judge_reads_each_runs_speed_and_loss() -> None:
    speeds_a, speeds_b = [10000.0, 10100.0, 9950.0], [13000.0, 12900.0, 13100.0]
    rounds = [(run(a, 3.0), run(b, 2.9)) for a, b in zip(speeds_a, speeds_b, strict=True)]
    speed, loss = judge(rounds)
    assert (speed.name, speed.role, speed.threshold) == (SPEED, "speed", 0.05)
    assert speed.alpha == pytest.approx(0.04)
    assert speed.a == pytest.approx(speeds_a, rel=1e-12) and speed.b == pytest.approx(speeds_b, rel=1e-12)
    want = reference(np.log(speeds_a).tolist(), np.log(speeds_b).tolist(), 0.04)
    assert want is not None and speed.p_value == pytest.approx(want.p_value, rel=1e-6)
    assert (loss.name, loss.role) == (LOSS, "loss") and loss.alpha == pytest.approx(0.01)
    assert loss.a == pytest.approx([3.0] * 3) and loss.b == pytest.approx([2.9] * 3)
    custom = judge(rounds, alpha=0.1, min_change=0.5)
    assert custom[0].threshold == 0.5 and custom[0].alpha == pytest.approx(0.08)
    assert custom[1].threshold == 0.01  # the minimum change given is the speed's only
    assert custom[0].verdict == "no significant difference"  # 30% faster, below a 50% minimum change
    same = judge([(run(10000.0, 3.0), run(13000.0, 3.0)) for _ in range(2)])
    assert same[1].status == "identical"


def test_a_run_without_a_speed_is_named_in_the_reason() -> None:
    bad = run(10000.0)
    for column in ("tokens", "tokens_per_s", "step_time_s", "time"):
        bad.steps[column] = np.full(12, np.nan)
    speed, _ = judge([(run(10000.0), run(10000.0)), (run(10000.0), bad)])
    assert (speed.status, speed.verdict) == ("unavailable", "unavailable") and speed.name == SPEED
    assert speed.rule.startswith(f"round 2 B ({bad.label}): ")
    with pytest.raises(LedgerError) as caught:
        until_verdict(lambda k: (run(10000.0), bad), Options(max_rounds=3))
    assert str(caught.value) == (f"the runs give no speed to judge ({speed.rule.replace('round 2', 'round 1')}): ab "
                                 "--until-verdict needs tokens/s, steps/s or step times in every run; the first round "
                                 "is recorded")


def test_a_speed_or_loss_that_is_not_positive_is_no_value() -> None:
    """A run that printed a speed of 0 tokens/s and step times of 0 s has no positive value to take the log of in
    any speed row (the reason named is the first row's); a loss curve at 0 or below likewise (the loss is judged on
    the log scale too)."""
    stalled = run(10000.0)
    stalled.steps["tokens_per_s"] = np.zeros(12)
    stalled.steps["step_time_s"] = np.zeros(12)
    speed, _ = judge([(run(10000.0), run(12000.0)), (stalled, run(12000.0))])
    assert speed.name == SPEED
    assert speed.status == "unavailable" and speed.alpha == pytest.approx(0.04) and speed.threshold == 0.05
    assert speed.rule == f"round 2 A ({stalled.label}): no positive value"
    for bad_a, bad_b in ((0.0, 3.0), (3.0, -1.0)):
        _, loss = judge([(run(10000.0, 3.0), run(12000.0, 2.9)), (run(10000.0, bad_a), run(12000.0, bad_b))])
        assert (loss.status, loss.rule, loss.role) == ("unavailable", "round 2: a loss that is not positive", "loss")
        assert loss.alpha == pytest.approx(0.01) and loss.name == LOSS


def test_the_loop_stops_at_the_first_round_that_decides() -> None:
    speeds_a = [10000.0 * math.exp(e) for e in [0.02, -0.03, 0.01, -0.02, 0.03, -0.01, 0.0, 0.02]]
    speeds_b = [12000.0 * math.exp(e) for e in [-0.01, 0.02, -0.03, 0.01, 0.0, 0.03, -0.02, 0.01]]
    la, lb = np.log(speeds_a).tolist(), np.log(speeds_b).tolist()
    first = next(k for k in range(2, 9) if (ref := reference(la[:k], lb[:k], 0.04)) is not None
                 and (ref.p_value <= 0.04 or (-math.log(1.05) <= ref.interval[0]
                                               and ref.interval[1] <= math.log(1.05))))
    seen: list[int] = []
    got = until_verdict(lambda k: (run(speeds_a[k - 1], seconds=360.0), run(speeds_b[k - 1], seconds=720.0)),
                        Options(max_rounds=8), on_round=lambda k, hs: seen.append(k))
    assert got.rounds == first and seen == list(range(1, first + 1)) and got.stopped == "decided"
    assert got.verdict == "better" and got.cap == 8 and got.cap_from == "--max-rounds"
    assert got.hours == pytest.approx(first * (360 + 720) / 3600) and got.device == "CPU"
    assert len(got.runs) == first and all(len(a) == 64 and len(b) == 64 for a, b in got.runs)
    ratio = speed_ratio(got.speed())
    assert ratio is not None
    assert got.summary() == (f"{first} rounds, decided: B runs at {ratio:.2f}x the speed of A "
                             f"({(ratio - 1) * 100:.0f}% faster): {got.speed().rule}")
    # from round 3 on the rounds' own noise sizes the fixed design the cost is set against
    assert first >= 3
    sd = got.speed().sd
    assert sd is not None and got.hours is not None
    fixed = runs_for_power(sd, 0.05, 0.04)
    assert fixed is not None and got.fixed_rounds == fixed and got.noise_sd == sd
    fixed_hours = got.hours / first * fixed
    assert got.cost() == (f"cost: {got.hours:.3g} CPU device-hours over {first} rounds, against {fixed_hours:.3g} for "
                          f"the fixed design of {fixed} rounds with 80% power for the 5% minimum change at the "
                          f"measured noise ({got.hours / fixed_hours:.0%} of it)")
    two = until_verdict(lambda k: (run(speeds_a[k - 1], seconds=360.0), run(speeds_b[k - 1], seconds=720.0)),
                        Options(max_rounds=2))
    assert two.noise_sd is None and two.fixed_rounds is None
    assert two.cost() == ("cost: 0.6 CPU device-hours over 2 rounds; no fixed design to set against it (the noise was "
                          "not measured)")


def test_the_cap_ends_an_undecided_sequence_and_says_where_it_came_from() -> None:
    noise = [0.05, -0.04, 0.06, -0.05, 0.03]
    got = until_verdict(lambda k: (run(10000.0 * math.exp(noise[k - 1]), seconds=3600.0, gpus=2),
                                   run(10300.0 * math.exp(-noise[k - 1]), seconds=3600.0, gpus=2)),
                        Options(max_rounds=3))
    assert (got.rounds, got.stopped, got.cap, got.verdict) == (3, "cap", 3, "inconclusive")
    assert got.device == "GPU" and got.hours == pytest.approx(3 * 2 * 2 * 1.0)  # 3 rounds x 2 runs x 2 GPUs x 1 h
    s = got.speed()
    assert got.summary() == (f"3 rounds, stopped at the cap of 3 rounds (--max-rounds): speed ({SPEED}): "
                             f"inconclusive, B/A {s.ratio:.3f}x: {s.rule}")
    data = got.to_json()
    assert (data["rounds"], data["verdict"], data["stopped"], data["cap"], data["cap_from"]) == (
        3, "inconclusive", "cap", 3, "--max-rounds")
    fixed = runs_for_power(s.sd, 0.05, 0.04)  # three rounds: their own noise sizes the fixed design
    assert fixed is not None
    assert (data["device_hours"], data["device"], data["fixed_rounds"], data["fixed_device_hours"],
            data["noise_sd"]) == (pytest.approx(12.0), "GPU", fixed, pytest.approx(12.0 / 3 * fixed), s.sd)
    assert data["names"] == ["A", "B"] and data["summary"] == got.summary() and data["cost"] == got.cost()
    assert [h["role"] for h in data["headlines"]] == ["speed", "loss"] and len(data["runs"]) == 3


def test_the_default_cap_is_the_fixed_design_at_the_noise_measured_before() -> None:
    runs_for_power.cache_clear()
    share = 0.04
    for sd, prior in ((0.05, 0), (0.02, 0), (0.05, 30), (0.001, 0), (0.3, 0)):
        fixed = runs_for_power(sd, 0.05, share, prior_df=prior)
        got = until_verdict(lambda k: (run(10000.0, seconds=60.0), run(10000.0, seconds=60.0)),
                            Options(noise_sd=sd, prior_df=prior))
        want_cap = min(50, max(MIN_CAP, fixed if fixed is not None else 50))
        assert got.cap == want_cap and got.fixed_rounds == fixed and got.noise_sd == sd
        assert got.cap_from == f"the sample-size hint at the noise measured before the rounds (SD {100 * sd:.2g}%)"
        assert got.rounds == min(got.cap, 2) and got.stopped == "decided"  # equal speeds: identical at round 2
    assert MIN_CAP == 3


def test_the_cost_against_the_fixed_design() -> None:
    # no noise and a 20% change: t is infinite and the Bayes factor r^(-nu/2), r = 0.5 / (0.5 + k/2), nu = 2k - 2:
    # 3 at round 2, 16 at round 3, 125 at round 4, the first above 1 / 0.04 = 25
    got = until_verdict(lambda k: (run(10000.0, seconds=1800.0, gpus=8), run(12000.0, seconds=1800.0, gpus=8)),
                        Options(noise_sd=0.05))
    assert got.rounds == 4 and got.fixed_rounds is not None and got.hours == pytest.approx(4 * 2 * 8 * 0.5)
    fixed_hours = 32.0 / 4 * got.fixed_rounds
    assert got.fixed_hours == pytest.approx(fixed_hours)
    assert got.cost() == (f"cost: 32 GPU-hours over 4 rounds, against {fixed_hours:.3g} for the fixed design of "
                          f"{got.fixed_rounds} rounds with 80% power for the 5% minimum change at the measured noise "
                          f"({32.0 / fixed_hours:.0%} of it)")
    huge = until_verdict(lambda k: (run(10000.0, seconds=60.0), run(12000.0, seconds=60.0)), Options(noise_sd=5.0))
    assert huge.fixed_rounds is None and huge.cap == 50
    assert huge.cost() == (f"cost: {huge.hours:.3g} CPU device-hours over {huge.rounds} rounds; at the measured noise "
                           "(SD 5e+02%) a fixed design would need more than 200 runs per side for 80% power")
    unknown = Result(2, "better", "decided", 3, "x", got.headlines, None, "GPU", None)
    assert unknown.cost() == "cost: the runs' durations are not known" and unknown.fixed_hours is None
    assert Result(0, "x", "cap", 3, "x", got.headlines, 1.0, "GPU", 5).fixed_hours is None


def test_without_a_measured_noise_the_rounds_own_noise_sets_the_cap_after_three() -> None:
    noise = [0.04, -0.05, 0.03, -0.02, 0.05, -0.04, 0.02, -0.03, 0.01, -0.01] * 5
    caps: list[tuple[int, str]] = []

    def record(k: int) -> tuple[Any, Any]:
        return run(10000.0 * math.exp(noise[k - 1]), seconds=60.0), run(10200.0 * math.exp(-noise[k - 1]),
                                                                        seconds=60.0)

    got = until_verdict(record, Options(), on_round=lambda k, hs: caps.append((k, speed_of(hs).rule)))
    assert NOISE_ROUNDS == 3
    assert got.cap_from.startswith("the sample-size hint at the noise of the rounds (SD ")
    sd = got.speed().sd
    assert sd is not None and got.noise_sd == sd
    fixed = runs_for_power(sd, 0.05, 0.04)
    assert got.fixed_rounds == fixed and got.cap == min(50, max(3, fixed if fixed is not None else 50))
    two = until_verdict(record, Options(max_rounds=2))
    assert two.rounds == 2 and two.cap_from == "--max-rounds" and two.noise_sd is None
    blind = until_verdict(lambda k: (run(10000.0 * math.exp(noise[k - 1])), run(10000.0 * math.exp(-noise[k - 1]))),
                          Options(max_rounds=2))
    assert blind.hours == pytest.approx(4 * 12 * (cal.TOKENS_PER_STEP / 10000.0) / 3600, rel=0.05)


def test_a_run_without_a_duration_is_timed_by_its_steps_else_not_at_all() -> None:
    """No duration in the receipt: the run's hours are its steps' time (12 steps of 0.1 s here); a run whose clock
    is missing at its last step has no duration, and the cost says the durations are not known."""
    timed = until_verdict(lambda k: (run(10240.0), run(12000.0)), Options(max_rounds=2))
    assert timed.hours == pytest.approx(2 * 12 * (0.1 + cal.TOKENS_PER_STEP / 12000.0) / 3600)

    def unclocked(speed: float) -> Any:
        r = run(speed)
        r.steps["time"] = np.r_[r.steps["time"][:-1], np.nan]
        return r

    blind = until_verdict(lambda k: (unclocked(10240.0), unclocked(12000.0)), Options(max_rounds=2))
    assert blind.hours is None and blind.cost() == "cost: the runs' durations are not known"


def test_options_are_checked() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_rounds": 1}, "--max-rounds must be between 2 and 50, got 1"),
        ({"max_rounds": 51}, "--max-rounds must be between 2 and 50, got 51"),
        ({"alpha": 0.0}, "alpha must be between 0 and 1, got 0.0"),
        ({"alpha": 1.0}, "alpha must be between 0 and 1, got 1.0")]
    for bad, message in cases:
        with pytest.raises(BadInput) as caught:
            Options(**bad)
        assert str(caught.value) == message
    assert Options(max_rounds=2).max_rounds == 2 and Options(max_rounds=50).max_rounds == 50


def test_the_progress_line_of_a_round() -> None:
    h = Headline(SPEED, "speed", 0.04, 0.05, "higher", "undecided", "inconclusive", "the rule", ratio=1.2345,
                 interval=(1.1, 1.4), p_value=0.0512)
    assert _state(h) == ("tokens/s per device B/A 1.234x, 96% confidence sequence [1.100, 1.400], p 0.051: "
                         "undecided")
    bare = Headline(LOSS, "loss", 0.01, 0.01, "lower", "identical", "identical", "equal values in every round")
    assert _state(bare) == "loss @ matched tokens identical (equal values in every round)"
