"""The live parser of a wrapped launch's output: in the wrapper while the output is small, in a process of its
own once it is not.

Parsing the output (:class:`ledger.ingest.formats.scan.LineCapture`) costs more CPU per byte than anything else
the output tee does. In the wrapper's process it runs after the redaction of each batch, under the same
interpreter lock as the pumps that drain the child's pipes. :class:`LiveParser` parses the first
:data:`SPAWN_BYTES` of output in the wrapper (most launches print less: they pay nothing more); past that it
starts ``python -m ledger.ingest.worker``, sends it the output so far and every batch after it through a pipe,
and drops its own capture: the worker parses on another core while the wrapper redacts and writes the next
batches. At the end the worker sends back what it found (the formats' rows, pickled) and exits. The worker is a
new interpreter in a session of its own (the wrapper already runs threads: no fork), runs at a lower priority
than the launch, ignores signals meant for the launch, and ends when the wrapper closes the pipe or dies.

:meth:`LiveParser.feed` raises :class:`WorkerFailed` when the worker is gone or takes no output for
:data:`STALL_S` (the tee then stops feeding it), and :meth:`LiveParser.close` when no result came back: the
wrapper then parses ``output.log`` itself, so the metrics are never lost to the worker. A worker that cannot be
started leaves the parsing in the wrapper.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import signal
import subprocess
import sys
from typing import IO

from ledger.ingest.formats.scan import LineCapture, Rows
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


class WorkerFailed(Exception):
    """The worker is gone, stalled, or sent no result."""


class Result:
    """What a ``LineCapture`` found, as the worker sends it back: its formats' rows and line counts."""

    def __init__(self, capture: LineCapture) -> None:
        self.rows: dict[str, Rows] = {name: rows for name, rows in capture.rows.items()
                                      if rows.step_count() or rows.evals or rows.unparsed}
        self.long_lines = capture.long_lines
        self.lines = capture.lines

    def best(self) -> Rows | None:
        """The format that gave the most steps (then evals), as :meth:`LineCapture.best`."""
        found = [r for r in self.rows.values() if r.step_count() or r.evals]
        return max(found, key=lambda r: (r.step_count(), len(r.evals))) if found else None


class LiveParser:
    """The output's parser that the tee feeds (see the module docs); after :meth:`close`, :meth:`best` and
    :attr:`long_lines` answer as :class:`LineCapture`'s do."""

    def __init__(self, parse: str | None, spawn_bytes: int = SPAWN_BYTES) -> None:
        """``parse``: the user's ``--parse`` pattern (checked before), as :func:`ledger.ingest.launch.live_capture`
        takes it; ``spawn_bytes``: output parsed here before the worker takes over."""
        from ledger.ingest.launch import live_capture

        self.parse = parse
        self.spawn_bytes = spawn_bytes
        self.capture: LineCapture | None = live_capture(parse)
        self.seen: list[bytes] = []  # the output so far, for the worker to start from (at most spawn_bytes)
        self.fed = 0
        self.worker: subprocess.Popen[bytes] | None = None
        self.result: Result | None = None
        self.note: str | None = None
        """Why the worker was not used, when it was not (for the receipt's problems)."""

    @property
    def in_worker(self) -> bool:
        return self.worker is not None

    def feed(self, data: bytes) -> None:
        """A batch of whole lines, as the log gets it."""
        self.fed += len(data)
        if self.worker is not None:
            self._send(data)
            return
        assert self.capture is not None
        self.capture.feed(data)
        self.seen.append(data)
        if self.fed > self.spawn_bytes:
            self._hand_over()

    def _hand_over(self) -> None:
        command = [sys.executable, "-m", "ledger.ingest.worker", *(["--parse", self.parse] if self.parse else [])]
        try:
            worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, start_new_session=True, env=_worker_env())
        except OSError as exc:  # parse here, as for a small output
            self.note = f"the output's parser process could not start ({exc.strerror or exc}); parsed in the wrapper"
            self.seen = []
            return
        assert worker.stdin is not None
        with contextlib.suppress(OSError):
            fcntl.fcntl(worker.stdin.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(worker.stdin.fileno(), False)
        self.worker = worker
        seen, self.seen, self.capture = self.seen, [], None
        for data in seen:
            self._send(data)

    def _send(self, data: bytes) -> None:
        assert self.worker is not None and self.worker.stdin is not None
        fd = self.worker.stdin.fileno()
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
        worker, stdin, stdout = self.worker, self.worker.stdin, self.worker.stdout
        assert stdin is not None and stdout is not None
        with contextlib.suppress(OSError):
            stdin.close()
        payload = _read_all(stdout, STALL_S)
        if payload is None:
            self.abandon()
            raise WorkerFailed(f"the output's parser process sent nothing for {STALL_S:g} s")
        stdout.close()
        worker.wait()
        try:
            result = pickle.loads(payload)  # from the worker the wrapper started: trusted
        except Exception as exc:
            raise WorkerFailed(f"the output's parser process sent no result ({len(payload)} bytes, exit "
                               f"{worker.returncode})") from exc
        if not isinstance(result, Result):
            raise WorkerFailed("the output's parser process sent something else than its result")
        self.result = result

    def abandon(self) -> None:
        """Stop the worker without waiting for its result (the wrapper gave up on it)."""
        if self.worker is None:
            return
        with contextlib.suppress(OSError):
            self.worker.kill()
        for stream in (self.worker.stdin, self.worker.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.worker.wait()

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


def _read_all(stream: IO[bytes], timeout: float) -> bytes | None:
    """Everything until end of file; None when nothing came for ``timeout`` seconds."""
    fd = stream.fileno()
    chunks: list[bytes] = []
    while True:
        if not select.select([fd], [], [], timeout)[0]:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _worker_env() -> dict[str, str]:
    """The wrapper's environment, with this ``ledger`` importable (as the wrapper imported it)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def main(argv: list[str] | None = None) -> int:
    """``python -m ledger.ingest.worker [--parse PATTERN]``: parse standard input until end of file, write the
    pickled :class:`Result` to standard output."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_IGN)  # the wrapper forwards them to the launch and decides
    with contextlib.suppress(OSError):
        os.nice(NICE)
    args = list(sys.argv[1:] if argv is None else argv)
    parse = args[1] if args[:1] == ["--parse"] and len(args) == 2 else None
    from ledger.ingest.launch import live_capture

    capture = live_capture(parse)
    source = os.fdopen(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    while True:
        chunk = source.read(PIPE_BYTES)
        if not chunk:
            break
        capture.feed(chunk)
        fault("parser")
    capture.close()
    from ledger.ingest import worker  # run as __main__: pickle the importable class, which the wrapper knows

    sys.stdout.buffer.write(pickle.dumps(worker.Result(capture), protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


__all__ = ["LiveParser", "Result", "WorkerFailed"]

if __name__ == "__main__":
    sys.exit(main())
