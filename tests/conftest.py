"""Shared fixtures: real ledgers in temporary directories, the real `ledger` CLI in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SHARED = Path(os.environ.get("STACKRECEIPT_SHARED", ROOT.parent / "shared"))


def child_env(**extra: str) -> dict[str, str]:
    """The test process's environment with the venv first on PATH (so `python` is this interpreter)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("LEDGER_RUN_DIR", None)
    env.pop("LEDGER_DIR", None)
    env["DVC_NO_ANALYTICS"] = "1"  # no network here; DVC must not try to send usage statistics
    env["COLUMNS"] = "200"  # a wide terminal for tests of what is printed; tests of width set their own
    env.update(extra)
    # the tree under test, not whatever the environment's editable install points at
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


@pytest.fixture(autouse=True)
def _priority_kept() -> object:
    """A test that runs ``record()`` in this process lowers the test process's CPU priority once its launch ends
    (``staging.yield_cpu``, as a finished ``ledger record`` does). Restored after each test where permitted (as
    root, as in CI): otherwise the worker ran every later test at niceness 19, and a test of ``yield_cpu`` in a
    child started there had nothing left to lower."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    yield
    if os.getpriority(os.PRIO_PROCESS, 0) != before:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except PermissionError:
            pass


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    return tmp_path / "receipts"


Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def ledger_cli(ledger_dir: Path, tmp_path: Path) -> Runner:
    """Run the real `ledger` executable against the test's ledger; returns the completed process."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path | None = None,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(BIN / "ledger"), *args],
            env=child_env(LEDGER_DIR=str(ledger_dir), **(env or {})),
            cwd=cwd or tmp_path,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"ledger {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    return run


@pytest.fixture
def workload(tmp_path: Path) -> Callable[..., Path]:
    """Write a small training script that logs real metrics through the SDK."""

    def make(body: str = "", steps: int = 20, name: str = "train.py") -> Path:
        script = tmp_path / name
        script.write_text(
            textwrap.dedent(
                f"""
                import math, sys, time
                import ledger.sdk
                run = ledger.sdk.current()
                run.set_workload({{"seed": 7, "precision": {{"compute": "fp32"}},
                                  "model": {{"num_experts": 4, "top_k": 2}}}})
                for step in range(1, {steps} + 1):
                    run.log_step(step, loss=4.0 / step, tokens=step * 256, step_time_s=0.01,
                                 tokens_per_s=25600.0, lr=1e-3, custom_metric=step * 2)
                    run.log_routing(step, 0, [100, 156, 128, 128], dropped=[0, 6, 0, 0], entropy=0.9)
                    run.log_timing(step, "expert", 0.004)
                run.log_eval({steps}, 1.25, metric="loss", split="val", source="rare")
                run.event("checkpoint_save_end", step={steps})
                """
            )
            + textwrap.dedent(body)
        )
        return script

    return make
