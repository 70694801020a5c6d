"""`ledger history`'s figures against independent computations: E-divisive means (ledger.analyses.changepoints)
against a brute-force search written from Matteson and James's statistic, with its permutation test replayed on
the same random stream (every split, p-value and bound); and each change point's figures (ledger.analyses.history):
the shift as a ratio of geometric means and its interval from scipy's pooled two-sample t test, the runs on each
side, the points, the suspects (which field changed, whether it lines up with the shift), every JSON key and the
text a user reads. Series are built in memory from receipts written here; one test reads a small real ledger."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from ledger.analyses.changepoints import MIN_SIZE, PERMUTATIONS, Split, _prefix, best_split, e_divisive, segments
from ledger.analyses.history import (
    FINAL_LOSS,
    MIN_RUNS,
    SPEED,
    ChangePoint,
    History,
    Point,
    Series,
    Suspect,
    analyse,
    per_run_metric,
)
from ledger.analyses.metrics import Observation, RunMetric, Spec, unavailable
from ledger.analyses.series import RunData
from ledger.errors import BadInput
from schemas.receipt import Code, Hardware, Receipt, Stack, Summary

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


# ------------------------------------------------------------------------------------- E-divisive by brute force
def q_by_hand(x: list[float], start: int, tau: int, kappa: int) -> float:
    """Matteson and James (2014), eq. 3 and 4: mn/(m+n) times the empirical divergence of x[start:tau] and
    x[tau:kappa]."""
    a, b = x[start:tau], x[tau:kappa]
    m, n = len(a), len(b)
    between = sum(abs(u - v) for u in a for v in b) * 2 / (m * n)
    within_a = sum(abs(u - v) for u, v in itertools.combinations(a, 2)) / math.comb(m, 2)
    within_b = sum(abs(u - v) for u, v in itertools.combinations(b, 2)) / math.comb(n, 2)
    return m * n / (m + n) * (between - within_a - within_b)


def best_by_hand(x: list[float], bounds: list[int]) -> tuple[int, float] | None:
    """The split (and end) of largest divergence over every segment; the first of equal ones."""
    best: tuple[int, float] | None = None
    for start, end in zip(bounds, bounds[1:], strict=False):
        for tau in range(start + 2, end - 1):
            for kappa in range(tau + 2, end + 1):
                q = q_by_hand(x, start, tau, kappa)
                if best is None or q > best[1]:
                    best = (tau, q)
    return best


def e_divisive_by_hand(x: list[float], alpha: float, permutations: int, seed: int) -> list[tuple[int, float]]:
    """The change points (index, p-value): each significant split added while the permutation test, shuffling the
    values within each segment on a numpy stream seeded with ``seed``, says so."""
    rng = np.random.default_rng(seed)
    bounds, found = [0, len(x)], []
    while True:
        candidate = best_by_hand(x, bounds)
        if candidate is None or candidate[1] <= 0:
            break
        exceed = 0
        for _ in range(permutations):
            shuffled = np.array(x)
            for a, b in zip(bounds, bounds[1:], strict=False):
                shuffled[a:b] = rng.permutation(shuffled[a:b])
            again = best_by_hand(shuffled.tolist(), bounds)
            # a tie counts: the same values on each side in another order give the same divergence, which two
            # ways of summing may round apart by a few units in the last place
            exceed += again is not None and again[1] >= candidate[1] * (1 - 1e-9)
            if (1 + exceed) / (permutations + 1) > alpha:
                break
        p = (1 + exceed) / (permutations + 1)
        if p > alpha:
            break
        found.append((candidate[0], p))
        bounds = sorted([*bounds, candidate[0]])
    return sorted(found)


def test_the_prefix_sums_are_the_sums_of_distances() -> None:
    x = [3.0, -1.0, 4.5, 2.0, 2.0]
    p = _prefix(np.array(x))
    assert p.shape == (6, 6)
    for i in range(6):
        for j in range(6):
            assert p[i, j] == pytest.approx(sum(abs(u - v) for u in x[:i] for v in x[:j]), abs=1e-12)


@pytest.mark.parametrize(("start", "end"), [(0, 4), (0, 5), (2, 9), (0, 11), (5, 11)])
def test_the_best_split_of_every_segment_is_the_brute_force_one(start: int, end: int) -> None:
    rng = np.random.default_rng(start * 100 + end)
    x = (rng.normal(size=11) + np.r_[np.zeros(6), np.full(5, 1.5)]).tolist()
    got = best_split(_prefix(np.array(x)), start, end)
    want = best_by_hand(x, [start, end])
    assert got is not None and want is not None
    assert got[0] == want[0] and isinstance(got[0], int) and got[1] == pytest.approx(want[1], rel=1e-12)
    assert isinstance(got[1], float)


def test_a_segment_splits_only_with_two_values_on_each_side() -> None:
    p = _prefix(np.array([0.0, 5.0, 0.0, 5.0, 1.0]))
    assert MIN_SIZE == 2 and best_split(p, 0, 3) is None and best_split(p, 1, 4) is None
    only = best_split(p, 0, 4)  # four values: the one split in the middle
    assert only is not None and only[0] == 2
    assert only[1] == pytest.approx(q_by_hand([0.0, 5.0, 0.0, 5.0], 0, 2, 4))


SERIES = {
    "one shift": [0.1, -0.2, 0.05, 0.0, 0.15, -0.1, 2.0, 2.2, 1.9, 2.1, 1.95, 2.05],
    "two shifts": [0.0, 0.1, -0.1, 0.05, 1.0, 1.1, 0.9, 1.05, 3.0, 3.1, 2.9, 3.05],
    "a weak shift": [0.0, 0.4, -0.3, 0.2, 0.1, 0.5, 0.9, 0.2, 0.8, 0.6, 1.1, 0.7],
    "flat": [0.3, -0.2, 0.5, 0.1, -0.4, 0.0, 0.2, -0.1, 0.4, -0.3, 0.1, 0.2],
}


@pytest.mark.parametrize("name", sorted(SERIES))
@pytest.mark.parametrize(("alpha", "permutations", "seed"), [(0.05, 99, 0), (0.2, 39, 7)])
def test_change_points_and_p_values_are_the_brute_force_ones(name: str, alpha: float, permutations: int,
                                                             seed: int) -> None:
    x = SERIES[name]
    got = e_divisive(x, alpha, permutations, np.random.default_rng(seed))
    want = e_divisive_by_hand(x, alpha, permutations, seed)
    assert [(s.index, s.p_value) for s in got] == want
    for s in got:
        assert isinstance(s, Split) and isinstance(s.index, int)
        assert s.q > 0 and s.p_value <= alpha


def test_the_series_give_what_their_names_say() -> None:
    """The brute-force comparison above is not vacuous: it covers one, two and no change points."""
    assert [i for i, _ in e_divisive_by_hand(SERIES["one shift"], 0.05, 99, 0)] == [6]
    assert [i for i, _ in e_divisive_by_hand(SERIES["two shifts"], 0.05, 99, 0)] == [4, 8]
    assert e_divisive_by_hand(SERIES["flat"], 0.05, 99, 0) == []
    weak = e_divisive_by_hand(SERIES["a weak shift"], 0.2, 39, 7)
    assert weak and weak[0][1] > 1 / 40  # some permutations beat it: a p-value above its floor


def test_a_p_value_exactly_at_alpha_is_significant() -> None:
    """19 permutations, none as divergent as the planted shift: p = 1/20 = 0.05, significant at alpha 0.05."""
    x = [0.0, 0.1, -0.1, 0.05, 0.02, -0.03, 0.07, 0.01, 5.0, 5.1, 4.9, 5.05, 5.02, 4.97, 5.07, 5.01]
    (split,) = e_divisive(x, 0.05, 19)
    assert (split.index, split.p_value) == (8, 0.05)
    assert e_divisive(x, 0.049, 19) == []


def test_a_permutation_that_only_reorders_each_side_ties_and_counts() -> None:
    """Four low and four high values: a permutation that keeps the same four values on each side (2 of the 70 ways
    to choose them, counting the swap of the sides) has the observed divergence exactly, however it was summed.
    Of 199 permutations about 6 do; the p-value counts each."""
    x = [0.0, 0.1, -0.1, 0.05, 1.0, 1.1, 0.9, 1.05]
    rng = np.random.default_rng(0)
    ties = 0
    for _ in range(199):
        shuffled = rng.permutation(x)
        ties += set(shuffled[:4].tolist()) in ({0.0, 0.1, -0.1, 0.05}, {1.0, 1.1, 0.9, 1.05})
    (split,) = e_divisive(x, 0.2, 199)
    assert ties > 0 and split.index == 4 and split.p_value == (1 + ties) / 200


def test_the_default_permutations_and_stream() -> None:
    """199 permutations (p in steps of 1/200), the stream seeded with 0 when none is given: the same answer
    twice, and the same as an explicit seed 0."""
    x = SERIES["one shift"]
    assert PERMUTATIONS == 199
    first, again = e_divisive(x), e_divisive(x)
    assert first == again == e_divisive(x, 0.05, 199, np.random.default_rng(0))
    assert [(s.index, s.p_value) for s in first] == [(6, 1 / 200)]


def test_a_constant_series_or_one_too_short_has_no_change_point() -> None:
    assert e_divisive([2.0] * 12) == [] and e_divisive([0.0, 9.0, 0.0]) == [] and e_divisive([]) == []
    with pytest.raises(ValueError, match="^e_divisive takes finite values only$"):
        e_divisive([1.0, 2.0, math.inf, 3.0])


def test_segments_cut_at_the_change_points() -> None:
    cuts = [Split(4, 1.0, 0.01), Split(8, 1.0, 0.01)]
    assert segments(12, cuts) == [(0, 4), (4, 8), (8, 12)]
    assert segments(12, []) == [(0, 12)]
    assert segments(0, []) == []


# ------------------------------------------------------------------------------------- a history's figures
def receipt(k: int, value: float | None, commit: str = "a" * 40, host: str = "node-1",
            name: str | None = "") -> Receipt:
    return Receipt(run_uuid=f"u{k}", status="succeeded", name=f"nightly-{k:02d}" if name == "" else name,
                   started_at=T0 + timedelta(minutes=k),
                   stack=Stack(code=Code(is_repo=True, commit=commit), hardware=Hardware(hostname=host)),
                   summary=Summary(tokens_per_s=value, final_loss=value))


def runs(values: Sequence[float | None], **per_run: list[str]) -> list[RunData]:
    out = []
    for k, v in enumerate(values):
        extra = {key: column[k] for key, column in per_run.items()}
        out.append(RunData(f"{k:02d}" + "f" * 62, receipt(k, v, **extra), {}, [], {}, {}))
    return out


def speed_metric(scale: str = "ratio") -> RunMetric:
    """A per-run rate read from the receipt's summary (what `compare`'s rows observe, without the tables)."""
    def observe(run: RunData) -> Observation:
        v = run.receipt.summary.tokens_per_s
        return unavailable("no tokens/s in the summary") if v is None else Observation(v)

    return RunMetric(Spec("tok/s", "throughput", "tokens/s", "higher", 0.05, scale=scale), observe)  # type: ignore[arg-type]


BEFORE = [1000.0, 1040.0, 980.0, 1010.0, 995.0, 1025.0]
AFTER = [900.0, 920.0, 890.0, 905.0, 915.0, 880.0]


def test_a_slowdown_after_a_commit_is_found_with_its_ratio_interval_and_suspects() -> None:
    """Six runs at ~1,000 tokens/s on commit a, six at ~900 on commit b; runs 4 and 5 ran on node-2."""
    history = runs(BEFORE + AFTER, commit=["a" * 40] * 6 + ["b" * 40] * 6,
                   host=["node-1"] * 4 + ["node-2"] * 2 + ["node-1"] * 6)
    series = analyse(history, speed_metric(), key="k1", label="configuration k1")
    assert (series.key, series.label, series.metric, series.unit, series.log_scale) == (
        "k1", "configuration k1", "tok/s", "tokens/s", True)
    assert [p.value for p in series.points] == BEFORE + AFTER and series.unavailable == []
    assert series.points[0] == Point("00" + "f" * 62, "nightly-00", T0, 1000.0)
    (cp,) = series.change_points
    assert (cp.index, cp.runs_before, cp.runs_after, cp.p_value) == (6, 6, 6, 1 / 200)
    assert cp.first.name == "nightly-06" and cp.last_before.name == "nightly-05"
    logs_before, logs_after = np.log(BEFORE), np.log(AFTER)
    delta = logs_after.mean() - logs_before.mean()
    assert cp.delta == pytest.approx(delta, rel=1e-12)
    geometric = math.prod(AFTER) ** (1 / 6) / math.prod(BEFORE) ** (1 / 6)
    assert cp.ratio == pytest.approx(geometric, rel=1e-12)
    ci = sps.ttest_ind(logs_after, logs_before, equal_var=True).confidence_interval(0.95)
    assert cp.ci is not None
    assert cp.ci == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-9)
    assert cp.ratio is not None and cp.ci[0] < cp.ratio < cp.ci[1] < 1
    commit, node = cp.suspects
    assert commit == Suspect("code", "stack.code.commit", "a" * 40, "b" * 40, True)
    assert node == Suspect("node", "stack.hardware.hostname", "node-2", "node-1", False)
    assert commit.text() == f"code: stack.code.commit: {'a' * 40} -> {'b' * 40}"
    assert node.text() == "node: stack.hardware.hostname: node-2 -> node-1 (not constant within the segments)"
    pct = round((1 - geometric) * 100)
    assert cp.shift_text() == f"{geometric:.3f}x [{math.exp(ci.low):.3f}, {math.exp(ci.high):.3f}] ({pct}% lower)"


def test_the_json_of_a_history_has_every_figure() -> None:
    history = runs(BEFORE + AFTER, commit=["a" * 40] * 6 + ["b" * 40] * 6)
    series = analyse(history, speed_metric(), key="k1", label="configuration k1")
    (cp,) = series.change_points
    out = History("tok/s", None, [series], [("configuration k2 (2 runs, latest x)", 2, "x")], 0.05).to_json()
    assert out["metric"] == "tok/s" and out["where"] is None and out["alpha"] == 0.05 and out["min_runs"] == 6
    assert out["skipped"] == [{"label": "configuration k2 (2 runs, latest x)", "runs": 2, "latest": "x"}]
    (found,) = out["change_points"]
    assert found == {
        "series": "k1", "label": "configuration k1", "index": 6, "name": "nightly-06", "id": "06" + "f" * 62,
        "started_at": (T0 + timedelta(minutes=6)).isoformat(),
        "last_before": {"id": "05" + "f" * 62, "name": "nightly-05", "value": 1025.0,
                        "started_at": (T0 + timedelta(minutes=5)).isoformat()},
        "p_value": 1 / 200, "runs_before": 6, "runs_after": 6, "ratio": cp.ratio, "delta": cp.delta,
        "ci": list(cp.ci or ()), "shift": cp.shift_text(),
        "suspects": [{"factor": "code", "path": "stack.code.commit", "before": "a" * 40, "after": "b" * 40,
                      "consistent": True, "text": f"code: stack.code.commit: {'a' * 40} -> {'b' * 40}"}]}
    (s,) = out["series"]
    assert (s["key"], s["label"], s["metric"], s["unit"], s["log_scale"]) == ("k1", "configuration k1", "tok/s",
                                                                              "tokens/s", True)
    assert [r["value"] for r in s["runs"]] == BEFORE + AFTER and s["unavailable"] == []
    assert s["runs"][0] == {"id": "00" + "f" * 62, "name": "nightly-00", "value": 1000.0,
                            "started_at": T0.isoformat()}
    assert len(s["change_points"]) == 1 and s["change_points"][0]["index"] == 6
    assert History("tok/s", None, [series]).change_points == [(series, cp)]


def test_a_speed_up_reads_higher_and_a_delta_scale_reads_as_a_difference() -> None:
    up = analyse(runs(AFTER + BEFORE), speed_metric())
    (cp,) = up.change_points
    assert cp.ratio is not None and cp.ratio > 1 and cp.shift_text().endswith("% higher)")
    delta = analyse(runs(AFTER + BEFORE), speed_metric("delta"))
    assert not delta.log_scale
    (d,) = delta.change_points
    want = float(np.mean(BEFORE) - np.mean(AFTER))
    ci = sps.ttest_ind(BEFORE, AFTER, equal_var=True).confidence_interval(0.95)
    assert d.ratio is None and d.delta == pytest.approx(want) and d.ci == pytest.approx((ci.low, ci.high))
    assert d.shift_text() == f"{want:+.3g} [{ci.low:+.3g}, {ci.high:+.3g}]"
    no_ci = ChangePoint(3, Point("x", None, None, 1.0), Point("y", None, None, 2.0), 0.01, 3, 3, None, -0.25, None)
    assert no_ci.shift_text() == "-0.25" and no_ci.to_json()["ci"] is None and no_ci.to_json()["started_at"] is None
    ratio_no_ci = ChangePoint(3, Point("x", None, None, 1.0), Point("y", None, None, 2.0), 0.01, 3, 3, 1.1, 0.0, None)
    assert ratio_no_ci.shift_text() == "1.100x (10% higher)"


def test_a_value_at_or_below_zero_keeps_the_series_on_a_linear_scale() -> None:
    values = [0.0, 0.1, -0.1, 0.05, 0.02, -0.05, 2.0, 2.1, 1.9, 2.05, 2.0, 1.95]
    series = analyse(runs(values), speed_metric())
    assert not series.log_scale
    (cp,) = series.change_points
    assert cp.ratio is None and cp.delta == pytest.approx(np.mean(values[6:]) - np.mean(values[:6]))


def test_runs_without_a_value_are_left_out_with_the_reason() -> None:
    values: list[float | None] = [*BEFORE[:3], None, *BEFORE[3:], math.nan, *AFTER]
    history = runs(values)
    series = analyse(history, speed_metric())
    assert series.unavailable == [(history[3].id, "no tokens/s in the summary"), (history[7].id, "no value")]
    assert [p.value for p in series.points] == BEFORE + AFTER
    (cp,) = series.change_points
    assert cp.index == 6 and cp.first.id == history[8].id  # positions in the series of runs that have a value
    assert series.to_json()["unavailable"] == [{"id": history[3].id, "reason": "no tokens/s in the summary"},
                                               {"id": history[7].id, "reason": "no value"}]


def test_a_long_value_is_shortened_to_60_characters_in_a_suspect() -> None:
    """A 70-character host name: 57 characters and '...' on each side of the arrow."""
    long = Suspect("node", "stack.hardware.hostname", "n" * 70, "m" * 61, True)
    assert long.text() == f"node: stack.hardware.hostname: {'n' * 57}... -> {'m' * 57}..."
    fits = Suspect("node", "stack.hardware.hostname", "n" * 60, None, True)
    assert fits.text() == f"node: stack.hardware.hostname: {'n' * 60} -> -"


def test_the_seed_sets_the_permutation_stream() -> None:
    """A weak shift whose p-value depends on the permutations drawn: analyse's seed is the stream's."""
    x = SERIES["a weak shift"]
    values = [1000.0 * math.exp(v / 10) for v in x]
    for seed in (0, 3, 11):
        got = analyse(runs(values), speed_metric(), alpha=0.2, permutations=39, seed=seed)
        want = e_divisive_by_hand(np.log(values).tolist(), 0.2, 39, seed)
        assert [(c.index, c.p_value) for c in got.change_points] == want
    p_values = {tuple(c.p_value for c in analyse(runs(values), speed_metric(), alpha=0.2, permutations=39,
                                                 seed=seed).change_points) for seed in (0, 3, 11)}
    assert len(p_values) > 1  # the seeds give different answers: the stream is not the default one each time


def test_fewer_runs_than_the_minimum_are_not_searched() -> None:
    assert MIN_RUNS == 6
    five = analyse(runs([1000.0, 1010.0, 990.0, 500.0, 505.0]), speed_metric())
    assert five.change_points == [] and len(five.points) == 5
    six = analyse(runs([1000.0, 1010.0, 990.0, 500.0, 505.0, 495.0]), speed_metric(), alpha=0.2)
    assert [c.index for c in six.change_points] == [3]


def test_each_change_point_is_measured_between_its_neighbours() -> None:
    """Three levels: the first shift's figures use the runs up to the second change point, not all after."""
    a, b, c = [10.0, 10.2, 9.9, 10.1], [20.0, 20.3, 19.8, 20.1], [40.0, 39.6, 40.4, 40.2]
    series = analyse(runs(a + b + c), speed_metric(), alpha=0.1, permutations=99)
    first, second = series.change_points
    assert (first.index, first.runs_before, first.runs_after) == (4, 4, 4)
    assert (second.index, second.runs_before, second.runs_after) == (8, 4, 4)
    assert first.ratio == pytest.approx(math.prod(b) ** 0.25 / math.prod(a) ** 0.25)
    assert second.ratio == pytest.approx(math.prod(c) ** 0.25 / math.prod(b) ** 0.25)


