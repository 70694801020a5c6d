"""The job staging protocol with real `ledger record --job` wrappers and a small SDK script (no torch):
a node that never reports, a node-0 wrapper killed (then `ledger recover`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import BIN, child_env
from helpers import ids_in, load_receipt

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import ledger.sdk
    run = ledger.sdk.current()
    rank = int(sys.argv[1])
    run.report_runtime()
    for step in range(1, 4):
        if rank == 0:
            run.log_step(step, loss=1.0 / step, step_time_s=0.01)
        run.log_timing(step, "expert", 0.01 * (rank + 1))
    run.flush()
    time.sleep(float(sys.argv[2]))
    """
)


def _wrapper(tmp: Path, k: int, nnodes: int, sleep: float, *extra: str) -> subprocess.Popen[str]:
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    cmd = [str(BIN / "ledger"), "record", "--name", "staged", "--job", "job-a", "--node-rank", str(k),
           "--nnodes", str(nnodes), "--telemetry-interval", "0", *extra, "--", sys.executable, str(script),
           str(k), str(sleep)]
    env = child_env(LEDGER_DIR=str(tmp / "receipts"), RANK=str(k))
    return subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_node_that_never_reports_is_lost_after_the_timeout(tmp_path: Path) -> None:
    node0 = _wrapper(tmp_path, 0, 2, 0.0, "--job-timeout", "1")
    _, err = node0.communicate(timeout=120)
    assert node0.returncode == 0, err  # the launch of node 0 succeeded: its exit status is kept
    ids = ids_in(tmp_path / "receipts")
    assert len(ids) == 1
    receipt = load_receipt(tmp_path / "receipts", ids[0])
    assert receipt["status"] == "failed"
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["status"]) for n in nodes] == [(0, "ended"), (1, "lost")]
    assert nodes[1]["detail"] == "never reported (no wrapper staged this node)"
    steps = pq.read_table(tmp_path / "receipts" / ids[0] / "steps.parquet")
    assert steps.column("step").to_pylist() == [1, 2, 3]  # node 0's data all there


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_node_0_wrapper_killed_then_recover_publishes_the_job_once(tmp_path: Path) -> None:
    node0 = _wrapper(tmp_path, 0, 2, 30.0)
    node1 = _wrapper(tmp_path, 1, 2, 0.0)
    _, err1 = node1.communicate(timeout=120)
    assert node1.returncode == 0 and "node 0 publishes the receipt" in err1
    node0_dir = next((tmp_path / "receipts" / ".staging").glob("job-*/node-00000"))
    deadline = time.monotonic() + 60
    while not (node0_dir / "rank-00000" / "steps.arrows").exists():  # node 0 has trained and flushed
        assert time.monotonic() < deadline
        time.sleep(0.1)
    recover = [str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "recover"]
    running = subprocess.run(recover, env=child_env(), capture_output=True, text=True, timeout=60)
    assert "running" in running.stdout and ids_in(tmp_path / "receipts") == []
    child = json.loads((node0_dir / "wrapper.json").read_text())["child_pid"]
    node0.send_signal(signal.SIGKILL)
    node0.communicate(timeout=30)
    os.killpg(child, signal.SIGKILL)  # the wrapper started its launch in a session of its own
    done = subprocess.run(recover, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "published" in done.stdout, done.stdout + done.stderr
    ids = ids_in(tmp_path / "receipts")
    assert len(ids) == 1
    receipt = load_receipt(tmp_path / "receipts", ids[0])
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["status"], n["ranks"]) for n in nodes] == [(0, "lost", [0]), (1, "ended", [1])]
    assert receipt["status"] == "failed"
    timing = pq.read_table(tmp_path / "receipts" / ids[0] / "timing.parquet").to_pylist()
    assert sorted((r["rank"], r["step"]) for r in timing) == [(r, s) for r in (0, 1) for s in (1, 2, 3)]
    again = subprocess.run(recover, env=child_env(), capture_output=True, text=True, timeout=60)
    assert "nothing to recover" in again.stdout and ids_in(tmp_path / "receipts") == ids
    # the HTML report names the slow rank: rank 1 logged twice rank 0's work (0.02 s against 0.01 s)
    single = subprocess.run([str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "record", "--name",
                             "single", "--telemetry-interval", "0", "--", sys.executable, str(tmp_path / "train.py"),
                             "0", "0"], env=child_env(), capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    page = tmp_path / "report.html"
    report = subprocess.run([str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "report", ids[0][:12],
                             "single", "--html", str(page)], env=child_env(), capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stderr
    section = page.read_text().split('<h2 id="stragglers">Nodes and stragglers</h2>')[1].split("<h2")[0]
    assert "<td class=\"l\">1</td><td class=\"\">1 (" in section and "0.50" in section and "straggler" in section


FAKE_SRUN = textwrap.dedent(
    """
    # starts the ranks of two "nodes" the way srun does: each rank with its node's Slurm variables
    import os, subprocess, sys
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), SLURM_NODEID=str(rank), SLURMD_NODENAME=f"gpu-{rank:03d}")
        procs.append(subprocess.Popen([sys.executable, *sys.argv[1:], str(rank), "0"], env=env))
    sys.exit(max(p.wait() for p in procs))
    """
)


def test_one_wrapper_around_srun_describes_each_node_from_its_ranks(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "srun.py").write_text(FAKE_SRUN)
    proc = subprocess.run([str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "record", "--name", "srun",
                           "--telemetry-interval", "0", "--", sys.executable, str(tmp_path / "srun.py"),
                           str(tmp_path / "train.py")], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (receipt_id,) = ids_in(tmp_path / "receipts")
    receipt = load_receipt(tmp_path / "receipts", receipt_id)
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["hostname"], n["ranks"]) for n in nodes] == [(0, "gpu-000", [0]), (1, "gpu-001", [1])]
    assert all(n["detail"] and "runtime facts" in n["detail"] for n in nodes)  # no wrapper ran on either
    assert nodes[0]["packages_digest"] == nodes[1]["packages_digest"] and nodes[0]["torch"]
