"""A real 2-node job on this machine: two `ledger record` wrappers with Slurm-like environments, each
launching torchrun (c10d rendezvous, 2 processes per "node") of the reference MoE runner with EP=4.

One job trains with a planted package difference on node 1 and a planted straggler (global rank 3
sleeps in every step); the other has node 1 killed mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import BIN, ROOT, child_env

from ledger.analyses.goodput_index import goodput
from ledger.analyses.nodes import node_differences
from ledger.analyses.stragglers import WAIT_PHASES, of_receipt
from ledger.cli.app import cli
from ledger.store.receipts import Ledger
from schemas import Factor

pytestmark = pytest.mark.slow

MICRO = ["model.layers=2", "model.hidden=32", "model.heads=2", "model.ffn_hidden=64", "model.seq_len=32",
         "moe.num_experts=4", "moe.top_k=2", "batch_size=8", "data.train_sequences=256", "data.val_sequences=8",
         "warmup_steps=2", "lr=1e-2", "threads=1", "parallel.ep=4"]
"""The runner tests' micro model (tests/runners/moe/conftest.py), one expert per rank over 4 ranks."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _planted_package(root: Path, version: str) -> Path:
    """A directory that, on PYTHONPATH, makes a distribution `stackreceipt-planted==version` installed."""
    info = root / f"stackreceipt_planted-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: stackreceipt-planted\nVersion: {version}\n")
    return root


def _start_node(k: int, ledger: Path, port: int, settings: list[str], tmp: Path, extra_path: Path | None = None,
                name: str = "job", per_node: int = 2) -> subprocess.Popen[bytes]:
    env = child_env(LEDGER_DIR=str(ledger), SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES="2",
                    SLURM_STEP_NUM_NODES="2", SLURM_NODEID=str(k), SLURMD_NODENAME=f"gpu-{k:03d}",
                    GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(extra_path)])
    sets = [a for s in settings for a in ("--set", s)]
    cmd = [str(BIN / "ledger"), "record", "--name", name, "--telemetry-interval", "0.5", "--job-timeout", "60",
           "--", str(BIN / "python"), "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(per_node),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job4242",
           # node 0 hosts the rendezvous store; node 1 connects (retrying until it listens), so both nodes
           # start at once instead of node 1 waiting for node 0's start-up
           "--rdzv-conf", f"is_host={'true' if k == 0 else 'false'}",
           "--local-addr", "127.0.0.1", "--max-restarts", "0",
           "-m", "runners.moe", "--config", "tiny", *sets]
    with open(tmp / f"node{k}.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts its workers in sessions of their own)."""
    parents: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(fields[1])].append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for kid in parents.get(todo.pop(), []):
            out.append(kid)
            todo.append(kid)
    return out


@pytest.fixture
def reap() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Wrappers a test started: whatever of them still runs at its end is killed, with every descendant."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            for pid in [*_descendants(p.pid), p.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            p.wait()


def _log(tmp: Path, k: int) -> str:
    return (tmp / f"node{k}.log").read_text(errors="replace")[-4000:]