def test_the_final_loss_is_a_per_run_metric() -> None:
    loss = per_run_metric(FINAL_LOSS, [])
    # a relative change, as compare's loss rows (1% the smallest worth reporting)
    assert (loss.spec.name, loss.spec.unit, loss.spec.scale, loss.spec.threshold) == ("final loss", "loss", "ratio",
                                                                                       0.01)
    before, after = [2.0, 2.01, 1.99, 2.02, 1.98, 2.0], [2.5, 2.51, 2.49, 2.52, 2.48, 2.5]
    series = analyse(runs(before + after), loss)
    assert series.log_scale and [c.index for c in series.change_points] == [6]
    assert series.change_points[0].ratio == pytest.approx((math.prod(after) / math.prod(before)) ** (1 / 6))
    assert loss.observe(runs([math.inf])[0]).reason == "no final loss"
    assert loss.observe(runs([None])[0]).reason == "no final loss"
    assert loss.observe(runs([2.5])[0]) == Observation(2.5)


def test_a_metric_that_is_not_per_run_is_refused_with_the_names() -> None:
    with pytest.raises(BadInput) as paired:
        per_run_metric("loss @ matched tokens", [])
    assert str(paired.value).startswith("'loss @ matched tokens' compares two sides at shared points, not one run; "
                                        "--metric takes a per-run metric: ")
    with pytest.raises(BadInput) as unknown:
        per_run_metric("speed", [])
    names = str(unknown.value).split("--metric takes a per-run metric: ")[1].split(", ")
    assert str(unknown.value).startswith("no metric 'speed'; ")
    assert names == sorted(names) and FINAL_LOSS in names and SPEED in names
    assert per_run_metric(SPEED, []).spec.name == SPEED


