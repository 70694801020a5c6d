"""The output's parser in a process of its own: the same rows as in this process, nothing inherited, the
terminal's signals ignored, and a parser that dies costs the run nothing (`ledger record` reads the log)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import LedgerAt

from ledger.ingest.formats.scan import LineCapture
from ledger.ingest.launch import live_capture
from ledger.ingest.worker import ParseWorker, WorkerFailed


def _log(steps: int) -> bytes:
    lines = []
    for i in range(1, steps + 1):
        lines.append(f"[INFO] loading shard {i % 7} of 7\n")
        lines.append(f"step {i} loss {3.0 / i:.6f} lr 1e-3 grad_norm {i % 5 + 0.5}\n")
        if i % 50 == 0:
            lines.append(f"{{'eval_loss': {2.0 / i:.6f}, 'epoch': {i / 100}}}\n")
    return "".join(lines).encode()


def _feed(target: LineCapture | ParseWorker, data: bytes, size: int = 4096) -> None:
    for i in range(0, len(data), size):
        target.feed(data[i:i + size])


def test_same_rows_as_in_process() -> None:
    data = _log(3000)
    here = LineCapture()
    _feed(here, data)
    here.close()
    worker = ParseWorker(lambda: live_capture(None))
    _feed(worker, data)
    worker.close()
    ours, theirs = here.best(), worker.best()
    assert ours is not None and theirs is not None and theirs.name == ours.name == "key-value"
    assert theirs.step_count() == 3000
    assert theirs.tables()["steps"].equals(ours.tables()["steps"])
    steps = theirs.tables()["steps"]
    assert steps.column("loss").to_pylist()[-1] == round(3.0 / 3000, 6)  # as printed
    assert worker.long_lines == here.long_lines == 0
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(worker.pid, os.WNOHANG)


def _open_files(pid: int) -> set[str]:
    fds = Path(f"/proc/{pid}/fd")
    out = set()
    for fd in fds.iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            pass
    return out


def test_worker_holds_nothing_of_the_wrapper(tmp_path: Path) -> None:
    lock = open(tmp_path / "staging.lock", "w")  # noqa: SIM115 - held across the fork on purpose
    fcntl.flock(lock, fcntl.LOCK_EX)
    worker = ParseWorker(lambda: live_capture(None))
    try:
        import time

        path = str(tmp_path / "staging.lock")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and path in _open_files(worker.pid):  # the fork closes what it inherited
            time.sleep(0.02)
        assert path not in _open_files(worker.pid)
        lock.close()  # the wrapper lets go: nobody else may hold it now
        other = open(tmp_path / "staging.lock", "w")  # noqa: SIM115
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if the worker kept a copy
        other.close()
        os.kill(worker.pid, signal.SIGINT)  # a Ctrl-C at the terminal reaches the whole process group
        os.kill(worker.pid, signal.SIGTERM)
        _feed(worker, _log(20))
        worker.close()
        best = worker.best()
        assert best is not None and best.step_count() == 20
    finally:
        worker.abandon()


def test_a_dead_worker_is_said() -> None:
    worker = ParseWorker(lambda: live_capture(None))
    os.kill(worker.pid, signal.SIGKILL)
    os.waitpid(worker.pid, 0)
    with pytest.raises(WorkerFailed):
        _feed(worker, _log(2000) * 8)  # more than the pipe holds: the write fails
    with pytest.raises(WorkerFailed):
        worker.close()


def test_record_keeps_the_metrics_when_the_parser_dies(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("for i in range(1, 401):\n    print(f'step {i} loss {1.0 / i:.5f} lr 0.001', flush=True)\n")
    from conftest import BIN, child_env

    lg = LedgerAt(tmp_path)
    out = subprocess.run([str(BIN / "ledger"), "--ledger", str(lg.dir), "record", "--name", "killed-parser", "--",
                          "python", str(script)], env=child_env(LEDGER_FAULT_AT="parser"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=180, check=True)
    assert "captured 400 steps (loss, lr) from output [key-value]" in out.stderr
    receipt = lg.json("show", "killed-parser")
    assert receipt["summary"]["steps"] == 400 and receipt["summary"]["final_loss"] == 0.0025
    problems = " ".join(p["message"] for p in receipt["problems"])
    assert "parser process" in problems and "parsed after the launch" in problems


class _Hangs(LineCapture):
    """A parser that never finishes its last step (as a bug in a format could)."""

    def close(self) -> None:
        import time

        time.sleep(3600)


def test_a_stuck_worker_does_not_hold_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import ledger.ingest.worker as worker_module

    monkeypatch.setattr(worker_module, "STALL_S", 0.5)
    stuck = ParseWorker(lambda: time.sleep(3600))  # type: ignore[arg-type,return-value]
    with pytest.raises(WorkerFailed, match="took no output"):
        _feed(stuck, _log(2000) * 8, size=1 << 20)
    stuck.abandon()
    with pytest.raises(WorkerFailed):
        stuck.close()
    hangs = ParseWorker(_Hangs)
    _feed(hangs, _log(50))
    with pytest.raises(WorkerFailed, match="sent nothing"):
        hangs.close()
    with pytest.raises(ChildProcessError):  # killed and reaped
        os.waitpid(hangs.pid, os.WNOHANG)
