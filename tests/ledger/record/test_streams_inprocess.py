"""The launch's streams, in this process (mutation testing cannot run the `ledger record` of test_streams.py): for
each kind of output the wrapper may have (a terminal of a given size, a pipe, a file, an object without a descriptor,
a closed file), what :func:`launch_streams` gives the launch, checked with the kernel's own answers (``isatty``,
``TIOCGWINSZ``, ``tcgetattr``, ``fstat``) against what the test set up; a terminal resized while the launch runs; a
machine where no pseudo-terminal can be had."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.record import streams as streams_module
from ledger.record.streams import LaunchStreams, launch_streams


def _winsize(fd: int) -> tuple[int, int, int, int]:
    return struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))


def _set_winsize(fd: int, rows: int, cols: int, xpix: int = 0, ypix: int = 0) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, xpix, ypix))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


@pytest.fixture
def terminal() -> Iterator[tuple[io.FileIO, int]]:
    """A terminal of the user's (the wrapper's stdout): a pseudo-terminal's slave, 33 rows by 101 columns."""
    master, slave = os.openpty()
    _set_winsize(slave, 33, 101, 640, 480)
    f = os.fdopen(slave, "wb", buffering=0)
    try:
        yield f, master
    finally:
        f.close()
        os.close(master)


def _read_all(fd: int) -> bytes:
    got = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # a pseudo-terminal's master once every slave closed
            break
        if not chunk:
            break
        got += chunk
    return got


