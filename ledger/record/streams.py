"""The launch's stdout and stderr under `ledger record`: what it would have had without the wrapper.

The tee reads the launch's output to copy it, so the launch cannot write to the user's terminal itself. Given a
pipe instead, a program changes how it writes: C's stdio and Python's ``print`` buffer a pipe in blocks of 4-8 KiB
where they write a terminal line by line. A training loop that prints its loss once a step then shows nothing for
minutes at a time, and when it is killed (the out-of-memory killer, a scheduler's time limit), the lines it had not
flushed are lost to the terminal and to the log alike.

So each stream of the wrapper that is a terminal gives the launch a terminal too: a pseudo-terminal of its own
(one for stdout, one for stderr, so that they stay apart), with the user's terminal's size and without output
processing (the launch's bytes reach the tee unchanged: ``\\n`` stays ``\\n``; the user's terminal does its own
translation when the tee writes them). A stream that is not a terminal (a file, a pipe, a batch job's output) gives
the launch a pipe, as before. Where a pseudo-terminal cannot be had (no ``/dev/ptmx``, none left), a pipe.

The pseudo-terminals are not the launch's controlling terminal: the launch runs in a session of its own and job
control stays with the user's terminal; when that terminal is resized, the new size is set on them and the launch's
process group gets ``SIGWINCH`` (:meth:`LaunchStreams.resized`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

try:  # POSIX only: elsewhere the launch always gets pipes
    import fcntl
    import termios
except ImportError:  # pragma: no cover - not on Linux
    fcntl = termios = None  # type: ignore[assignment]


@dataclass
class LaunchStreams:
    """For stdout and stderr: the descriptor the launch writes (``child``) and the one the tee reads (``reader``),
    and whether it is a pseudo-terminal."""

    child: list[int] = field(default_factory=list)
    reader: list[int] = field(default_factory=list)
    sources: list[int | None] = field(default_factory=list)
    """The wrapper's own descriptor each pseudo-terminal copies its size from (None for a pipe)."""

    @property
    def terminal(self) -> list[bool]:
        return [source is not None for source in self.sources]

    @property
    def any_terminal(self) -> bool:
        return any(self.terminal)

    def launched(self) -> None:
        """Close the launch's ends in the wrapper (after the launch started): the tee then sees the end of its
        output once the launch and whatever inherited them closed theirs."""
        for fd in self.child:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child = []

    def readers(self) -> tuple[IO[bytes], IO[bytes]]:
        """The tee's ends, as unbuffered binary files (the tee reads their descriptors)."""
        out, err = (os.fdopen(fd, "rb", buffering=0) for fd in self.reader)
        return out, err

    def resized(self) -> None:
        """Copy the user's terminal's size to each pseudo-terminal again (on ``SIGWINCH``)."""
        for reader, source in zip(self.reader, self.sources, strict=True):
            if source is not None:
                _copy_size(source, reader)

    def close(self) -> None:
        """Close every descriptor still held (a launch that could not start)."""
        for fd in [*self.child, *self.reader]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child, self.reader = [], []


def launch_streams(outputs: Sequence[IO[bytes]]) -> LaunchStreams:
    """A pipe or a pseudo-terminal for each of the wrapper's ``outputs`` (its stdout and stderr), as the module
    docs say."""
    streams = LaunchStreams()
    for out in outputs:
        source = _terminal_fd(out)
        pair = _pseudo_terminal(source) if source is not None else None
        reader, child = pair if pair is not None else os.pipe()
        streams.child.append(child)
        streams.reader.append(reader)
        streams.sources.append(source if pair is not None else None)
    return streams


def _terminal_fd(out: IO[bytes]) -> int | None:
    """The stream's descriptor when it is a terminal, else None (a file-like object without one included)."""
    try:
        fd = out.fileno()
        return fd if os.isatty(fd) else None
    except (OSError, ValueError, AttributeError):
        return None


def _pseudo_terminal(source: int) -> tuple[int, int] | None:
    """A pseudo-terminal (its master for the tee, its slave for the launch) without output processing and with the
    size of the terminal ``source``; None when none can be had."""
    if termios is None:
        return None
    try:
        master, slave = os.openpty()
    except OSError:
        return None
    try:
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # oflag: the launch's bytes as written (no \n -> \r\n)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        os.close(master)
        os.close(slave)
        return None
    _copy_size(source, master)
    return master, slave


def _copy_size(source: int, target: int) -> None:
    """Give the pseudo-terminal ``target`` the window size of the terminal ``source`` (best effort)."""
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(source, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(target, termios.TIOCSWINSZ, size)


__all__ = ["LaunchStreams", "launch_streams"]
