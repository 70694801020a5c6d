"""Fixtures of the MoE runner tests: ``kit`` holds a micro config, a subprocess runner, an SDK-stream reader.

(Exposed as a fixture rather than imported: tests run with --import-mode=importlib.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

REPO = Path(__file__).resolve().parents[3]

MICRO = [
    "model.layers=2",
    "model.hidden=32",
    "model.heads=2",
    "model.ffn_hidden=64",
    "model.seq_len=32",
    "moe.num_experts=4",
    "moe.top_k=2",
    "batch_size=8",
    "data.train_sequences=256",
    "data.val_sequences=8",
    "warmup_steps=2",
    "lr=1e-2",
    "steps=12",
    "eval_every=6",
]
"""Overrides that shrink tiny to a model that trains 12 steps in well under a second."""

MICRO_MODEL = MICRO[:-2]
"""MICRO without steps and eval_every."""


def set_args(overrides: list[str]) -> list[str]:
    """["a=1", "b=2"] -> ["--set", "a=1", "--set", "b=2"]."""
    return [arg for o in overrides for arg in ("--set", o)]


def run_runner(
    args: list[str], run_dir: Path | None = None, procs: int = 1, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runners.moe ARGS`` (under torchrun when procs > 1), with LEDGER_RUN_DIR=run_dir."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("LEDGER_RUN_DIR", None)
    if run_dir is not None:
        env["LEDGER_RUN_DIR"] = str(run_dir)
    if procs > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={procs}",
            "-m",
            "runners.moe",
            *args,
        ]
    else:
        cmd = [sys.executable, "-m", "runners.moe", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def read_table(run_dir: Path, table: str, rank: int = 0) -> pa.Table:
    """One rank's SDK stream, ``rank-NNNNN/<table>.arrows`` (one attempt per run directory)."""
    with ipc.open_stream(run_dir / f"rank-{rank:05d}" / f"{table}.arrows") as reader:
        return reader.read_all()


class Kit:
    """What the tests share (see the module's functions)."""

    MICRO = MICRO
    MICRO_MODEL = MICRO_MODEL
    set_args = staticmethod(set_args)
    run = staticmethod(run_runner)
    read = staticmethod(read_table)


@pytest.fixture(scope="session")
def kit() -> type[Kit]:
    return Kit
