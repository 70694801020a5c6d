"""The smaller pieces of `ledger compare`: factor diff, matched curves, metric verdicts, routing formulas,
peaks, override mapping, formatting and SVG."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from ledger.analyses import builtin_metrics, evidence, matched, metrics
from ledger.analyses.ablations import override_factor
from ledger.analyses.diff import Change, TaskMismatch, check_task, factor_diff, summarize_change
from ledger.analyses.series import RunData
from ledger.mfu import Peak, device_key, peak_flops
from ledger.report import fmt, svg
from schemas.receipt import Architecture, Precision, Receipt, Task, Workload


def receipt(**workload: Any) -> Receipt:
    base: dict[str, Any] = {
        "task": Task(dataset="mix", objective="causal-lm"),
        "model": Architecture(layers=2, hidden=64, num_experts=8, top_k=2, active_params=1000),
        "precision": Precision(compute="fp32"),
        "seed": 0,
    }
    base.update(workload)
    return Receipt(run_uuid="u", status="succeeded", name="r", workload=Workload(**base))


def run(step_time: np.ndarray, *, loss: np.ndarray | None = None, routing: dict[str, np.ndarray] | None = None,
        rid: str = "a" * 64) -> RunData:
    n = step_time.size
    steps = {
        "step": np.arange(1, n + 1), "tokens": 100.0 * np.arange(1, n + 1), "time": np.cumsum(step_time),
        "loss": loss if loss is not None else np.linspace(4, 3, n), "lr": np.full(n, 1e-3),
        "grad_norm": np.ones(n), "step_time_s": step_time, "tokens_per_s": 100.0 / step_time,
        "flops_per_s": np.full(n, np.nan), "memory_bytes": np.full(n, np.nan), "skipped": np.full(n, np.nan),
        "loss_nonfinite": np.zeros(n),
    }
    return RunData(rid, receipt(), steps, [], routing or {}, {})


# ----------------------------------------------------------------------------------------------- diff
def test_factor_diff_groups_changes_and_ignores_bookkeeping() -> None:
    a = receipt()
    b = receipt(precision=Precision(compute="bf16", autocast="bf16"), seed=1).model_copy(update={"name": "other"})
    diff = factor_diff(a, b)
    assert diff.factors == ["precision", "seed"]
    assert [c.path for c in diff.changed["precision"]] == ["workload.precision.compute", "workload.precision.autocast"]
    assert "precision" not in diff.unchanged and "code" in diff.unchanged
    assert [c.path for c in diff.record] == ["name"]
    assert factor_diff(a, b, ignore=("seed",)).factors == ["precision"]
    assert check_task(diff, allow=False) is True


def test_task_change_is_refused_naming_the_field() -> None:
    a, b = receipt(), receipt(model=Architecture(layers=2, hidden=64, num_experts=16, top_k=2, active_params=1000))
    diff = factor_diff(a, b)
    with pytest.raises(TaskMismatch, match=r"workload\.model\.num_experts: 8 -> 16.*--allow-task-change"):
        check_task(diff, allow=False)
    assert check_task(diff, allow=True) is False


def test_package_lists_are_summarised() -> None:
    a = [{"name": "torch", "version": "2.3"}, {"name": "numpy", "version": "1.26"}]
    b = [{"name": "torch", "version": "2.4"}, {"name": "numpy", "version": "1.26"}, {"name": "te", "version": "1"}]
    assert summarize_change("stack.software.packages", a, b) == "2 package(s) differ: te - -> 1, torch 2.3 -> 2.4"


# -------------------------------------------------------------------------------------------- matched
def test_curves_are_interpolated_at_common_token_counts() -> None:
    a = matched.Curve(np.arange(0, 1001, 100.0), 5 - np.arange(0, 1001, 100.0) / 500)
    b = matched.Curve(np.arange(50, 1201, 100.0), 4 - np.arange(50, 1201, 100.0) / 500)
    grid = matched.common_grid([a, b])
    assert not isinstance(grid, str)
    # the last 20% of [50, 1000] holds only A's points 900 and 1000: the window grows to 5 points
    assert grid.hi == 1000 and grid.x.tolist() == [600, 700, 800, 900, 1000]
    values = matched.matched_values([a, b], grid)
    assert np.allclose(values[:, 0] - values[:, 1], 1.0)  # exactly the offset of the two lines
    assert matched.common_grid([a, matched.Curve(np.array([2000.0, 3000.0]), np.ones(2))]) == "the runs share no range"


def test_grid_window_bounds_are_inclusive() -> None:
    # A covers 0..200, B 0..100: the common range is [0, 100], its last 20% [80, 100]; both ends are points of A
    a = matched.Curve(np.arange(0, 201, 1.0), np.zeros(201))
    b = matched.Curve(np.arange(0, 101, 1.0), np.ones(101))
    grid = matched.common_grid([a, b])
    assert not isinstance(grid, str)
    assert grid.x.tolist() == list(range(80, 101)) and grid.lo == 80 and grid.hi == 100
    # the grid taken from B, whose last point is the end of the range
    grid_b = matched.common_grid([a, b], reference=b)
    assert not isinstance(grid_b, str) and grid_b.x.tolist() == list(range(80, 101))


def test_curve_keeps_finite_points_only() -> None:
    r = run(np.full(4, 0.1))
    r.steps["tokens"][:] = [100, 200, 300, 400]
    r.steps["loss"][:] = [2.0, np.nan, 1.5, np.inf]
    c = matched.curve(r, "tokens")
    assert not isinstance(c, str)
    assert c.x.tolist() == [100, 300] and c.y.tolist() == [2.0, 1.5]


def test_curve_sorts_and_deduplicates() -> None:
    r = run(np.full(5, 0.1))
    r.steps["tokens"][:] = [300, 100, 200, 200, 500]
    c = matched.curve(r, "tokens")
    assert not isinstance(c, str)
    assert c.x.tolist() == [100, 200, 300, 500]


# -------------------------------------------------------------------------------------------- metrics
def _row(name: str, a: RunData, b: RunData, **settings: Any) -> metrics.MetricRow:
    rows = builtin_metrics.compare_all([a], [b], metrics.Settings(n_boot=500, **settings))
    return next(r for r in rows if r.name == name)


def test_one_run_per_side_is_inconclusive_however_large_the_change() -> None:
    rng = np.random.default_rng(0)
    a = run(0.10 + 0.002 * rng.standard_normal(200))
    b = run(0.12 + 0.002 * rng.standard_normal(200), rid="b" * 64)
    row = _row("step time (median)", a, b)
    assert row.verdict == "inconclusive" and row.p_value is None and row.ci is None
    assert row.reason is not None and "record replicates" in row.reason
    # the within-run intervals describe each run's median, not the configurations
    assert row.ci_a is not None and row.ci_a[0] < row.a < row.ci_a[1] < 0.11
    assert row.ci_b is not None and 0.11 < row.ci_b[0] < row.b < row.ci_b[1]


def _replicates(centre: float, spread: list[float], first: int) -> list[RunData]:
    return [run(np.full(60, centre * (1 + s)), rid=f"{first + i:064d}") for i, s in enumerate(spread)]


def test_replicates_decide_with_a_t_test_between_runs() -> None:
    a = _replicates(0.10, [-0.02, 0.0, 0.02], 0)
    b = _replicates(0.12, [-0.02, 0.0, 0.02], 10)
    rows = builtin_metrics.compare_all(a, b, metrics.Settings())
    row = next(r for r in rows if r.name == "step time (median)")
    assert row.test == "t-test" and row.n == (3, 3) and row.df == 4 and row.verdict == "worse"
    # the same test by scipy on the per-run log values
    from scipy import stats as sps
    la, lb = np.log([r.steps["step_time_s"][0] for r in a]), np.log([r.steps["step_time_s"][0] for r in b])
    ref = sps.ttest_ind(lb, la)
    assert row.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert row.ci is not None and row.ci_of == "ratio"
    ci = ref.confidence_interval(0.95)
    assert row.ci == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-9)


def test_a_significant_change_below_the_threshold_is_no_significant_difference() -> None:
    a = _replicates(0.100, [-0.001, 0.0, 0.001], 0)
    b = _replicates(0.102, [-0.001, 0.0, 0.001], 10)
    row = next(r for r in builtin_metrics.compare_all(a, b, metrics.Settings()) if r.name == "step time (median)")
    assert row.p_value is not None and row.p_value < 1e-4
    assert row.verdict == "no significant difference"  # 2% < the 5% threshold worth reporting
    low = next(r for r in builtin_metrics.compare_all(a, b, metrics.Settings(noise=0.01))
               if r.name == "step time (median)")
    assert low.verdict == "worse"


def test_a_noise_floor_decides_one_run_per_side() -> None:
    spec = metrics.Spec("tokens/s", "throughput", "tokens/s", "higher", 0.05)
    floor = evidence.Floor(sd=0.05, df=12, groups=4, runs=16, log_scale=True)
    row = metrics.judge(spec, [100.0], [130.0], metrics.Settings(), 0.05, floor=floor)
    # t = log(1.3) / (0.05 sqrt 2) with 12 df (scipy)
    from scipy import stats as sps
    t_value = math.log(1.3) / (0.05 * math.sqrt(2))
    assert row.verdict == "better" and row.test == "t-test (noise floor)" and row.df == 12
    assert row.p_value == pytest.approx(2 * sps.t.sf(t_value, 12), rel=1e-9)
    assert row.evidence is not None and "noise floor 5%" in row.evidence and "4 replicate groups" in row.evidence
    small = metrics.judge(spec, [100.0], [104.0], metrics.Settings(), 0.0, floor=floor)
    assert small.verdict == "no significant difference" and small.p_value is not None and small.p_value > 0.05


def test_equal_values_are_identical_and_deterministic_metrics_need_no_replicates() -> None:
    spec = metrics.Spec("peak device memory", "memory", "GiB", "lower", 0.02, statistic="value", deterministic=True)
    assert metrics.judge(spec, [10.0], [10.0], metrics.Settings(), 0.02).verdict == "identical"
    assert metrics.judge(spec, [10.0], [12.0], metrics.Settings(), 0.02).verdict == "worse"
    assert metrics.judge(spec, [10.0], [10.1], metrics.Settings(), 0.02).verdict == "no significant difference"


def test_noise_floor_is_the_pooled_within_group_sd() -> None:
    groups = [[100.0, 110.0], [50.0, 55.0, 60.0], [7.0]]  # the single run adds nothing
    got = evidence.learn_floor(groups, log_scale=True)
    logs = [np.log([100.0, 110.0]), np.log([50.0, 55.0, 60.0])]
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    assert got is not None and got.df == 3 and got.groups == 2 and got.runs == 5
    assert got.sd == pytest.approx(math.sqrt(ss / 3))
    assert evidence.learn_floor([[1.0, 2.0]], log_scale=False) is None  # 1 df: below the minimum


def test_metrics_without_data_are_unavailable_with_a_reason() -> None:
    empty = RunData("e" * 64, receipt(), {c: np.empty(0) for c in ("step", "tokens", "time", "loss", "lr",
                                                                    "grad_norm", "step_time_s", "tokens_per_s",
                                                                    "flops_per_s", "memory_bytes", "skipped",
                                                                    "loss_nonfinite")}, [], {}, {})
    row = _row("tokens/s per device", run(np.full(20, 0.1)), empty)
    assert row.verdict == "unavailable" and row.a is None and row.b is None and row.reason == "B: no step rows"
    assert _row("MFU", run(np.full(20, 0.1)), run(np.full(20, 0.1))).reason.startswith("A: no GPU model")


def test_routing_formulas_follow_the_definitions() -> None:
    # one layer, one step (after warm-up): n = 100, 156, 128, 128 (T x k = 512), d = 0, 6, 0, 0
    n = np.array([100.0, 156, 128, 128])
    routing = {"step": np.array([10]), "layer": np.array([0]), "experts": np.array([4.0]),
               "n_sum": np.array([n.sum()]), "n_std": np.array([n.std()]), "n_max": np.array([n.max()]),
               "d_sum": np.array([6.0]), "c_sum": np.array([np.nan]), "entropy": np.array([0.9]),
               "n_log_n": np.array([(n * np.log(n)).sum()])}
    r = run(np.full(20, 0.1), routing=routing)
    q = n / n.sum()
    expected = {
        "cv": n.std() / n.mean(),
        "max_mean": 156 / 128,
        "dropped": 100 * 6 / 512,
        "entropy": 0.9,
        "load_entropy": -(q * np.log(q)).sum() / np.log(4),
    }
    for what, value in expected.items():
        got = builtin_metrics._routing_samples(r, what)
        assert not isinstance(got, str)
        assert got.tolist() == pytest.approx([value])
    assert builtin_metrics._routing_samples(r, "waste") == "no capacity (dropless routing)"


# ----------------------------------------------------------------------------------------------- peaks
@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-80GB", "A100"), ("Tesla V100", None), (None, None),
])
def test_device_keys(name: str | None, key: str | None) -> None:
    assert device_key(name) == key


def test_peaks_say_which_figure_they_are() -> None:
    peak = peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert isinstance(peak, Peak) and peak.flops == 989e12 and "H100 dense bf16" in peak.label
    fp8 = peak_flops("NVIDIA B200", "mxfp8")
    assert isinstance(fp8, Peak) and fp8.flops == 4500e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp8") == "A100 has no fp8 tensor-core peak"
    assert "no GPU model" in str(peak_flops(None, "bf16"))


# ----------------------------------------------------------------------------------------- ablations
def test_overrides_are_mapped_to_the_factor_they_change() -> None:
    changes = [Change("workload.router.z_loss_coeff", 0.001, 0.002), Change("workload.optimizer.lr", 0.01, 0.02),
               Change("workload.precision.compute", "fp32", "bf16")]
    assert override_factor("moe.z_loss_coeff", "0.001", "0.002", changes) == "router"
    assert override_factor("lr", "1e-2", "2e-2", changes) == "hyperparameters"
    assert override_factor("precision", None, "bf16", changes) == "precision"
    assert override_factor("delay_s", "0.05", "0.1", changes) is None


# ------------------------------------------------------------------------------------- fmt and svg
def test_formatting() -> None:
    assert fmt.num(12345.678) == "12,346" and fmt.num(0.0012345) == "0.001234" and fmt.num(None) == "-"
    assert fmt.share(-0.6931471805599453) == "x0.500 (-0.693)"
    assert fmt.interval((0.0, 0.6931471805599453)) == "[x1.000, x2.000]"
    assert svg.nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_svg_plots_are_well_formed() -> None:
    x = np.linspace(0, 1e6, 5000)
    charts = [
        svg.line_chart([svg.Series("A <run>", "#123456", x, np.sin(x)), svg.Series("B", "#654321", x, np.cos(x),
                                                                                    True)], "t & t", "x", "y"),
        svg.histogram([("A", "#123456", np.random.default_rng(0).normal(size=100))], "h", "s", marks=[("#000", 0.0)]),
        svg.heatmap(np.array([[0.5, 1.0, 2.5], [1.0, np.nan, 1.5]]), np.array([1.0, 2.0, 3.0]), "layer 0"),
        svg.line_chart([], "empty", "x", "y"),
    ]
    for chart in charts:
        root = ET.fromstring(chart)
        assert root.tag.endswith("svg") and root.find("{http://www.w3.org/2000/svg}title") is not None
    assert charts[0].count("<polyline") == 2 and "A &lt;run&gt;" in charts[0]
    assert max(len(p.split()) for p in ET.fromstring(charts[0]).iter("{http://www.w3.org/2000/svg}polyline")
               for p in [p.get("points") or ""]) <= svg.MAX_POINTS


# ------------------------------------------------------------------------------- headlines share alpha
def _called(name: str, family: str, p: float | None, verdict: str = "better", headline: bool = False) -> Any:
    from ledger.analyses.metrics import MetricRow

    return MetricRow(name, family, "", "higher", 1.0, 1.2, 0.2, 1.2, (1.1, 1.3), "ratio", p,
                     None if p is None else "t-test", (3, 3), 0.05, "ratio", verdict, headline=headline)


def _verdicts(tp: float | None, step: float, p90: float, loss: float, routing: float = 0.001) -> dict[str, str]:
    from ledger.analyses.metrics import control_headlines

    rows = [_called("tokens/s per device", "throughput", tp, "better" if tp is not None else "inconclusive",
                    headline=True),
            _called("step time (median)", "step time", step), _called("step time (p90)", "step time", p90),
            _called("loss @ matched tokens", "loss", loss, "worse", headline=True),
            _called("load CV", "routing", routing, "lower")]
    return {r.name: r.verdict for r in control_headlines(rows, 0.05)}


def test_headline_families_share_alpha_by_weighted_holm() -> None:
    # speed weighs 4, the loss 1 (W = 5). By hand: p/w = 0.045/4 = 0.01125 for speed, 0.005 for the loss:
    # the loss first, at 0.05 x 1/5 = 0.01 (0.005 passes); then speed alone at 0.05 (0.045 passes); the
    # speed rows follow at the level speed met (0.05): 0.01 and 0.03 pass
    assert _verdicts(0.045, 0.01, 0.03, 0.005) == {
        "tokens/s per device": "better", "step time (median)": "better", "step time (p90)": "better",
        "loss @ matched tokens": "worse", "load CV": "lower"}
    # speed first (0.01125 < 0.02), at 0.05 x 4/5 = 0.04: 0.045 fails, so nothing in the headline families is
    # significant; the routing row is not a headline and keeps its verdict at alpha
    assert _verdicts(0.045, 0.01, 0.03, 0.02) == {
        "tokens/s per device": "no significant difference", "step time (median)": "no significant difference",
        "step time (p90)": "no significant difference", "loss @ matched tokens": "no significant difference",
        "load CV": "lower"}
    # speed at 0.04 (0.03 passes), then the loss at 0.05 (0.02 passes); a speed row above 0.04 is taken back
    got = _verdicts(0.03, 0.045, 0.01, 0.02)
    assert got["tokens/s per device"] == got["step time (p90)"] == "better" and got["loss @ matched tokens"] == "worse"
    assert got["step time (median)"] == "no significant difference"
    # a p that underflows to 0.0 (a huge effect on tiny noise) is the most significant there is, not "untested"
    assert _verdicts(0.0, 0.0, 0.0, 0.0)["tokens/s per device"] == "better"
    # an untested headline (one side unavailable): the first tested speed row stands for speed
    got = _verdicts(None, 0.039, 0.045, 0.5)
    assert got["tokens/s per device"] == "inconclusive" and got["step time (median)"] == "better"
    assert got["step time (p90)"] == "no significant difference"  # above the 0.04 that step time met


def test_a_verdict_taken_back_says_why() -> None:
    from ledger.analyses.metrics import control_headlines

    rows = [_called("tokens/s per device", "throughput", 0.045, headline=True),
            _called("step time (median)", "step time", 0.01),
            _called("loss @ matched tokens", "loss", 0.02, "worse", headline=True)]
    tp, step, loss = control_headlines(rows, 0.05)
    assert tp.note == ("not significant once the 2 headline families share alpha 0.05 (Holm, weighted): "
                       "tokens/s per device p=0.045")
    assert step.note == ("not significant once the 2 headline families share alpha 0.05 (Holm, weighted): "
                         "its headline tokens/s per device is not significant (p=0.045)")
    assert loss.verdict == "no significant difference" and "loss @ matched tokens p=0.02" in loss.note
    # a follower exactly at the level its headline met is not below it; a note of its own is kept in front
    rows = [_called("tokens/s per device", "throughput", 0.01, headline=True),
            replace(_called("step time (median)", "step time", 0.04), note="median per step"),
            _called("loss @ matched tokens", "loss", 0.5, "worse", headline=True)]
    _, step, _ = control_headlines(rows, 0.05)
    assert step.verdict == "no significant difference"
    assert step.note == "median per step; not significant at the level its headline met (0.04; p=0.04)"
