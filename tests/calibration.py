"""Synthetic runs for calibrating verdicts: step times from an AR(1) process around a per-run offset.

One run of configuration ``config`` (a no-op argument: configurations differ in name only, unless ``speed``
plants a real change):

- step time ``T / speed * exp(u) * exp(0.03 z_t)``, ``u ~ N(0, 0.05^2)`` once per run (between-run SD 5%),
  ``z`` an AR(1) series with unit variance and ``phi ~ U(0.6, 0.8)`` (within-run autocorrelation);
- tokens per step fixed, so tokens/s is ``tokens / step time``;
- loss ``3 + 2 / sqrt(step) + v + 0.02 w_t``, ``v ~ N(0, 0.01^2)`` once per run (the seed's effect on the
  curve), ``w`` another AR(1) series.

:func:`run_data` builds the analyses' in-memory :class:`RunData` (thousands of simulations in seconds);
:func:`publish_run` writes the same run through the real SDK into a staging directory and publishes it.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

STEPS = 120
TOKENS_PER_STEP = 1024
STEP_TIME_S = 0.1
BETWEEN_RUN_SD = 0.05
_PUBLISHED = itertools.count()
"""Runs published by :func:`publish_run` in this process: each starts a minute after the one before."""
WITHIN_RUN_CV = 0.03
LOSS_SEED_SD = 0.01


@dataclass(frozen=True)
class Series:
    """One synthetic run's step columns."""

    config: str
    seed: int
    step: np.ndarray
    step_time_s: np.ndarray
    loss: np.ndarray

    @property
    def tokens(self) -> np.ndarray:
        return TOKENS_PER_STEP * self.step.astype(np.float64)


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """A stationary AR(1) series with unit marginal variance."""
    e = rng.standard_normal(n) * np.sqrt(1 - phi**2)
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def series(rng: np.random.Generator, config: str, seed: int, speed: float = 1.0, steps: int = STEPS,
           between_sd: float = BETWEEN_RUN_SD) -> Series:
    step = np.arange(1, steps + 1)
    phi = rng.uniform(0.6, 0.8)
    step_time = STEP_TIME_S / speed * np.exp(between_sd * rng.standard_normal()) * np.exp(
        WITHIN_RUN_CV * ar1(rng, steps, phi))
    loss = 3.0 + 2.0 / np.sqrt(step) + LOSS_SEED_SD * rng.standard_normal() + 0.02 * ar1(rng, steps, phi)
    return Series(config, seed, step, step_time, loss)


def workload(s: Series) -> Any:
    from schemas.receipt import Architecture, Batch, Data, Precision, Task, Workload

    return Workload(
        task=Task(dataset="synthetic", dataset_fingerprint="c" * 64, objective="causal-lm"),
        data=Data(sequence_length=128),
        model=Architecture(layers=2, hidden=64, num_experts=8, top_k=2, active_params=100_000),
        precision=Precision(compute="fp32"),
        batch=Batch(global_batch=8, tokens_per_step=TOKENS_PER_STEP, steps=len(s.step)),
        seed=s.seed,
        arguments={"variant": s.config},
    )


def run_data(s: Series, rid: str | None = None) -> Any:
    """The analyses' view of the run (no ledger involved)."""
    from ledger.analyses.series import RunData
    from schemas.receipt import Receipt

    n = len(s.step)
    steps = {
        "step": s.step, "tokens": s.tokens, "time": np.cumsum(s.step_time_s), "loss": s.loss,
        "lr": np.full(n, 1e-3), "grad_norm": np.ones(n), "step_time_s": s.step_time_s,
        "tokens_per_s": TOKENS_PER_STEP / s.step_time_s, "flops_per_s": np.full(n, np.nan),
        "memory_bytes": np.full(n, np.nan), "skipped": np.full(n, np.nan), "loss_nonfinite": np.zeros(n),
    }
    receipt = Receipt(run_uuid="u", status="succeeded", name=s.config, workload=workload(s))
    return RunData(rid or uuid.uuid4().hex * 2, receipt, steps, [], {}, {})


