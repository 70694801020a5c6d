"""The verdict builders of `ledger compare`, each value by hand: every key of a row's JSON, the verdict rules at
their edges (delta and ratio thresholds on non-positive values, directionless metrics, deterministic ones),
unavailable rows, notes, the noise floor of a paired metric, and each built-in metric's observation
(throughput fallbacks, TFLOP/s and MFU, step-time statistics, evals at the last shared point, timing phases,
stability, memory, energy) (found by mutation testing, issue 23)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ledger.analyses import builtin_metrics, metrics
from ledger.analyses.metrics import (
    MetricRow,
    Observation,
    Paired,
    PairedMetric,
    RunMetric,
    Settings,
    Spec,
    compare_metric,
    judge,
)
from ledger.analyses.series import RunData
from schemas.receipt import (
    Architecture,
    Data,
    Hardware,
    Parallelism,
    Precision,
    QualityGate,
    Receipt,
    Stack,
    Summary,
    Task,
    Workload,
)

NAN = math.nan


def steps_of(step_time: Sequence[float], tokens_per_s: Sequence[float] | None = None,
             **columns: Sequence[float]) -> dict[str, np.ndarray]:
    n = len(step_time)
    out: dict[str, np.ndarray] = {
        "step": np.arange(1, n + 1), "tokens": 100.0 * np.arange(1, n + 1), "time": np.cumsum(step_time),
        "loss": np.linspace(4, 3, n), "lr": np.full(n, 1e-3), "grad_norm": np.ones(n),
        "step_time_s": np.asarray(step_time, dtype=np.float64),
        "tokens_per_s": np.asarray(tokens_per_s, dtype=np.float64) if tokens_per_s is not None else np.full(n, NAN),
        "flops_per_s": np.full(n, NAN), "tflops_per_device": np.full(n, NAN), "memory_bytes": np.full(n, NAN),
        "skipped": np.full(n, NAN), "loss_nonfinite": np.zeros(n),
    }
    out.update({k: np.asarray(v, dtype=np.float64) for k, v in columns.items()})
    return out


def rd(steps: dict[str, np.ndarray], *, name: str = "r", rid: str = "a" * 64, workload: Workload | None = None,
       stack: Stack | None = None, summary: Summary | None = None, evals: list[dict[str, Any]] | None = None,
       timing: dict[str, dict[str, np.ndarray]] | None = None, telemetry: dict[str, np.ndarray] | None = None,
       routing: dict[str, np.ndarray] | None = None) -> RunData:
    receipt = Receipt(run_uuid="u", status="succeeded", name=name, workload=workload or Workload(),
                      stack=stack or Stack(), summary=summary or Summary())
    return RunData(rid, receipt, steps, evals or [], routing or {}, timing or {}, telemetry or {})


def by_name(metric_list: list[Any]) -> dict[str, Any]:
    return {m.spec.name: m for m in metric_list}


# --------------------------------------------------------------------------------------------- rows
def test_every_key_of_a_row() -> None:
    row = MetricRow("m", "fam", "s", "lower", 1.0, 2.0, 1.0, 2.0, (1.5, 2.5), "ratio", 0.01, "t-test", (3, 2),
                    0.05, "ratio", "worse", "why", "note", True, "3 vs 2 runs", 3, (0.9, 1.1), (1.9, 2.1),
                    "p = 0.01 < 0.04", 0.04, 0.05, 7)
    assert row.to_json() == {
        "name": "m", "family": "fam", "unit": "s", "direction": "lower", "a": 1.0, "b": 2.0, "delta": 1.0,
        "ratio": 2.0, "ci": [1.5, 2.5], "ci_of": "ratio", "p_value": 0.01, "test": "t-test", "n": [3, 2],
        "threshold": 0.05, "scale": "ratio", "verdict": "worse", "reason": "why", "note": "note",
        "evidence": "3 vs 2 runs", "df": 3, "ci_a": [0.9, 1.1], "ci_b": [1.9, 2.1], "rule": "p = 0.01 < 0.04",
        "level": 0.04, "sd": 0.05, "runs_for_power": 7}
    bare = MetricRow("m", "fam", "s", "lower", None, None, None, None, None, None, None, None, (0, 0), 0.05,
                     "delta", "unavailable").to_json()
    assert (bare["ci"], bare["ci_a"], bare["ci_b"], bare["n"], bare["reason"]) == (None, None, None, [0, 0], None)


# ------------------------------------------------------------------------------------------ verdicts
def test_ratio_threshold_on_non_positive_values_is_relative_to_a() -> None:
    spec = Spec("x", "f", "u", "lower", 0.02, statistic="value", deterministic=True)
    # -10 -> -9.9: a change of 0.1, below 2% of |a| (0.2), on a ratio scale without a log
    assert judge(spec, [-10.0], [-9.9], Settings(), 0.02).verdict == "no significant difference"
    assert judge(spec, [-10.0], [-9.7], Settings(), 0.02).verdict == "worse"  # 0.3 > 0.2
    delta = Spec("x", "f", "u", "lower", 0.5, scale="delta", statistic="value", deterministic=True)
    assert judge(delta, [10.0], [10.4], Settings(), 0.5).verdict == "no significant difference"
    assert judge(delta, [10.0], [9.4], Settings(), 0.5).verdict == "better"
    row = judge(delta, [10.0], [10.6], Settings(), 0.5, note="n")
    assert row.verdict == "worse" and row.note == "n; deterministic: judged by the threshold"
    assert (row.a, row.b, row.delta, row.ratio, row.n, row.threshold) == (10.0, 10.6, pytest.approx(0.6),
                                                                          pytest.approx(1.06), (1, 1), 0.5)
    assert judge(delta, [1.0], [2.0], Settings(), 0.5).note == "deterministic: judged by the threshold"


def test_directionless_metrics_are_higher_or_lower() -> None:
    spec = Spec("x", "f", "u", "none", 0.01, statistic="value", deterministic=True)
    assert judge(spec, [1.0], [2.0], Settings(), 0.01).verdict == "higher"
    assert judge(spec, [2.0], [1.0], Settings(), 0.01).verdict == "lower"
    up = Spec("x", "f", "u", "higher", 0.01, statistic="value", deterministic=True)
    assert judge(up, [2.0], [1.0], Settings(), 0.01).verdict == "worse"
    assert judge(up, [1.0], [2.0], Settings(), 0.01).verdict == "better"


def test_one_run_per_side_without_a_floor_says_how_to_get_evidence() -> None:
    spec = Spec("x", "f", "u", "lower", 0.01, statistic="value")
    row = judge(spec, [1.0], [2.0], Settings(), 0.01, note="n")
    assert row.verdict == "inconclusive" and row.note == "n" and row.p_value is None and row.test is None
    assert row.reason == ("one run per side and no noise floor for this metric on this hardware and drivers: record "
                          "replicates")


def test_a_delta_scale_t_test_gives_an_interval_of_the_difference() -> None:
    from scipy import stats as sps

    spec = Spec("x", "f", "u", "lower", 0.5, scale="delta", statistic="value")
    va, vb = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    row = judge(spec, va, vb, Settings(), 0.5, note="n")
    ref = sps.ttest_ind(vb, va)
    ci = ref.confidence_interval(0.95)
    assert row.ci_of == "delta" and row.ci == pytest.approx((ci.low, ci.high))
    assert row.p_value == pytest.approx(ref.pvalue) and row.verdict == "worse" and row.df == 4
    assert row.note == "n; between runs: 3 vs 3 runs; df=4" and row.evidence == "3 vs 3 runs"


# ------------------------------------------------------------------------------------ compare_metric
def obs_metric(name: str, values: dict[str, Observation], note: str = "", scale: Any = "ratio") -> RunMetric:
    return RunMetric(Spec(name, "f", "u", "lower", 0.05, scale=scale, statistic="value", note=note),
                     lambda run: values[run.id])


def test_unavailable_rows_name_the_run_and_keep_the_threshold() -> None:
    a, b1, b2 = rd({}, rid="a" * 64), rd({}, name="b1", rid="b" * 64), rd({}, name="b2", rid="c" * 64)
    values = {"a" * 64: Observation(1.0), "b" * 64: Observation(2.0), "c" * 64: metrics.unavailable("no data")}
    row = compare_metric(obs_metric("x", values), [a], [b1, b2], Settings(noise=0.2))
    assert row.verdict == "unavailable" and row.reason == "B b2 (cccccccc): no data"
    assert (row.n, row.threshold, row.a, row.ci) == ((0, 0), 0.2, None, None)
    single = compare_metric(obs_metric("x", values, scale="delta"), [rd({}, rid="c" * 64)], [a], Settings(noise=0.2))
    assert single.reason == "A: no data" and single.threshold == 0.05  # --noise is for ratio metrics only


def test_notes_of_the_spec_and_the_runs_are_joined() -> None:
    a, b = rd({}, rid="a" * 64), rd({}, rid="b" * 64)
    values = {"a" * 64: Observation(1.0, note="z run"), "b" * 64: Observation(1.0, note="a run")}
    assert compare_metric(obs_metric("x", values), [a], [b], Settings()).note == "a run; z run"
    assert compare_metric(obs_metric("x", values, note="spec"), [a], [b], Settings()).note == "spec; a run; z run"


def test_a_paired_metric_that_cannot_pair_is_unavailable() -> None:
    metric = PairedMetric(Spec("p", "f", "u", "lower", 0.01, statistic="mean", note="spec note"),
                          lambda a, b: "no shared range")
    row = compare_metric(metric, [rd({})], [rd({})], Settings(noise=0.3))
    assert (row.verdict, row.reason, row.note, row.n, row.threshold) == (
        "unavailable", "no shared range", "spec note", (0, 0), 0.3)


def test_a_paired_metric_learns_its_floor_from_each_group() -> None:
    from scipy import stats as sps

    def paired(a: Sequence[RunData], b: Sequence[RunData]) -> Paired:
        # two shared points; each run's value is its constant level (the mean over the points)
        level = {r.id: float(r.receipt.name or 0) for r in [*a, *b]}
        return Paired(np.array([[level[r.id] for r in a]] * 2), np.array([[level[r.id] for r in b]] * 2), "pts")

    metric = PairedMetric(Spec("p", "f", "u", "lower", 0.01, statistic="mean"), paired)
    runs = {v: rd({}, name=v, rid=f"{i:064d}") for i, v in enumerate(("3.0", "3.3", "2.0", "2.2", "5.0", "5.5"))}
    groups = [[runs["2.0"], runs["2.2"]], [runs["5.0"], runs["5.5"]]]
    row = compare_metric(metric, [runs["3.0"]], [runs["3.3"]], Settings(), groups)
    # floor: log values, SS = 2 x (log(1.1) / 2)^2 over 2 df... below the 3-df minimum: no floor
    assert row.verdict == "inconclusive"
    groups.append([rd({}, name="7.0", rid="7" * 64), rd({}, name="7.7", rid="8" * 64)])
    row = compare_metric(metric, [runs["3.0"]], [runs["3.3"]], Settings(), groups)
    sd = math.sqrt(3 * 2 * (math.log(1.1) / 2) ** 2 / 3)
    t = math.log(1.1) / (sd * math.sqrt(2))
    assert row.test == "t-test (noise floor)" and row.df == 3
    assert row.p_value == pytest.approx(2 * sps.t.sf(t, 3))
    assert row.note == "pts; between runs: 1 vs 1 runs, " + metrics.evidence.Floor(sd, 3, 3, 6, True).describe() \
        + "; df=3"


# ------------------------------------------------------------------------------------ built-in metrics
def test_the_built_in_metrics_and_how_they_are_judged() -> None:
    specs = [m.spec for p in builtin_metrics.BUILTIN for m in p.build([], [])]
    got = [(s.name, s.family, s.unit, s.direction, s.threshold, s.scale, s.statistic, s.deterministic) for s in specs]
    assert got == [
        ("tokens/s per device", "throughput", "tokens/s", "higher", 0.05, "ratio", "median", False),
        ("TFLOP/s per device", "throughput", "TFLOP/s", "higher", 0.05, "ratio", "median", False),
        ("MFU", "throughput", "fraction", "higher", 0.05, "ratio", "median", False),
        ("step time (median)", "step time", "s", "lower", 0.05, "ratio", "median", False),
        ("step time (p90)", "step time", "s", "lower", 0.05, "ratio", "p90", False),
        ("loss @ matched tokens", "loss", "loss", "lower", 0.01, "ratio", "mean", False),
        ("loss @ matched wall time", "loss", "loss", "lower", 0.01, "ratio", "mean", False),
        ("load CV", "routing", "", "lower", 0.05, "ratio", "mean", False),
        ("max/mean load", "routing", "", "lower", 0.05, "ratio", "mean", False),
        ("load entropy", "routing", "", "higher", 0.01, "ratio", "mean", False),
        ("dropped tokens", "routing", "%", "lower", 0.1, "delta", "mean", False),
        ("capacity waste", "routing", "fraction", "lower", 0.02, "delta", "mean", False),
        ("router entropy", "routing", "", "none", 0.01, "ratio", "mean", False),
        ("grad-norm spikes", "stability", "steps", "lower", 0.5, "delta", "count", False),
        ("loss spikes", "stability", "steps", "lower", 0.5, "delta", "count", False),
        ("NaN/inf or skipped steps", "stability", "steps", "lower", 0.5, "delta", "count", False),
        ("peak device memory", "memory", "GiB", "lower", 0.02, "ratio", "value", True),
        ("peak host memory", "memory", "GiB", "lower", 0.05, "ratio", "value", False),
        ("energy", "energy", "J", "lower", 0.05, "ratio", "value", False),
        ("energy per token", "energy", "J/token", "lower", 0.05, "ratio", "value", False),
    ]
    notes = {s.name: s.note for s in specs}
    steady = "median over steps after warm-up, step-time outliers (MAD) removed"
    assert notes["tokens/s per device"] == notes["step time (median)"] == steady
    assert notes["TFLOP/s per device"] == "model FLOPs per token = 6 x active params + 12 x layers x hidden x seq"
    assert notes["load CV"] == "mean over (step, MoE layer) after warm-up; std(n)/mean(n)"
    assert notes["dropped tokens"] == "sum(d)/(T x k); threshold in percentage points"


def test_step_time_statistics_over_the_steady_steps() -> None:
    # 5 steps, the first is warm-up; the others 1, 1, 2, 4 (none an outlier): median 1.5, p90 3.4 (numpy's
    # linear rule: 2 + 0.7 x 2)
    m = by_name(builtin_metrics._throughput_metrics([], []))
    run = rd(steps_of([9.0, 1.0, 1.0, 2.0, 4.0]))
    median = m["step time (median)"].observe(run)
    assert median.value == 1.5 and median.samples.tolist() == [1.0, 1.0, 2.0, 4.0] and median.reason is None
    assert m["step time (p90)"].observe(run).value == pytest.approx(3.4)
    assert m["step time (median)"].observe(rd({})).reason == "no step rows"
    assert m["step time (median)"].observe(rd(steps_of([NAN] * 3))).reason == "step_time_s not logged"


def test_throughput_from_tokens_and_step_times_when_not_logged() -> None:
    m = by_name(builtin_metrics._throughput_metrics([], []))["tokens/s per device"]
    # one step (no warm-up): 100 tokens from 0 in 0.5 s
    one = m.observe(rd(steps_of([0.5])))
    assert one.value == pytest.approx(200.0) and one.note == ""
    # 3 steps on 2 devices: 100 tokens per step in 0.5, 0.25 s after warm-up -> 200 and 400 tokens/s, per device 100
    # and 200
    two = m.observe(rd(steps_of([1.0, 0.5, 0.25]), workload=Workload(parallelism=Parallelism(world_size=2))))
    assert two.samples.tolist() == pytest.approx([100.0, 200.0]) and two.note == "2 device(s)"
    assert m.observe(rd(steps_of([1.0, 1.0], tokens_per_s=[5.0, NAN]))).reason == "no finite throughput after warm-up"
    untimed = steps_of([NAN, NAN])
    assert m.observe(rd(untimed)).reason == "neither tokens_per_s nor tokens and step_time_s logged"
    assert m.observe(rd({})).reason == "no step rows"


def test_tflops_and_mfu_from_each_source() -> None:
    m = by_name(builtin_metrics._throughput_metrics([], []))
    tflops, mfu = m["TFLOP/s per device"], m["MFU"]
    # FLOPs per token 6 x 1e6 + 12 x 2 x 64 x 128 = 6,196,608; 1e6 tokens/s -> 6.196608 TFLOP/s
    known = Workload(model=Architecture(layers=2, hidden=64, active_params=1_000_000), data=Data(sequence_length=128),
                     precision=Precision(compute="bf16"), device="cuda")
    h200 = Stack(hardware=Hardware(gpu_model="NVIDIA H200", gpu_count=1))
    run = rd(steps_of([1.0, 1.0], tokens_per_s=[1e6, 1e6]), workload=known, stack=h200)
    assert tflops.observe(run).value == pytest.approx(6.196608)
    got = mfu.observe(run)
    assert got.value == pytest.approx(6.196608 / 989) and got.note == "H200 dense bf16 tensor peak, 989 TFLOP/s per GPU"
    # without the model's size: FLOP/s as logged (per run, divided over 2 devices), else TFLOP/s per device
    two = Workload(parallelism=Parallelism(world_size=2))
    flops = rd(steps_of([1.0, 1.0], tokens_per_s=[1.0, 1.0], flops_per_s=[NAN, 4e12]), workload=two)
    assert tflops.observe(flops).value == pytest.approx(2.0)
    printed = rd(steps_of([1.0, 1.0], tokens_per_s=[1.0, 1.0], tflops_per_device=[NAN, 150.0]))
    assert tflops.observe(printed).value == pytest.approx(150.0)
    bare = rd(steps_of([1.0, 1.0], tokens_per_s=[1.0, 1.0]))
    assert tflops.observe(bare).reason == ("model FLOPs per token unknown (workload lacks active_params, layers, "
                                           "hidden or sequence_length)")
    assert tflops.observe(rd({})).reason == "no step rows"
    on_h200 = rd(steps_of([1.0, 1.0], tokens_per_s=[1.0, 1.0]), stack=h200,
                 workload=Workload(precision=Precision(compute="bf16"), device="cuda"))
    assert mfu.observe(on_h200).reason == tflops.observe(bare).reason


def test_evals_at_the_last_point_both_sides_ran() -> None:
    def ev(step: int, value: float | None, source: str | None = None, tokens: int | None = None,
           metric: str = "loss") -> dict[str, Any]:
        return {"step": step, "tokens": tokens, "split": "val", "source": source, "metric": metric, "value": value}

    a = rd({}, evals=[ev(100, 3.0), ev(200, 2.5), ev(300, NAN), ev(100, 0.9, "rare", metric="accuracy"),
                      ev(200, 0.5, metric="bleu_like")],
           workload=Workload(task=Task(quality_gates=(QualityGate(name="g", metric="accuracy", threshold=1.0,
                                                                  source="rare"),))))
    b = rd({}, rid="b" * 64, evals=[ev(100, 3.1), ev(200, 2.4), ev(200, 2.3), ev(300, 2.0),
                                    ev(100, 0.8, "rare", metric="accuracy")])
    rows = {m.spec.name: m for m in builtin_metrics._eval_metrics([a], [b])}
    assert list(rows) == ["eval val/all/loss", "eval val/rare/accuracy (rare)", "eval val/all/bleu_like"]
    loss = rows["eval val/all/loss"]
    # A's step-300 eval is NaN: the last step both ran is 200; B logged two there, the last counts
    assert (loss.spec.direction, loss.spec.note) == ("lower", "at the last eval both sides ran (step 200)")
    assert (loss.observe(a).value, loss.observe(b).value) == (2.5, 2.3)
    acc = rows["eval val/rare/accuracy (rare)"]
    assert acc.spec.direction == "higher" and acc.observe(b).value == 0.8
    other = rows["eval val/all/bleu_like"]
    assert other.spec.direction == "none" and other.spec.note == ""
    assert other.observe(b).reason == "no val/all/bleu_like eval"
    assert other.observe(a).reason == "the sides never evaluated at the same token count or step"
    tok = rd({}, evals=[ev(1, 3.0, tokens=1000), ev(2, 2.0, tokens=2000)])
    tokens = builtin_metrics._eval_metrics([tok], [tok])[0]
    assert tokens.spec.note == "at the last eval both sides ran (tokens 2,000)" and tokens.observe(tok).value == 2.0


@pytest.mark.parametrize(("metric", "direction"), [
    *[(m, "lower") for m in ("loss", "perplexity", "ppl", "error", "wer", "cer", "nll", "Loss", "WER")],
    *[(m, "higher") for m in ("accuracy", "acc", "f1", "bleu", "exact_match", "em", "pass@1", "EM")],
    ("bleu_like", "none"),
])
def test_which_eval_metrics_are_better_lower_or_higher(metric: str, direction: str) -> None:
    run = rd({}, evals=[{"step": 1, "tokens": None, "split": None, "source": None, "metric": metric, "value": 1.0}])
    (got,) = builtin_metrics._eval_metrics([run], [run])
    assert got.spec.direction == direction and got.spec.statistic == "value" and got.spec.family == "evals"
    assert got.spec.name == f"eval all/all/{metric}" and got.spec.unit == metric


def test_timing_phases_after_warm_up() -> None:
    timing = {"attention": {"step": np.arange(1, 6), "seconds": np.array([9.0, 1.0, 2.0, NAN, 3.0])},
              "late": {"step": np.array([1]), "seconds": np.array([5.0])}}
    run = rd(steps_of([1.0] * 5), timing=timing)
    phases = by_name(builtin_metrics._timing_metrics([run], [rd({})]))
    assert list(phases) == ["time: attention", "time: late"]
    got = phases["time: attention"].observe(run)  # steps 2.. (step 1 is warm-up), NaN left out
    assert got.value == 2.0 and got.samples.tolist() == [1.0, 2.0, 3.0]
    assert phases["time: late"].observe(run).reason == "phase 'late' not timed after warm-up"
    assert phases["time: attention"].observe(rd(steps_of([1.0]), timing={"x": timing["late"]})).reason == \
        "phase 'attention' not timed"
    assert phases["time: attention"].observe(rd({})).reason == "no timing rows"
    single = rd({}, timing={"attention": {"step": np.array([1]), "seconds": np.array([4.0])}})
    assert phases["time: attention"].observe(single).value == 4.0  # no steps: nothing is warm-up


def test_memory_and_energy_observations() -> None:
    m = by_name(builtin_metrics._resource_metrics([], []))
    device, host, energy, per_token = (m[k] for k in ("peak device memory", "peak host memory", "energy",
                                                      "energy per token"))
    gib = 2.0**30
    logged = rd(steps_of([1.0, 1.0], memory_bytes=[gib, 3 * gib]))
    assert (device.observe(logged).value, device.observe(logged).note) == (3.0, "peak of the steps' memory_bytes")
    tele = {"device": np.array(["gpu0", "cuda:1", "host", "gpu0"], dtype=object),
            "memory_bytes": np.array([2 * gib, 5 * gib, 9 * gib, NAN])}
    sampled = rd(steps_of([1.0]), telemetry=tele)
    assert device.observe(sampled).value == 5.0
    assert device.observe(sampled).note == "GPU memory in use sampled by telemetry"
    assert host.observe(sampled).value == 9.0
    assert host.observe(sampled).note == "memory in use on the whole node (other processes too)"
    assert device.observe(rd(steps_of([1.0]))).reason == ("no device memory logged (CPU run, or memory_bytes not "
                                                          "logged)")
    only_host = rd({}, telemetry={"device": np.array(["host"], dtype=object), "memory_bytes": np.array([gib])})
    assert device.observe(only_host).value is None
    assert host.observe(rd({})).reason == "no telemetry"
    gpu_only = rd({}, telemetry={"device": np.array(["gpu0"], dtype=object), "memory_bytes": np.array([gib])})
    assert host.observe(gpu_only).reason == "host memory not sampled"
    measured = rd({}, summary=Summary(energy_j=500.0, energy_method="counter", tokens=1000))
    assert (energy.observe(measured).value, energy.observe(measured).note) == (500.0, "counter")
    assert per_token.observe(measured).value == 0.5 and per_token.observe(measured).note == "counter"
    assert energy.observe(rd({})).reason == "energy not measured"
    assert per_token.observe(rd({})).reason == "energy not measured"
    no_tokens = rd({}, summary=Summary(energy_j=500.0, energy_method="counter"))
    assert per_token.observe(no_tokens).reason == "tokens not logged"


def test_stability_counts() -> None:
    m = by_name(builtin_metrics._stability_metrics([], []))
    n = 30
    loss = np.full(n, 3.0)
    grad = np.ones(n)
    grad[20] = 50.0
    run = rd(steps_of([1.0] * n, loss=loss, grad_norm=grad, skipped=[NAN] * 28 + [1.0, 0.0],
                      loss_nonfinite=[1.0] + [0.0] * 29))
    spikes = m["grad-norm spikes"].observe(run)
    # a grad norm of 50 after a block of ones: one spike, of 27 steps after warm-up (3 of 30)
    assert spikes.value == 1.0 and spikes.note == "of 27 steps after warm-up" and spikes.samples.size == 27
    assert m["loss spikes"].observe(run).value == 0.0
    bad = m["NaN/inf or skipped steps"].observe(run)
    assert bad.value == 2.0 and bad.note == "of 30 steps"  # the non-finite loss at step 1, the skipped step 29
    assert m["loss spikes"].observe(rd(steps_of([1.0], loss=[NAN]))).reason == "loss not logged"
    assert m["grad-norm spikes"].observe(rd({})).reason == "no step rows"


def test_plugins_report_a_module_that_fails_to_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    found = metrics.plugins()
    assert found.problems == []
    assert any(getattr(h, "name", "") for h in found.headlines)
    real = importlib.import_module

    def broken(name: str, *args: Any) -> Any:
        if name == "ledger.analyses.km":
            raise ImportError("km is broken\nsecond line")
        return real(name, *args)

    monkeypatch.setattr(metrics.importlib, "import_module", broken)
    again = metrics.plugins()
    assert again.problems == ["ledger.analyses.km failed to import: km is broken"]
    assert len(again.metrics) == len(found.metrics) and len(again.headlines) == len(found.headlines)


def test_routing_metrics_observe_each_formula_after_warm_up() -> None:
    # two (step, layer) rows; step 1 is warm-up (20 steps: the first 2). At step 10: loads n = 100, 156, 128, 128
    # over 4 experts (T x k = 512), 6 dropped, capacity 4 x 150 = 600, router entropy 0.9
    n = np.array([100.0, 156, 128, 128])
    routing = {"step": np.array([1, 10]), "layer": np.array([0, 0]), "experts": np.array([4.0, 4.0]),
               "n_sum": np.array([7.0, n.sum()]), "n_std": np.array([7.0, n.std()]), "n_max": np.array([7.0, 156.0]),
               "d_sum": np.array([7.0, 6.0]), "c_sum": np.array([7.0, 600.0]), "entropy": np.array([7.0, 0.9]),
               "n_log_n": np.array([7.0, (n * np.log(n)).sum()])}
    run = rd(steps_of([1.0] * 20), routing=routing)
    q = n / 512
    expected = {"load CV": n.std() / 128, "max/mean load": 156 / 128,
                "load entropy": -(q * np.log(q)).sum() / np.log(4), "dropped tokens": 100 * 6 / 512,
                "capacity waste": (600 - (512 - 6)) / 600, "router entropy": 0.9}
    m = by_name(builtin_metrics._routing_metrics([], []))
    assert list(m) == list(expected)
    for name, value in expected.items():
        got = m[name].observe(run)
        assert got.value == pytest.approx(value) and got.samples.tolist() == pytest.approx([value]), name
    assert m["load CV"].observe(rd(steps_of([1.0]))).reason == "no routing rows (a dense model, or routing not logged)"
    late = {k: v[:1] for k, v in routing.items()}
    assert m["load CV"].observe(rd(steps_of([1.0] * 20), routing=late)).reason == "no routing rows after warm-up"
    blank = dict(routing, entropy=np.array([NAN, NAN]), c_sum=np.array([NAN, NAN]))
    assert m["router entropy"].observe(rd(steps_of([1.0] * 20), routing=blank)).reason == "router entropy not logged"
    assert m["capacity waste"].observe(rd(steps_of([1.0] * 20), routing=blank)).reason == \
        "no capacity (dropless routing)"


def test_timing_and_stability_specs() -> None:
    run = rd(steps_of([1.0]), timing={"attention": {"step": np.array([1]), "seconds": np.array([1.0])}})
    (spec,) = [m.spec for m in builtin_metrics._timing_metrics([run], [run])]
    assert (spec.name, spec.family, spec.unit, spec.direction, spec.threshold, spec.statistic, spec.note) == (
        "time: attention", "timing", "s", "lower", 0.05, "median", "median per step after warm-up")
    notes = {m.spec.name: m.spec.note for m in builtin_metrics._stability_metrics([], [])}
    assert notes == {"grad-norm spikes": "grad norm > 3x and > 6 robust SD above the previous block's median",
                     "loss spikes": "loss > 1.1x and > 6 robust SD above the previous block's median",
                     "NaN/inf or skipped steps": ""}
    # the spike blocks: 5% of the steps, at least 10 and at most 50
    blocks = [builtin_metrics._spike_block(n) for n in (0, 219, 220, 999, 1000, 1039, 5000)]
    assert blocks == [10, 10, 11, 49, 50, 50, 50]


def test_a_p_value_equal_to_alpha_is_not_significant() -> None:
    spec = Spec("x", "f", "u", "lower", 0.05, scale="delta", statistic="value")
    va, vb = [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]
    first = judge(spec, va, vb, Settings(), 0.05)
    assert first.p_value is not None and first.verdict == "worse"
    at = judge(spec, va, vb, Settings(alpha=first.p_value), 0.05)
    assert at.verdict == "no significant difference" and at.threshold == 0.05 and at.unit == "u"
    assert at.note == "between runs: 3 vs 3 runs; df=4"


def test_within_run_intervals_follow_the_level() -> None:
    spec = Spec("x", "f", "u", "lower", 0.05)
    rng = np.random.default_rng(4)
    sa, sb = 1.0 + 0.1 * rng.standard_normal(400), 2.0 + 0.1 * rng.standard_normal(400)
    wide = judge(spec, [float(np.median(sa))], [float(np.median(sb))], Settings(), 0.05, samples_a=sa, samples_b=sb)
    narrow = judge(spec, [float(np.median(sa))], [float(np.median(sb))], Settings(level=0.5), 0.05, samples_a=sa,
                   samples_b=sb)
    assert wide.ci_a is not None and narrow.ci_a is not None and wide.ci_b is not None and narrow.ci_b is not None
    # a 50% interval lies strictly inside the 95% one, both around the run's median
    assert wide.ci_a[0] < narrow.ci_a[0] < wide.a < narrow.ci_a[1] < wide.ci_a[1]
    assert wide.ci_b[0] < narrow.ci_b[0] < wide.b < narrow.ci_b[1] < wide.ci_b[1]
