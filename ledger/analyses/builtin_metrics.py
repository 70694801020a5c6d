"""The metrics `ledger compare` reports for every pair of sides: throughput and step time, loss at matched
tokens and wall time, final evals per source, routing balance, timing per phase, stability, memory and
energy (each family a :class:`ledger.analyses.metrics.MetricProvider` of :data:`BUILTIN`), and
:func:`compare_all`, which judges each of them and the other analysis modules' ``METRICS`` with the engine
of :mod:`ledger.analyses.metrics`. A new family belongs in its own module with a ``METRICS`` list
(:func:`ledger.analyses.metrics.plugins` finds it), not here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ledger.analyses import matched, stats
from ledger.analyses.metrics import (
    Direction,
    Metric,
    MetricProvider,
    MetricRow,
    Observation,
    Paired,
    PairedMetric,
    RunMetric,
    Settings,
    Spec,
    Statistic,
    compare_metric,
    control_headlines,
    plugins,
    summary_statistic,
    unavailable,
)
from ledger.analyses.series import RunData
from ledger.mfu import Peak, peak_flops


def _steady(run: RunData, column: str) -> NDArray[np.float64]:
    """The finite values of a step column over the steady steps (computed once per run and column)."""
    key = f"steady:{column}"
    if key not in run.memo:
        run.memo[key] = _steady_values(run, column)
    found: NDArray[np.float64] = run.memo[key]
    return found


def _steady_values(run: RunData, column: str) -> NDArray[np.float64]:
    x = np.asarray(run.steps.get(column, np.empty(0)), dtype=np.float64)
    if x.size != run.n_steps:
        return np.empty(0)
    x = x[run.steady]
    return x[np.isfinite(x)]


def _sample_obs(samples: NDArray[np.float64], statistic: Statistic, missing: str, note: str = "") -> Observation:
    if samples.size == 0:
        return unavailable(missing)
    return Observation(summary_statistic(samples, statistic), samples, None, note)


def tokens_per_s_per_device(run: RunData) -> NDArray[np.float64] | str:
    """Per-step tokens/s per device over the steady steps (logged, or tokens / step time), or why not."""
    if "tokens_per_s_per_device" not in run.memo:
        run.memo["tokens_per_s_per_device"] = _tokens_per_s_per_device(run)
    found: NDArray[np.float64] | str = run.memo["tokens_per_s_per_device"]
    return found


def _tokens_per_s_per_device(run: RunData) -> NDArray[np.float64] | str:
    if run.n_steps == 0:
        return "no step rows"
    tps = np.asarray(run.steps["tokens_per_s"], dtype=np.float64)
    if not np.isfinite(tps).any():
        tokens = np.asarray(run.steps["tokens"], dtype=np.float64)
        st = np.asarray(run.steps["step_time_s"], dtype=np.float64)
        per_step = np.diff(np.r_[0.0, tokens])
        with np.errstate(divide="ignore", invalid="ignore"):
            tps = per_step / st
        if not np.isfinite(tps).any():
            return "neither tokens_per_s nor tokens and step_time_s logged"
    x = tps[run.steady]
    x = x[np.isfinite(x)] / run.devices
    return x if x.size else "no finite throughput after warm-up"


def _throughput(run: RunData) -> Observation:
    x = tokens_per_s_per_device(run)
    if isinstance(x, str):
        return unavailable(x)
    return Observation(stats.median(x), x, None, f"{run.devices} device(s)" if run.devices > 1 else "")


def _tflops(run: RunData) -> NDArray[np.float64] | str:
    x = tokens_per_s_per_device(run)
    if isinstance(x, str):
        return x
    fpt = run.flops_per_token
    if fpt is not None:
        return x * fpt / 1e12
    flops = _steady(run, "flops_per_s")
    if flops.size:
        return flops / run.devices / 1e12
    printed = _steady(run, "tflops_per_device")  # as a log printed it per device (Megatron's TFLOP/s/GPU)
    if printed.size:
        return printed
    return "model FLOPs per token unknown (workload lacks active_params, layers, hidden or sequence_length)"


def _tflops_obs(run: RunData) -> Observation:
    x = _tflops(run)
    if isinstance(x, str):
        return unavailable(x)
    return Observation(stats.median(x), x)


def _mfu_obs(run: RunData) -> Observation:
    peak = peak_flops(run.gpu_model, run.precision)
    if not isinstance(peak, Peak):
        return unavailable(peak)
    x = _tflops(run)
    if isinstance(x, str):
        return unavailable(x)
    x = x * 1e12 / peak.flops
    return Observation(stats.median(x), x, None, peak.label)


def _step_time(statistic: Statistic) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        if run.n_steps == 0:
            return unavailable("no step rows")
        return _sample_obs(_steady(run, "step_time_s"), statistic, "step_time_s not logged")

    return observe


def steps_per_s(run: RunData) -> NDArray[np.float64] | str:
    """Per-step steps/s (1 / step time) over the steady steps, or why not."""
    if run.n_steps == 0:
        return "no step rows"
    st = _steady(run, "step_time_s")
    st = st[st > 0]
    return 1.0 / st if st.size else "step_time_s not logged (nor timed by the output)"


def samples_per_s(run: RunData) -> NDArray[np.float64] | str:
    """Per-step samples/s over the steady steps: the rate the run printed (``samples_per_s``), else its global
    batch over its step time; or why not."""
    if run.n_steps == 0:
        return "no step rows"
    printed = _steady(run, "samples_per_s")
    if printed.size:
        return printed
    batch = np.asarray(run.steps.get("global_batch", np.empty(0)), dtype=np.float64)
    st = np.asarray(run.steps.get("step_time_s", np.empty(0)), dtype=np.float64)
    if batch.size == run.n_steps and st.size == run.n_steps:
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (batch / st)[run.steady]
        x = x[np.isfinite(x)]
        if x.size:
            return x
    return "no samples rate printed, nor global batch and step time"


def _rate_obs(rate: Callable[[RunData], NDArray[np.float64] | str]) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        x = rate(run)
        return unavailable(x) if isinstance(x, str) else Observation(stats.median(x), x)

    return observe


def _throughput_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    note = "median over steps after warm-up, step-time outliers (MAD) removed"
    rows: list[Metric] = [
        RunMetric(Spec("tokens/s per device", "throughput", "tokens/s", "higher", 0.05, note=note), _throughput),
        RunMetric(Spec("TFLOP/s per device", "throughput", "TFLOP/s", "higher", 0.05,
                       note="model FLOPs per token = 6 x active params + 12 x layers x hidden x seq"), _tflops_obs),
        RunMetric(Spec("MFU", "throughput", "fraction", "higher", 0.05), _mfu_obs),
    ]
    if any(isinstance(tokens_per_s_per_device(r), str) for r in (*a, *b)):  # a launch that printed no tokens
        rows += [
            RunMetric(Spec("samples/s", "throughput", "samples/s", "higher", 0.05,
                           note=note + "; as printed, else global batch / step time"), _rate_obs(samples_per_s)),
            RunMetric(Spec("steps/s", "throughput", "steps/s", "higher", 0.05,
                           note=note + "; 1 / step time (tokens per step unknown)"), _rate_obs(steps_per_s)),
        ]
    return rows + [
        RunMetric(Spec("step time (median)", "step time", "s", "lower", 0.05, note=note), _step_time("median")),
        RunMetric(Spec("step time (p90)", "step time", "s", "lower", 0.05, statistic="p90"), _step_time("p90")),
    ]


def loss_curve_metric(axis: matched.Axis) -> PairedMetric:
    """Training loss at matched tokens (axis "tokens"), training wall time ("time") or steps ("steps")."""
    name = {"tokens": "loss @ matched tokens", "time": "loss @ matched wall time"}.get(axis, "loss @ matched steps")

    def observe(runs_a: Sequence[RunData], runs_b: Sequence[RunData]) -> Paired | str:
        curves = []
        for side, runs in (("A", runs_a), ("B", runs_b)):
            for r in runs:
                c = matched.curve(r, axis)
                if isinstance(c, str):
                    return f"{side} {r.label}: {c}"
                curves.append(c)
        grid = matched.common_grid(curves)
        if isinstance(grid, str):
            return grid
        values = matched.matched_values(curves, grid)
        return Paired(values[:, : len(runs_a)], values[:, len(runs_a) :], matched.describe(axis, grid))

    return PairedMetric(Spec(name, "loss", "loss", "lower", 0.01, statistic="mean"), observe)


def _loss_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    rows: list[Metric] = [loss_curve_metric("tokens"), loss_curve_metric("time")]
    if any(isinstance(matched.curve(r, "tokens"), str) for r in (*a, *b)):  # a launch that printed no tokens
        rows.append(loss_curve_metric("steps"))
    return rows


def rare_sources(run: RunData) -> set[str]:
    """Sources called rare by the data generator or restricted by a quality gate."""
    out = set()
    rare = run.receipt.workload.data.generator.get("rare_source")
    if isinstance(rare, str):
        out.add(rare)
    out.update(g.source for g in run.receipt.workload.task.quality_gates if g.source)
    return out


def _eval_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return (str(row["split"] or "all"), str(row["source"] or "all"), str(row["metric"]))


def _eval_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    runs = [*a, *b]
    keys: dict[tuple[str, str, str], None] = {}
    for r in runs:
        for row in r.evals:
            keys.setdefault(_eval_key(row))
    rare = set().union(*(rare_sources(r) for r in runs)) if runs else set()
    out: list[Metric] = []
    for key in keys:
        points = [{(row["tokens"] if row["tokens"] is not None else row["step"]) for row in r.evals
                   if _eval_key(row) == key and row["value"] is not None and math.isfinite(row["value"])} for r in runs]
        common = set.intersection(*points) if all(points) else set()
        at = max(common) if common else None
        split, source, metric = key
        lower = metric.lower() in ("loss", "perplexity", "ppl", "error", "wer", "cer", "nll")
        higher = metric.lower() in ("accuracy", "acc", "f1", "bleu", "exact_match", "em", "pass@1")
        direction: Direction = "lower" if lower else "higher" if higher else "none"
        name = f"eval {split}/{source}/{metric}" + (" (rare)" if source in rare else "")
        unit = "tokens" if _by_tokens(runs, key) else "step"
        how = f"at the last eval both sides ran ({unit} {at:,})" if at is not None else ""
        out.append(RunMetric(Spec(name, "evals", metric, direction, 0.01, statistic="value", note=how),
                             _eval_observer(key, at)))
    return out


def _by_tokens(runs: Sequence[RunData], key: tuple[str, str, str]) -> bool:
    return all(row["tokens"] is not None for r in runs for row in r.evals if _eval_key(row) == key)


def _eval_observer(key: tuple[str, str, str], at: Any) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        rows = [row for row in run.evals if _eval_key(row) == key and row["value"] is not None
                and math.isfinite(row["value"])]
        if not rows:
            return unavailable(f"no {'/'.join(key)} eval")
        if at is None:
            return unavailable("the sides never evaluated at the same token count or step")
        hit = [row for row in rows if (row["tokens"] if row["tokens"] is not None else row["step"]) == at]
        return Observation(float(hit[-1]["value"]), None)

    return observe


def _routing_samples(run: RunData, what: str) -> NDArray[np.float64] | str:
    r = run.routing
    if not r or r.get("step") is None or r["step"].size == 0:
        return "no routing rows (a dense model, or routing not logged)"
    first = float(run.steps["step"][run.warmup]) if run.n_steps > run.warmup else -math.inf
    keep = r["step"] >= first
    e = r["experts"][keep].astype(np.float64)
    n = r["n_sum"][keep].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = n / e
        if what == "cv":
            x = r["n_std"][keep] / mean
        elif what == "max_mean":
            x = r["n_max"][keep] / mean
        elif what == "dropped":
            x = 100.0 * r["d_sum"][keep] / n
        elif what == "entropy":
            x = r["entropy"][keep]
        elif what == "load_entropy":
            x = (np.log(n) - r["n_log_n"][keep] / n) / np.log(e)
        else:  # capacity waste
            c = r["c_sum"][keep]
            x = (c - (n - r["d_sum"][keep])) / c
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"entropy": "router entropy not logged", "waste": "no capacity (dropless routing)"}.get(
            what, "no routing rows after warm-up")
    return x


def _routing_observer(what: str) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        x = _routing_samples(run, what)
        return unavailable(x) if isinstance(x, str) else Observation(float(x.mean()), x)

    return observe


def _routing_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    note = "mean over (step, MoE layer) after warm-up"
    return [
        RunMetric(Spec("load CV", "routing", "", "lower", 0.05, statistic="mean", note=note + "; std(n)/mean(n)"),
                  _routing_observer("cv")),
        RunMetric(Spec("max/mean load", "routing", "", "lower", 0.05, statistic="mean"), _routing_observer("max_mean")),
        RunMetric(Spec("load entropy", "routing", "", "higher", 0.01, statistic="mean",
                       note="-sum(q log q)/log E, 1 = even"), _routing_observer("load_entropy")),
        RunMetric(Spec("dropped tokens", "routing", "%", "lower", 0.1, scale="delta", statistic="mean",
                       note="sum(d)/(T x k); threshold in percentage points"), _routing_observer("dropped")),
        RunMetric(Spec("capacity waste", "routing", "fraction", "lower", 0.02, scale="delta", statistic="mean"),
                  _routing_observer("waste")),
        RunMetric(Spec("router entropy", "routing", "", "none", 0.01, statistic="mean",
                       note="mean over tokens of -sum(p log p) / log E"), _routing_observer("entropy")),
    ]


def _timing_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    phases: dict[str, None] = {}
    for r in [*a, *b]:
        for p in r.timing:
            phases.setdefault(p)
    return [RunMetric(Spec(f"time: {p}", "timing", "s", "lower", 0.05, note="median per step after warm-up"),
                      _phase_observer(p)) for p in phases]


def _phase_observer(phase: str) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        t = run.timing.get(phase)
        if t is None:
            return unavailable(f"phase {phase!r} not timed" if run.timing else "no timing rows")
        first = float(run.steps["step"][run.warmup]) if run.n_steps > run.warmup else -math.inf
        x = np.asarray(t["seconds"][t["step"] >= first], dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return unavailable(f"phase {phase!r} not timed after warm-up")
        x = x[stats.mad_keep(x)]
        return Observation(stats.median(x), x)

    return observe


def _spike_block(n: int) -> int:
    return max(10, min(50, n // 20))


def _stability_observer(what: str) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        if run.n_steps == 0:
            return unavailable("no step rows")
        loss = np.asarray(run.steps["loss"], dtype=np.float64)
        if what == "nonfinite":
            skipped = np.asarray(run.steps["skipped"], dtype=np.float64)
            hits = (np.asarray(run.steps["loss_nonfinite"], dtype=np.float64) == 1) | (skipped == 1)
            return Observation(float(hits.sum()), hits.astype(np.float64), None, f"of {loss.size} steps")
        column = "grad_norm" if what == "grad" else "loss"
        x = np.asarray(run.steps[column], dtype=np.float64)
        if not np.isfinite(x).any():
            return unavailable(f"{column} not logged")
        ratio = 3.0 if what == "grad" else 1.1
        hits = stats.spikes(x, block=_spike_block(x.size), ratio=ratio)[run.warmup :]
        return Observation(float(hits.sum()), hits.astype(np.float64), None, f"of {hits.size} steps after warm-up")

    return observe


def _stability_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    return [
        RunMetric(Spec("grad-norm spikes", "stability", "steps", "lower", 0.5, scale="delta", statistic="count",
                       note="grad norm > 3x and > 6 robust SD above the previous block's median"),
                  _stability_observer("grad")),
        RunMetric(Spec("loss spikes", "stability", "steps", "lower", 0.5, scale="delta", statistic="count",
                       note="loss > 1.1x and > 6 robust SD above the previous block's median"),
                  _stability_observer("loss")),
        RunMetric(Spec("NaN/inf or skipped steps", "stability", "steps", "lower", 0.5, scale="delta",
                       statistic="count"), _stability_observer("nonfinite")),
    ]


def _device_memory_obs(run: RunData) -> Observation:
    mem = np.asarray(run.steps.get("memory_bytes", np.empty(0)), dtype=np.float64)
    mem = mem[np.isfinite(mem)]
    if mem.size:
        return Observation(float(mem.max()) / 2**30, None, None, "peak of the steps' memory_bytes")
    devices = run.telemetry.get("device")
    tele = np.asarray(run.telemetry.get("memory_bytes", np.empty(0)), dtype=np.float64)
    if devices is not None and tele.size:
        names = [str(d) for d in devices.tolist()]
        held = np.array([d.startswith("gpu") and d.endswith(":process") for d in names], dtype=np.bool_)
        used = tele[held & np.isfinite(tele)]
        if used.size:
            return Observation(float(used.max()) / 2**30, None, None, "GPU memory the launch's processes held (NVML)")
        gpu = np.array([d.startswith(("gpu", "cuda")) and not d.endswith(":process") for d in names], dtype=np.bool_)
        used = tele[gpu & np.isfinite(tele)]
        if used.size:
            return Observation(float(used.max()) / 2**30, None, None, "GPU memory in use sampled by telemetry")
    return unavailable("no device memory logged (CPU run, or memory_bytes not logged)")


def _host_memory_obs(run: RunData) -> Observation:
    devices = run.telemetry.get("device")
    tele = np.asarray(run.telemetry.get("memory_bytes", np.empty(0)), dtype=np.float64)
    if devices is None or not tele.size:
        return unavailable("no telemetry")
    names = [str(d) for d in devices.tolist()]
    tree = np.array([d == "process" for d in names], dtype=np.bool_)
    used = tele[tree & np.isfinite(tele)]
    if used.size:
        return Observation(float(used.max()) / 2**30, None, None, "peak memory of the launch's process tree")
    host = np.array([d == "host" for d in names], dtype=np.bool_)
    used = tele[host & np.isfinite(tele)]
    if not used.size:
        return unavailable("host memory not sampled")
    return Observation(float(used.max()) / 2**30, None, None, "memory in use on the whole node (other processes too)")


def _energy_obs(run: RunData) -> Observation:
    s = run.receipt.summary
    if s.energy_j is None:
        return unavailable(f"energy {s.energy_method}")
    return Observation(s.energy_j, None, None, s.energy_method)


def _energy_per_token_obs(run: RunData) -> Observation:
    s = run.receipt.summary
    if s.energy_j is None:
        return unavailable(f"energy {s.energy_method}")
    if not s.tokens:
        return unavailable("tokens not logged")
    return Observation(s.energy_j / s.tokens, None, None, s.energy_method)


def _resource_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Metric]:
    return [
        RunMetric(Spec("peak device memory", "memory", "GiB", "lower", 0.02, statistic="value", deterministic=True),
                  _device_memory_obs),
        RunMetric(Spec("peak host memory", "memory", "GiB", "lower", 0.05, statistic="value"), _host_memory_obs),
        RunMetric(Spec("energy", "energy", "J", "lower", 0.05, statistic="value"), _energy_obs),
        RunMetric(Spec("energy per token", "energy", "J/token", "lower", 0.05, statistic="value"),
                  _energy_per_token_obs),
    ]


BUILTIN: tuple[MetricProvider, ...] = (
    MetricProvider("throughput and step time", _throughput_metrics),
    MetricProvider("loss at matched tokens and wall time", _loss_metrics),
    MetricProvider("final evals per source", _eval_metrics),
    MetricProvider("routing balance", _routing_metrics),
    MetricProvider("timing per phase", _timing_metrics),
    MetricProvider("stability", _stability_metrics),
    MetricProvider("memory and energy", _resource_metrics),
)
"""The built-in providers, in report order."""


def providers() -> list[MetricProvider]:
    """The built-in providers followed by those of the other analysis modules."""
    return [*BUILTIN, *plugins().metrics]


def compare_all(runs_a: Sequence[RunData], runs_b: Sequence[RunData], settings: Settings,
                extra: Sequence[MetricProvider] = (), headline_rows: Iterable[str] = (),
                groups: Sequence[Sequence[RunData]] = ()) -> list[MetricRow]:
    """Every metric of the built-in providers and of ``extra``, side by side; rows named in
    ``headline_rows`` are flagged as headlines, and the headline families share alpha
    (:func:`ledger.analyses.metrics.control_headlines`); ``groups``: replicate groups for the noise floors."""
    flagged = set(headline_rows)
    rows: list[MetricRow] = []
    for provider in [*BUILTIN, *extra]:
        for metric in provider.build(runs_a, runs_b):
            row = compare_metric(metric, runs_a, runs_b, settings, groups)
            rows.append(replace(row, headline=row.name in flagged))
    return control_headlines(rows, settings.alpha)
