"""`ledger watch`: follows a real `ledger record` run in the background from its staging directory and
ends when the run is published."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from conftest import BIN, child_env

SLOW = """
import time
import ledger.sdk
run = ledger.sdk.current()
run.set_workload({"batch": {"steps": 30}})
for step in range(1, 31):
    time.sleep(0.1)
    run.log_step(step, loss=4.0 / step, tokens=step * 256, tokens_per_s=14500.0)
"""


@pytest.mark.slow
def test_watch_follows_a_run_until_it_is_published(ledger_cli, ledger_dir, tmp_path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    run = subprocess.Popen([str(BIN / "ledger"), "record", "--name", "slow", "--", "python", str(script)],
                           env=child_env(LEDGER_DIR=str(ledger_dir)), cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list((ledger_dir / ".staging").glob("*/wrapper.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        watched = ledger_cli("watch", "slow", "--interval", "0.1", env={"COLUMNS": "100"}, timeout=120)
        assert watched.returncode == 0, watched.stderr
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    (row,) = json.loads(ledger_cli("ls", "--json").stdout)
    out = watched.stdout
    assert f"published as {row['id'][:8]} ({row['id']})" in out
    assert any(line.split() == ["step", "loss", "tokens/s", "ETA"] for line in out.splitlines()), out
    assert re.search(r"slow \([0-9a-f]{8}\)\s+step \d+/30", out), out
    steps = [int(m) for m in re.findall(r"^\s*(\d+)\s+\d\.\d+", out, re.M)]
    assert steps and steps == sorted(steps) and steps[-1] <= 30
    assert "14.5k" in out and "slow" in out


def test_watch_names_what_is_running_when_the_ref_is_unknown(ledger_cli) -> None:
    proc = ledger_cli("watch", "nope")
    assert proc.returncode == 2 and "no run in progress named 'nope'" in proc.stderr




WRAPPED = """
import os, sys, time
for i in range(1, 41):
    time.sleep(0.1)
    print(f"epoch 1 iter {i}/40 | loss={4.0 / i:.4f} | lr 3.0e-4", flush=True)
    if i == 20:  # halfway: wait until the test has seen watch show the run (at most a minute)
        deadline = time.time() + 60
        while not os.path.exists(sys.argv[1]) and time.time() < deadline:
            time.sleep(0.05)
"""



@pytest.mark.slow
def test_watch_follows_a_wrapped_launch_from_its_printed_lines(ledger_dir, tmp_path) -> None:
    """A loop that never imports the SDK, printing `epoch 1 iter N/40 | loss=...`, held at step 20: what watch draws
    then (the library call `ledger watch` redraws) shows its steps and losses as printed, the rate in steps/s from when
    the lines arrived, and an ETA from N/40; then `ledger watch` follows it to its receipt."""
    from rich.console import Console

    from ledger.report.watch import render
    from ledger.store import running
    from ledger.store.receipts import Ledger

    script, go = tmp_path / "loop.py", tmp_path / "go"
    script.write_text(WRAPPED)
    env = child_env(LEDGER_DIR=str(ledger_dir))
    run = subprocess.Popen([str(BIN / "ledger"), "record", "--name", "loop", "--", "python", str(script), str(go)],
                           env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        found = None
        while time.monotonic() < deadline:
            found = running.find(Ledger(ledger_dir), "loop")
            if found is not None and running.steps(found).num_rows >= 20:
                break
            time.sleep(0.1)
        assert found is not None
        found = running.reload(found)
        console = Console(record=True, width=120)
        console.print(render(found, running.steps(found)))
        drawn = console.export_text()
        go.touch()
        watched = subprocess.run([str(BIN / "ledger"), "watch", "loop", "--interval", "0.2"], env=env, cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
        assert run.wait(timeout=60) == 0
    finally:
        go.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    head = re.search(r"loop \([0-9a-f]{8}\)\s+epoch 1\s+step 20/40\s+loss 0\.2000\s+(\S+) steps/s\s+"
                     r"ETA \(epoch\) (\S+) s", drawn)
    assert head is not None, drawn
    assert 4 <= float(head.group(1)) <= 12 and 0.8 <= float(head.group(2)) <= 5, drawn  # ~10 steps/s, 20 left
    assert any(line.split() == ["step", "loss", "steps/s", "ETA", "(epoch)"] for line in drawn.splitlines()), drawn
    rows = [line.split() for line in drawn.splitlines() if re.match(r"^\s+1\d\s", line)]
    assert rows and all(float(r[1]) == round(4.0 / int(r[0]), 4) for r in rows), drawn
    assert watched.returncode == 0 and "published as" in watched.stdout, watched.stderr
