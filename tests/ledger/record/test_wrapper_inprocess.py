"""`ledger record`'s wrapper, in this process (mutation testing cannot run the `ledger` CLI): :func:`record` around
small shell launches (which import nothing of ledger), each ending a different way (success, an exit code, a
signal, a signal sent to the wrapper and forwarded), and what it publishes, prints and returns checked against what
the launch did; the environment and directory the launch gets; what is refused before anything runs; a ledger that
cannot be written (the run kept in a private staging root, and the command to publish it later)."""

from __future__ import annotations

import gc
import io
import json
import os
import signal
import socket
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.errors import BadInput
from ledger.record import wrapper
from ledger.record.wrapper import EXIT_NOT_RECORDED, EXIT_RESERVE, RecordOptions, RecordResult, record
from ledger.redact import REDACTED
from ledger.store.receipts import Ledger

SECRET = "pw-Zq81xKcd-secret"


def _record(tmp: Path, script: str, **options: object) -> tuple[Ledger, RecordResult, bytes, str]:
    lg = options.pop("ledger", None) or Ledger(tmp / "receipts")
    out, err = io.BytesIO(), io.BytesIO()
    opts = RecordOptions(command=["sh", "-c", script], cwd=tmp, telemetry_interval=0, stdout=out, stderr=err,
                         **options)  # type: ignore[arg-type]
    result = record(lg, opts)  # type: ignore[arg-type]
    return lg, result, out.getvalue(), err.getvalue().decode()


def _receipt(lg: Ledger, rid: str) -> dict:
    return json.loads((lg.path(rid) / "receipt.json").read_bytes())


def test_a_launch_that_succeeds(tmp_path: Path) -> None:
    lg, result, out, err = _record(tmp_path, "echo step 1 loss 2.5; echo step 2 loss 1.5; echo warn >&2",
                                   name="first", tags={"team": "a"}, attempt=2)
    r = result.receipt
    assert r is not None and result.exit_code == 0 and result.run_dir.parent == lg.staging
    assert not result.run_dir.exists()  # published: staging cleaned up
    assert result.to_json() == {"receipt_id": r.id, "name": "first", "status": "succeeded", "exit_code": 0,
                                "kept_in": None}
    data = _receipt(lg, r.id)
    assert (data["status"], data["exit_code"], data["signal"], data["name"], data["attempt"]) == \
        ("succeeded", 0, None, "first", 2)
    assert data["tags"] == {"team": "a"}
    assert data["command"] == ["sh", "-c", "echo step 1 loss 2.5; echo step 2 loss 1.5; echo warn >&2"]
    assert (data["summary"]["steps"], data["summary"]["final_loss"]) == (2, 1.5)
    assert out == b"step 1 loss 2.5\nstep 2 loss 1.5\n"  # the launch's stdout, unchanged
    log = (lg.path(r.id) / "output.log").read_bytes()
    assert sorted(log.splitlines()) == sorted([b"step 1 loss 2.5", b"step 2 loss 1.5", b"warn"])
    lines = err.splitlines()
    assert lines[0] == "warn"
    assert lines[1].startswith("ledger: captured 2 steps")
    assert lines[-1] == f"ledger: recorded {r.id} (first, succeeded, exit 0)"
    assert len(lines) == 3


def test_a_launch_that_fails_with_an_exit_code(tmp_path: Path) -> None:
    lg, result, _, err = _record(tmp_path, "echo step 1 loss 2; exit 3")
    r = result.receipt
    assert r is not None and result.exit_code == 3
    data = _receipt(lg, r.id)
    assert (data["status"], data["exit_code"], data["signal"], data["name"]) == ("failed", 3, None, None)
    log = lg.path(r.id) / "output.log"
    assert err.splitlines()[-2:] == [f"ledger: failed: no exception printed (line 1 of {log})",
                                     f"ledger: recorded {r.id} (unnamed, failed, exit 3)"]
    assert result.to_json()["status"] == "failed" and result.to_json()["exit_code"] == 3


