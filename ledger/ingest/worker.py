"""The live parser of a wrapped launch's output: in the wrapper while the output is small, in a fork of it once
it is not.

Parsing the output (:class:`ledger.ingest.formats.scan.LineCapture`) costs more CPU per byte than anything else
the output tee does. In the wrapper's process it runs after the redaction of each batch, under the same
interpreter lock as the pumps that drain the child's pipes. :class:`LiveParser` parses the first
:data:`SPAWN_BYTES` of output in the wrapper (most launches print less: they pay nothing more); past that it
forks: the fork carries on with the capture as it stands and reads every later batch through a pipe, on another
core, while the wrapper redacts and writes the next ones. At the end the fork sends back what it found (the
formats' rows, pickled) and exits. A fork starts at once with everything imported (a new interpreter would
spend most of a second importing numpy and pyarrow); it imports nothing itself (the wrapper runs threads, one
of which may hold an import's lock at the fork), leaves the terminal's process group, ignores signals meant for
the launch, closes what it inherited, runs at a lower priority than the launch, and ends when the wrapper
closes the pipe or dies.

:meth:`LiveParser.feed` raises :class:`WorkerFailed` when the worker is gone or takes no output for
:data:`STALL_S` (the tee then stops feeding it), and :meth:`LiveParser.close` when no result came back: the
wrapper then parses ``output.log`` itself, so the metrics are never lost to the worker. A fork that fails leaves
the parsing in the wrapper.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import pickle
import select
import signal
from collections.abc import Callable
from pathlib import Path

from ledger.ingest.formats.scan import LineCapture, Rows
from ledger.ingest.formats.trail import WRITE_S, Trail
from ledger.process import reuse_freed_memory
from ledger.store.faults import fault

SPAWN_BYTES = 1 << 20
"""Output parsed in the wrapper before the worker takes over (what most launches print in all)."""
PIPE_BYTES = 1 << 20
"""Capacity asked for the pipe to the worker (Linux: ``F_SETPIPE_SZ``), as the tee's pipes."""
_F_SETPIPE_SZ = 1031
STALL_S = 300.0
"""Seconds the wrapper waits for a worker that takes no output or sends no result: then it is stopped and the log
is parsed after the launch instead (a parser that never ends must not hold the run back from its receipt)."""
NICE = 10
"""How much lower the worker's priority is than the wrapper's: the launch and the pumps come first."""


def live_capture(parse: str | None, trail: Path | None = None) -> LineCapture:
    """The parser of a launch's output (``--parse``'s pattern checked before): every format, or the pattern alone
    on every line; ``trail``: where to write what it read so far (:mod:`ledger.ingest.formats.trail`)."""
    live = Trail(trail) if trail is not None else None
    if parse is not None:
        from ledger.ingest.formats.pattern import compile_pattern, line_format

        return LineCapture({"pattern": line_format(compile_pattern(parse))}, hint=False, trail=live)
    return LineCapture(trail=live)


class WorkerFailed(Exception):
    """The worker is gone, stalled, or sent no result."""


class Result:
    """What a ``LineCapture`` found, as the worker sends it back: its formats' rows and line counts."""

    def __init__(self, capture: LineCapture) -> None:
        self.rows: dict[str, Rows] = {name: rows.frozen() for name, rows in capture.rows.items()
                                      if rows.step_count() or rows.evals or rows.unparsed}
        self.long_lines = capture.long_lines
        self.lines = capture.lines
        self.collector = gc.isenabled()
        """Whether the worker parsed with Python's garbage collector on (it turns it on: see :func:`_serve`)."""

    def best(self) -> Rows | None:
        """The format that gave the most steps (then evals), as :meth:`LineCapture.best`."""
        found = [r for r in self.rows.values() if r.step_count() or r.evals]
        return max(found, key=lambda r: (r.step_count(), len(r.evals))) if found else None


