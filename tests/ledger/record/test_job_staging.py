"""The job staging protocol with real `ledger record --job` wrappers and a small SDK script (no torch):
a node that never reports, a node-0 wrapper killed (then `ledger recover`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from conftest import BIN, child_env
from helpers import ids_in, load_receipt, receipt_dir

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


def _ledger(tmp: Path, *args: str) -> Result:
    """A `ledger` command on the test's ledger, run in this process (no interpreter started per call)."""
    from ledger.cli.app import cli

    return CliRunner().invoke(cli, ["--ledger", str(tmp / "receipts"), *args], catch_exceptions=False)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


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
    # node 0 says what it published (before: "succeeded", node 0's own status, for a job published as failed)
    assert f"ledger: recorded {ids[0]} (staged, failed, exit 0; this node: succeeded, exit 0)" in err
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["status"]) for n in nodes] == [(0, "ended"), (1, "lost")]
    assert nodes[1]["detail"] == "never reported (no wrapper staged this node)"
    steps = pq.read_table(receipt_dir(tmp_path / "receipts", ids[0]) / "steps.parquet")
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
    running = _ledger(tmp_path, "recover")
    assert "running" in running.stdout and ids_in(tmp_path / "receipts") == []
    child = json.loads((node0_dir / "wrapper.json").read_text())["child_pid"]
    node0.send_signal(signal.SIGKILL)
    node0.communicate(timeout=30)
    os.killpg(child, signal.SIGKILL)  # the wrapper started its launch in a session of its own
    deadline = time.monotonic() + 60
    while _running(child):  # dead (gone, or a zombie nobody reaped yet) before recover looks
        assert time.monotonic() < deadline, f"pid {child} survived SIGKILL"
        time.sleep(0.05)
    done = _ledger(tmp_path, "recover")
    assert done.exit_code == 0 and "published" in done.stdout, done.stdout + done.stderr
    ids = ids_in(tmp_path / "receipts")
    assert len(ids) == 1
    receipt = load_receipt(tmp_path / "receipts", ids[0])
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["status"], n["ranks"]) for n in nodes] == [(0, "lost", [0]), (1, "ended", [1])]
    assert receipt["status"] == "failed"
    timing = pq.read_table(receipt_dir(tmp_path / "receipts", ids[0]) / "timing.parquet").to_pylist()
    assert sorted((r["rank"], r["step"]) for r in timing) == [(r, s) for r in (0, 1) for s in (1, 2, 3)]
    again = _ledger(tmp_path, "recover")
    assert "nothing to recover" in again.stdout and ids_in(tmp_path / "receipts") == ids
    # `ledger goodput`: the waiting on rank 1 as its own bucket. By hand: in each of the 3 steps the slowest
    # rank works 0.02 s and the median of (0.01, 0.02) is 0.015, so 3 x 0.005 s were spent waiting
    good = json.loads(_ledger(tmp_path, "goodput", ids[0][:12], "--json").stdout)
    # the bucket takes the estimate from `other`, then from productive time, never more than both: on a loaded
    # machine this lost run's clock can hold less than 0.015 s of them (then both are used up)
    taken = good["badput_s"]["straggler_wait"]
    left = good["badput_s"].get("other", 0.0) + good["productive_s"]
    assert taken == pytest.approx(0.015, abs=1e-9) or (taken < 0.015 and left == pytest.approx(0.0, abs=1e-9))
    assert good["productive_s"] + sum(good["badput_s"].values()) == pytest.approx(good["wall_s"], abs=1e-9)
    text = _ledger(tmp_path, "goodput", ids[0][:12])
    assert "straggler wait" in text.stdout and "0.015 s estimated from the ranks' timers" in text.stdout
    # the HTML report names the slow rank: rank 1 logged twice rank 0's work (0.02 s against 0.01 s)
    single = subprocess.run([str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "record", "--name",
                             "single", "--telemetry-interval", "0", "--", sys.executable, str(tmp_path / "train.py"),
                             "0", "0"], env=child_env(), capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    page = tmp_path / "report.html"
    report = _ledger(tmp_path, "report", ids[0][:12], "single", "--html", str(page))
    assert report.exit_code == 0, report.stderr
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


ZERO_CODE = textwrap.dedent(
    """
    import sys
    import ledger.sdk
    run = ledger.sdk.current()
    rank = int(sys.argv[1])
    run.report_runtime()
    for step in range(1, 4):
        run.log_timing(step, "expert", 0.01)
        if rank == 1:  # the progress lines come from the last rank (as Megatron prints them), on node 1
            print(f"step {step} loss {2.0 / step:.6f}", flush=True)
    run.flush()
    """
)


def test_zero_code_capture_of_node_1_is_kept_beside_rank_0_of_node_0(tmp_path: Path) -> None:
    """Node 0's global rank 0 writes rank-00000/ itself; node 1's steps exist only in node 1's output.
    Each node's capture is staged apart (captured/), so neither hides the other."""
    (tmp_path / "train.py").write_text(ZERO_CODE)
    procs = []
    for k in (0, 1):
        cmd = [str(BIN / "ledger"), "record", "--name", "zero", "--job", "job-z", "--node-rank", str(k), "--nnodes",
               "2", "--telemetry-interval", "0", "--", sys.executable, str(tmp_path / "train.py"), str(k)]
        procs.append(subprocess.Popen(cmd, env=child_env(LEDGER_DIR=str(tmp_path / "receipts"), RANK=str(k)),
                                      cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    (receipt_id,) = ids_in(tmp_path / "receipts")
    receipt = load_receipt(tmp_path / "receipts", receipt_id)
    steps = pq.read_table(receipt_dir(tmp_path / "receipts", receipt_id) / "steps.parquet").to_pylist()
    assert [(r["step"], r["loss"]) for r in steps] == [(1, 2.0), (2, 1.0), (3, pytest.approx(2 / 3, abs=1e-6))]
    timing = pq.read_table(receipt_dir(tmp_path / "receipts", receipt_id) / "timing.parquet").to_pylist()
    assert sorted({r["rank"] for r in timing}) == [0, 1]  # rank 0's own directory kept too
    messages = [p["message"] for p in receipt["problems"]]  # type: ignore[union-attr]
    assert not any("was written on node" in m for m in messages), messages
    capture = receipt["capture"]
    assert capture is not None and [t["table"] for t in capture["tables"]] == ["steps"]  # type: ignore[index]


PROBING_SRUN = textwrap.dedent(
    """
    # srun over two "nodes": ranks 0 and 1 on gpu-000, rank 2 on gpu-001 (whose PYTHONPATH plants a package)
    import os, subprocess, sys
    planted = sys.argv[1]
    procs = []
    for rank, node in ((0, 0), (1, 0), (2, 1)):
        env = dict(os.environ, RANK=str(rank), SLURM_NODEID=str(node), SLURMD_NODENAME=f"gpu-{node:03d}")
        if node == 1:
            env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], planted])
        procs.append(subprocess.Popen([*sys.argv[2:], str(rank), "0"], env=env))
    sys.exit(max(p.wait() for p in procs))
    """
)


def test_ledger_probe_on_each_node_of_one_wrapper_over_srun(tmp_path: Path) -> None:
    """`ledger record -- srun ... ledger probe -- python train.py`: every node probed where it runs, the
    planted difference on node 1 named, each node's second task does not probe again."""
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "srun.py").write_text(PROBING_SRUN)
    planted = tmp_path / "planted" / "stackreceipt_planted-2.0.dist-info"
    planted.mkdir(parents=True)
    (planted / "METADATA").write_text("Metadata-Version: 2.1\nName: stackreceipt-planted\nVersion: 2.0\n")
    proc = subprocess.run([str(BIN / "ledger"), "--ledger", str(tmp_path / "receipts"), "record", "--name", "probed",
                           "--telemetry-interval", "0.2", "--", sys.executable, str(tmp_path / "srun.py"),
                           str(planted.parent), str(BIN / "ledger"), "probe", "--", sys.executable,
                           str(tmp_path / "train.py")], env=child_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("ledger probe: node gpu-000 (node rank 0) probed into") == 1
    assert proc.stderr.count("ledger probe: node gpu-001 (node rank 1) probed into") == 1
    assert "already probed by another of its tasks" in proc.stderr  # rank 1, the second task of gpu-000
    (receipt_id,) = ids_in(tmp_path / "receipts")
    receipt = load_receipt(tmp_path / "receipts", receipt_id)
    nodes = receipt["stack"]["nodes"]  # type: ignore[index]
    assert [(n["node_rank"], n["hostname"], n["ranks"]) for n in nodes] == [(0, "gpu-000", [0, 1]), (1, "gpu-001", [2])]
    assert all(n["detail"] == "probed on the node by `ledger probe`" for n in nodes)
    # facts only a probe on the node gives (the ranks' runtime facts have no CPU topology or code commit)
    assert all(n["cpu_topology"] and n["cpu_model"] for n in nodes)
    assert nodes[1]["packages"] == {"stackreceipt-planted": "2.0"} and nodes[0]["packages"] == {}
    messages = [p["message"] for p in receipt["problems"]]  # type: ignore[union-attr]
    assert any("stackreceipt-planted" in m and "gpu-001" in m for m in messages), messages
    # telemetry of every node: each probing task sampled its node while its command ran, merged by node name
    # beside the wrapper's own samples of the launching node (this host)
    telemetry = pq.read_table(receipt_dir(tmp_path / "receipts", receipt_id) / "telemetry.parquet").to_pylist()
    assert {r["node"] for r in telemetry if r["device"] == "host"} == {socket.gethostname(), "gpu-000", "gpu-001"}


def test_ledger_probe_outside_a_recorded_launch_is_one_line_error(tmp_path: Path) -> None:
    env = {k: v for k, v in child_env().items() if k != "LEDGER_RUN_DIR"}
    proc = subprocess.run([str(BIN / "ledger"), "probe"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1
    assert "LEDGER_RUN_DIR is not set" in proc.stderr
    elsewhere = tmp_path / "other-run"  # a run that is not the named ledger's: this node sees another ledger
    elsewhere.mkdir()
    wrong = _ledger(tmp_path, "probe", "--run-dir", str(elsewhere))
    assert wrong.exit_code == 2 and "is not staged in the ledger's" in wrong.stderr
    assert not (elsewhere / "probes").exists()