def test_a_failed_launch_with_a_traceback_names_its_exception_and_line(tmp_path: Path) -> None:
    script = ("echo step 1 loss 2; echo 'Traceback (most recent call last):'; "
              "echo '  File \"train.py\", line 9, in <module>'; echo 'ValueError: boom' ; exit 1")
    lg, result, _, err = _record(tmp_path, script)
    r = result.receipt
    assert r is not None and result.exit_code == 1
    log = lg.path(r.id) / "output.log"
    assert f"ledger: failed: ValueError: boom (line 2 of {log})" in err.splitlines()


def test_a_launch_killed_by_a_signal(tmp_path: Path) -> None:
    lg, result, _, err = _record(tmp_path, "echo step 1 loss 2; kill -9 $$")
    r = result.receipt
    assert r is not None and result.exit_code == 128 + 9
    data = _receipt(lg, r.id)
    assert (data["status"], data["exit_code"], data["signal"]) == ("failed", 137, "SIGKILL")
    assert err.splitlines()[-1] == f"ledger: recorded {r.id} (unnamed, failed, exit 137)"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_wrapper_is_forwarded_to_the_launch(tmp_path: Path, signum: int) -> None:
    """The launch signals its parent (this process, the wrapper): the wrapper passes it on to the launch's process
    group, the launch dies of it, and the run is interrupted; the wrapper's own handlers are back afterwards."""
    before = {s: signal.getsignal(s) for s in wrapper.FORWARDED}
    # short sleeps: a shell that takes the signal between two commands dies of it once the command it started ends
    script = (f"echo step 1 loss 2; kill -{int(signum)} $PPID; i=0; while [ $i -lt 200 ]; do sleep 0.1; "
              "i=$((i+1)); done; echo never")
    lg, result, out, _ = _record(tmp_path, script)
    r = result.receipt
    assert r is not None and b"never" not in out
    data = _receipt(lg, r.id)
    name = signal.Signals(signum).name
    assert (data["status"], data["exit_code"], data["signal"]) == ("interrupted", 128 + signum, name)
    assert result.exit_code == 128 + signum
    assert {s: signal.getsignal(s) for s in wrapper.FORWARDED} == before


