"""A multi-node job's staging directory, in this process (mutation testing cannot run the `ledger` wrappers that
test_job.py starts): job directories written by hand as the node wrappers leave them (nodes that ended, one lost,
one whose wrapper died, one that never reported; ranks on each node, each node's log, stack and telemetry), and
what :func:`wait_for_nodes`, :func:`job_outcome` and :func:`recover_job` (which assembles and publishes) make of
them, checked against the facts written here."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from ledger.record import job as jobmod
from ledger.record.job import NodeState, job_outcome, recover_job, wait_for_nodes
from ledger.store.jobs import ENDED_MARK, node_dir
from ledger.store.layout import LOCK_FILE, STREAM_SUFFIX
from ledger.store.receipts import Ledger
from ledger.store.staging import acquire_staging_lock, write_wrapper_facts

DEAD_PID = 2**22 + 4321


def _node(job: Path, k: int, *, ended: bool = True, returncode: int | None = 0, ranks: tuple[int, ...] = (),
          host: str | None = None, started: str = "2026-05-28T20:00:00+00:00", ended_at: str | None = None,
          log: str | None = None, nnodes: int = 2) -> Path:
    d = node_dir(job, k)
    d.mkdir(parents=True)
    (d / LOCK_FILE).write_text("")
    write_wrapper_facts(d, {"run_uuid": f"n{k}", "name": "job", "started_at": started, "child_pid": DEAD_PID,
                            "host": host or f"node{k}.example", "command": ["torchrun", "t.py"],
                            "job": {"key": "j", "node_rank": k, "nnodes": nnodes, "node_name": host or f"node{k}"}})
    if returncode is not None:
        (d / "exit.json").write_text(json.dumps({"returncode": returncode, "forwarded": [],
                                                 "ended_at": ended_at or f"2026-05-28T20:1{k}:00+00:00"}))
    for r in ranks:
        (d / f"rank-{r:05d}").mkdir()
        (d / f"rank-{r:05d}" / "steps.jsonl").write_text(
            "".join(json.dumps({"step": s, "loss": 5.0 - s + r}) + "\n" for s in (1, 2)))
    if log is not None:
        (d / "output.log").write_text(log)
    if ended:
        (d / ENDED_MARK).write_text("")
    return d


def _job(tmp: Path) -> tuple[Ledger, Path]:
    lg = Ledger(tmp / "receipts")
    lg.ensure_writable()
    return lg, lg.staging / "job-0123456789abcdef"


def _receipt(lg: Ledger, rid: str | None) -> dict:
    assert rid is not None
    return json.loads((lg.path(rid) / "receipt.json").read_bytes())


# -- the nodes' states ----------------------------------------------------------------------------------------------

def test_the_state_of_each_node(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0)
    _node(job, 1, ended=False)  # its wrapper died: its lock is free and it never ended
    held = _node(job, 2, ended=False)  # its wrapper is alive
    fd = acquire_staging_lock(held)
    try:
        states = wait_for_nodes(job, 4, 0.0, wait=False)
        assert states == [
            NodeState(0, node_dir(job, 0), True),
            NodeState(1, node_dir(job, 1), False, "its wrapper died before the node ended"),
            NodeState(2, node_dir(job, 2), False, "had not ended"),
            NodeState(3, node_dir(job, 3), False, "never reported (no wrapper staged this node)"),
        ]
        waited = wait_for_nodes(job, 3, 0.01)
        assert waited[2] == NodeState(2, node_dir(job, 2), False,
                                      "did not end within 0.01 s of node 0 (--job-timeout)")
    finally:
        os.close(fd)
    assert wait_for_nodes(job, 1, 100.0) == [NodeState(0, node_dir(job, 0), True)]  # no wait when all ended


def test_a_node_without_its_lock_file_is_not_taken_for_gone(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    d = _node(job, 0, ended=False)
    (d / LOCK_FILE).unlink()
    (d / LOCK_FILE).symlink_to(tmp_path / "nowhere")  # its lock cannot be opened: not known to be gone
    assert wait_for_nodes(job, 1, 0.0, wait=False)[0].detail == "had not ended"
    (d / "wrapper.json").unlink()
    assert wait_for_nodes(job, 1, 0.0, wait=False)[0].detail == "never reported (no wrapper staged this node)"


# -- the job's outcome ----------------------------------------------------------------------------------------------

def _states(job: Path, *ended: bool) -> list[NodeState]:
    return [NodeState(k, node_dir(job, k), e, None if e else "lost") for k, e in enumerate(ended)]


def test_every_node_succeeded(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0, ended_at="2026-05-28T20:10:00+00:00")
    _node(job, 1, ended_at="2026-05-28T20:12:30+00:00")
    o = job_outcome(_states(job, True, True))
    assert (o.status, o.exit_code, o.signal) == ("succeeded", 0, None)
    assert o.ended_at == datetime(2026, 5, 28, 20, 12, 30, tzinfo=UTC)  # the last node's end


def test_a_failed_node_fails_the_job_with_the_lowest_bad_nodes_code(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0, returncode=0)
    _node(job, 1, returncode=-15)
    _node(job, 2, returncode=7)
    o = job_outcome(_states(job, True, True, True))
    assert (o.status, o.exit_code, o.signal) == ("failed", 143, "SIGTERM")  # node 1: the lowest that did not succeed


def test_an_interrupted_node_alone_interrupts_the_job(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0, returncode=0)
    d = _node(job, 1, returncode=None)
    (d / "exit.json").write_text(json.dumps({"returncode": -2, "forwarded": [2], "ended_at": None}))
    o = job_outcome(_states(job, True, True))
    assert (o.status, o.exit_code, o.signal) == ("interrupted", 130, "SIGINT")
    assert o.ended_at == datetime(2026, 5, 28, 20, 10, tzinfo=UTC)  # node 1 gave no time


def test_a_lost_node_fails_the_job(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0, returncode=0)
    _node(job, 1, returncode=None, ended=False)
    o = job_outcome(_states(job, True, False))
    assert (o.status, o.exit_code, o.signal) == ("failed", 0, None)  # node 0's own code


def test_without_any_outcome_the_job_ends_now(tmp_path: Path) -> None:
    _, job = _job(tmp_path)
    _node(job, 0, returncode=None)
    (node_dir(job, 0) / "exit.json").write_text('{"returncode": "0"}')
    before = datetime.now(UTC)
    o = job_outcome(_states(job, True))
    assert (o.status, o.exit_code, o.signal) == ("succeeded", None, None)
    assert before <= o.ended_at <= datetime.now(UTC)


# -- recover_job: assemble and publish ------------------------------------------------------------------------------

def test_a_job_whose_node_0_wrapper_died_is_published_once_with_every_node(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0, ranks=(0, 1), log="n0 line\n", started="2026-05-28T20:00:05+00:00")
    _node(job, 1, ranks=(2, 3), log="n1 line\n", started="2026-05-28T20:00:01+00:00")
    action, rid, detail = recover_job(lg, job)
    assert (action, detail) == ("published", "job of 2 nodes")
    data = _receipt(lg, rid)
    assert (data["status"], data["exit_code"]) == ("succeeded", 0)
    assert datetime.fromisoformat(data["started_at"]) == datetime(2026, 5, 28, 20, 0, 1, tzinfo=UTC)  # the first
    nodes = data["stack"]["nodes"]
    assert [(n["node_rank"], n["hostname"], n["ranks"], n["status"], n["exit_code"]) for n in nodes] == \
        [(0, "node0", [0, 1], "ended", 0), (1, "node1", [2, 3], "ended", 0)]
    assert sorted(data["stack"]["hardware"]["nodes_observed"]) == ["node0", "node1"]
    log = (lg.path(rid) / "output.log").read_text()
    assert log == "==> node 0 (node0) <==\nn0 line\n==> node 1 (node1) <==\nn1 line\n"
    assert not job.exists()
    assert recover_job(lg, job)[0] == "skipped"  # gone: nothing to do


def test_a_job_with_a_lost_node_keeps_what_it_wrote(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0, ranks=(0,), nnodes=3)
    _node(job, 1, ranks=(1,), ended=False, returncode=None, nnodes=3)
    action, rid, detail = recover_job(lg, job)
    assert (action, detail) == ("published", "job of 3 nodes; lost: nodes [1, 2]")  # node 2 never reported
    data = _receipt(lg, rid)
    assert data["status"] == "failed"
    nodes = {n["node_rank"]: n for n in data["stack"]["nodes"]}
    assert (nodes[1]["status"], nodes[1]["detail"], nodes[1]["ranks"]) == \
        ("lost", "its wrapper died before the node ended", [1])
    assert (nodes[2]["status"], nodes[2]["detail"], nodes[2]["hostname"]) == \
        ("lost", "never reported (no wrapper staged this node)", None)
    problems = [(p["source"], p["message"]) for p in data["problems"]]
    assert ("nodes", "node 1 (node1) lost: its wrapper died before the node ended; kept what it wrote (ranks 1)") \
        in problems
    assert ("nodes", "node 2 (unknown host) lost: never reported (no wrapper staged this node)") in problems
    assert data["summary"]["steps"] == 2


def test_a_rank_written_on_two_nodes_keeps_the_first_nodes(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0, ranks=(0,))
    _node(job, 1, ranks=(0,))
    action, rid, _ = recover_job(lg, job)
    problems = [(p["source"], p["message"]) for p in _receipt(lg, rid)["problems"]]
    assert ("nodes", "rank-00000 was written on node 0 and node 1; kept node 0's") in problems


def test_the_nodes_own_problems_are_kept_with_their_node(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    d = _node(job, 0, ranks=(0,), nnodes=1)
    (d / "problems.jsonl").write_text(json.dumps({"source": "telemetry", "message": "no NVML"}) + "\nnot json\n"
                                      + json.dumps({"source": "x"}) + "\n")
    _, rid, _ = recover_job(lg, job)
    problems = [(p["source"], p["message"]) for p in _receipt(lg, rid)["problems"]]
    assert ("node-00000/telemetry", "no NVML") in problems
    assert not any(src == "node-00000/x" for src, _ in problems)


def test_a_job_whose_wrapper_or_launch_still_runs_is_left_alone(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0)
    d1 = _node(job, 1, ended=False)
    job_lock = acquire_staging_lock(job)
    try:
        assert recover_job(lg, job) == ("running", None, "its node-0 wrapper is alive")
    finally:
        os.close(job_lock)
    fd = acquire_staging_lock(d1)
    try:
        assert recover_job(lg, job) == ("running", None, "node 1's wrapper is alive")
    finally:
        os.close(fd)
    me = os.getpid()
    from ledger.record.outcome import proc_start

    facts = json.loads((d1 / "wrapper.json").read_text()) | {"child_pid": me, "child_start": proc_start(me),
                                                             "host": socket.gethostname()}
    write_wrapper_facts(d1, facts)
    if os.uname().nodename == socket.gethostname():
        assert recover_job(lg, job) == ("running", None, f"node 1's launch (pid {me}) still runs")
    write_wrapper_facts(d1, facts | {"host": "elsewhere.example"})  # a pid on another node means nothing here
    assert recover_job(lg, job)[0] == "published"


def test_an_empty_job_directory_is_removed(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    job.mkdir()
    assert recover_job(lg, job) == ("skipped", None, "no node had staged anything; removed")
    assert not job.exists()


def test_a_job_whose_lock_cannot_be_opened_is_skipped(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0)
    (job / LOCK_FILE).symlink_to(tmp_path / "nowhere")
    action, rid, detail = recover_job(lg, job)
    assert (action, rid) == ("skipped", None) and "lock" in detail


def test_telemetry_of_each_node_is_named_after_it(tmp_path: Path) -> None:
    from schemas.tables import TABLES

    lg, job = _job(tmp_path)
    for k in (0, 1):
        d = _node(job, k, ranks=(k,))
        (d / "wrapper").mkdir()
        rows = {f.name: [None] for f in TABLES["telemetry"]} | {"time": [1.0 + k], "rank": [-1], "device": ["gpu0"],
                                                               "power_w": [100.0 * (k + 1)]}
        table = pa.table(rows, schema=TABLES["telemetry"])
        with pa.OSFile(str(d / "wrapper" / f"telemetry{STREAM_SUFFIX}"), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    _, rid, _ = recover_job(lg, job)
    import pyarrow.parquet as pq

    tele = pq.read_table(lg.path(rid) / "telemetry.parquet").to_pylist()
    assert sorted((r["node"], r["power_w"]) for r in tele) == [("node0", 100.0), ("node1", 200.0)]


@pytest.mark.parametrize("value", ["plain", ["a", "b"], {"k": "v"}, 3, None])
def test_redacting_json_values(value: object) -> None:
    def redact(s: str) -> str:
        return s.upper()

    expected = {"plain": "PLAIN", 3: 3, None: None}
    got = jobmod._redact_json(value, redact)
    if isinstance(value, list):
        assert got == ["A", "B"]
    elif isinstance(value, dict):
        assert got == {"K": "V"}
    else:
        assert got == expected[value]  # type: ignore[index]


def _record_node(tmp: Path, lg: Ledger, k: int, script: str, nnodes: int = 2) -> tuple[object, str]:
    import io

    from ledger.record.jobkey import JobOptions
    from ledger.record.wrapper import RecordOptions, record

    err = io.BytesIO()
    result = record(lg, RecordOptions(command=["sh", "-c", script], cwd=tmp, telemetry_interval=0, name="two",
                                      stdout=io.BytesIO(), stderr=err,
                                      job=JobOptions(key="two-nodes", node_rank=k, nnodes=nnodes, timeout_s=30)))
    return result, err.getvalue().decode()


def test_two_nodes_recorded_here_make_one_receipt_from_node_0(tmp_path: Path) -> None:
    """Node 1's wrapper ends first (its launch failed), then node 0's: node 0 waits for none, assembles both and
    publishes one failed receipt; each node's output gave steps, node 0's are kept and node 1's named."""
    lg = Ledger(tmp_path / "receipts")
    r1, err1 = _record_node(tmp_path, lg, 1, "echo step 1 loss 4; echo step 2 loss 3; exit 3")
    assert r1.receipt is None and r1.exit_code == 3  # type: ignore[attr-defined]
    assert err1.splitlines()[-1].startswith("ledger: node 1 of job two-nodes staged in ")
    r0, err0 = _record_node(tmp_path, lg, 0, "echo step 1 loss 2; echo step 2 loss 1")
    receipt = r0.receipt  # type: ignore[attr-defined]
    assert receipt is not None and r0.exit_code == 0  # type: ignore[attr-defined]
    assert "ledger: node 0 of job two-nodes: waiting up to 30 s for 1 other node(s)" in err0.splitlines()
    assert err0.splitlines()[-1] == f"ledger: recorded {receipt.id} (two, failed, exit 3; this node: succeeded, exit 0)"
    data = _receipt(lg, receipt.id)
    assert (data["status"], data["exit_code"]) == ("failed", 3)
    assert [(n["node_rank"], n["status"], n["exit_code"]) for n in data["stack"]["nodes"]] == \
        [(0, "ended", 0), (1, "ended", 3)]
    assert (data["summary"]["steps"], data["summary"]["final_loss"]) == (2, 1.0)  # node 0's output
    problems = [(p["source"], p["message"]) for p in data["problems"]]
    assert ("capture", "node 1's output also gave 2 steps row(s); node 0's were kept") in problems
    log = (lg.path(receipt.id) / "output.log").read_text().splitlines()
    assert log[0].startswith("==> node 0 (") and "step 2 loss 1" in log and "step 2 loss 3" in log
    assert not any(p.name.startswith("job-") for p in lg.staging.iterdir())  # published: the job's staging gone


