"""What one SDK call costs the training loop: ``log_step`` with 10 metrics, and ``log_routing`` of one MoE
layer of 256 experts, against a bare Python call of the same signature and against MLflow's ``log_metric``.

**Ours**: a ``ledger.sdk.Run`` on a temporary staging directory with its background flush thread (every
second, as in training); ``--calls`` calls, then ``close()``. The cost per call is the process's CPU time
(``time.process_time``: the calling thread, the flush thread turning the rows into Arrow and appending them
to the rank's stream, and the final flush) divided by the calls. CPU time rather than wall time: on a
shared machine the wall time of a busy loop mostly measures the other tenants (the wall time is in the
note). ``log_step`` gets the 10 standard step metrics (loss, lr, grad_norm, tokens, step_time_s,
tokens_per_s, flops_per_s, aux_loss, z_loss, loss_scale); ``log_routing`` a numpy int64 array of 256
counts and an entropy.

**Floor**: the same calls to a bare Python function of the same signature (``def f(step, **metrics)``),
``time.thread_time`` per call.

**MLflow** (when it can be imported, by this interpreter or by ``--mlflow-python``; ``make bench`` installs
it): in a child process, ``mlflow.log_metric(key, value, step=...)`` into a sqlite tracking store created
before timing, ``--mlflow-calls`` calls, wall time per call (MLflow's call is a synchronous database write,
so its wall time is its cost). Logging one step's 10 metrics takes it 10 such calls.

Figures:
- ``sdk_log_step_us``: CPU us per ``log_step`` call. Target: <= 10x the bare call (``ratio`` = ours / bare).
  The note has MLflow's 10 ``log_metric`` calls for the same step and that ratio.
- ``sdk_log_routing_us``: CPU us per ``log_routing`` call (one layer). Target: under 1% of a 1 s step shared
  by 58 layers, 172 us (``ratio`` = ours / that budget); the bare call and MLflow (one ``log_metric`` per
  expert: 256 calls) in the note.

    .venv/bin/python bench/bench_sdk_calls.py [--calls 100000] [--mlflow-calls 2000] [--mlflow-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_STEP_VS_BARE = 10.0
ROUTING_BUDGET_US = 0.01 * 1e6 / 58
"""1% of a 1 s step, shared by DeepSeek-V3's 58 MoE layers."""
METRICS = {"loss": 2.0, "lr": 3e-4, "grad_norm": 1.0, "tokens": 1, "step_time_s": 0.5, "tokens_per_s": 1e6,
           "flops_per_s": 1e15, "aux_loss": 0.01, "z_loss": 0.001, "loss_scale": 1.0}

MLFLOW_CHILD = """
import logging, os, sys, time, warnings
warnings.filterwarnings("ignore")
os.environ["MLFLOW_TRACKING_URI"] = "sqlite:///" + sys.argv[1]
logging.getLogger("mlflow").setLevel(logging.ERROR)
logging.getLogger("alembic").setLevel(logging.ERROR)
import mlflow
calls = int(sys.argv[2])
with mlflow.start_run():
    mlflow.log_metric("warmup", 0.0, step=0)
    t0 = time.perf_counter()
    for i in range(calls):
        mlflow.log_metric("loss", 2.0, step=i)
    print(time.perf_counter() - t0)
"""


def ours_log_step(calls: int) -> dict[str, float]:
    import ledger.sdk as sdk

    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as d:
        run = sdk.Run(d, rank=0)
        m = dict(METRICS)
        p0, w0 = time.process_time(), time.perf_counter()
        for i in range(calls):
            run.log_step(i, loss=m["loss"], lr=m["lr"], grad_norm=m["grad_norm"], tokens=i,
                         step_time_s=m["step_time_s"], tokens_per_s=m["tokens_per_s"], flops_per_s=m["flops_per_s"],
                         aux_loss=m["aux_loss"], z_loss=m["z_loss"], loss_scale=m["loss_scale"])
        run.close()
        cpu, wall = time.process_time() - p0, time.perf_counter() - w0
    return {"cpu_us": cpu / calls * 1e6, "wall_us": wall / calls * 1e6}


def bare_log_step(calls: int) -> float:
    def f(step: int, **metrics: Any) -> None:
        return None

    m = dict(METRICS)
    t0 = time.thread_time()
    for i in range(calls):
        f(i, loss=m["loss"], lr=m["lr"], grad_norm=m["grad_norm"], tokens=i, step_time_s=m["step_time_s"],
          tokens_per_s=m["tokens_per_s"], flops_per_s=m["flops_per_s"], aux_loss=m["aux_loss"], z_loss=m["z_loss"],
          loss_scale=m["loss_scale"])
    return (time.thread_time() - t0) / calls * 1e6