def test_the_launch_gets_its_run_directory_attempt_directory_and_unbuffered_output(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = ('printf "%s\\n" "$LEDGER_RUN_DIR" "$LEDGER_ATTEMPT" "$PYTHONUNBUFFERED" "$PWD" "$MINE" > '
              f"{tmp_path}/env.txt; ls \"$LEDGER_RUN_DIR\" > {tmp_path}/staged.txt")
    lg = Ledger(tmp_path / "receipts")
    out, err = io.BytesIO(), io.BytesIO()
    result = record(lg, RecordOptions(command=["sh", "-c", script], cwd=work, telemetry_interval=0, stdout=out,
                                      stderr=err, attempt=4, env={"PATH": os.environ["PATH"], "MINE": "x"}))
    run_dir, attempt, unbuffered, pwd, mine = (tmp_path / "env.txt").read_text().splitlines()
    assert run_dir == str(result.run_dir.resolve()) and Path(run_dir).is_absolute()
    assert (attempt, unbuffered, pwd, mine) == ("4", "1", str(work), "x")
    staged = (tmp_path / "staged.txt").read_text().split()
    assert {"wrapper.json", "exit.json", "lock", "output.log"} <= set(staged)


def test_a_users_own_unbuffered_setting_is_kept(tmp_path: Path) -> None:
    script = f'printf "%s" "$PYTHONUNBUFFERED" > {tmp_path}/u.txt'
    _record(tmp_path, script, env={"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "0"})
    assert (tmp_path / "u.txt").read_text() == "0"


def test_secrets_of_the_environment_are_redacted_in_the_command_name_and_log(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "API_TOKEN": SECRET}
    lg, result, out, _ = _record(tmp_path, f"echo token {SECRET}; echo step 1 loss 1", env=env,
                                 name=f"run-{SECRET}", tags={"k": SECRET})
    r = result.receipt
    assert r is not None
    data = _receipt(lg, r.id)
    assert SECRET not in json.dumps(data)
    assert REDACTED in data["command"][2] and REDACTED in data["name"] and data["tags"]["k"] == REDACTED
    assert SECRET.encode() not in (lg.path(r.id) / "output.log").read_bytes()
    assert SECRET.encode() in out  # the user's own terminal sees what the launch printed


@pytest.mark.parametrize(("command", "message"), [
    ([], "nothing to run: give the launch after `--`, e.g. ledger record -- python train.py"),
    (["no-such-program-xyz", "a"], "command not found: 'no-such-program-xyz' (check the launch after `--`)"),
])
def test_a_launch_that_cannot_run_is_refused_before_anything_is_written(
        tmp_path: Path, command: list[str], message: str) -> None:
    lg = Ledger(tmp_path / "receipts")
    with pytest.raises(BadInput) as exc:
        record(lg, RecordOptions(command=command, cwd=tmp_path, telemetry_interval=0, stdout=io.BytesIO(),
                                 stderr=io.BytesIO()))
    assert str(exc.value) == message
    assert not lg.root.exists()


def test_a_bad_parse_pattern_is_refused_before_anything_runs(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    with pytest.raises(BadInput):
        record(lg, RecordOptions(command=["sh", "-c", f"touch {tmp_path}/ran"], cwd=tmp_path, telemetry_interval=0,
                                 stdout=io.BytesIO(), stderr=io.BytesIO(), parse="step {step"))
    assert not lg.root.exists() and not (tmp_path / "ran").exists()


def test_a_script_given_by_its_path_runs(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho step 1 loss 3\n")
    script.chmod(0o755)
    lg = Ledger(tmp_path / "receipts")
    result = record(lg, RecordOptions(command=[str(script)], cwd=tmp_path, telemetry_interval=0,
                                      stdout=io.BytesIO(), stderr=io.BytesIO()))
    assert result.receipt is not None and result.receipt.status == "succeeded"


@pytest.mark.parametrize(("script", "code"), [("echo step 1 loss 2", EXIT_NOT_RECORDED), ("exit 4", 4)])
def test_a_ledger_that_cannot_be_written_keeps_the_run_in_a_private_staging_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, code: int) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "blocker").write_text("")
    lg = Ledger(tmp_path / "blocker" / "receipts")
    env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": "gpu-node-7"}
    _, result, _, err = _record(tmp_path, script, ledger=lg, name="kept", env=env)
    fallback = tmp_path / "tmp" / f"ledger-staging-{os.getuid()}"
    assert result.receipt is None and result.exit_code == code
    assert result.run_dir.parent == fallback and result.run_dir.is_dir()
    assert result.to_json() == {"receipt_id": None, "name": None, "status": None, "exit_code": code,
                                "kept_in": str(result.run_dir)}
    lines = err.splitlines()
    assert lines[0].startswith(f"ledger: ledger directory {lg.root} is not writable (")
    assert lines[0].endswith(f"; staging this run in {fallback} instead, the training proceeds")
    assert lines[-1].startswith("ledger: could not publish the receipt (")
    assert lines[-1].endswith(f"); the run's data is kept in {result.run_dir}; once the problem is fixed, publish "
                              f"it with `ledger recover --from {fallback} --ledger {lg.root}`")
    # what the wrapper left for `ledger recover`: its facts and the child's outcome, in the space reserved for it
    facts = json.loads((result.run_dir / "wrapper.json").read_text())
    assert facts["run_uuid"] == result.run_dir.name and facts["pid"] == os.getpid()
    assert facts["pid_start"] == Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
    assert facts["host"] == socket.gethostname() and facts["name"] == "kept" and facts["cwd"] == str(tmp_path)
    assert facts["command"] == ["sh", "-c", script] and facts["attempt"] == 1 and facts["telemetry_interval"] == 0
    assert facts["links"] == {"attempt_of": None, "replicates": None, "baseline": None}
    assert facts["node_name"] == "gpu-node-7" and "job" not in facts
    assert isinstance(facts["child_pid"], int) and facts["child_pid"] != os.getpid()
    exit_bytes = (result.run_dir / "exit.json").read_bytes()
    assert len(exit_bytes) == EXIT_RESERVE == 512
    outcome = json.loads(exit_bytes)
    assert outcome["returncode"] == (0 if code == EXIT_NOT_RECORDED else code) and outcome["forwarded"] == []
    ended = datetime.fromisoformat(outcome["ended_at"])
    assert datetime.fromisoformat(facts["started_at"]) <= ended <= datetime.now(UTC)
    # and the lock is free: recover can take it
    from ledger.store.staging import acquire_staging_lock

    os.close(acquire_staging_lock(result.run_dir))


def test_the_outcome_is_written_in_place_into_its_reserved_space(tmp_path: Path) -> None:
    path = tmp_path / "exit.json"
    wrapper._fill(path, {"returncode": None})
    assert path.read_bytes() == b'{"returncode": null}'.ljust(512)
    ino = path.stat().st_ino
    wrapper._fill(path, {"returncode": 3, "forwarded": [15], "ended_at": "2026-12-01T00:00:00+00:00"})
    assert path.stat().st_ino == ino and path.stat().st_size == 512
    assert json.loads(path.read_bytes()) == {"returncode": 3, "forwarded": [15],
                                             "ended_at": "2026-12-01T00:00:00+00:00"}
    assert path.read_bytes().startswith(b'{"ended_at": ')  # sorted keys
    exact = {"k": "x" * (512 - len('{"k": ""}'))}
    wrapper._fill(path, exact)
    assert json.loads(path.read_bytes()) == exact
    with pytest.raises(ValueError, match="outcome larger than its reserved space"):
        wrapper._fill(path, {"k": "x" * (513 - len('{"k": ""}'))})


def test_imports_without_collection(tmp_path: Path) -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with wrapper.imports_without_collection(freeze=False):
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    try:
        with wrapper.imports_without_collection(freeze=True):
            assert not gc.isenabled()
        assert gc.isenabled() and gc.get_freeze_count() > frozen
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with wrapper.imports_without_collection(freeze=False):
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_the_stack_capture_never_fails_the_run(tmp_path: Path) -> None:
    class Boom:  # a redactor that fails at its first use
        def __getattr__(self, name: str) -> object:
            raise RuntimeError("no stack today")

    opts = RecordOptions(command=["sh"], cwd=tmp_path)
    wrapper._capture_stack(tmp_path, opts, {}, Boom())
    data = json.loads((tmp_path / "stack.json").read_text())
    assert data == {"hardware": {"error": "stack capture failed: RuntimeError: no stack today"}}
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "stack.json").mkdir()  # cannot be written: nothing raised
    wrapper._capture_stack(tmp_path / "ro", opts, {}, Boom())


def test_no_sampler_without_an_interval(tmp_path: Path) -> None:
    assert wrapper._start_sampler(tmp_path, 0, os.getpid()) is None
    assert wrapper._start_sampler(tmp_path, -1.0, os.getpid()) is None


def test_variables_named_by_the_user_are_stored_in_the_stack(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "RUN_LABEL": "visible-label-77"}
    lg, result, _, _ = _record(tmp_path, "true", env=env)
    assert result.receipt is not None
    assert "RUN_LABEL" not in _receipt(lg, result.receipt.id)["stack"]["environment"]
    lg2, result2, _, _ = _record(tmp_path, "true", env=env, env_names=["RUN_LABEL"], ledger=Ledger(tmp_path / "2"))
    assert result2.receipt is not None
    assert _receipt(lg2, result2.receipt.id)["stack"]["environment"]["RUN_LABEL"] == "visible-label-77"


def test_a_job_of_one_node_is_published_by_its_node_0(tmp_path: Path) -> None:
    from ledger.record.jobkey import JobOptions

    lg, result, _, err = _record(tmp_path, "echo step 1 loss 2", name="job1",
                                 job=JobOptions(key="k-one", node_rank=0, nnodes=1, timeout_s=5))
    r = result.receipt
    assert r is not None and result.exit_code == 0
    data = _receipt(lg, r.id)
    assert [(n["node_rank"], n["status"]) for n in data["stack"]["nodes"]] == [(0, "ended")]
    assert err.splitlines()[-1] == f"ledger: recorded {r.id} (job1, succeeded, exit 0)"
    assert not any("waiting up to" in line for line in err.splitlines())


def test_a_node_other_than_0_leaves_the_publish_to_node_0(tmp_path: Path) -> None:
    from ledger.record.jobkey import JobOptions

    lg, result, _, err = _record(tmp_path, "exit 2", job=JobOptions(key="k-two", node_rank=1, nnodes=2))
    assert result.receipt is None and result.exit_code == 2
    assert result.run_dir.name == "node-00001" and result.run_dir.parent.parent == lg.staging
    assert err.splitlines()[-1] == (f"ledger: node 1 of job k-two staged in {result.run_dir}; node 0 publishes the "
                                    "receipt")
    from ledger.store.staging import acquire_staging_lock

    os.close(acquire_staging_lock(result.run_dir))  # its wrapper let go of it
    job = json.loads((result.run_dir / "wrapper.json").read_text())["job"]
    assert (job["key"], job["node_rank"], job["nnodes"]) == ("k-two", 1, 2)


def test_the_launchs_arguments_are_staged_before_it_runs(tmp_path: Path) -> None:
    lg, result, _, _ = _record(tmp_path, "echo step 1 loss 2", name="args")
    lg2 = Ledger(tmp_path / "second")
    out, err = io.BytesIO(), io.BytesIO()
    result = record(lg2, RecordOptions(command=["sh", "-c", "echo step 1 loss 2", "prog", "--lr=0.5", "--layers", "4"],
                                       cwd=tmp_path, telemetry_interval=0, stdout=out, stderr=err))
    assert result.receipt is not None
    data = _receipt(lg2, result.receipt.id)
    arguments = data["workload"]["arguments"]
    assert (arguments["lr"], arguments["layers"]) == ("0.5", "4")
    assert data["capture"]["config_sources"] == ["argv"]


def test_a_signal_once_the_launch_runs_is_forwarded_at_once(tmp_path: Path) -> None:
    """The launch waits until the wrapper has written its pid (after the handlers send signals themselves), then
    signals the wrapper: the handler forwards it to the launch's group directly."""
    script = ('while ! grep -q child_pid "$LEDGER_RUN_DIR/wrapper.json"; do sleep 0.01; done; kill -TERM $PPID; '
              "i=0; while [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; echo never")
    lg, result, out, _ = _record(tmp_path, script)
    assert result.receipt is not None and b"never" not in out
    data = _receipt(lg, result.receipt.id)
    assert (data["status"], data["exit_code"], data["signal"]) == ("interrupted", 143, "SIGTERM")


def test_wrapper_json_names_the_launchs_process_by_pid_and_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """What `ledger recover` needs to tell the launch from a process that reused its pid: the launch writes its own
    pid and start time (field 22 of /proc/<pid>/stat) where the wrapper's facts can be compared with them."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (tmp_path / "blocker").write_text("")
    lg = Ledger(tmp_path / "blocker" / "receipts")
    script = f"echo $$ > {tmp_path}/pid; cut -d' ' -f22 /proc/$$/stat > {tmp_path}/start"
    _, result, _, _ = _record(tmp_path, script, ledger=lg)
    facts = json.loads((result.run_dir / "wrapper.json").read_text())
    assert facts["child_pid"] == int((tmp_path / "pid").read_text())
    assert facts["child_start"] == (tmp_path / "start").read_text().strip()


def test_the_wrapper_samples_telemetry_when_asked(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    out, err = io.BytesIO(), io.BytesIO()
    result = record(lg, RecordOptions(command=["sh", "-c", "sleep 0.5; echo step 1 loss 2"], cwd=tmp_path,
                                      telemetry_interval=0.05, stdout=out, stderr=err))
    assert result.receipt is not None
    import pyarrow.parquet as pq

    rows = pq.read_table(lg.path(result.receipt.id) / "telemetry.parquet").num_rows
    assert rows > 0


@pytest.mark.parametrize(("phase", "status"), [("prelaunch", "interrupted"), ("launched", None),
                                               ("running", None), ("finalizing", "succeeded")])
def test_a_wrapper_killed_at_each_phase_is_published_by_recover(tmp_path: Path, phase: str, status: str | None
                                                                ) -> None:
    """The wrapper SIGKILLs itself at a phase (``LEDGER_FAULT_AT``), in a forked child of this process (so that the
    code under test is this process's); `ledger recover` then publishes what it left, once."""
    from ledger.record.recover import recover

    lg = Ledger(tmp_path / "receipts")
    done = tmp_path / "done"
    pid = os.fork()
    if pid == 0:  # the wrapper's process
        try:
            os.environ["LEDGER_FAULT_AT"] = phase
            record(lg, RecordOptions(command=["sh", "-c", f"echo step 1 loss 2; touch {done}"], cwd=tmp_path,
                                     telemetry_interval=0, stdout=io.BytesIO(), stderr=io.BytesIO()))
        finally:
            os._exit(3)
    _, code = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(code) and os.WTERMSIG(code) == signal.SIGKILL
    [run_dir] = list(lg.staging.iterdir())
    facts = json.loads((run_dir / "wrapper.json").read_text())
    assert ("child_pid" in facts) is (phase != "prelaunch")
    if phase != "prelaunch":
        import time

        from ledger.record.outcome import process_alive

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (  # the launch runs on without its wrapper: until it has ended
                not done.exists() or process_alive(facts["child_pid"], facts.get("child_start"))):
            time.sleep(0.02)
    import time

    from ledger.store.staging import StagingBusy, acquire_staging_lock

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the wrapper's forked output parser may hold its lock a moment longer
        try:
            os.close(acquire_staging_lock(run_dir))
            break
        except StagingBusy:
            time.sleep(0.02)
    [r] = recover(lg)
    assert r.action == "published"
    data = _receipt(lg, r.receipt_id or "")
    if status is not None:
        assert data["status"] == status
    assert recover(lg) == []


def test_a_receipt_that_cannot_be_published_into_the_ledger_says_how_to_recover_it(tmp_path: Path) -> None:
    """The ledger can be staged into, but every shard directory is a symbolic link (ledger never publishes through
    one): the run stays in the ledger's own staging, and the command to publish it later needs no --from."""
    lg = Ledger(tmp_path / "receipts")
    lg.ensure_writable()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for i in range(256):
        (lg.root / f"{i:02x}").symlink_to(elsewhere, target_is_directory=True)
    _, result, _, err = _record(tmp_path, "echo step 1 loss 2", ledger=lg)
    assert result.receipt is None and result.exit_code == EXIT_NOT_RECORDED
    assert result.run_dir.parent == lg.staging and result.run_dir.is_dir()
    last = err.splitlines()[-1]
    assert last.startswith("ledger: could not publish the receipt (") and " is a symbolic link" in last
    assert last.endswith(f"); the run's data is kept in {result.run_dir}; once the problem is fixed, publish it with "
                         f"`ledger recover --ledger {lg.root}`")
    assert list(elsewhere.iterdir()) == []


def test_a_launch_at_a_terminal_is_told_when_the_users_terminal_is_resized(tmp_path: Path) -> None:
    """The wrapper's stdout is a terminal of 33 x 101: the launch gets a terminal of that size. The launch shrinks
    its own to 5 x 7 and signals SIGWINCH to the wrapper (as the user's terminal does when resized): the wrapper
    copies the user's terminal's size to the launch's again and passes SIGWINCH on, which the launch traps."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    # until the launch's trap has run: a signal sent before the wrapper's handler is in place is ignored
    script = (f"trap 'stty size <&1 > {tmp_path}/after' WINCH; stty size <&1 > {tmp_path}/before; "
              f"stty rows 5 cols 7 <&1; i=0; while [ ! -s {tmp_path}/after ] && [ $i -lt 100 ]; do "
              "kill -WINCH $PPID; sleep 0.1; i=$((i+1)); done")
    lg = Ledger(tmp_path / "receipts")
    with os.fdopen(slave, "wb", buffering=0) as terminal:
        result = record(lg, RecordOptions(command=["sh", "-c", script], cwd=tmp_path, telemetry_interval=0,
                                          stdout=terminal, stderr=io.BytesIO()))
    os.close(master)
    assert (tmp_path / "before").read_text().split() == ["33", "101"]
    assert (tmp_path / "after").read_text().split() == ["33", "101"]
    assert result.receipt is not None and result.receipt.status == "succeeded"
    assert signal.getsignal(signal.SIGWINCH) == signal.SIG_DFL
