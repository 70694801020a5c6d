"""Live capture: `ledger record` parses the output as the tee writes it, so a launch killed mid-run keeps
the steps it printed before the kill, even when nothing is left to read once it is gone."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import LedgerAt

KILLED = textwrap.dedent("""
    import os, signal
    for step in range(1, 8):
        print(f"step {step} loss {3.0 - step / 10:.3f} lr 0.001", flush=True)
    # the log is gone before the launch ends: only what the tee parsed as it wrote can give the steps
    os.unlink(os.path.join(os.environ["LEDGER_RUN_DIR"], "output.log"))
    os.kill(os.getpid(), signal.SIGKILL)
    print("step 8 loss 0.1 lr 0.001", flush=True)  # never printed
""")


@pytest.mark.slow
def test_a_launch_killed_mid_run_keeps_the_steps_parsed_live(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(KILLED)
    lg = LedgerAt(tmp_path)
    proc = lg("record", "--name", "killed", "--telemetry-interval", "0", "--", "python", "train.py", check=False)
    assert proc.returncode == 128 + 9, proc.stderr[-2000:]
    assert "captured 7 steps (loss, lr) from output [key-value]" in proc.stderr
    receipt = lg.json("show", "killed")
    assert receipt["status"] == "failed" and receipt["summary"]["steps"] == 7
    rows = lg.json("query", "SELECT step, loss FROM steps ORDER BY step")
    assert [(r["step"], r["loss"]) for r in rows] == [(s, round(3.0 - s / 10, 3)) for s in range(1, 8)]
