"""The output's parser: in the wrapper for a small output, in a fork of it past that; the same rows either way,
nothing of the wrapper held, signals for the launch ignored, and a parser that dies or stalls costs the run
nothing (`ledger record` reads the log)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import LedgerAt

from ledger.ingest.formats.scan import LineCapture
from ledger.ingest.worker import LiveParser, WorkerFailed


def _log(steps: int) -> bytes:
    lines = []
    for i in range(1, steps + 1):
        lines.append(f"[INFO] loading shard {i % 7} of 7\n")
        lines.append(f"step {i} loss {3.0 / i:.6f} lr 1e-3 grad_norm {i % 5 + 0.5}\n")
        if i % 50 == 0:
            lines.append(f"{{'eval_loss': {2.0 / i:.6f}, 'epoch': {i / 100}}}\n")
    return "".join(lines).encode()


def _feed(target: LineCapture | LiveParser, data: bytes, size: int = 4096) -> None:
    for i in range(0, len(data), size):
        target.feed(data[i:i + size])


def test_same_rows_in_the_wrapper_and_in_the_worker() -> None:
    data = _log(3000)
    here = LineCapture()
    _feed(here, data)
    here.close()
    small = LiveParser(None, spawn_bytes=len(data) + 1)  # never hands over
    large = LiveParser(None, spawn_bytes=20_000)  # hands over after the first 20 kB
    ahead = LiveParser(None, spawn_bytes=20_000)  # more than 20 kB waiting already: hands over at once
    ahead.watch(lambda: len(data) - ahead.fed)
    assert ahead.in_worker and ahead.capture is None  # this process parses nothing
    soon = LiveParser(None, spawn_bytes=20_000)  # 10 kB waiting: parses here until 20 kB are fed or waiting
    soon.watch(lambda: min(10_000, len(data) - soon.fed))
    soon.feed(data[:8192])
    assert not soon.in_worker
    soon.feed(data[8192:12_288])  # 12 kB fed and 10 kB waiting: the rest goes to the worker
    assert soon.in_worker
    _feed(soon, data[12_288:])
    soon.close()
    _feed(ahead, data)
    ahead.close()
    for parser in (small, large):
        _feed(parser, data)
        parser.close()
    assert not small.in_worker and large.in_worker
    ours = here.best()
    assert ours is not None and ours.name == "key-value" and ours.step_count() == 3000
    for parser in (small, large, ahead, soon):
        theirs = parser.best()
        assert theirs is not None and theirs.name == "key-value"
        assert theirs.tables()["steps"].equals(ours.tables()["steps"])
        assert theirs.tables()["evals"].equals(ours.tables()["evals"])
        assert parser.long_lines == 0
    loss = large.best().tables()["steps"].column("loss").to_pylist()  # type: ignore[union-attr]
    assert loss[-1] == round(3.0 / 3000, 6)  # as printed
    assert large.worker is not None and large.worker.status == 0  # exited 0, reaped


def _ignored(pid: int) -> int:
    """The signals a process ignores, as a bit mask (Linux: /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    return 0


def test_the_worker_ignores_the_launchs_signals() -> None:
    parser = LiveParser(None, spawn_bytes=1000)
    _feed(parser, _log(100))
    assert parser.worker is not None
    import time

    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _ignored(parser.worker.pid) & wanted != wanted:  # it has started
        time.sleep(0.02)
    assert _ignored(parser.worker.pid) & wanted == wanted
    os.kill(parser.worker.pid, signal.SIGINT)  # a Ctrl-C or a scheduler's SIGTERM is for the launch
    os.kill(parser.worker.pid, signal.SIGTERM)
    _feed(parser, _log(20))
    parser.close()
    best = parser.best()
    assert best is not None and best.step_count() == 100  # steps 1..20 again: merged by step, first value kept


def test_the_worker_holds_nothing_of_the_wrapper(tmp_path: Path) -> None:
    import fcntl
    import time

    lock = open(tmp_path / "staging.lock", "w")  # noqa: SIM115 - held across the fork on purpose
    fcntl.flock(lock, fcntl.LOCK_EX)
    parser = LiveParser(None, spawn_bytes=1000)
    _feed(parser, _log(100))
    assert parser.worker is not None
    path = str(tmp_path / "staging.lock")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and path in _open_files(parser.worker.pid):  # it closes what it inherited
        time.sleep(0.02)
    assert path not in _open_files(parser.worker.pid)
    lock.close()  # the wrapper lets go: nobody else may hold it now
    other = open(tmp_path / "staging.lock", "w")  # noqa: SIM115
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the worker kept a copy
    other.close()
    parser.close()
    assert parser.best() is not None


def _open_files(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            pass
    return out


def test_a_dead_worker_is_said() -> None:
    parser = LiveParser(None, spawn_bytes=1000)
    _feed(parser, _log(100))
    assert parser.worker is not None
    os.kill(parser.worker.pid, signal.SIGKILL)
    os.waitpid(parser.worker.pid, 0)
    parser.worker.status = -1  # reaped here
    with pytest.raises(WorkerFailed):
        _feed(parser, _log(2000) * 8, size=1 << 20)  # more than the pipe holds: the write fails
    with pytest.raises(WorkerFailed):
        parser.close()


def test_a_stuck_worker_does_not_hold_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import ledger.ingest.worker as worker_module

    monkeypatch.setattr(worker_module, "STALL_S", 0.5)
    parser = LiveParser(None, spawn_bytes=1000)
    _feed(parser, _log(100))
    assert parser.worker is not None
    os.kill(parser.worker.pid, signal.SIGSTOP)  # alive, but it reads nothing and sends nothing
    try:
        with pytest.raises(WorkerFailed, match="took no output"):
            _feed(parser, _log(2000) * 8, size=1 << 20)
        with pytest.raises(WorkerFailed, match="sent nothing"):
            parser.close()
    finally:
        parser.abandon()
    assert os.WIFSIGNALED(parser.worker.status) and os.WTERMSIG(parser.worker.status) == signal.SIGKILL


def test_record_keeps_the_metrics_when_the_parser_dies(tmp_path: Path) -> None:
    from conftest import BIN, child_env

    script = tmp_path / "train.py"  # about 3.4 MB of output: the wrapper parses its first MiB, the fork the rest
    script.write_text("for i in range(1, 100001):\n    print(f'step {i} loss {1.0 / i:.6f} lr 0.001', flush=False)\n")
    lg = LedgerAt(tmp_path)
    out = subprocess.run([str(BIN / "ledger"), "--ledger", str(lg.dir), "record", "--name", "killed-parser", "--",
                          "python", str(script)], env=child_env(LEDGER_FAULT_AT="parser"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=180, check=True)
    assert "captured 100000 steps (loss, lr) from output [key-value]" in out.stderr
    receipt = lg.json("show", "killed-parser")
    assert receipt["summary"]["steps"] == 100_000 and receipt["summary"]["final_loss"] == 0.00001
    problems = " ".join(p["message"] for p in receipt["problems"])
    assert "parser process" in problems


def test_a_worker_forked_while_the_collector_is_off_parses_with_it_on() -> None:
    """The wrapper's imports run with the garbage collector off (record.wrapper.imports_without_collection), and
    the tee's writer may fork the worker meanwhile: the worker turns its own back on for its parsing."""
    import gc

    data = _log(300)
    parser = LiveParser(None, spawn_bytes=1000)
    gc.disable()
    try:
        _feed(parser, data)
    finally:
        gc.enable()
    parser.close()
    assert parser.in_worker and parser.result is not None
    assert parser.result.collector is True
    rows = parser.best()
    assert rows is not None and rows.step_count() == 300