class LiveParser:
    """The output's parser that the tee feeds (see the module docs); after :meth:`close`, :meth:`best` and
    :attr:`long_lines` answer as :class:`LineCapture`'s do."""

    def __init__(self, parse: str | None, spawn_bytes: int = SPAWN_BYTES, trail: Path | None = None) -> None:
        """``parse``: the user's ``--parse`` pattern (checked before), as :func:`live_capture` takes it;
        ``spawn_bytes``: output parsed here before the worker takes over; ``trail``: where the capture writes what
        it read so far, for readers of the run in progress (here, then in the worker)."""
        self.parse = parse
        self.spawn_bytes = spawn_bytes
        self.capture: LineCapture | None = live_capture(parse, trail)
        self.fed = 0
        self.worker: _Worker | None = None
        self.result: Result | None = None
        self.note: str | None = None
        """Why the worker was not used, when it was not (for the receipt's problems)."""
        self.backlog: Callable[[], int] | None = None
        """Output already waiting to be fed (the tee's :meth:`ledger.record.tee.Tee.backlog`): when it takes the
        output past ``spawn_bytes``, the worker takes over at once rather than after this process parsed the
        first ``spawn_bytes`` (a launch that printed much while the wrapper was still starting)."""

    def watch(self, backlog: Callable[[], int]) -> None:
        """Take :attr:`backlog` from the tee; when more than ``spawn_bytes`` is waiting already (a launch that
        printed much while the wrapper was starting), start the worker now, before the wrapper's next imports
        compete with it for the interpreter lock."""
        self.backlog = backlog
        if self.worker is None and self.note is None and self._waiting() > self.spawn_bytes:
            self._hand_over()

    @property
    def in_worker(self) -> bool:
        return self.worker is not None

    def feed(self, data: bytes) -> None:
        """A batch of whole lines, as the log gets it."""
        self.fed += len(data)
        if self.worker is None and self.note is None and self.fed + self._waiting() > self.spawn_bytes:
            self._hand_over()  # past what this process parses (or about to be: output waiting): the worker's
        if self.worker is not None:
            self._send(data)
            return
        assert self.capture is not None
        self.capture.feed(data)

    def idle(self) -> None:
        """The output paused: the capture here reads what it holds and writes its trail (the worker does so on its
        own when its pipe is quiet)."""
        if self.worker is None and self.capture is not None:
            self.capture.idle()

    def _waiting(self) -> int:
        try:
            return self.backlog() if self.backlog is not None else 0
        except Exception:  # a tee that cannot say: parse here first, as for a small output
            return 0

    def _hand_over(self) -> None:
        import pyarrow.compute  # noqa: F401  # what the fork's parsing needs, imported here: the fork imports
        import pyarrow.csv  # noqa: F401  # nothing (another thread of the wrapper may hold an import's lock)

        assert self.capture is not None
        data_r, data_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:  # parse here, as for a small output
            for fd in (data_r, data_w, result_r, result_w):
                os.close(fd)
            self.note = f"the output's parser process could not start ({exc.strerror or exc}); parsed in the wrapper"
            return
        if pid == 0:  # the worker: carries on with the capture as it is, never returns
            _serve(self.capture, data_r, result_w)
        os.close(data_r)
        os.close(result_w)
        with contextlib.suppress(OSError):
            fcntl.fcntl(data_w, _F_SETPIPE_SZ, PIPE_BYTES)
        with contextlib.suppress(OSError):  # the result (megabytes for a long run) in fewer round trips
            fcntl.fcntl(result_r, _F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(data_w, False)
        self.worker = _Worker(pid, data_w, result_r)
        self.capture = None

    def _send(self, data: bytes) -> None:
        assert self.worker is not None
        fd = self.worker.data
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    if not select.select([], [fd], [], STALL_S)[1]:
                        raise WorkerFailed(f"the output's parser process took no output for {STALL_S:g} s") from None
        except OSError as exc:  # a worker that died: the tee stops feeding it
            raise WorkerFailed(f"the output's parser process ended: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """End of output: the capture's last line, or the worker's result (:class:`WorkerFailed` without one)."""
        if self.result is not None:
            return
        if self.worker is None:
            assert self.capture is not None
            self.capture.close()
            return
        worker = self.worker
        worker.close_data()
        payload = _read_all(worker.result, STALL_S)
        if payload is None:
            self.abandon()
            raise WorkerFailed(f"the output's parser process sent nothing for {STALL_S:g} s")
        code = worker.end()
        try:
            result = pickle.loads(payload)  # from the wrapper's own fork: trusted
        except Exception as exc:
            raise WorkerFailed(f"the output's parser process sent no result ({len(payload)} bytes, exit "
                               f"status {code})") from exc
        if not isinstance(result, Result):
            raise WorkerFailed("the output's parser process sent something else than its result")
        self.result = result

    def abandon(self) -> None:
        """Stop the worker without waiting for its result (the wrapper gave up on it)."""
        if self.worker is not None:
            self.worker.kill()

    @property
    def long_lines(self) -> int:
        if self.result is not None:
            return self.result.long_lines
        assert self.capture is not None
        return self.capture.long_lines

    def best(self) -> Rows | None:
        if self.result is not None:
            return self.result.best()
        assert self.capture is not None
        return self.capture.best()


class _Worker:
    """The forked worker as the wrapper holds it: its pid and the two pipes' ends."""

    def __init__(self, pid: int, data: int, result: int) -> None:
        self.pid, self.data, self.result = pid, data, result
        self.status: int | None = None

    def close_data(self) -> None:
        if self.data >= 0:
            with contextlib.suppress(OSError):
                os.close(self.data)
            self.data = -1

    def end(self) -> int:
        """Close what is left, reap the worker once; its wait status."""
        self.close_data()
        if self.result >= 0:
            with contextlib.suppress(OSError):
                os.close(self.result)
            self.result = -1
        if self.status is None:
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                self.status = -1
        return self.status

    def kill(self) -> None:
        if self.status is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self.end()


def _read_all(fd: int, timeout: float) -> bytes | None:
    """Everything until end of file; None when nothing came for ``timeout`` seconds."""
    chunks: list[bytes] = []
    while True:
        if not select.select([fd], [], [], timeout)[0]:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _serve(capture: LineCapture, data_r: int, result_w: int) -> None:
    """The worker's life: parse what comes through ``data_r`` until end of file, send the result, exit."""
    code = 0
    try:
        os.setsid()  # out of the terminal's process group: a Ctrl-C is for the launch
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_IGN)  # the wrapper forwards them to the launch and decides
        _close_others((data_r, result_w))
        with contextlib.suppress(OSError):
            os.nice(NICE)
        reuse_freed_memory()
        # What it inherited stays until it exits (os._exit): out of the collector's reach. The collector on: the
        # wrapper may have forked it while its own was off, during its imports (record.wrapper).
        gc.freeze()
        gc.enable()
        while True:
            if not select.select([data_r], [], [], WRITE_S)[0]:
                capture.idle()  # the output paused: what came is read, and the live trail written
                continue
            chunk = os.read(data_r, PIPE_BYTES)
            if not chunk:
                break
            capture.feed(chunk)
            fault("parser")
        capture.close()
        payload = pickle.dumps(Result(capture), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(payload)
        while view:
            view = view[os.write(result_w, view):]
    except BaseException:  # nothing to report to: the wrapper sees no result and parses the log itself
        code = 1
    finally:
        os._exit(code)


def _close_others(keep: tuple[int, ...]) -> None:
    """Close the file descriptors the fork inherited (the staging lock, the log, the child's pipes), but its own
    and the standard streams: a worker that outlived a killed wrapper holds nothing of the run."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


__all__ = ["LiveParser", "Result", "WorkerFailed", "live_capture"]
