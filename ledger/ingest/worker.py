"""The live parser of a wrapped launch's output, in a process of its own.

Parsing the output (:class:`ledger.ingest.formats.scan.LineCapture`) costs more CPU per byte than anything else
the output tee does. In the wrapper's process it would run after the redaction of each batch, under the same
interpreter lock as the pumps that drain the child's pipes. :class:`ParseWorker` forks the wrapper before it
starts any thread or the launch: the fork holds a ``LineCapture``, reads the redacted batches the tee's writer
sends it through a pipe, and parses them on another core while the wrapper redacts and writes the next ones; at
the end it sends back what it found (the formats' rows, pickled) and exits. A fork shares the modules the wrapper
already imported (no interpreter start-up), runs at a lower priority than the launch, ignores the terminal's
signals (the wrapper forwards them to the launch and decides), and ends when the wrapper closes the pipe or dies.

:meth:`ParseWorker.feed` raises :class:`WorkerFailed` when the fork is gone (the tee then stops feeding it), and
:meth:`ParseWorker.close` when no result came back: the wrapper then parses ``output.log`` itself, so the metrics
are never lost to the worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import signal
import threading
from collections.abc import Callable
from typing import Any

from ledger.ingest.formats.scan import LineCapture, Rows
from ledger.store.faults import fault

_F_SETPIPE_SZ = 1031
PIPE_BYTES = 1 << 20
"""Capacity asked for the pipe to the worker (Linux: ``F_SETPIPE_SZ``), as the tee's pipes."""
STALL_S = 300.0
"""Seconds the wrapper waits for a worker that takes no output or sends no result: then it is stopped and the log
is parsed after the launch instead (a parser that never ends must not hold the run back from its receipt)."""
NICE = 10
"""How much lower the worker's priority is than the wrapper's: the launch and the pumps come first."""


class WorkerFailed(Exception):
    """The worker is gone or sent no result."""


class Result:
    """What a ``LineCapture`` found, as the worker sends it back: its formats' rows and line counts."""

    def __init__(self, capture: LineCapture) -> None:
        self.rows: dict[str, Rows] = {name: rows for name, rows in capture.rows.items()
                                      if rows.step_count() or rows.evals or rows.unparsed}
        self.long_lines = capture.long_lines
        self.lines = capture.lines
        self.ended_without_newline = capture.ended_without_newline


class ParseWorker:
    """A ``LineCapture`` in a forked process, fed through a pipe; after :meth:`close`, :meth:`best`,
    :meth:`others` and :attr:`long_lines` answer as the capture's would (see the module docs)."""

    def __init__(self, factory: Callable[[], LineCapture]) -> None:
        """``factory``: builds the capture in the worker (:func:`ledger.ingest.launch.live_capture`)."""
        if threading.active_count() > 1:  # a thread may hold the import lock at the fork: import now what the
            import pyarrow.compute  # noqa: F401  # fork would (alone, as in `ledger record`, it imports them
            import re2  # noqa: F401  # itself, on its own core)
        data_r, data_w = os.pipe()
        result_r, result_w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(data_w, _F_SETPIPE_SZ, PIPE_BYTES)
        try:
            pid = os.fork()
        except OSError:
            for fd in (data_r, data_w, result_r, result_w):
                os.close(fd)
            raise
        if pid == 0:  # the worker: never returns
            _serve(factory, data_r, result_w, keep=(data_r, result_w))
        os.close(data_r)
        os.close(result_w)
        os.set_blocking(data_w, False)
        self.pid = pid
        self._data = data_w
        self._result_fd = result_r
        self._result: Result | None = None
        self._reaped = False

    def feed(self, data: bytes) -> None:
        """Send a batch of whole lines (waits while the worker is a pipe's worth behind, up to
        :data:`STALL_S`)."""
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(self._data, view):]
                except BlockingIOError:
                    if not select.select([], [self._data], [], STALL_S)[1]:
                        raise WorkerFailed(f"the output's parser process took no output for {STALL_S:g} s") from None
        except OSError as exc:  # a worker that died: the tee stops feeding it
            raise WorkerFailed(f"the output's parser process ended: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """End of output: wait for the worker's result (raises :class:`WorkerFailed` without one)."""
        if self._result is not None:
            return
        if self._result_fd < 0:
            raise WorkerFailed("the output's parser process was stopped")
        if self._data >= 0:
            with contextlib.suppress(OSError):
                os.close(self._data)
            self._data = -1
        chunks: list[bytes] = []
        try:
            while select.select([self._result_fd], [], [], STALL_S)[0]:
                chunk = os.read(self._result_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            else:
                self.abandon()
                raise WorkerFailed(f"the output's parser process sent nothing for {STALL_S:g} s")
        finally:
            self._close_fds()
            self._reap()
        payload = b"".join(chunks)
        try:
            result = pickle.loads(payload)  # from the wrapper's own fork: trusted
        except Exception as exc:
            raise WorkerFailed(f"the output's parser process sent no result ({len(payload)} bytes)") from exc
        if not isinstance(result, Result):
            raise WorkerFailed("the output's parser process sent something else than its result")
        self._result = result

    def abandon(self) -> None:
        """Stop the worker without waiting for a result (the wrapper gave up on it)."""
        if not self._reaped:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self._close_fds()
        self._reap()

    def _close_fds(self) -> None:
        for fd in (self._data, self._result_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._data = self._result_fd = -1

    def _reap(self) -> None:
        if not self._reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self._reaped = True

    @property
    def result(self) -> Result:
        if self._result is None:
            raise WorkerFailed("the output's parser process has not been closed")
        return self._result

    @property
    def long_lines(self) -> int:
        return self.result.long_lines

    def best(self) -> Rows | None:
        """The format that gave the most steps (then evals), as :meth:`LineCapture.best`."""
        found = [r for r in self.result.rows.values() if r.step_count() or r.evals]
        return max(found, key=lambda r: (r.step_count(), len(r.evals))) if found else None

    def others(self) -> list[Rows]:
        best = self.best()
        return [r for r in self.result.rows.values() if (r.step_count() or r.evals) and r is not best]


def _serve(factory: Callable[[], LineCapture], data_r: int, result_w: int, keep: tuple[int, ...]) -> Any:
    """The worker's life: parse what comes through ``data_r`` until end of file, send the result, exit."""
    code = 0
    try:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_IGN)  # the wrapper forwards them to the launch and decides
        _close_others(keep)
        with contextlib.suppress(OSError):
            os.nice(NICE)
        capture = factory()
        with os.fdopen(data_r, "rb", buffering=0) as source:
            while True:
                chunk = source.read(PIPE_BYTES)
                if not chunk:
                    break
                capture.feed(chunk)
                fault("parser")
        capture.close()
        payload = pickle.dumps(Result(capture), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(result_w, "wb") as sink:
            sink.write(payload)
    except BaseException:  # nothing to report to: the wrapper sees no result and parses the log itself
        code = 1
    finally:
        os._exit(code)


def _close_others(keep: tuple[int, ...]) -> None:
    """Close the file descriptors the fork inherited (the staging lock, the ledger's files), but its own and the
    standard streams: a worker that outlived a killed wrapper must hold nothing of the run."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 256))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


__all__ = ["ParseWorker", "Result", "WorkerFailed"]
