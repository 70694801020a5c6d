"""The launch's stdout and stderr under `ledger record`: a terminal where the wrapper has one (real pseudo-terminals,
a real `ledger record` subprocess), a pipe elsewhere."""

from __future__ import annotations

import fcntl
import io
import os
import select
import signal
import struct
import subprocess
import termios
import time
from pathlib import Path

from conftest import BIN, child_env
from helpers import ids_in, receipt_dir

from ledger.record.streams import launch_streams

LAUNCH = r"""
import os, signal, sys, time
sizes = []
signal.signal(signal.SIGWINCH, lambda *_: sizes.append(os.get_terminal_size(1)))
print("tty", os.isatty(1), os.isatty(2), tuple(os.get_terminal_size(1)))
print("step 1 loss 2.0")  # no flush: a pipe would keep it in Python's buffer until the end
deadline = time.monotonic() + 30
while not (os.path.exists("go") and sizes) and time.monotonic() < deadline:
    time.sleep(0.01)
print("went", os.path.exists("go"), tuple(sizes[-1]) if sizes else None)
print("step 2 loss 1.0")
print("a warning", file=sys.stderr)
"""


def _winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_a_launch_at_a_terminal_gets_a_terminal_and_its_lines_as_they_come(ledger_dir: Path, tmp_path: Path) -> None:
    """The wrapper's stdout is a terminal (33 x 111), its stderr a pipe: the launch gets a terminal of that size for
    stdout and a pipe for stderr; its first line (printed without a flush) reaches the user's terminal while it
    runs; a resize reaches it as SIGWINCH with the new size; the log keeps its bytes as written (``\n``). Before,
    the launch had two pipes and its line waited in its buffer until it exited (the test timed out at 30 s)."""
    master, slave = os.openpty()
    _winsize(slave, 33, 111)
    env = child_env(LEDGER_DIR=str(ledger_dir))
    env.pop("PYTHONUNBUFFERED", None)
    (tmp_path / "launch.py").write_text(LAUNCH)
    wrapper = subprocess.Popen([str(BIN / "ledger"), "record", "--telemetry-interval", "0", "--", "python",
                                "launch.py"], stdout=slave, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    os.close(slave)
    seen, resized = b"", False
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not resized and b"step 1 loss 2.0" in seen:  # the launch still runs: it waits for "go"
                _winsize(master, 40, 120)  # the user's terminal is resized: its driver signals the wrapper
                wrapper.send_signal(signal.SIGWINCH)
                (tmp_path / "go").touch()
                resized = True
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # every writer closed it
                break
            if not chunk:
                break
            seen += chunk
        err = wrapper.communicate(timeout=60)[1].decode()
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
        os.close(master)
    assert wrapper.returncode == 0, err
    text = seen.decode().replace("\r\n", "\n")  # the user's terminal translates newlines as it displays them
    assert "tty True False (111, 33)\n" in text
    assert "went True (120, 40)\n" in text, text
    assert "a warning" in err and "captured 2 steps" in err
    (rid,) = ids_in(ledger_dir)
    log = (receipt_dir(ledger_dir, rid) / "output.log").read_bytes()
    lines = log.splitlines(keepends=True)  # the two streams interleave line by line, in the order they came
    assert lines.count(b"a warning\n") == 1 and b"\r" not in log
    assert [line for line in lines if line != b"a warning\n"] == [
        b"tty True False (111, 33)\n", b"step 1 loss 2.0\n", b"went True (120, 40)\n", b"step 2 loss 1.0\n"]


def test_a_launch_whose_outputs_are_not_terminals_gets_pipes(tmp_path: Path) -> None:
    """A file, a pipe or an object without a descriptor: pipes, as a launch would have without the wrapper."""
    read, write = os.pipe()
    with open(tmp_path / "out", "wb") as f, os.fdopen(write, "wb") as pipe:
        streams = launch_streams((f, pipe))
        try:
            assert streams.terminal == [False, False] and not streams.any_terminal
            assert all(not os.isatty(fd) for fd in streams.child + streams.reader)
        finally:
            streams.close()
        streams = launch_streams((io.BytesIO(), io.BytesIO()))
        assert streams.terminal == [False, False]
        streams.close()
    os.close(read)


def test_a_terminals_stream_writes_the_launchs_bytes_unchanged(tmp_path: Path) -> None:
    """The launch's end of a pseudo-terminal is a terminal without output processing: what it writes reaches the
    tee byte for byte (no ``\r`` added before ``\n``); the tee's end ends with an error once every writer closed it,
    which :class:`ledger.record.tee.Tee` takes as the end of the output."""
    master, slave = os.openpty()
    _winsize(slave, 24, 80)
    with os.fdopen(master, "wb", buffering=0) as terminal:
        streams = launch_streams((terminal, io.BytesIO()))
        try:
            assert streams.terminal == [True, False]
            child, reader = streams.child[0], streams.reader[0]
            assert os.isatty(child) and struct.unpack("HHHH", fcntl.ioctl(child, termios.TIOCGWINSZ, b"\0" * 8))[:2] \
                == (24, 80)
            os.write(child, b"step 1 loss 2.0\nno newline")
            streams.launched()
            got = b""
            while True:
                try:
                    chunk = os.read(reader, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                got += chunk
            assert got == b"step 1 loss 2.0\nno newline"
        finally:
            streams.close()
    os.close(slave)