def ours_log_routing(calls: int) -> dict[str, float]:
    import numpy as np

    import ledger.sdk as sdk

    counts = np.random.default_rng(0).poisson(1_966_080, 256)
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as d:
        run = sdk.Run(d, rank=0)
        p0, w0 = time.process_time(), time.perf_counter()
        for i in range(calls):
            run.log_routing(i // 58, i % 58, counts, entropy=0.9)
        run.close()
        cpu, wall = time.process_time() - p0, time.perf_counter() - w0
    return {"cpu_us": cpu / calls * 1e6, "wall_us": wall / calls * 1e6}


def bare_log_routing(calls: int) -> float:
    import numpy as np

    def f(step: int, layer: int, tokens: Any, *, entropy: float | None = None) -> None:
        return None

    counts = np.ones(256, dtype=np.int64)
    t0 = time.thread_time()
    for i in range(calls):
        f(i // 58, i % 58, counts, entropy=0.9)
    return (time.thread_time() - t0) / calls * 1e6


def mlflow_us(python: str | None, calls: int) -> tuple[float | None, str]:
    """Wall us per ``mlflow.log_metric`` call, or None and why."""
    exe = python or sys.executable
    probe = subprocess.run([exe, "-c", "import mlflow"], capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"MLflow not importable by {exe} (make bench installs it; or --mlflow-python)"
    with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as d:
        proc = subprocess.run([exe, "-c", MLFLOW_CHILD, str(Path(d) / "mlflow.db"), str(calls)], capture_output=True,
                              text=True, cwd=d)
        if proc.returncode != 0:
            return None, f"MLflow child failed: {proc.stderr.strip().splitlines()[-1:]}"
        seconds = float(proc.stdout.strip().splitlines()[-1])
    return seconds / calls * 1e6, f"MLflow log_metric, sqlite, {calls:,} calls, by {exe}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--mlflow-calls", type=int, default=2_000)
    p.add_argument("--mlflow-python", help="an interpreter that can import mlflow (default: this one)")
    args = p.parse_args()
    load = os.getloadavg()[0]

    step = ours_log_step(args.calls)
    step_bare = bare_log_step(args.calls)
    routing = ours_log_routing(args.calls // 5)
    routing_bare = bare_log_routing(args.calls // 5)
    ml, ml_note = mlflow_us(args.mlflow_python, args.mlflow_calls)
    print(f"log_step: {step['cpu_us']:.2f} us CPU/call ({step['wall_us']:.2f} us wall), bare call "
          f"{step_bare:.2f} us; log_routing (256 counts): {routing['cpu_us']:.2f} us CPU/call "
          f"({routing['wall_us']:.2f} us wall), bare call {routing_bare:.2f} us; "
          + (f"MLflow log_metric {ml:.1f} us/call" if ml is not None else ml_note) + f"; load average {load:.1f}")

    ratio = step["cpu_us"] / step_bare
    vs_ml = f"; MLflow: 10 log_metric calls {10 * ml:.0f} us, {10 * ml / step['cpu_us']:.0f}x ours ({ml_note})" \
        if ml is not None else f"; {ml_note}"
    note = (f"CPU per log_step(10 standard metrics) over {args.calls:,} calls with the flush thread and close "
            f"({step['wall_us']:.2f} us wall); floor: a bare call of the same signature {step_bare:.2f} us; ratio = "
            f"ours / bare, target <= {TARGET_STEP_VS_BARE:g}{vs_ml}; load average {load:.1f}")
    print(json.dumps({"figure": "sdk_log_step_us", "value": round(step["cpu_us"], 3), "unit": "us",
                      "reference": round(step_bare, 3), "ratio": round(ratio, 2), "target": TARGET_STEP_VS_BARE,
                      "met": ratio <= TARGET_STEP_VS_BARE, "note": note}))

    ratio = routing["cpu_us"] / ROUTING_BUDGET_US
    vs_ml = f"; MLflow: 256 log_metric calls {256 * ml / 1e3:.1f} ms ({ml_note})" if ml is not None else f"; {ml_note}"
    note = (f"CPU per log_routing(256 int64 counts, entropy) over {args.calls // 5:,} calls with the flush thread "
            f"and close ({routing['wall_us']:.2f} us wall); bare call {routing_bare:.2f} us "
            f"({routing['cpu_us'] / routing_bare:.0f}x); ratio = ours / {ROUTING_BUDGET_US:.0f} us (1% of a 1 s step "
            f"over 58 layers), target <= 1{vs_ml}; load average {load:.1f}")
    print(json.dumps({"figure": "sdk_log_routing_us", "value": round(routing["cpu_us"], 3), "unit": "us",
                      "reference": round(ROUTING_BUDGET_US, 1), "ratio": round(ratio, 4), "target": 1.0,
                      "met": ratio <= 1.0, "note": note}))


if __name__ == "__main__":
    main()