def test_a_history_read_from_a_ledger(tmp_path: Path) -> None:
    """Seven published runs of one configuration (the last three 20% slower at another commit) and two of
    another: the first series is searched, the second listed as too short, each with its label."""
    import calibration as cal

    from ledger.analyses.history import fingerprint, history
    from ledger.store import index
    from ledger.store.receipts import Ledger

    rng = np.random.default_rng(5)
    for k in range(7):
        slow = k >= 4
        cal.publish_run(tmp_path, cal.series(rng, "a", k, 0.8 if slow else 1.0, steps=20, between_sd=0.01),
                        name=f"a-{k}", commit="b" * 40 if slow else "a" * 40)
    for k in range(2):
        cal.publish_run(tmp_path, cal.series(rng, "other", k, steps=20), name=f"other-{k}")
    with index.reader(Ledger(tmp_path)) as con:
        found = history(con, alpha=0.1, permutations=99)
        where = history(con, where="name~a-*", alpha=0.1, permutations=99)
        short = history(con, where="name~other-*")
        with pytest.raises(BadInput) as none:
            history(con, where="name=zzz")
    assert str(none.value) == ("no completed run matches --where 'name=zzz'; `ledger ls --where ...` lists "
                               "receipts")
    (series,) = found.series
    assert (found.metric, found.where, found.alpha) == (SPEED, None, 0.1)
    assert series.label == f"configuration {series.key} (7 runs, latest a-6)" and len(series.key) == 12
    assert [p.name for p in series.points] == [f"a-{k}" for k in range(7)]
    (cp,) = series.change_points
    assert cp.first.name == "a-4" and cp.ratio is not None and 0.75 < cp.ratio < 0.85
    assert cp.suspects[0].path == "stack.code.commit" and cp.suspects[0].consistent
    ((label, n, latest),) = found.skipped
    assert n == 2 and latest == "other-1" and label.startswith("configuration ") and "(2 runs, latest other-1)" in label
    assert label != series.label
    (wseries,) = where.series
    assert wseries.key == "where" and wseries.label == "--where name~a-* (7 runs)"
    assert [c.first.name for c in wseries.change_points] == ["a-4"]
    assert short.series == [] and short.skipped == [("--where name~other-* (2 runs)", 2, "other-1")]
    assert (short.where, short.metric, short.alpha) == ("name~other-*", SPEED, 0.05)
    assert isinstance(series, Series)
    with index.reader(Ledger(tmp_path)) as con:
        from ledger.analyses.groups import Catalog

        keys = {e.name: fingerprint(e) for e in Catalog.load(con).entries.values()}
    assert len({keys[f"a-{k}"] for k in range(7)}) == 1 and keys["a-0"] != keys["other-0"]
    assert keys["a-0"] == series.key
