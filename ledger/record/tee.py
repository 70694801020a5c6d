"""The output tee of `ledger record`: the child's stdout and stderr to the terminal as they come, and,
secrets redacted, into the run's ``output.log``, without ever holding the child back.

Two kinds of thread:

* one **pump** per stream: ``os.read`` of up to 1 MiB (the pipe enlarged to 1 MiB), written to the terminal
  as is, then appended to a shared **spool** cut at its last newline (a line longer than
  :data:`MAX_LINE` is cut into pieces), so that the two streams interleave line by line. No per-line work.
  The spool is a queue in memory, up to :data:`MEMORY_LIMIT` bytes waiting, and past that an anonymous
  temporary file (see :class:`_Spool`).
* one **writer**: takes batches of up to :data:`BATCH` bytes of whole lines from the spool, redacts them as
  bytes (:meth:`ledger.redact.StreamRedactor.feed_bytes`: one RE2 scan finds the few lines where a rule may
  match; a multi-line PEM block in one batch goes as a whole), appends them to ``output.log`` and hands the
  same redacted batch to an optional ``consumer``: live log parsing
  (:class:`ledger.ingest.formats.scan.LineCapture`), which so sees exactly what the log keeps.

Each pump notes when it read each piece (the output's clock): the writer turns the notes into marks of the log's
line count and time, appended to ``output.clock`` beside the log (:mod:`ledger.store.clock`), so that every line
the capture reads has the time it arrived. The log is written without a user-space buffer, a batch per write:
what the writer took is in the kernel's hands when the write returns, and survives the wrapper being killed.

The pumps never wait for the writer, memory stays bounded whatever the line length and the backlog, and
nothing unredacted is left behind when the wrapper dies (the spool's file, when there is one, has no name).
While the child writes fast, the writer waits, so that the child gets the CPU, but not for long: at most
:data:`DEFER_S` seconds from the first byte that waited since the writer last caught up (and up to a backlog of
:data:`DEFER_LIMIT`); then it writes until it has caught up again. A burst of output is logged once it ends; a
launch that never stops printing (a line every few milliseconds, for hours) still has its log written as it runs,
about :data:`DEFER_S` behind at most.

When the child has exited, the pumps get :data:`DRAIN_S` seconds to reach end of file; what is left of the
child's process group is terminated, and a process outside it that keeps the pipes open (a daemon the launch
started) is read for at most :data:`GRACE_S` seconds after the launch exited: then its output is no longer
recorded, and the receipt says how much was read after the exit and that the rest was cut (see
:meth:`Tee.finish`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import select
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from ledger.store.clock import CLOCK_FILE, RESOLUTION_S, ClockWriter

CHUNK = 1 << 20
"""Bytes per read of a pipe."""
BATCH = 1 << 18
"""Bytes per batch of the writer: regular expressions hold the GIL for a whole call, so the writer works in
batches that take it a few milliseconds, and the pumps (hence the child) wait at most that long."""
MAX_LINE = 1 << 20
"""A line longer than this is cut into pieces of this size (log and consumer)."""
DEFER_LIMIT = 1 << 30
"""Backlog (bytes) up to which the writer defers to a child that writes fast."""
DEFER_S = 0.5
"""Seconds the writer defers to a child that writes fast, counted from the first byte that waited since the writer
last caught up; past them it writes until nothing waits (and defers again only after that). Half a second, so
that a line that reached the wrapper is in the log (and survives the wrapper's death) within a second."""
FAST_S = 0.02
"""The child counts as writing fast while output came within this many seconds."""
MEMORY_LIMIT = 16 << 20
"""Backlog kept in memory; past it, the spool's file takes the rest."""
DRAIN_S = 2.0
"""Seconds the pumps keep reading after the child exited, for output still in the pipes."""
IDLE_S = 0.5
"""Seconds without output after which the writer calls the tee's ``idle`` hook."""
GRACE_S = 10.0
"""Seconds after the child exited during which a process outside its group that holds the pipes open is still
read; past them its output is cut (and the receipt says so)."""
SWITCH_S = 0.0005
"""The interpreter's thread switch interval while the tee runs (the default is 5 ms)."""
_F_SETPIPE_SZ = 1031

LineConsumer = Callable[[bytes], None]
"""Receives each batch of complete lines as written to the log (redacted, newlines included, a line at most
MAX_LINE bytes), from the writer thread: slow parsing delays the log, never the child."""


class _Spool:
    """A FIFO of bytes: append by the pumps, take by the writer. In memory up to :data:`MEMORY_LIMIT` bytes
    waiting (no copy through the kernel for the usual backlog); past that, in an anonymous temporary file, made
    on first need, until the writer caught up with it: memory bounded whatever the backlog, and nothing
    unredacted left behind when the wrapper dies (memory, and a file without a name)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.memory: collections.deque[bytes] = collections.deque()
        self.offset = 0
        """Bytes of the oldest piece in memory already taken."""
        self.in_memory = 0
        self.file: IO[bytes] | None = None
        self.head = 0
        self.tail = 0
        """The file's unread bytes (``head`` to ``tail``), all of them later than those in memory."""
        self.last_put = 0.0
        self.put_bytes = 0
        """Bytes put so far (the offset of the next byte in the stream of what the pumps put)."""
        self.marks: collections.deque[tuple[int, float]] = collections.deque()
        """When pieces were read: (offset just past the piece in the put stream, Unix time of its read); reads
        within :data:`ledger.store.clock.RESOLUTION_S` of the previous mark extend it."""
        self.behind_since: float | None = None
        """When the first byte came that waits since the writer last caught up (None: nothing waits)."""
        self.closed = False
        self.cond = threading.Condition()

    def put(self, data: bytes, when: float | None = None) -> None:
        """Append a piece; ``when``: the Unix time it was read (now when not given)."""
        when = time.time() if when is None else when
        with self.cond:
            self.put_bytes += len(data)
            if self.marks and when - self.marks[-1][1] < RESOLUTION_S:
                self.marks[-1] = (self.put_bytes, self.marks[-1][1])
            else:
                self.marks.append((self.put_bytes, when))
            if self.tail == self.head and self.in_memory + len(data) <= MEMORY_LIMIT:
                self.memory.append(data)
                self.in_memory += len(data)
            else:  # a large backlog, or bytes already in the file (order kept: these come after them)
                if self.file is None:
                    self.file = tempfile.TemporaryFile(dir=self.directory)
                fd = self.file.fileno()
                written = 0
                while written < len(data):
                    written += os.pwrite(fd, data[written:], self.tail + written)
                self.tail += len(data)
            self.last_put = time.monotonic()
            if self.behind_since is None:
                self.behind_since = self.last_put
            self.cond.notify()

    def waiting(self) -> int:
        """Bytes put and not yet taken (the caller holds :attr:`cond`)."""
        return self.in_memory + self.tail - self.head

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()

    def busy(self) -> bool:
        """True while the child is writing fast (data came within :data:`FAST_S`), the writer fell behind less
        than :data:`DEFER_S` ago and the backlog is below :data:`DEFER_LIMIT`: the writer then waits,
        leaving the CPU to the child."""
        with self.cond:
            now = time.monotonic()
            return (not self.closed and now - self.last_put < FAST_S and self.waiting() < DEFER_LIMIT
                    and self.behind_since is not None and now - self.behind_since < DEFER_S)

    def take(self, timeout: float | None = None) -> bytes | None:
        """Up to BATCH bytes, waiting for some; None when closed and empty; ``b""`` when nothing came for
        ``timeout`` seconds. Small pieces are taken together (a pseudo-terminal gives the pumps 4 KiB a read, and
        the writer's cost is mostly per batch)."""
        with self.cond:
            while not self.waiting() and not self.closed:
                if not self.cond.wait(timeout):
                    return b""
            if self.memory:
                parts: list[bytes] = []
                size = 0
                while self.memory:
                    first = self.memory[0]
                    rest = len(first) - self.offset
                    if size + rest > BATCH:
                        if not parts:  # a batch of it (the writer's calls hold the interpreter lock: keep them short)
                            parts.append(first[self.offset:self.offset + BATCH])
                            self.offset += BATCH
                        break
                    self.memory.popleft()  # the rest of the oldest piece
                    parts.append(first[self.offset:] if self.offset else first)
                    self.offset = 0
                    size += rest
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self.in_memory -= len(data)
                self._maybe_caught_up()
                return data
            if self.head == self.tail:
                return None
            assert self.file is not None
            head, size = self.head, min(BATCH, self.tail - self.head)
        data = os.pread(self.file.fileno(), size, head)
        with self.cond:
            self.head += len(data)
            if self.head == self.tail:  # caught up: reuse the file from its start
                self.head = self.tail = 0
                os.ftruncate(self.file.fileno(), 0)
            self._maybe_caught_up()
        return data

    def _maybe_caught_up(self) -> None:
        """After a take (the caller holds :attr:`cond`): nothing waits any more, so the next byte starts a new
        deferral."""
        if not self.waiting():
            self.behind_since = None

    def marks_until(self, offset: int) -> list[tuple[int, float]]:
        """Take the marks of the pieces that end at or before ``offset`` of the put stream."""
        out: list[tuple[int, float]] = []
        with self.cond:
            while self.marks and self.marks[0][0] <= offset:
                out.append(self.marks.popleft())
        return out

    def discard(self) -> None:
        """Close the file (when one was needed)."""
        if self.file is not None:
            self.file.close()


class Tee:
    """Copies the child's two streams (see the module docs)."""

    def __init__(self, log_path: Path, redact: Callable[[bytes], bytes], outputs: tuple[IO[bytes], IO[bytes]],
                 consumer: LineConsumer | None = None) -> None:
        """``redact``: applied to each batch of whole lines (a :class:`ledger.redact.StreamRedactor`'s
        ``feed_bytes``); ``outputs``: the terminal's stdout and stderr; ``consumer``: see
        :data:`LineConsumer`."""
        import hashlib

        # a batch per write: in the kernel's hands when it returns; readable, for a consumer attached later (the
        # lines before it are read back through this descriptor: a log another process removed still reads)
        self.log = open(log_path, "a+b", buffering=0)
        self.log_path = log_path
        self.start_offset = self.log.tell()
        """Where this tee's bytes start in the log (a log that had bytes before keeps them first)."""
        self.written = 0
        """Bytes this tee wrote to the log."""
        self._attaching: tuple[LineConsumer | None, Callable[[], None] | None] | None = None
        self.clock = ClockWriter(log_path.with_name(CLOCK_FILE))
        self.lines = 0
        """Lines written to the log by this tee (the line count its clock's marks give)."""
        self.taken = 0
        """Bytes of the put stream the writer has logged (redacted, they may differ in length)."""
        self.digest: Any = hashlib.sha256() if self.log.tell() == 0 else None
        """The log's sha256 as written (a log that had bytes before this tee has none): kept beside it for
        publishing (:data:`ledger.store.layout.LOG_DIGEST_FILE`), which then need not read it again."""
        self.logged = 0
        """Bytes written to the log by this tee."""
        self.redact = redact
        self.outputs = outputs
        self.consumer = consumer
        self.idle: Callable[[], None] | None = None
        """Called by the writer when the output paused for :data:`IDLE_S` (a live capture's turn to catch up)."""
        self.spool = _Spool(log_path.parent)
        self.pumps: list[threading.Thread] = []
        self.writer = threading.Thread(target=self._write_loop, name="ledger-tee-writer", daemon=True)
        self.stopping = threading.Event()
        self.last_output = time.monotonic()
        """When a pump last read output (or the tee was made)."""
        self.read_bytes = 0
        """Bytes the pumps read from the child's streams."""
        self.cutoff: float | None = None
        """Monotonic time after which the pumps stop reading (set when the launch exited; see :data:`GRACE_S`)."""
        self.cut = False
        """The pumps stopped at the cutoff with the streams still open."""
        self.error: str | None = None

    def start(self, streams: tuple[IO[bytes], IO[bytes]]) -> None:
        """Start a pump per stream and the writer: the log (and its clock) is written from the launch's first line,
        whether or not a consumer is attached yet (:meth:`attach`)."""
        # The writer's batches (redaction, parsing) hold the GIL between their C calls; a pump waiting for it
        # holds back the child. A short switch interval hands it over within SWITCH_S instead of 5 ms.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_S))
        for stream, out in zip(streams, self.outputs, strict=True):
            with contextlib.suppress(OSError):
                fcntl.fcntl(stream.fileno(), _F_SETPIPE_SZ, CHUNK)
            t = threading.Thread(target=self._pump, args=(stream, out), name="ledger-tee-pump", daemon=True)
            t.start()
            self.pumps.append(t)
        self.writer.start()

    def close_unstarted(self) -> None:
        """Close the log and its clock of a tee that was never started (the launch could not start)."""
        with contextlib.suppress(OSError):
            self.log.close()
        self.clock.close()

    def wait_quiet(self, quiet_s: float, limit_s: float, done: Callable[[], bool]) -> None:
        """Return once no output came for ``quiet_s`` seconds, ``done()`` is true (the child exited) or
        ``limit_s`` seconds passed: the moment for the wrapper's own work that holds the interpreter lock (its
        imports), which would otherwise hold back the pumps, and the child with them, while it prints."""
        deadline = time.monotonic() + limit_s
        while not done():
            now = time.monotonic()
            if now - self.last_output >= quiet_s or now >= deadline:
                return
            time.sleep(min(quiet_s, 0.01))

    def attach(self, consumer: LineConsumer | None, idle: Callable[[], None] | None = None) -> None:
        """Hand each batch the log gets from now on to ``consumer`` (and call ``idle`` when the output paused for
        :data:`IDLE_S`), after the lines the log got before, read back from it: the wrapper builds the parser after
        the launch started, and its first lines are in the log already. The writer does it, between two batches
        (within :data:`IDLE_S`), so that the consumer sees every line once and in order."""
        with self.spool.cond:
            self._attaching = (consumer, idle)
            self.spool.cond.notify()

    def _take_attach(self) -> None:
        """In the writer: a consumer attached since its last batch gets the log so far, then becomes the consumer."""
        if self._attaching is None:
            return
        with self.spool.cond:
            consumer, idle = self._attaching
            self._attaching = None
        if consumer is not None and self.written:
            try:
                fd, offset = self.log.fileno(), self.start_offset
                left, carry = self.written, b""
                while left > 0:
                    block = os.pread(fd, min(BATCH, left), offset)
                    if not block:
                        break
                    left -= len(block)
                    offset += len(block)
                    data = carry + block
                    cut = data.rfind(b"\n") + 1 if left else len(data)  # whole lines, as every batch
                    carry = data[cut:]
                    if cut:
                        consumer(data[:cut])
            except Exception as exc:  # a parser's bug (or a log that cannot be read back) never stops the log
                self.error = self.error or f"output.log: line consumer failed: {type(exc).__name__}: {exc}"
                consumer, idle = None, None
        self.consumer, self.idle = consumer, idle

    def backlog(self) -> int:
        """Bytes of output read from the pipes and not yet taken by the writer."""
        with self.spool.cond:
            return self.spool.waiting()

    def _pump(self, stream: IO[bytes], out: IO[bytes]) -> None:
        fd = stream.fileno()
        try:
            out_fd: int | None = out.fileno()
        except (OSError, ValueError, AttributeError):
            out_fd = None
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        os.set_blocking(fd, False)  # read while data flows; poll (and look at `stopping`) only when it does not
        carry = b""
        while True:
            if self.cutoff is not None and time.monotonic() >= self.cutoff:
                self.cut = True
                break
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                if self.stopping.is_set():
                    break
                poller.poll(100)
                continue
            except OSError as exc:  # a pseudo-terminal whose every writer closed it (Linux: EIO, not end of file)
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            self.last_output = time.monotonic()
            when = time.time()
            self.read_bytes += len(chunk)
            _emit(out, out_fd, chunk)
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry += chunk
                if len(carry) >= MAX_LINE:  # a very long line: its pieces go on their own lines
                    for i in range(0, len(carry) - MAX_LINE + 1, MAX_LINE):
                        self.spool.put(carry[i:i + MAX_LINE] + b"\n", when)
                    carry = carry[len(carry) - len(carry) % MAX_LINE:]
                continue
            self.spool.put(carry + chunk[: cut + 1], when)
            carry = chunk[cut + 1:]
        if carry:
            self.spool.put(carry + b"\n")
        stream.close()

    def _write_loop(self) -> None:
        lower_priority()  # the child and the pumps first: the log catches up when they wait
        pending = b""
        while True:
            while self.spool.busy():
                time.sleep(0.01)
            data = self.spool.take(IDLE_S)
            self._take_attach()
            if data is None:
                break
            if not data:  # the output paused: the consumer's turn to catch up (a live capture writes its trail)
                if self.idle is not None:
                    try:
                        self.idle()
                    except Exception as exc:
                        self.error = self.error or f"output.log: line consumer failed: {type(exc).__name__}: {exc}"
                        self.idle = None
                continue
            data = pending + data
            cut = data.rfind(b"\n")
            if cut < 0 and len(data) <= MAX_LINE:  # a line of MAX_LINE bytes waits for its newline
                pending = data
                continue
            batch, pending = (data[: cut + 1], data[cut + 1:]) if cut >= 0 else (data, b"")
            self._batch(batch)
        if pending:
            self._batch(pending)
        self._take_attach()

    def _batch(self, batch: bytes) -> None:
        text = self.redact(batch)
        marks = self._marks(batch, text)
        if self.consumer is not None:
            try:
                self.consumer(text)
            except Exception as exc:  # a parser's bug never stops the log
                self.error = self.error or f"output.log: line consumer failed: {type(exc).__name__}: {exc}"
                self.consumer = None
        if self.log.closed:
            return
        try:
            view = memoryview(text)
            while view:
                n = self.log.write(view) or 0
                self.written += n
                view = view[n:]
        except OSError as exc:  # a full disk must never stall the child's output
            self.error = f"output.log: writing stopped: {exc.strerror or exc}"
            self.digest = None
            with contextlib.suppress(OSError):
                self.log.close()
            return
        if self.digest is not None:
            self.digest.update(text)  # (hashlib leaves the interpreter lock to the pumps meanwhile)
            self.logged += len(text)
        self.clock.write(marks)

    def _marks(self, batch: bytes, text: bytes) -> list[tuple[int, float]]:
        """The clock's marks of a batch: for each piece the pumps read that ends in it, the log's line count once
        the piece is written and the time it was read. Lines are counted in the batch as read; redaction keeps
        them but for a private key's block, which it makes one line: no mark counts past the redacted batch's
        lines."""
        start, self.taken = self.taken, self.taken + len(batch)
        first = self.lines
        total = text.count(b"\n")
        marks = []
        counted, pos = 0, 0
        for offset, when in self.spool.marks_until(self.taken):
            end = min(max(offset - start, pos), len(batch))
            counted += batch.count(b"\n", pos, end)
            pos = end
            marks.append((first + min(counted, total), when))
        self.lines = first + total
        return marks

    def finish(self, pgid: int, drain_s: float = DRAIN_S, grace_s: float = GRACE_S) -> list[str]:
        """After the child exited: give the pumps ``drain_s`` seconds to reach end of file; terminate what
        is left of the child's process group (detached grandchildren); stop reading pipes that a process
        outside the group still holds; write out everything read. Returns notes for the receipt."""
        notes = []
        exited, at_exit = time.monotonic(), self.read_bytes
        self.cutoff = exited + grace_s
        for t in self.pumps:
            t.join(timeout=drain_s)
        if end_group(pgid):
            notes.append(f"processes of the launch's group still ran {drain_s:g} s after it exited; terminated")
            for t in self.pumps:
                t.join(timeout=drain_s)
        if any(t.is_alive() for t in self.pumps):
            for t in self.pumps:  # until the streams end or the cutoff
                t.join(timeout=max(0.0, self.cutoff - time.monotonic()) + 0.5)
            self.stopping.set()
            for t in self.pumps:
                t.join()
            after = self.read_bytes - at_exit
            if self.cut:
                notes.append(f"a process outside the launch's group kept its output open: {_size(after)} it wrote "
                             f"in the {grace_s:g} s after the launch exited were recorded; its output after that "
                             "was cut (not recorded)")
            else:
                notes.append(f"a process outside the launch's group kept its output open; it closed it within "
                             f"{grace_s:g} s of the launch's exit ({_size(after)} recorded after the exit)")
        if self.writer.ident is None:  # never started (the wrapper failed before): the log still gets it all
            self.writer.start()
        self.spool.close()
        self.writer.join()
        try:
            if not self.log.closed:
                self.log.close()
                with contextlib.suppress(OSError):  # only saves publishing a read of the log
                    self._keep_digest()
        except OSError as exc:
            self.error = self.error or f"output.log: {exc.strerror or exc}"
        self.spool.discard()
        self.clock.close()
        sys.setswitchinterval(getattr(self, "_switch", sys.getswitchinterval()))
        if self.error:
            notes.append(self.error)
        if self.clock.error:
            notes.append(self.clock.error)
        return notes

    def _keep_digest(self) -> None:
        """Write the log's digest, size and modification time beside it (after the log was closed whole)."""
        import json

        from ledger.store.layout import LOG_DIGEST_FILE

        if self.digest is None or self.error:
            return
        st = self.log_path.stat()  # a log that another process wrote to has another size: read at publishing
        facts = {"sha256": self.digest.hexdigest(), "bytes": self.logged, "mtime_ns": st.st_mtime_ns}
        self.log_path.with_name(LOG_DIGEST_FILE).write_text(json.dumps(facts))


def _size(n: int) -> str:
    """A byte count in words (``841.2 MB``)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _emit(out: IO[bytes], out_fd: int | None, chunk: bytes) -> None:
    """Write a chunk to the terminal; a terminal that went away does not stop the log."""
    try:
        if out_fd is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out_fd, view):]
        else:
            out.write(chunk)
            out.flush()
    except (OSError, ValueError):
        pass


def lower_priority(by: int = 10) -> None:
    """Lower the calling thread's scheduling priority (Linux: a thread has its own nice value, and the
    processes it starts inherit it); elsewhere nothing. For the wrapper's own work (the log's writer, the
    stack capture), so that on a busy machine the child and the pumps that drain its pipes run first."""
    with contextlib.suppress(OSError, AttributeError, ValueError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))


def group_alive(pgid: int) -> bool:
    """True when a live (not zombie) process of the process group still runs."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def end_group(pgid: int, grace_s: float = 1.0) -> bool:
    """Terminate what is left of a launch's process group (SIGTERM, then SIGKILL after ``grace_s``).
    True when something was left."""
    import signal
    import time

    if not group_alive(pgid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return True
