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