def test_a_node_whose_ranks_wrote_steps_keeps_them_over_any_capture(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    script = ('mkdir -p "$LEDGER_RUN_DIR/rank-00001"; printf \'{"step": 1, "loss": 9.5}\\n\' > '
              '"$LEDGER_RUN_DIR/rank-00001/steps.jsonl"; echo step 1 loss 4')
    _record_node(tmp_path, lg, 1, script)
    r0, _ = _record_node(tmp_path, lg, 0, "echo step 1 loss 2")
    data = _receipt(lg, r0.receipt.id)  # type: ignore[attr-defined]
    problems = [(p["source"], p["message"]) for p in data["problems"]]
    assert ("capture", "node 0's output also gave 1 steps row(s); the ranks' own were kept") in problems
    assert data["summary"]["final_loss"] == 9.5


SECRET = "s3cr3t-Job-Value-91"


def test_each_nodes_stack_and_runtime_facts_are_kept_redacted_and_compared(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_TOKEN", SECRET)  # recover's redactor is the process environment's
    lg, job = _job(tmp_path)
    d0 = _node(job, 0, ranks=(0,))
    d1 = _node(job, 1, ranks=(1,))
    (d0 / "stack.json").write_text(json.dumps({"hardware": {"gpu_model": "H200", "gpu_count": 8}}))
    (d1 / "stack.json").write_text(json.dumps({"hardware": {"gpu_count": "many"}}))  # invalid: an empty stack
    (d0 / "rank-00000" / "runtime.json").write_text(json.dumps({"host": "node0", "nccl": "2.21.5",
                                                                "python": f"3.11 {SECRET}"}))
    (d1 / "rank-00001" / "runtime.json").write_text(json.dumps({"host": "node1", "nccl": "2.18.1",
                                                                "python": "3.12"}))
    (job / "wrapper").mkdir(parents=True)  # left by an earlier assembly: replaced
    (job / "wrapper" / "stale.txt").write_text("old")
    _, rid, _ = recover_job(lg, job)
    data = _receipt(lg, rid)
    text = json.dumps(data)
    assert SECRET not in text
    assert data["stack"]["hardware"]["gpu_model"] == "H200" and data["stack"]["drivers"]["nccl"] == "2.21.5"
    problems = [(p["source"], p["message"]) for p in data["problems"]]
    try:
        from schemas import Stack

        Stack.model_validate({"hardware": {"gpu_count": "many"}})
    except ValueError as exc:
        first = str(exc).splitlines()[0]
    assert ("node-00001/stack.json", f"invalid: {first}") in problems
    assert any(src == "nodes" and msg.startswith("nodes differ in ") for src, msg in problems)
    assert not (lg.path(rid) / "stale.txt").exists()


def test_a_lost_node_with_several_ranks_and_odd_problems_lines(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0, ranks=(0,))
    d1 = _node(job, 1, ranks=(1, 5), ended=False, returncode=None)
    with open(d1 / "problems.jsonl", "wb") as f:
        f.write(json.dumps({"source": "tee", "message": "cut"}).encode() + b"\n"
                + b'{"source": "x", "message": "caf\xff"}\n')
    _, rid, _ = recover_job(lg, job)
    problems = [(p["source"], p["message"]) for p in _receipt(lg, rid)["problems"]]
    assert ("nodes", "node 1 (node1) lost: its wrapper died before the node ended; kept what it wrote (ranks 1, 5)") \
        in problems
    assert ("node-00001/tee", "cut") in problems and ("node-00001/x", "caf\ufffd") in problems


def test_a_node_without_a_host_has_no_hostname_and_a_reused_pid_is_not_its_launch(tmp_path: Path) -> None:
    lg, job = _job(tmp_path)
    _node(job, 0, ranks=(0,), nnodes=1)
    facts = json.loads((node_dir(job, 0) / "wrapper.json").read_text())
    me = os.getpid()
    write_wrapper_facts(node_dir(job, 0), {k: v for k, v in facts.items() if k not in ("host", "job")}
                        | {"child_pid": me, "child_start": "1"})  # this pid now belongs to another process
    action, rid, _ = recover_job(lg, job)
    assert action == "published"
    [node] = _receipt(lg, rid)["stack"]["nodes"]
    assert node["hostname"] is None


def test_the_arguments_are_the_lowest_nodes_and_the_capture_facts_the_capturing_nodes(tmp_path: Path) -> None:
    """Node 0 prints no steps, node 1 does: the steps (and capture.json) are node 1's, the arguments node 0's."""
    import io

    from ledger.record.jobkey import JobOptions
    from ledger.record.wrapper import RecordOptions, record

    lg = Ledger(tmp_path / "receipts")
    results = []
    for k, script, lr in ((1, "echo step 1 loss 4", "0.2"), (0, "echo hello", "0.1")):
        results.append(record(lg, RecordOptions(command=["sh", "-c", script, "prog", f"--lr={lr}"], cwd=tmp_path,
                                                telemetry_interval=0, stdout=io.BytesIO(), stderr=io.BytesIO(),
                                                job=JobOptions(key="args", node_rank=k, nnodes=2, timeout_s=30))))
    receipt = results[-1].receipt
    assert receipt is not None
    data = _receipt(lg, receipt.id)
    assert data["workload"]["arguments"]["lr"] == "0.1"
    assert data["summary"]["steps"] == 1 and data["summary"]["final_loss"] == 4.0