def test_two_nodes_one_receipt_every_node_planted_difference_and_straggler(
    tmp_path: Path, reap: list[subprocess.Popen[bytes]]
) -> None:
    ledger_dir, port = tmp_path / "receipts", _free_port()
    steps = 8
    settings = [*MICRO, f"steps={steps}", f"eval_every={steps}", "delay_s=0.1", "delay_rank=3"]
    node0 = _start_node(0, ledger_dir, port, settings, tmp_path, _planted_package(tmp_path / "p0", "1.0"))
    reap.append(node0)
    node1 = _start_node(1, ledger_dir, port, settings, tmp_path, _planted_package(tmp_path / "p1", "2.0"))
    reap.append(node1)
    assert node1.wait(timeout=300) == 0, _log(tmp_path, 1)
    assert node0.wait(timeout=300) == 0, _log(tmp_path, 0)
    assert "node 0 publishes the receipt" in _log(tmp_path, 1)

    ledger = Ledger(ledger_dir)
    ids = ledger.ids()
    assert len(ids) == 1  # exactly one receipt for the job
    receipt = ledger.load(ids[0])
    assert receipt.status == "succeeded"
    nodes = receipt.stack.nodes
    assert [(n.node_rank, n.hostname, n.status) for n in nodes] == [(0, "gpu-000", "ended"), (1, "gpu-001", "ended")]
    assert sorted(r for n in nodes for r in n.ranks) == [0, 1, 2, 3] and all(len(n.ranks) == 2 for n in nodes)
    assert not (ledger_dir / ".staging").exists() or not any((ledger_dir / ".staging").iterdir())

    rdir = ledger.path(ids[0])
    timing = pq.read_table(rdir / "timing.parquet").to_pylist()
    timed: dict[int, set[int]] = defaultdict(set)
    for r in timing:
        timed[r["rank"]].add(r["step"])
    assert timed == {rank: set(range(1, steps + 1)) for rank in range(4)}  # every step of every rank
    step_rows = pq.read_table(rdir / "steps.parquet").to_pylist()
    assert [r["step"] for r in step_rows] == list(range(1, steps + 1))
    routing = pq.read_table(rdir / "routing.parquet").to_pylist()
    per_layer: dict[tuple[int, int], int] = defaultdict(int)
    for r in routing:
        per_layer[(r["step"], r["layer"])] += sum(r["tokens"])
    # every rank's tokens are routed: 8 sequences x 32 tokens x top-2, summed over the 4 ranks
    assert set(per_layer.values()) == {8 * 32 * 2} and len(per_layer) == steps * 2
    telemetry = pq.read_table(rdir / "telemetry.parquet").to_pylist()
    assert {r["node"] for r in telemetry if r["rank"] == -1} == {"gpu-000", "gpu-001"}  # both nodes sampled
    log = (rdir / "output.log").read_text()
    assert "==> node 0 (gpu-000) <==" in log and "==> node 1 (gpu-001) <==" in log

    # the planted difference: another version of one package on node 1, named by factor
    diffs = node_differences(receipt)
    packages = [text for factor, text in diffs if factor is Factor.SOFTWARE and text.startswith("packages")]
    assert packages and "stackreceipt-planted 1.0 on node 0 (gpu-000); 2.0 on node 1 (gpu-001)" in packages[0]
    # a node's packages are those that differ from the job's software, which is rank 0's; the rendezvous
    # decides which node holds rank 0 (both nodes start at once), so either node can be the one that differs
    holder = next(n for n in nodes if 0 in n.ranks)
    (other,) = [n for n in nodes if n is not holder]
    planted = {0: "1.0", 1: "2.0"}
    assert holder.packages == {} and other.packages == {"stackreceipt-planted": planted[other.node_rank]}
    assert any(p.source == "nodes" and "stackreceipt-planted" in p.message for p in receipt.problems)

    # the planted straggler: rank 3, with the score computed here by hand from the timing table
    work: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for r in timing:
        if r["phase"] not in WAIT_PHASES:
            work[r["rank"]][r["step"]] += r["seconds"]
    medians = {rank: statistics.median(by_step.values()) for rank, by_step in work.items()}
    expected = min(medians.values()) / medians[3]
    found = of_receipt(rdir, receipt)
    assert found.stragglers and found.stragglers[0].rank == 3
    assert found.stragglers[0].relative == pytest.approx(expected, rel=1e-9)
    slow_node = next(n for n in nodes if 3 in n.ranks)
    assert found.nodes[0].node_rank == slow_node.node_rank and found.nodes[0].slowest_rank == 3
    assert found.wait_s > 0
    # goodput of the job (all nodes' events in one receipt), with the waiting on rank 3 as its own bucket
    job_goodput = goodput(ledger, ids[0])
    assert job_goodput.buckets["straggler_wait"] == pytest.approx(found.wait_s)
    assert job_goodput.productive_s + job_goodput.badput_s == pytest.approx(job_goodput.wall_s)

    shown = CliRunner().invoke(cli, ["--ledger", str(ledger_dir), "show", ids[0][:12]])
    assert shown.exit_code == 0, shown.output
    assert f"stragglers (score < 0.7): rank 3 {found.stragglers[0].score:.2f}" in shown.output
    assert "nodes differ (software) packages: stackreceipt-planted" in shown.output and "gpu-001" in shown.output


def test_node_killed_mid_run_one_failed_receipt_node_lost_node_0_kept(
    tmp_path: Path, reap: list[subprocess.Popen[bytes]]
) -> None:
    ledger_dir, port = tmp_path / "receipts", _free_port()
    # one process per node keeps this test light: what is killed is a node, whatever runs on it
    settings = [*MICRO[:-1], "parallel.ep=2", "steps=400", "eval_every=400", "delay_s=0.05"]
    node0 = _start_node(0, ledger_dir, port, settings, tmp_path, name="killed", per_node=1)
    reap.append(node0)
    node1 = _start_node(1, ledger_dir, port, settings, tmp_path, name="killed", per_node=1)
    reap.append(node1)
    staging = ledger_dir / ".staging"
    deadline = time.monotonic() + 180
    node1_dir = None
    while time.monotonic() < deadline:  # wait until node 1's ranks have flushed timing rows
        found = [p for p in staging.glob("job-*/node-00001/rank-*/timing.arrows") if p.stat().st_size > 0]
        if found:
            node1_dir = found[0].parents[1]
            break
        assert node0.poll() is None and node1.poll() is None, _log(tmp_path, 0) + _log(tmp_path, 1)
        time.sleep(0.2)
    assert node1_dir is not None, "node 1 never logged"
    child = json.loads((node1_dir / "wrapper.json").read_text())["child_pid"]
    for pid in [node1.pid, child, *_descendants(child)]:  # the whole node goes: wrapper, torchrun, ranks
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    node1.wait(timeout=30)
    code = node0.wait(timeout=120)
    assert code != 0, _log(tmp_path, 0)

    ledger = Ledger(ledger_dir)
    ids = ledger.ids()
    assert len(ids) == 1, _log(tmp_path, 0)
    receipt = ledger.load(ids[0])
    assert receipt.status == "failed"
    n0, n1 = receipt.stack.nodes
    assert (n0.status, n1.status) == ("ended", "lost")
    assert "wrapper died" in (n1.detail or "")
    assert any(p.source == "nodes" and "node 1 (gpu-001) lost" in p.message for p in receipt.problems)
    rdir = ledger.path(ids[0])
    timing = pq.read_table(rdir / "timing.parquet").to_pylist()
    by_rank: dict[int, set[int]] = defaultdict(set)
    for r in timing:
        by_rank[r["rank"]].add(r["step"])
    # nothing of node 0 lost: each of its ranks has every step up to its last, node 1's rows kept too
    for rank in n0.ranks:
        assert by_rank[rank] == set(range(1, max(by_rank[rank]) + 1))
    assert all(by_rank[rank] for rank in n1.ranks)
    assert "==> node 0 (gpu-000) <==" in (rdir / "output.log").read_text()
    assert not any(staging.iterdir())