def publish_run(ledger_dir: Path, s: Series, name: str | None = None, nodes: tuple[Any, ...] = (),
                environment: dict[str, str] | None = None, commit: str | None = None,
                hostname: str | None = None, tags: dict[str, str] | None = None) -> str:
    """Write the run through the real SDK (as a training process under ``ledger record`` would) and publish
    its staging directory (with ``environment`` as the wrapper's kept environment variables, ``commit`` as
    the code's commit and ``hostname`` as the machine's name); returns the receipt id."""
    from ledger.record.capture import merge_runtime
    from ledger.sdk import Run
    from ledger.store.layout import STACK_FILE, WRAPPER_FILE
    from ledger.store.publish import publish
    from ledger.store.receipts import Ledger
    from ledger.store.staging import Outcome
    from schemas.receipt import Code, Hardware, Stack

    ledger = Ledger(ledger_dir)
    ledger.root.mkdir(parents=True, exist_ok=True)
    run_dir = ledger.staging / uuid.uuid4().hex
    run_dir.mkdir(parents=True)
    # in publication order, as runs recorded one after another: which runs are "the most recent" (the noise
    # floor's replicate groups) is then the same in every test run, not drawn anew by a random start time
    started = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=next(_PUBLISHED))
    (run_dir / STACK_FILE).write_text(json.dumps(Stack(hardware=Hardware(
        cpu_model="synthetic CPU", cpu_cores=2, memory_bytes=2**34, hostname=hostname), nodes=nodes,
        code=Code(is_repo=commit is not None, commit=commit),
        environment=environment or {}).model_dump(mode="json")))
    (run_dir / WRAPPER_FILE).write_text(json.dumps({
        "name": name or f"{s.config}-s{s.seed}", "run_uuid": run_dir.name, "started_at": started.isoformat(),
        "attempt": 1, "command": ["python", "train.py", "--variant", s.config, "--seed", str(s.seed)],
        "tags": tags or {}}))
    sdk = Run(run_dir, rank=0, background=False)
    sdk.set_workload(workload(s))
    for i, step in enumerate(s.step):
        sdk.log_step(int(step), loss=float(s.loss[i]), tokens=int(s.tokens[i]), step_time_s=float(s.step_time_s[i]),
                     tokens_per_s=TOKENS_PER_STEP / float(s.step_time_s[i]))
    sdk.close()
    receipt = publish(ledger, run_dir, Outcome("succeeded", 0, None, started + timedelta(seconds=60)),
                      runtime=merge_runtime)
    return receipt.id


# ------------------------------------------------------------------------------------------ wrapped runs
def wrapped_lines(s: Series, every: int = 1) -> tuple[str, np.ndarray]:
    """What a plain loop without the SDK prints for the run (``step N | loss X | lr Y``, every ``every`` steps),
    and when each printed line reached the wrapper: the end of its step on the run's clock (the step times'
    running sum from a start at 1,000 s)."""
    at = np.flatnonzero(s.step % every == 0)
    text = "".join(f"step {int(s.step[i])} | loss {s.loss[i]:.4f} | lr 0.001\n" for i in at)
    ends = 1000.0 + np.cumsum(s.step_time_s)
    return text, ends[at]


def wrapped_run_data(s: Series, every: int = 1, rid: str | None = None) -> Any:
    """The analyses' view of a wrapped run: the printed lines read by the real capture and timed as the output's
    clock times them (:meth:`ledger.ingest.formats.scan.Rows.build_tables`): no tokens, step times derived from
    the arrivals."""
    from ledger.analyses.series import STEP_COLUMNS, RunData
    from ledger.ingest.formats.scan import LineCapture
    from schemas.receipt import Receipt, Workload

    text, arrivals = wrapped_lines(s, every)
    capture = LineCapture()
    capture.feed(text.encode())
    capture.close()
    rows = capture.best()
    assert rows is not None
    lines = rows.merged().lines  # line k (1-based) is the k-th printed line
    tables, _ = rows.build_tables(arrivals[lines - 1])
    table = tables["steps"]
    steps: dict[str, np.ndarray] = {}
    for name in STEP_COLUMNS:
        column = table.column(name).to_numpy(zero_copy_only=False)
        steps[name] = column if name == "step" else np.asarray(
            [np.nan if v is None else float(v) for v in column.tolist()], dtype=np.float64)
    steps["samples_per_s"] = np.full(len(steps["step"]), np.nan)
    steps["loss_nonfinite"] = np.zeros(len(steps["step"]))
    receipt = Receipt(run_uuid="u", status="succeeded", name=s.config,
                      workload=Workload(arguments={"variant": s.config}))
    return RunData(rid or uuid.uuid4().hex * 2, receipt, steps, [], {}, {})