def test_a_terminal_gets_a_terminal_of_its_size_and_a_pipe_a_pipe(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    read, write = os.pipe()
    with os.fdopen(write, "wb") as pipe:
        s = launch_streams((user, pipe))
        try:
            assert s.sources == [user.fileno(), None]
            assert s.terminal == [True, False] and s.any_terminal is True
            assert len(s.child) == len(s.reader) == 2
            assert [os.isatty(fd) for fd in s.child] == [True, False]
            assert [os.isatty(fd) for fd in s.reader] == [True, False]
            assert _winsize(s.child[0]) == (33, 101, 640, 480) == _winsize(s.reader[0])
            assert len(set(s.child) | set(s.reader) | {user.fileno(), read, write}) == 7  # every descriptor new
        finally:
            s.close()
    os.close(read)


def test_the_order_follows_the_outputs(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    s = launch_streams((io.BytesIO(), user))
    try:
        assert s.sources == [None, user.fileno()] and s.terminal == [False, True] and s.any_terminal
        assert [os.isatty(fd) for fd in s.child] == [False, True]
    finally:
        s.close()
    s = launch_streams((user, user))  # stdout and stderr the same terminal: two pseudo-terminals, apart
    try:
        assert s.terminal == [True, True] and s.child[0] != s.child[1]
        os.write(s.child[1], b"err")
        os.write(s.child[0], b"out")
        s.launched()
        assert [_read_all(fd) for fd in s.reader] == [b"out", b"err"]
    finally:
        s.close()


def test_the_launchs_terminal_has_no_output_processing_and_keeps_the_rest(terminal: tuple[io.FileIO, int]) -> None:
    """Only OPOST is cleared: every other output flag is the kernel's default for a new pseudo-terminal, and the
    input and local modes are untouched."""
    user, _ = terminal
    m, sl = os.openpty()
    default = termios.tcgetattr(sl)
    os.close(m)
    os.close(sl)
    assert default[1] & termios.OPOST  # the default processes output (\n -> \r\n)
    s = launch_streams((user, io.BytesIO()))
    try:
        attrs = termios.tcgetattr(s.child[0])
        assert attrs[1] == default[1] & ~termios.OPOST
        assert attrs[0] == default[0] and attrs[3] == default[3] and attrs[2] == default[2]
        os.write(s.child[0], b"a\nb\r\n\tc")
        s.launched()
        assert _read_all(s.reader[0]) == b"a\nb\r\n\tc"
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["file", "pipe", "bytes", "closed", "no fileno", "fileno -1"])
def test_outputs_that_are_not_terminals_get_pipes(tmp_path: Path, kind: str) -> None:
    class NoFileno:
        def write(self, data: bytes) -> int:
            return len(data)

    class Minus:
        def fileno(self) -> int:
            return -1

    read, write = os.pipe()
    out: object
    if kind in ("file", "closed"):
        out = open(tmp_path / "out", "wb")  # noqa: SIM115
        if kind == "closed":
            out.close()
    else:
        out = {"pipe": lambda: os.fdopen(write, "wb"), "bytes": io.BytesIO, "no fileno": NoFileno,
               "fileno -1": Minus}[kind]()
    s = launch_streams((out, out))  # type: ignore[arg-type]
    try:
        assert s.sources == [None, None] and s.terminal == [False, False] and s.any_terminal is False
        for child, reader in zip(s.child, s.reader, strict=True):  # each a pipe: the launch writes, the tee reads
            assert not os.isatty(child) and not os.isatty(reader)
            os.write(child, b"x")
            assert os.read(reader, 1) == b"x"
    finally:
        s.close()
        if kind in ("pipe", "file"):
            out.close()  # type: ignore[attr-defined]
        if kind != "pipe":
            os.close(write)
        os.close(read)


def test_launched_closes_the_launchs_ends_only(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    s = launch_streams((user, io.BytesIO()))
    children, readers = list(s.child), list(s.reader)
    s.launched()
    assert s.child == [] and not any(_is_open(fd) for fd in children)
    assert s.reader == readers and all(_is_open(fd) for fd in readers)
    s.launched()  # again: nothing left to close
    # the pipe's reader sees the end at once; the terminal's an error (no writer left)
    assert os.read(readers[1], 10) == b""
    assert _read_all(readers[0]) == b""
    s.close()
    assert s.reader == [] and s.child == [] and not any(_is_open(fd) for fd in readers)


def test_readers_are_the_tees_ends_unbuffered(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    s = launch_streams((user, io.BytesIO()))
    os.write(s.child[0], b"line 1\n")
    os.write(s.child[1], b"warning\n")
    out, err = s.readers()
    try:
        assert (out.fileno(), err.fileno()) == tuple(s.reader)
        assert out.mode == err.mode == "rb" and not hasattr(out, "peek")  # raw files: no buffer in between
        assert err.read(100) == b"warning\n" and out.read(100) == b"line 1\n"
    finally:
        s.launched()
        out.close()
        err.close()


def test_close_before_a_launch_closes_every_descriptor(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    before = _open_fds()
    s = launch_streams((user, io.BytesIO()))
    assert len(_open_fds() - before) == 4
    fds = [*s.child, *s.reader]
    s.close()
    assert _open_fds() == before and s.child == [] and s.reader == []
    assert not any(_is_open(fd) for fd in fds)
    s.close()  # twice: nothing


def test_a_resize_of_the_users_terminal_reaches_the_launchs(terminal: tuple[io.FileIO, int]) -> None:
    user, _ = terminal
    read, write = os.pipe()
    s = launch_streams((io.BytesIO(), user))
    try:
        _set_winsize(user.fileno(), 50, 200, 1, 2)
        assert _winsize(s.child[1]) == (33, 101, 640, 480)  # not before the wrapper hears of it
        s.resized()
        assert _winsize(s.child[1]) == (50, 200, 1, 2)
        s.launched()
        s.resized()  # after the launch's ends closed: the tee's end is resized
        _set_winsize(user.fileno(), 7, 9)
        s.resized()
        assert _winsize(s.reader[1]) == (7, 9, 0, 0)
    finally:
        s.close()
        os.close(read)
        os.close(write)


def test_a_resize_once_the_users_terminal_is_gone_is_ignored(terminal: tuple[io.FileIO, int]) -> None:
    user, master = terminal
    s = LaunchStreams()
    m, sl = os.openpty()
    s.child, s.reader, s.sources = [sl], [m], [999]  # a source descriptor that no longer exists
    _set_winsize(sl, 3, 4)
    try:
        s.resized()
        assert _winsize(sl) == (3, 4, 0, 0)
    finally:
        s.close()


def test_without_pseudo_terminals_a_terminal_gets_a_pipe(terminal: tuple[io.FileIO, int],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``/dev/ptmx`` (or none left): ``openpty`` fails, and the launch gets a pipe."""
    user, _ = terminal

    def no_pty() -> tuple[int, int]:
        raise OSError(24, "out of pseudo-terminals")

    monkeypatch.setattr(os, "openpty", no_pty)
    before = _open_fds()
    s = launch_streams((user, user))
    try:
        assert s.sources == [None, None] and s.terminal == [False, False] and not s.any_terminal
        assert not any(os.isatty(fd) for fd in s.child + s.reader)
    finally:
        s.close()
    assert _open_fds() == before


def test_a_pseudo_terminal_whose_modes_cannot_be_set_is_closed_and_a_pipe_used(
        terminal: tuple[io.FileIO, int], monkeypatch: pytest.MonkeyPatch) -> None:
    user, _ = terminal
    made: list[int] = []
    real = os.openpty

    def openpty() -> tuple[int, int]:
        pair = real()
        made.extend(pair)
        return pair

    def refuse(*_: object) -> None:
        raise termios.error(5, "Input/output error")

    monkeypatch.setattr(os, "openpty", openpty)
    monkeypatch.setattr(termios, "tcsetattr", refuse)
    before = _open_fds()
    s = launch_streams((user,))
    try:
        assert s.sources == [None] and not os.isatty(s.child[0])
        assert len(made) == 2 and not any(_is_open(fd) for fd in made if fd not in s.child + s.reader)
        assert len(_open_fds() - before) == 2  # the pipe's two ends only
    finally:
        s.close()
    monkeypatch.setattr(termios, "tcsetattr", lambda *_: (_ for _ in ()).throw(OSError(5, "EIO")))
    s = launch_streams((user,))
    try:
        assert s.sources == [None]
    finally:
        s.close()
    assert _open_fds() == before


def test_without_termios_every_output_gets_a_pipe(terminal: tuple[io.FileIO, int],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Off POSIX (no termios): pipes, even for a terminal."""
    user, _ = terminal
    monkeypatch.setattr(streams_module, "termios", None)
    s = launch_streams((user,))
    try:
        assert s.sources == [None] and not os.isatty(s.child[0])
    finally:
        s.close()


def test_descriptors_closed_by_someone_else_are_passed_over(terminal: tuple[io.FileIO, int]) -> None:
    """The tee closes its ends (the files :meth:`readers` made) before the wrapper's cleanup, and a launch's end may
    be closed already: closing again is no error."""
    user, _ = terminal
    s = launch_streams((user, io.BytesIO()))
    os.close(s.child[1])  # closed by someone else first
    s.launched()
    assert s.child == []
    out, err = s.readers()
    out.close()
    err.close()
    s.close()
    assert s.reader == [] and s.child == []
