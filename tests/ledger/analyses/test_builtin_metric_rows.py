"""The per-run figures of the built-in metric rows, each from data written here and worked out by hand: samples/s
and steps/s of wrapped runs (printed, or global batch / step time, or 1 / step time), tokens/s per device from
tokens and step times, device and host memory (per GPU, the process tree's, which source), stability counts,
the loss curves' axis and description, routing samples after warm-up, the rows' specs and notes (found by
mutation testing, session 14)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ledger.analyses import builtin_metrics as bm
from ledger.analyses.metrics import Paired, Settings, Spec
from ledger.analyses.series import RunData
from schemas.receipt import Architecture, Data, Hardware, Parallelism, Precision, Receipt, Stack, Workload

NAN = math.nan
GIB = 2.0**30


def steps_of(step_time: Sequence[float], **columns: Sequence[float]) -> dict[str, np.ndarray]:
    """Step rows 1..n (the first is warm-up for n < 20) with the given step times, tokens 100 per step, no
    logged rate; ``columns`` replace or add columns."""
    n = len(step_time)
    out: dict[str, np.ndarray] = {
        "step": np.arange(1, n + 1), "tokens": 100.0 * np.arange(1, n + 1), "time": np.cumsum(step_time),
        "loss": np.linspace(4, 3, n), "grad_norm": np.ones(n), "step_time_s": np.asarray(step_time, dtype=np.float64),
        "tokens_per_s": np.full(n, NAN), "flops_per_s": np.full(n, NAN), "tflops_per_device": np.full(n, NAN),
        "memory_bytes": np.full(n, NAN), "skipped": np.zeros(n), "loss_nonfinite": np.zeros(n),
    }
    out.update({k: np.asarray(v) for k, v in columns.items()})
    return out


def rd(steps: dict[str, np.ndarray], *, workload: Workload | None = None, stack: Stack | None = None,
       evals: list[dict[str, Any]] | None = None, telemetry: dict[str, Any] | None = None,
       routing: dict[str, np.ndarray] | None = None) -> RunData:
    receipt = Receipt(run_uuid="u", status="succeeded", name="r", workload=workload or Workload(),
                      stack=stack or Stack())
    tele = {k: np.asarray(v) for k, v in (telemetry or {}).items()}
    return RunData("a" * 64, receipt, steps, evals or [], routing or {}, {}, tele)


def by_name(rows: list[Any]) -> dict[str, Any]:
    return {m.spec.name: m for m in rows}


WRAPPED = {"tokens": [NAN] * 10}  # a launch that printed no tokens


# ------------------------------------------------------------------------------------------ samples/s, steps/s
def test_samples_per_s_as_printed_after_warm_up() -> None:
    # 10 steps: the first is warm-up; every later step time 0.5 s, none an outlier
    run = rd(steps_of([2.0] + [0.5] * 9, samples_per_s=[1, 60, 62, 64, 66, 68, 70, 72, 74, 76], **WRAPPED))
    got = bm.samples_per_s(run)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    assert got.tolist() == [60.0, 62.0, 64.0, 66.0, 68.0, 70.0, 72.0, 74.0, 76.0]
    obs = by_name(bm._throughput_metrics([run], [run]))["samples/s"].observe(run)
    assert (obs.value, obs.reason, obs.samples.tolist()) == (68.0, None, got.tolist())


def test_samples_per_s_from_global_batch_over_step_time() -> None:
    # the warm-up step took 0 s (32 / 0 is left out without a warning); later: batch / 0.5 s
    batch = [32, 16, 32, 48, 32, 32, 32, 32, 32, 64]
    run = rd(steps_of([0.0] + [0.5] * 9, global_batch=batch, **WRAPPED))
    assert bm.samples_per_s(run).tolist() == [32.0, 64.0, 96.0, 64.0, 64.0, 64.0, 64.0, 64.0, 128.0]
    assert by_name(bm._throughput_metrics([run], [run]))["samples/s"].observe(run).value == 64.0
    # a step time column shorter than the steps, or no batch: no rate
    short = steps_of([0.5] * 10, global_batch=[32] * 10, **WRAPPED)
    short["step_time_s"] = np.array([0.5] * 9)
    why = "no samples rate printed, nor global batch and step time"
    assert bm.samples_per_s(rd(short)) == why
    assert bm.samples_per_s(rd(steps_of([0.5] * 10, **WRAPPED))) == why
    assert bm.samples_per_s(rd(steps_of([NAN] * 10, global_batch=[32] * 10))) == why
    obs = by_name(bm._throughput_metrics([run], [run]))["samples/s"].observe(rd(steps_of([0.5] * 10, **WRAPPED)))
    assert (obs.value, obs.samples, obs.reason) == (None, None, why)
    assert bm.samples_per_s(rd({})) == "no step rows"



def test_a_one_step_run_without_the_columns() -> None:
    # one step row, nothing dropped as warm-up; no printed rate: 32 samples / 0.5 s; no step time: no rate
    one = {"step": np.array([1]), "tokens": np.array([NAN]), "global_batch": np.array([32.0]),
           "step_time_s": np.array([0.5])}
    assert bm.samples_per_s(rd(one)).tolist() == [64.0]
    assert bm.steps_per_s(rd({"step": np.array([1])})) == "step_time_s not logged (nor timed by the output)"

def test_steps_per_s_is_one_over_the_steady_step_times() -> None:
    # after warm-up: 0.5 s five times, 0.4 s four times (median 0.5, none beyond 3.5 robust SD)
    st = [2.0, 0.5, 0.4, 0.5, 0.4, 0.5, 0.4, 0.5, 0.4, 0.5]
    run = rd(steps_of(st, **WRAPPED))
    assert bm.steps_per_s(run).tolist() == pytest.approx([2.0, 2.5, 2.0, 2.5, 2.0, 2.5, 2.0, 2.5, 2.0])
    obs = by_name(bm._throughput_metrics([run], [run]))["steps/s"].observe(run)
    assert obs.value == pytest.approx(2.0) and obs.reason is None
    why = "step_time_s not logged (nor timed by the output)"
    assert bm.steps_per_s(rd(steps_of([NAN] * 10, **WRAPPED))) == why
    assert by_name(bm._throughput_metrics([run], [run]))["steps/s"].observe(rd(steps_of([NAN] * 10))).reason == why
    assert bm.steps_per_s(rd({})) == "no step rows"


def test_the_wrapped_rate_rows_and_their_specs() -> None:
    note = "median over steps after warm-up, step-time outliers (MAD) removed"
    wrapped = rd(steps_of([0.5] * 10, **WRAPPED))
    rows = by_name(bm._throughput_metrics([wrapped], [rd(steps_of([0.5] * 10))]))
    assert rows["samples/s"].spec == Spec("samples/s", "throughput", "samples/s", "higher", 0.05,
                                          note=note + "; as printed, else global batch / step time")
    assert rows["steps/s"].spec == Spec("steps/s", "throughput", "steps/s", "higher", 0.05,
                                        note=note + "; 1 / step time (tokens per step unknown)")
    assert list(rows) == ["tokens/s per device", "TFLOP/s per device", "MFU", "samples/s", "steps/s",
                          "step time (median)", "step time (p90)"]
    with_tokens = rd(steps_of([0.5] * 10))
    assert "samples/s" not in by_name(bm._throughput_metrics([with_tokens], [with_tokens]))


# ------------------------------------------------------------------------------------------ tokens/s per device
def test_tokens_per_s_per_device_from_tokens_and_step_times() -> None:
    # cumulative tokens -> 100 or 200 per step; 0.5 s per step; 2 devices; the warm-up step took 0 s
    tokens = [100, 200, 400, 500, 700, 800, 1000, 1100, 1300, 1400]
    two = Workload(parallelism=Parallelism(world_size=2))
    run = rd(steps_of([0.0] + [0.5] * 9, tokens=tokens), workload=two)
    assert bm.tokens_per_s_per_device(run).tolist() == [100.0, 200.0, 100.0, 200.0, 100.0, 200.0, 100.0, 200.0, 100.0]
    obs = by_name(bm._throughput_metrics([run], [run]))["tokens/s per device"].observe(run)
    assert (obs.value, obs.note) == (100.0, "2 device(s)")
    # computed once per run: a later call returns what the first stored
    memo = rd(steps_of([0.5] * 10))
    memo.memo["tokens_per_s_per_device"] = "kept"
    assert bm.tokens_per_s_per_device(memo) == "kept"


def test_step_time_tflops_and_mfu_keep_their_samples() -> None:
    run = rd(steps_of([2.0] + [0.5] * 9, tokens_per_s=[1.0] * 10, tflops_per_device=[9, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
    m = by_name(bm._throughput_metrics([run], [run]))
    step = m["step time (median)"].observe(run)
    assert (step.value, step.note, step.samples.tolist()) == (0.5, "", [0.5] * 9)
    tflops = m["TFLOP/s per device"].observe(run)
    assert (tflops.value, tflops.samples.tolist()) == (5.0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    given = bm._sample_obs(np.array([1.0, 3.0]), "median", "missing", "n")
    assert (given.value, given.note) == (2.0, "n")
    # 6 x 1e6 + 12 x 2 x 64 x 128 = 6,196,608 FLOPs per token at 1e6 tokens/s: 6.196608 TFLOP/s of 989
    known = Workload(model=Architecture(layers=2, hidden=64, active_params=1_000_000), data=Data(sequence_length=128),
                     precision=Precision(compute="bf16"), device="cuda")
    h200 = Stack(hardware=Hardware(gpu_model="NVIDIA H200", gpu_count=1))
    mfu = m["MFU"].observe(rd(steps_of([1.0, 1.0], tokens_per_s=[1e6, 1e6]), workload=known, stack=h200))
    assert mfu.samples.tolist() == pytest.approx([6.196608 / 989])


# ------------------------------------------------------------------------------------------ memory
def test_device_memory_per_source() -> None:
    steps = steps_of([0.5] * 4, memory_bytes=[1 * GIB, 3 * GIB, NAN, 2 * GIB])
    got = bm._device_memory_obs(rd(steps))
    assert (got.value, got.reason, got.note) == (3.0, None, "peak of the steps' memory_bytes")
    names = ["gpu0", "gpu0:process", "gpu1", "gpu1:process", "host", "process", "gpu1:process"]
    mem = [40 * GIB, 10 * GIB, 50 * GIB, 12 * GIB, 100 * GIB, 20 * GIB, NAN]
    held = bm._device_memory_obs(rd(steps_of([0.5] * 4), telemetry={"device": names, "memory_bytes": mem}))
    assert (held.value, held.reason, held.note) == (12.0, None, "GPU memory the launch's processes held (NVML)")
    gpus = bm._device_memory_obs(rd(steps_of([0.5] * 4), telemetry={"device": names[::2], "memory_bytes": mem[::2]}))
    assert (gpus.value, gpus.note) == (50.0, "GPU memory in use sampled by telemetry")
    cuda = bm._device_memory_obs(rd({}, telemetry={"device": ["cuda:0", "host"], "memory_bytes": [GIB / 2, 8 * GIB]}))
    assert (cuda.value, cuda.note) == (0.5, "GPU memory in use sampled by telemetry")
    why = "no device memory logged (CPU run, or memory_bytes not logged)"
    assert bm._device_memory_obs(rd({}, telemetry={"device": ["gpu0", "gpu1"]})).reason == why
    assert bm._device_memory_obs(rd({}, telemetry={"memory_bytes": [GIB, GIB]})).reason == why
    assert bm._device_memory_obs(rd({}, telemetry={"device": ["host", "process"], "memory_bytes": [GIB, GIB]})
                                 ).reason == why


def test_host_memory_per_source() -> None:
    names = ["gpu0", "gpu0:process", "host", "process", "process"]
    mem = [40 * GIB, 10 * GIB, 100 * GIB, 20 * GIB, 24 * GIB]
    tree = bm._host_memory_obs(rd({}, telemetry={"device": names, "memory_bytes": mem}))
    assert (tree.value, tree.reason, tree.note) == (24.0, None, "peak memory of the launch's process tree")
    node = bm._host_memory_obs(rd({}, telemetry={"device": names[:3], "memory_bytes": mem[:3]}))
    whole_node = "memory in use on the whole node (other processes too)"
    assert (node.value, node.reason, node.note) == (100.0, None, whole_node)
    assert bm._host_memory_obs(rd({}, telemetry={"device": ["gpu0", "host"]})).reason == "no telemetry"
    assert bm._host_memory_obs(rd({})).reason == "no telemetry"
    assert bm._host_memory_obs(rd({}, telemetry={"device": ["gpu0"], "memory_bytes": [GIB]})
                               ).reason == "host memory not sampled"


# ------------------------------------------------------------------------------------------ stability
def test_stability_counts_by_hand() -> None:
    # 30 steps: warm-up 3, blocks of 10; the reference of steps 10..19 is block 0's median (1.0, MAD 0)
    grad = np.ones(30)
    grad[12] = 2.5  # below 3x: not a grad spike
    grad[15] = 3.5  # above 3x
    loss = np.full(30, 2.0)
    loss[22] = 2.4  # 1.2x block 1's median 2.0: a loss spike
    loss[25] = 2.1  # 1.05x: not
    nonfinite, skipped = np.zeros(30), np.zeros(30)
    nonfinite[[5, 9]] = 1
    skipped[[9, 20]] = 1
    run = rd(steps_of([0.5] * 30, grad_norm=grad, loss=loss, loss_nonfinite=nonfinite, skipped=skipped))
    m = by_name(bm._stability_metrics([run], [run]))
    g = m["grad-norm spikes"].observe(run)
    assert (g.value, g.note) == (1.0, "of 27 steps after warm-up")
    assert np.flatnonzero(g.samples).tolist() == [12] and g.samples.size == 27
    s = m["loss spikes"].observe(run)
    assert (s.value, np.flatnonzero(s.samples).tolist()) == (1.0, [19])
    n = m["NaN/inf or skipped steps"].observe(run)
    assert (n.value, n.note, np.flatnonzero(n.samples).tolist()) == (3.0, "of 30 steps", [5, 9, 20])
    assert m["grad-norm spikes"].observe(rd(steps_of([0.5] * 3, grad_norm=[NAN] * 3))).reason == "grad_norm not logged"


# ------------------------------------------------------------------------------------------ loss curves
def test_loss_by_steps_when_tokens_are_unknown() -> None:
    a = rd(steps_of([0.5] * 10, **WRAPPED))
    rows = bm._loss_metrics([a], [a])
    assert [m.spec.name for m in rows] == ["loss @ matched tokens", "loss @ matched wall time", "loss @ matched steps"]
    paired = rows[2].observe([a], [a])
    assert isinstance(paired, Paired)
    assert paired.note.startswith("mean over steps ") and paired.note.endswith(
        "..10 (tokens unknown: equal work only where the batches are equal)")
    assert bm.loss_curve_metric("steps").spec.name == "loss @ matched steps"
    tokens = bm.loss_curve_metric("tokens").observe([rd(steps_of([0.5] * 10))], [rd(steps_of([0.5] * 10))])
    assert isinstance(tokens, Paired) and tokens.note.startswith("mean over ") and tokens.note.endswith("tokens")
    logged = rd(steps_of([0.5] * 10))
    assert bm.loss_curve_metric("tokens").observe([logged], [a]) == "B r (aaaaaaaa): tokens not logged"
    assert bm.loss_curve_metric("tokens").observe([a], [a]) == "A r (aaaaaaaa): tokens not logged"


# ------------------------------------------------------------------------------------------ routing
def routing_rows(steps: list[int], experts: list[int], n_sum: list[float], n_max: list[float]) -> dict[str, np.ndarray]:
    k = len(steps)
    return {"step": np.array(steps), "experts": np.array(experts), "n_sum": np.array(n_sum, dtype=np.float64),
            "n_std": np.ones(k), "n_max": np.array(n_max, dtype=np.float64), "d_sum": np.zeros(k),
            "c_sum": np.full(k, NAN), "entropy": np.full(k, NAN), "n_log_n": np.full(k, NAN)}


def test_routing_samples_from_the_first_steady_step() -> None:
    # 10 step rows, warm-up 1: routing rows from step 2 on; mean load 8 / 4 = 2
    routing = routing_rows([1, 2, 3, 4, 5], [4, 4, 4, 4, 4], [8, 8, 8, 0, 0], [8, 4, 6, 0, 1])
    run = rd(steps_of([0.5] * 10), routing=routing)
    # steps 4 and 5 routed no tokens: 0 / 0 and 1 / 0 are left out without a warning
    assert bm._routing_samples(run, "max_mean").tolist() == [2.0, 3.0]
    no_steps = rd({}, routing=routing)
    assert bm._routing_samples(no_steps, "max_mean").tolist() == [4.0, 2.0, 3.0]
    assert bm._routing_samples(run, "entropy") == "router entropy not logged"
    assert bm._routing_samples(run, "waste") == "no capacity (dropless routing)"
    m = by_name(bm._routing_metrics([run], [run]))
    assert m["max/mean load"].observe(run).value == 2.5
    assert m["load entropy"].spec.note == "-sum(q log q)/log E, 1 = even"
    assert m["router entropy"].spec.note == "mean over tokens of -sum(p log p) / log E"


# ------------------------------------------------------------------------------------------ evals, headlines
def test_eval_unit_per_key_and_rare_sources() -> None:
    evals = [{"step": 10, "tokens": 1000, "split": "val", "source": "web", "metric": "loss", "value": 2.0},
             {"step": 10, "tokens": None, "split": "val", "source": "code", "metric": "loss", "value": 3.0}]
    gen = Workload(data=Data(generator={"rare_source": "code"}))
    run = rd(steps_of([0.5] * 10), evals=evals, workload=gen)
    assert bm.rare_sources(run) == {"code"}
    m = by_name(bm._eval_metrics([run], [run]))
    assert m["eval val/web/loss"].spec.note == "at the last eval both sides ran (tokens 1,000)"
    assert m["eval val/code/loss (rare)"].spec.note == "at the last eval both sides ran (step 10)"


def test_rows_not_named_are_not_headlines() -> None:
    run = rd(steps_of([0.5] * 10))
    rows = bm.compare_all([run], [run], Settings(), headline_rows=("steps/s",))
    assert rows and all(r.headline is False for r in rows)
