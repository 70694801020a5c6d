"""`ledger recover`, in this process (mutation testing cannot run the CLI that test_recover.py starts): staging
directories written by hand as a wrapper leaves them when it dies at each point (before its child exited, after,
with its log only, with its lock still held by a live wrapper, with its child still running here or on another
node), and what :func:`recover` publishes from each, its status, exit code, signal and end time checked against the
facts written here; what it refuses (one run's own directory given as the root) and what it cleans up (publishers'
temporary directories)."""

from __future__ import annotations

import json
import os
import signal
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.errors import BadInput
from ledger.record.outcome import proc_start
from ledger.record.recover import Recovered, recover, staging_root_of
from ledger.store.layout import LOCK_FILE, TMP_PREFIX
from ledger.store.receipts import Ledger
from ledger.store.staging import acquire_staging_lock, write_wrapper_facts

T0 = 1_780_000_000  # 2026-05-28T20:26:40Z, a time before any file this test writes
DEAD_PID = 2**22 + 12345  # above Linux's pid_max default: no such process


def _stage(root: Path, name: str, *, exit_json: dict | None = None, mtime: int = T0, **facts: object) -> Path:
    run = root / name
    (run / "rank-00000").mkdir(parents=True)
    (run / LOCK_FILE).write_text("")
    write_wrapper_facts(run, {"run_uuid": name, "name": name, "started_at": "2026-05-28T20:00:00+00:00",
                              "child_pid": DEAD_PID, "child_start": "1", "host": socket.gethostname()} | facts)
    (run / "rank-00000" / "steps.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 3.0 - s}) + "\n" for s in (1, 2)))
    if exit_json is not None:
        (run / "exit.json").write_text(json.dumps(exit_json))
    for path in [*run.rglob("*"), run]:
        os.utime(path, (mtime, mtime))
    return run


def _by_uuid(results: list[Recovered]) -> dict[str, Recovered]:
    return {r.run_uuid: r for r in results}


def _receipt(lg: Ledger, rid: str | None) -> dict:
    assert rid is not None
    return json.loads((lg.path(rid) / "receipt.json").read_bytes())


def _iso(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def test_a_run_whose_wrapper_died_before_its_child_exited_is_interrupted_at_its_last_sign_of_life(
        tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = _stage(lg.staging, "u1")
    # the run's files last changed at T0 + 30 (a rank's steps, two levels down), the directory itself earlier
    os.utime(run / "rank-00000" / "steps.jsonl", (T0 + 30, T0 + 30))
    os.utime(run / "wrapper.json", (T0 + 10, T0 + 10))
    os.utime(run, (T0 + 5, T0 + 5))
    [r] = recover(lg)
    assert (r.run_uuid, r.action, r.detail) == ("u1", "published", "")
    data = _receipt(lg, r.receipt_id)
    assert data["status"] == "interrupted" and data["exit_code"] is None and data["signal"] is None
    assert datetime.fromisoformat(data["ended_at"]) == _iso(T0 + 30)
    assert data["summary"]["steps"] == 2
    assert not run.exists()  # published: its staging directory is gone
    assert recover(lg) == []  # exactly once


def test_the_directory_itself_can_be_the_last_sign_of_life(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = _stage(lg.staging, "u1")
    os.utime(run, (T0 + 50, T0 + 50))
    [r] = recover(lg)
    assert datetime.fromisoformat(_receipt(lg, r.receipt_id)["ended_at"]) == _iso(T0 + 50)


@pytest.mark.parametrize(("returncode", "forwarded", "status", "exit_code", "sig"), [
    (0, [], "succeeded", 0, None),
    (3, [], "failed", 3, None),
    (-9, [], "failed", 137, "SIGKILL"),
    (-15, [15], "interrupted", 143, "SIGTERM"),
    (130, [2], "interrupted", 130, None),
])
def test_a_run_whose_wrapper_saw_its_child_exit_gets_the_true_outcome(
        tmp_path: Path, returncode: int, forwarded: list[int], status: str, exit_code: int, sig: str | None) -> None:
    lg = Ledger(tmp_path / "receipts")
    _stage(lg.staging, "u1", exit_json={"returncode": returncode, "forwarded": forwarded,
                                        "ended_at": "2026-05-28T20:30:00.500000+00:00"})
    [r] = recover(lg)
    data = _receipt(lg, r.receipt_id)
    assert (data["status"], data["exit_code"], data["signal"]) == (status, exit_code, sig)
    assert datetime.fromisoformat(data["ended_at"]) == datetime(2026, 5, 28, 20, 30, 0, 500000, tzinfo=UTC)


def test_an_exit_without_its_time_ends_at_the_last_sign_of_life(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    for name, extra in (("a", {}), ("b", {"ended_at": None}), ("c", {"ended_at": ""}), ("d", {"forwarded": None})):
        run = _stage(lg.staging, name, exit_json={"returncode": 2} | extra)
        os.utime(run / "exit.json", (T0 + 7, T0 + 7))
    results = recover(lg)
    assert [r.run_uuid for r in results] == ["a", "b", "c", "d"]
    for r in results:
        data = _receipt(lg, r.receipt_id)
        assert (data["status"], data["exit_code"]) == ("failed", 2), r
        assert datetime.fromisoformat(data["ended_at"]) == _iso(T0 + 7), r


@pytest.mark.parametrize("exit_text", ['{"returncode": "0"}', '{"returncode": null}', "{}", "not json", "[0]",
                                       '{"returncode": 1.0}'])
def test_an_exit_file_without_an_integer_return_code_is_an_interrupted_run(tmp_path: Path, exit_text: str) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = _stage(lg.staging, "u1")
    (run / "exit.json").write_text(exit_text)
    os.utime(run / "exit.json", (T0 + 3, T0 + 3))
    os.utime(run, (T0, T0))  # its entry made the directory newer
    [r] = recover(lg)
    data = _receipt(lg, r.receipt_id)
    assert (data["status"], data["exit_code"]) == ("interrupted", None)
    assert datetime.fromisoformat(data["ended_at"]) == _iso(T0 + 3)


def test_a_run_whose_wrapper_holds_its_lock_is_running(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = _stage(lg.staging, "u1")
    fd = acquire_staging_lock(run)  # the wrapper, alive
    try:
        assert recover(lg) == [Recovered("u1", "running", None, "its wrapper is alive")]
    finally:
        os.close(fd)
    assert run.is_dir()
    [r] = recover(lg)
    assert r.action == "published"


def test_a_run_whose_child_still_runs_here_is_left_alone(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    me = os.getpid()
    _stage(lg.staging, "here", child_pid=me, child_start=proc_start(me))
    _stage(lg.staging, "nohost", child_pid=me, child_start=proc_start(me), host=None)
    _stage(lg.staging, "nostart", child_pid=me, child_start=None)
    _stage(lg.staging, "reused", child_pid=me, child_start="1")  # the pid of another process since
    _stage(lg.staging, "elsewhere", child_pid=me, child_start=proc_start(me), host="another-node.example")
    got = _by_uuid(recover(lg))
    running = Recovered("", "running", None, f"its child (pid {me}) still runs")
    for name in ("here", "nohost", "nostart"):
        assert got[name] == Recovered(name, running.action, None, running.detail)
        assert (lg.staging / name).is_dir()
    # a pid reused by another process, or a child on another node (its pid means nothing here): published
    assert got["reused"].action == got["elsewhere"].action == "published"


def test_a_run_whose_child_was_never_started_or_is_a_zombie(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        # the child exited and was not reaped: a zombie, which runs no more
        import time

        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        _stage(lg.staging, "zombie", child_pid=pid, child_start=proc_start(pid))
        _stage(lg.staging, "nopid", child_pid=None)
        _stage(lg.staging, "zero", child_pid=0)
        got = _by_uuid(recover(lg))
        assert {k: v.action for k, v in got.items()} == {"zombie": "published", "nopid": "published",
                                                        "zero": "published"}
    finally:
        os.waitpid(pid, 0)


def test_damaged_or_missing_wrapper_facts_still_publish(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    a = _stage(lg.staging, "a")
    (a / "wrapper.json").write_text("{broken")
    b = _stage(lg.staging, "b")
    (b / "wrapper.json").unlink()
    c = _stage(lg.staging, "c")
    (c / "wrapper.json").write_text("[1, 2]")
    got = _by_uuid(recover(lg))
    assert {k: v.action for k, v in got.items()} == {"a": "published", "b": "published", "c": "published"}
    for r in got.values():
        assert _receipt(lg, r.receipt_id)["status"] == "interrupted"


def test_a_staging_root_holds_only_runs_what_else_is_there_is_passed_over(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _stage(lg.staging, "b")
    _stage(lg.staging, "a")
    (lg.staging / "a-file").write_text("not a run")
    elsewhere = _stage(tmp_path / "elsewhere", "linked")
    (lg.staging / "linked").symlink_to(elsewhere)
    results = recover(lg)
    assert [(r.run_uuid, r.action) for r in results] == [("a", "published"), ("b", "published")]  # in name order
    assert elsewhere.is_dir() and (lg.staging / "a-file").exists()


def test_one_staging_directory_that_cannot_be_published_stops_none_of_the_others(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _stage(lg.staging, "a")
    bad = _stage(lg.staging, "b")
    (bad / LOCK_FILE).unlink()
    (bad / LOCK_FILE).symlink_to(tmp_path / "nowhere")  # O_NOFOLLOW: the lock cannot be opened
    _stage(lg.staging, "c")
    got = _by_uuid(recover(lg))
    assert got["a"].action == got["c"].action == "published"
    assert got["b"].action == "skipped" and got["b"].receipt_id is None
    assert "lock" in got["b"].detail and got["b"].detail == str(_os_error(bad / LOCK_FILE))


def _os_error(path: Path) -> OSError:
    try:
        os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        return exc
    raise AssertionError("opened")


def test_a_run_that_fails_to_publish_is_kept_with_the_reason(tmp_path: Path) -> None:
    """Its log replaced by a directory: the publish fails, the run stays in staging with the error, the others
    are published."""
    lg = Ledger(tmp_path / "receipts")
    _stage(lg.staging, "a")
    bad = _stage(lg.staging, "bad")
    (bad / "output.log").mkdir()
    ok = _stage(lg.staging, "ok")
    results = recover(lg)
    assert [r.run_uuid for r in results] == ["a", "bad", "ok"]
    got = _by_uuid(results)
    assert got["a"].action == got["ok"].action == "published" and not ok.exists()
    assert got["bad"] == Recovered("bad", "failed", None,
                                   f"IsADirectoryError: [Errno 21] Is a directory: '{bad / 'output.log'}'")
    assert bad.is_dir()
    fd = acquire_staging_lock(bad)  # recover let go of its lock
    os.close(fd)


def test_a_wrapper_killed_before_its_capture_is_captured_from_the_log(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = lg.staging / "u1"
    run.mkdir(parents=True)
    (run / LOCK_FILE).write_text("")
    write_wrapper_facts(run, {"run_uuid": "u1", "name": "zero", "started_at": "2026-05-28T20:00:00+00:00",
                              "child_pid": DEAD_PID, "command": ["python", "train.py"], "cwd": str(tmp_path)})
    (run / "output.log").write_text("".join(f"step {s} loss {2.0 / s:.4f}\n" for s in range(1, 6)))
    (run / "exit.json").write_text(json.dumps({"returncode": 0, "ended_at": "2026-05-28T20:10:00+00:00"}))
    [r] = recover(lg)
    data = _receipt(lg, r.receipt_id)
    assert (data["status"], data["summary"]["steps"], data["summary"]["final_loss"]) == ("succeeded", 5, 0.4)


@pytest.mark.parametrize("command", [None, "python train.py"])
def test_without_the_command_as_a_list_the_log_is_not_captured(tmp_path: Path, command: object) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = lg.staging / "u1"
    run.mkdir(parents=True)
    write_wrapper_facts(run, {"run_uuid": "u1", "child_pid": DEAD_PID, "command": command})
    (run / "output.log").write_text("step 1 loss 2.0\nstep 2 loss 1.0\n")
    [r] = recover(lg)
    assert _receipt(lg, r.receipt_id)["summary"]["steps"] in (None, 0)


def test_a_capture_that_ran_already_is_not_run_again(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    run = lg.staging / "u1"
    run.mkdir(parents=True)
    write_wrapper_facts(run, {"run_uuid": "u1", "child_pid": DEAD_PID, "command": ["python", "t.py"]})
    (run / "output.log").write_text("step 1 loss 2.0\nstep 2 loss 1.0\n")
    (run / "capture.json").write_text(json.dumps({"line": None, "tables": []}))  # the wrapper's capture: none
    [r] = recover(lg)
    assert _receipt(lg, r.receipt_id)["summary"]["steps"] in (None, 0)


# -- the staging root -----------------------------------------------------------------------------------------------

def test_a_runs_own_directory_or_a_part_of_it_is_refused_with_its_root(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    root = tmp_path / "fallback"
    run = _stage(root, "u1")
    (run / "wrapper").mkdir()
    (run / "node-00001").mkdir()
    for wrong in (run, run / "rank-00000", run / "wrapper", run / "node-00001"):
        assert staging_root_of(wrong) == root
        with pytest.raises(BadInput) as err:
            recover(lg, wrong)
        assert str(err.value) == (f"{wrong} is one run's staging directory (or a part of one), not a staging root: "
                                  f"give the directory that holds it, `ledger recover --from {root}`")
    assert not lg.root.exists()  # nothing made, nothing published
    [r] = recover(lg, root)
    assert r.action == "published" and lg.path(r.receipt_id).is_dir()


def test_what_is_not_a_run_has_no_staging_root(tmp_path: Path) -> None:
    root = tmp_path / "fallback"
    run = _stage(root, "u1")
    assert staging_root_of(root) is None
    assert staging_root_of(tmp_path) is None
    assert staging_root_of(Path("/")) is None
    plain = tmp_path / "plain" / "rank-00000"
    plain.mkdir(parents=True)  # a rank's name outside any run
    assert staging_root_of(plain) is None and staging_root_of(plain.parent) is None
    lock_only = tmp_path / "l" / "run"
    lock_only.mkdir(parents=True)
    (lock_only / LOCK_FILE).write_text("")
    assert staging_root_of(lock_only) == tmp_path / "l"
    exit_only = tmp_path / "e" / "run"
    exit_only.mkdir(parents=True)
    (exit_only / "exit.json").write_text("{}")
    assert staging_root_of(exit_only / "rank-00003") == tmp_path / "e"
    job = tmp_path / "j" / "job-abc"
    (job / "node-00000").mkdir(parents=True)
    assert staging_root_of(job) == tmp_path / "j" and staging_root_of(job / "node-00000") == tmp_path / "j"
    relative = Path(os.path.relpath(run, Path.cwd()))
    assert staging_root_of(relative) == Path.cwd() / relative.parent  # absolute, not resolved


def test_recover_from_another_root_into_a_new_ledger(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "new" / "receipts")
    root = tmp_path / "fallback"
    _stage(root, "u1")
    [r] = recover(lg, root)
    assert r.action == "published" and lg.path(r.receipt_id).is_dir() and (lg.root / "index.duckdb").exists() in (
        True, False)
    assert recover(lg, tmp_path / "missing") == []


def test_an_empty_or_missing_ledger_recovers_nothing(tmp_path: Path) -> None:
    assert recover(Ledger(tmp_path / "none")) == []
    assert not (tmp_path / "none").exists()


# -- publishers' temporary directories ------------------------------------------------------------------------------

def test_temporary_directories_of_dead_publishers_are_removed(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    lg.ensure_writable()
    live = _stage(lg.staging, "live")
    dead = _stage(lg.staging, "dead")
    (dead / LOCK_FILE).unlink()
    (dead / LOCK_FILE).symlink_to(tmp_path / "nowhere")  # its lock cannot be taken: kept out of doubt
    tmps = {name: lg.root / f"{TMP_PREFIX}{name}" for name in
            ("live-1a2b3c4d", "gone-5e6f7a8b", "job-x-y-0011aabb", "dead-99887766")}
    for t in tmps.values():
        (t / "sub").mkdir(parents=True)
    (lg.root / f"{TMP_PREFIX}file-00000000").write_text("a file")
    (lg.root / "other-dir").mkdir()
    fd = acquire_staging_lock(live)  # its publisher is at work
    try:
        results = _by_uuid(recover(lg))
    finally:
        os.close(fd)
    assert results["live"].action == "running"
    assert tmps["live-1a2b3c4d"].is_dir()  # in use
    assert tmps["dead-99887766"].is_dir()  # its run's lock could not be taken
    assert not tmps["gone-5e6f7a8b"].exists() and not tmps["job-x-y-0011aabb"].exists()
    assert (lg.root / f"{TMP_PREFIX}file-00000000").is_file() and (lg.root / "other-dir").is_dir()
    recover(lg)  # the live run's wrapper has gone: it is published, and its temporary directory removed
    assert not tmps["live-1a2b3c4d"].exists()


def test_a_sigterm_forwarded_then_exit_130_is_interrupted(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _stage(lg.staging, "u1", exit_json={"returncode": 143, "forwarded": [int(signal.SIGTERM)],
                                        "ended_at": "2026-05-28T20:30:00+00:00"})
    [r] = recover(lg)
    assert _receipt(lg, r.receipt_id)["status"] == "interrupted"


def test_a_wrapper_killed_before_its_capture_reads_the_files_the_launch_wrote_in_its_directory(tmp_path: Path
                                                                                               ) -> None:
    """The launch's directory (``cwd`` of wrapper.json) holds a Hugging Face trainer state; the log says nothing:
    the steps come from that file."""
    lg = Ledger(tmp_path / "receipts")
    work = tmp_path / "work"
    (work / "out" / "checkpoint-3").mkdir(parents=True)
    state = {"global_step": 3, "max_steps": 3,
             "log_history": [{"step": s, "loss": 2.0 - 0.5 * s, "epoch": 0.1 * s} for s in (1, 2, 3)]}
    (work / "out" / "checkpoint-3" / "trainer_state.json").write_text(json.dumps(state))
    run = lg.staging / "u1"
    run.mkdir(parents=True)
    write_wrapper_facts(run, {"run_uuid": "u1", "started_at": "2020-01-01T00:00:00+00:00", "child_pid": DEAD_PID,
                              "command": ["python", "train.py"], "cwd": str(work)})
    (run / "output.log").write_text("nothing to read here\n")
    [r] = recover(lg)
    data = _receipt(lg, r.receipt_id)
    assert (data["summary"]["steps"], data["summary"]["final_loss"]) == (3, 0.5)


def test_a_job_left_in_the_staging_root_is_recovered_as_a_job(tmp_path: Path) -> None:
    from ledger.store.jobs import ENDED_MARK, node_dir

    lg = Ledger(tmp_path / "receipts")
    job = lg.staging / "job-00112233aabbccdd"
    node = node_dir(job, 0)
    (node / "rank-00000").mkdir(parents=True)
    (node / LOCK_FILE).write_text("")
    write_wrapper_facts(node, {"run_uuid": "n0", "child_pid": DEAD_PID, "host": "h0",
                               "job": {"key": "k", "node_rank": 0, "nnodes": 1, "node_name": "h0"}})
    (node / "rank-00000" / "steps.jsonl").write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    (node / "exit.json").write_text(json.dumps({"returncode": 0, "ended_at": "2026-05-28T20:10:00+00:00"}))
    (node / ENDED_MARK).write_text("")
    _stage(lg.staging, "single")
    results = recover(lg)
    assert [(r.run_uuid, r.action) for r in results] == [("job-00112233aabbccdd", "published"),
                                                         ("single", "published")]
    assert results[0].detail == "job of 1 nodes" and results[0].receipt_id is not None
    data = _receipt(lg, results[0].receipt_id)
    assert data["status"] == "succeeded" and [n["node_rank"] for n in data["stack"]["nodes"]] == [0]
    held = lg.staging / "job-ffeeddccbbaa0099"
    node_dir(held, 0).mkdir(parents=True)
    fd = acquire_staging_lock(held)
    try:
        assert recover(lg) == [Recovered("job-ffeeddccbbaa0099", "running", None, "its node-0 wrapper is alive")]
    finally:
        os.close(fd)


def test_temporary_directories_of_a_live_job_or_an_idle_run_are_told_apart(tmp_path: Path) -> None:
    """A job's staging name holds a dash (``job-<digest>``): its publisher's temporary directory is kept while the job
    is locked; the temporary directory of a run whose lock is free (no publisher at work) is removed."""
    lg = Ledger(tmp_path / "receipts")
    lg.ensure_writable()
    job = lg.staging / "job-abc"
    job.mkdir()
    kept = lg.root / f"{TMP_PREFIX}job-abc-0011aabb"
    kept.mkdir()
    me = os.getpid()
    idle = _stage(lg.staging, "idle", child_pid=me, child_start=proc_start(me))  # its launch runs, its wrapper died
    gone = lg.root / f"{TMP_PREFIX}idle-22334455"
    gone.mkdir()
    fd = acquire_staging_lock(job)
    try:
        got = _by_uuid(recover(lg))
    finally:
        os.close(fd)
    assert got["job-abc"].action == "running" and got["idle"].action == "running" and idle.is_dir()
    assert kept.is_dir() and not gone.exists()
