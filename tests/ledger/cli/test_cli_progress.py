"""Progress on a terminal for long operations (ingest of a large log, compare, the index rebuild that `ls`
starts), through the real `ledger` command with its stderr on a pseudo-terminal; nothing at all when piped.
$LEDGER_PROGRESS_DELAY=0 draws every task at once (bars otherwise appear only for tasks that last)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, child_env

import ledger
import ledger.sdk


def _run(args: list[str], cwd: Path, terminal: bool) -> tuple[int, str, str]:
    """The command's exit status, stdout (a pipe) and stderr (a pseudo-terminal when ``terminal``, else a pipe)."""
    env = child_env(LEDGER_PROGRESS_DELAY="0", COLUMNS="100")
    if not terminal:
        proc = subprocess.run([str(BIN / "ledger"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(BIN / "ledger"), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=slave,
                            text=True)
    os.close(slave)
    err = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the command ended and the terminal closed
                break
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    return proc.returncode, out, err.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("progress")
    lg = ledger.open(root / "receipts")
    for name, speed in (("a", 1000.0), ("b", 1500.0)):
        with lg.recording(name=name):
            run = ledger.sdk.current()
            run.set_workload({"precision": {"compute": "bf16" if speed > 1200 else "fp32"}})
            for step in range(1, 31):
                run.log_step(step, loss=4.0 / step, tokens=512 * step, step_time_s=512 / speed, tokens_per_s=speed)
    (root / "big.log").write_text("".join(f"step {s} loss {4.0 / s:.5f} lr 1e-3\n" for s in range(1, 20001)))
    return root


@pytest.mark.slow
def test_long_operations_show_progress_on_a_terminal_and_nothing_when_piped(site: Path) -> None:
    led = ["--ledger", str(site / "receipts")]
    code, out, err = _run([*led, "ingest", "log", "big.log", "--name", "big"], site, terminal=True)
    assert code == 0 and "reading big.log" in err and "keeping big.log (redacted)" in err, err
    assert "\x1b[" in err  # drawn, then erased: the bar is transient
    assert "ledger: " not in out and "reading" not in out
    code, out, err = _run([*led, "ingest", "log", "big.log", "--name", "big-piped"], site, terminal=False)
    assert code == 0 and "reading" not in err and "keeping" not in err and "\x1b" not in err

    code, out, err = _run([*led, "compare", "a", "b"], site, terminal=True)
    assert code == 0 and "reading the runs' tables" in err and "comparing the metrics" in err
    code, out, err = _run([*led, "compare", "a", "b"], site, terminal=False)
    assert code == 0 and "reading the runs" not in err and "\x1b" not in err

    # the rebuild `ls` starts when the index is gone (or of an older version): every receipt read again
    (site / "receipts" / "index.duckdb").unlink()
    code, out, err = _run([*led, "ls"], site, terminal=True)
    assert code == 0 and "indexing receipts" in err and "4 receipt(s)" in out
    (site / "receipts" / "index.duckdb").unlink()
    code, out, err = _run([*led, "ls"], site, terminal=False)
    assert code == 0 and err == "" and "4 receipt(s)" in out
