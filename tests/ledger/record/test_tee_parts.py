"""The output tee's parts, in-process: the spool (memory, then its file; the marks of when pieces were read; when
the writer defers), the writer's batches (the log, its clock's marks, the consumer, a full disk), a consumer
attached late (the log so far, read back), the end of a launch (the notes a receipt gets), and the helpers
(sizes in words, the terminal copy, thread priority, a launch's process group). Expected values are written by
hand from the bytes and marks put in."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ledger.record import tee as tee_module
from ledger.record.tee import MAX_LINE, Tee, _emit, _size, _Spool, end_group, group_alive, lower_priority
from ledger.redact import Redactor, StreamRedactor
from ledger.store.layout import LOG_DIGEST_FILE

NO_GROUP = os.getpid() + 10**7
"""A process group that does not exist."""


def _clock(path: Path) -> list[tuple[int, float]]:
    """The clock file's records, read with ``struct`` (little-endian uint64 line count, float64 time)."""
    data = path.read_bytes() if path.exists() else b""
    return list(struct.iter_unpack("<Qd", data))


def _tee(tmp_path: Path, redact=None, consumer=None) -> tuple[Tee, Path]:
    log = tmp_path / "output.log"
    return Tee(log, redact or (lambda b: b), (io.BytesIO(), io.BytesIO()), consumer=consumer), log


# ------------------------------------------------------------------------------------------------ helpers
@pytest.mark.parametrize(("n", "words"), [
    (0, "0 bytes"), (999, "999 bytes"), (1000, "1.0 kB"), (1499, "1.5 kB"), (999_949, "999.9 kB"),
    (1_000_000, "1.0 MB"), (841_200_000, "841.2 MB"), (999_999_999, "1000.0 MB"), (10**9, "1.0 GB"),
    (2_500_000_000, "2.5 GB"),
])
def test_sizes_in_words(n: int, words: str) -> None:
    assert _size(n) == words


def test_the_terminal_copy_gets_every_byte_and_a_terminal_gone_stops_nothing() -> None:
    out = io.BytesIO()
    _emit(out, None, b"step 1\n")
    _emit(out, None, b"step 2\n")
    assert out.getvalue() == b"step 1\nstep 2\n"
    r, w = os.pipe()
    big = bytes(range(256)) * 4096  # 1 MiB: more than a pipe takes in one write
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_read_all(r)))
    reader.start()
    with os.fdopen(w, "wb", buffering=0) as f:
        _emit(f, w, big)
    reader.join()
    os.close(r)
    assert bytes(got) == big
    closed = io.BytesIO()
    closed.close()
    _emit(closed, None, b"lost\n")  # ValueError: a closed terminal
    r, w = os.pipe()
    os.close(r)
    with os.fdopen(w, "wb", buffering=0) as f:
        _emit(f, w, b"no reader\n")  # EPIPE: a terminal that went away


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def test_lowering_a_threads_priority_adds_to_its_nice_value_up_to_19() -> None:
    seen: list[tuple[int, int, int]] = []

    def work() -> None:
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        lower_priority(3)
        middle = os.getpriority(os.PRIO_PROCESS, tid)
        lower_priority()
        seen.append((before, middle, os.getpriority(os.PRIO_PROCESS, tid)))

    for _ in range(2):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    (before, middle, after), (before2, middle2, after2) = seen
    assert middle == min(19, before + 3) and after == min(19, before + 13)
    assert (before2, middle2, after2) == (before, middle, after)  # per thread: the process's own is untouched
    t = threading.Thread(target=lambda: (lower_priority(100), seen.append(
        (os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),) * 3)))
    t.start()
    t.join()
    assert seen[-1][0] == 19


def _group(code: str) -> subprocess.Popen[bytes]:
    """A launch in its own process group (its pid is the group's id; the session is the test's, as under a shell's
    job control) that says when it is ready."""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, process_group=0)
    assert p.stdout is not None
    with p.stdout:
        assert p.stdout.readline() == b"ready\n"
    return p


def test_a_group_is_alive_while_a_process_of_it_runs_and_not_once_only_zombies_are_left() -> None:
    p = _group("import time; print('ready', flush=True); time.sleep(60)")
    assert group_alive(p.pid)
    assert not group_alive(NO_GROUP)
    os.kill(p.pid, signal.SIGKILL)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert Path(f"/proc/{p.pid}").exists() and not group_alive(p.pid)
    p.wait()
    assert not group_alive(p.pid)


def test_without_proc_a_group_is_alive_while_a_signal_reaches_it(tmp_path: Path, monkeypatch) -> None:
    """A system without /proc (macOS): the group is probed with signal 0, which reaches it without harm."""
    monkeypatch.setattr(tee_module, "Path", lambda _: tmp_path / "no-proc")
    p = _group("import time; print('ready', flush=True); time.sleep(60)")
    try:
        assert group_alive(p.pid) and p.poll() is None  # alive, and the probe did not end it
        assert not group_alive(NO_GROUP)
    finally:
        p.kill()
        p.wait()
    assert not group_alive(p.pid)


def test_a_process_whose_name_looks_like_a_state_is_still_alive() -> None:
    """/proc's stat line holds the process's name in parentheses; a name of ``x) Z 1`` is not a zombie's state."""
    p = _group("import time; open('/proc/self/comm', 'w').write('x) Z 1 2 3'); print('ready', flush=True); "
               "time.sleep(60)")
    try:
        assert Path(f"/proc/{p.pid}/comm").read_text() == "x) Z 1 2 3\n" and group_alive(p.pid)
    finally:
        p.kill()
        p.wait()


def test_a_launch_that_handles_the_terminate_gets_the_grace_period_to_exit() -> None:
    p = _group("import os, signal, time; signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.3), os._exit(0))); "
               "print('ready', flush=True); time.sleep(60)")
    assert end_group(p.pid, grace_s=30) is True
    assert p.wait(10) == 0  # its own exit after its clean-up (0.3 s), not a SIGKILL


def test_ending_a_group_terminates_it_and_kills_what_ignores_the_terminate() -> None:
    assert end_group(NO_GROUP) is False
    p = _group("import time; print('ready', flush=True); time.sleep(60)")
    assert end_group(p.pid) is True
    assert p.wait(10) == -signal.SIGTERM
    stubborn = _group("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True)"
                      "\nwhile True: time.sleep(1)")
    assert end_group(stubborn.pid, grace_s=0.2) is True
    assert stubborn.wait(10) == -signal.SIGKILL


# -------------------------------------------------------------------------------------------------- spool
def test_reads_closer_than_the_resolution_share_a_mark_and_marks_are_taken_by_offset(tmp_path: Path) -> None:
    spool = _Spool(tmp_path)
    spool.put(b"ab", when=0.0)
    spool.put(b"cd", when=0.0009)  # within 1 ms of the mark's read: the same mark, extended
    spool.put(b"e", when=0.001)  # 1 ms after the mark's first read: a mark of its own
    spool.put(b"fgh", when=0.0019)  # within 1 ms of that mark
    spool.put(b"i", when=0.5)
    assert list(spool.marks) == [(4, 0.0), (8, 0.001), (9, 0.5)] and spool.put_bytes == 9
    assert spool.marks_until(3) == []
    assert spool.marks_until(8) == [(4, 0.0), (8, 0.001)]
    assert spool.marks_until(100) == [(9, 0.5)] and spool.marks_until(100) == []
    before = time.time()
    spool.put(b"j")  # read now
    assert spool.marks_until(10) == [(10, pytest.approx(time.time(), abs=time.time() - before + 1e-6))]


def test_the_spool_keeps_up_to_its_limit_in_memory_then_uses_its_file_until_caught_up(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "MEMORY_LIMIT", 10)
    spool = _Spool(tmp_path)
    spool.put(b"0123456789")  # exactly the limit: memory
    assert spool.file is None and spool.in_memory == 10 and spool.waiting() == 10
    spool.put(b"ab")  # past it: the file
    assert spool.file is not None and spool.in_memory == 10 and (spool.head, spool.tail) == (0, 2)
    assert spool.take() == b"0123456789" and spool.waiting() == 2
    spool.put(b"c")  # bytes wait in the file: after them, whatever the memory holds
    assert spool.in_memory == 0 and (spool.head, spool.tail) == (0, 3)
    assert spool.take() == b"abc"  # caught up: the file is emptied for reuse
    assert (spool.head, spool.tail) == (0, 0) and os.fstat(spool.file.fileno()).st_size == 0
    spool.put(b"d")
    assert spool.in_memory == 1 and spool.tail == 0 and spool.take() == b"d"
    assert not list(tmp_path.iterdir())  # the file has no name
    spool.discard()
    assert spool.file.closed


def test_a_file_backlog_is_taken_in_batches(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "MEMORY_LIMIT", 0)
    monkeypatch.setattr(tee_module, "BATCH", 4)
    spool = _Spool(tmp_path)
    spool.put(b"abcdefghij")
    assert [spool.take(), spool.take(), spool.waiting(), spool.take()] == [b"abcd", b"efgh", 2, b"ij"]
    spool.close()
    assert spool.take() is None
    spool.discard()


def test_a_piece_longer_than_a_batch_is_taken_a_batch_at_a_time_then_with_the_next(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "BATCH", 4)
    spool = _Spool(tmp_path)
    spool.put(b"abcdefghij")
    spool.put(b"kl")
    spool.put(b"mnopq")
    got = [spool.take() for _ in range(4)]
    assert got == [b"abcd", b"efgh", b"ijkl", b"mnop"] and spool.in_memory == 1
    assert spool.take() == b"q" and spool.in_memory == 0


def test_taking_waits_for_bytes_and_says_when_none_came_or_the_spool_closed(tmp_path: Path) -> None:
    spool = _Spool(tmp_path)
    assert spool.take(0.01) == b""
    later = threading.Timer(0.05, spool.put, (b"late\n",))
    later.start()
    assert spool.take(30) == b"late\n"
    later.join()
    spool.put(b"last\n")
    spool.close()
    assert spool.closed and spool.take(0.01) == b"last\n" and spool.take(0.01) is None and spool.take() is None


def test_the_writer_is_behind_from_the_first_byte_that_waits_until_it_took_everything(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "BATCH", 4)
    spool = _Spool(tmp_path)
    assert spool.behind_since is None and spool.last_put == 0.0
    spool.put(b"abcdef")
    first = spool.behind_since
    assert first is not None and first == spool.last_put
    spool.put(b"g")
    assert spool.behind_since == first and spool.last_put >= first  # still the first byte's time
    spool.take()
    assert spool.behind_since == first  # bytes still wait
    spool.take()
    assert spool.behind_since is None
    spool.put(b"h")
    assert spool.behind_since is not None and spool.behind_since >= first


def test_the_writer_defers_only_to_fast_output_for_a_while_and_a_bounded_backlog(tmp_path: Path,
                                                                                monkeypatch) -> None:
    """busy(): output came within FAST_S, the writer fell behind less than DEFER_S ago, the backlog is below
    DEFER_LIMIT, the spool is open. Times are set on the spool (a second away from each bound)."""
    monkeypatch.setattr(tee_module, "DEFER_LIMIT", 10)
    spool = _Spool(tmp_path)
    spool.put(b"123456789")  # 9 bytes wait
    now = time.monotonic()

    def busy(last_put: float, behind: float | None) -> bool:
        spool.last_put, spool.behind_since = last_put, behind
        return spool.busy()

    assert busy(now + 1, now + 1)
    assert not busy(now - 1, now + 1)  # no output for a second: not fast
    assert not busy(now + 1, now - 1)  # behind for a second: past DEFER_S
    assert not busy(now + 1, None)  # nothing waits
    spool.put(b"0")  # 10 bytes: the limit
    assert not busy(now + 1, now + 1)
    spool.take()
    spool.put(b"x")
    assert busy(now + 1, now + 1)
    spool.close()
    assert not busy(now + 1, now + 1)


# ---------------------------------------------------------------------------------- the writer's batches
def test_each_batch_is_logged_with_the_marks_of_the_reads_that_end_in_it(tmp_path: Path) -> None:
    seen: list[bytes] = []
    tee, log = _tee(tmp_path, consumer=seen.append)
    tee.spool.put(b"a\nb\n", when=100.0)
    tee.spool.put(b"c", when=200.0)
    tee.spool.put(b"\n", when=300.0)
    assert tee.spool.take() == b"a\nb\nc\n"  # as the writer takes them
    tee._batch(b"a\nb\nc\n")
    assert _clock(tmp_path / "output.clock") == [(2, 100.0), (2, 200.0), (3, 300.0)]
    assert (tee.lines, tee.taken, tee.written, tee.logged) == (3, 6, 6, 6)
    tee.spool.put(b"d\ne", when=400.0)  # the writer logs the whole line first, "e" with the next
    assert tee.spool.take() == b"d\ne"
    tee._batch(b"d\n")
    assert _clock(tmp_path / "output.clock")[3:] == [] and tee.lines == 4
    tee.spool.put(b"f\n", when=500.0)
    assert tee.spool.take() == b"f\n"
    tee._batch(b"ef\n")
    assert _clock(tmp_path / "output.clock")[3:] == [(4, 400.0), (5, 500.0)]
    assert log.read_bytes() == b"a\nb\nc\nd\nef\n" and b"".join(seen) == log.read_bytes()
    assert seen == [b"a\nb\nc\n", b"d\n", b"ef\n"] and tee.digest.hexdigest() == hashlib.sha256(
        b"a\nb\nc\nd\nef\n").hexdigest()
    tee.finish(NO_GROUP)


def test_lines_redaction_joined_count_once_in_the_marks(tmp_path: Path) -> None:
    joined = b"-----BEGIN KEY-----\nQUJD\n-----END KEY-----\n"
    tee, log = _tee(tmp_path, redact=lambda b: b.replace(joined, b"[key]\n"))
    tee.spool.put(b"one\n", when=1.0)
    tee.spool.put(joined, when=2.0)
    tee.spool.put(b"two\n", when=3.0)
    assert tee.spool.take() == b"one\n" + joined + b"two\n"
    tee._batch(b"one\n" + joined + b"two\n")
    assert _clock(tmp_path / "output.clock") == [(1, 1.0), (3, 2.0), (3, 3.0)] and tee.lines == 3
    assert log.read_bytes() == b"one\n[key]\ntwo\n" and tee.taken == 4 + len(joined) + 4 and tee.written == 14
    tee.finish(NO_GROUP)


def test_a_consumer_that_fails_is_dropped_with_a_note_and_the_log_goes_on(tmp_path: Path) -> None:
    calls: list[bytes] = []

    def consumer(batch: bytes) -> None:
        calls.append(batch)
        raise RuntimeError(f"bad line {batch!r}")

    tee, log = _tee(tmp_path, consumer=consumer)
    tee._batch(b"x\n")
    tee._batch(b"y\n")
    assert calls == [b"x\n"] and tee.consumer is None and log.read_bytes() == b"x\ny\n"
    assert tee.finish(NO_GROUP) == ["output.log: line consumer failed: RuntimeError: bad line b'x\\n'"]


def test_a_full_disk_stops_the_log_with_a_note_and_no_digest(tmp_path: Path) -> None:
    (tmp_path / "output.log").symlink_to("/dev/full")
    seen: list[bytes] = []
    tee, _ = _tee(tmp_path, consumer=seen.append)
    tee._batch(b"step 1\n")
    assert tee.log.closed and tee.digest is None and tee.written == 0
    tee._batch(b"step 2\n")  # the log is closed: nothing more is written, the consumer still reads
    assert seen == [b"step 1\n", b"step 2\n"] and _clock(tmp_path / "output.clock") == []
    notes = tee.finish(NO_GROUP)
    assert notes == [f"output.log: writing stopped: {os.strerror(errno.ENOSPC)}"]
    assert not (tmp_path / LOG_DIGEST_FILE).exists()


def test_a_clock_file_that_is_a_link_is_not_followed_and_the_receipt_says_so(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (tmp_path / "output.clock").symlink_to(target)
    tee, log = _tee(tmp_path)
    tee.spool.put(b"step 1\n", when=5.0)
    notes = tee.finish(NO_GROUP)
    assert target.read_bytes() == b"" and log.read_bytes() == b"step 1\n"
    assert notes == [f"output.clock: not written ({os.strerror(errno.ELOOP)}): captured steps have no time"]


def test_the_digest_kept_beside_the_log_is_its_sha256_size_and_time(tmp_path: Path) -> None:
    tee, log = _tee(tmp_path)
    tee._batch(b"step 1 loss 2\n")
    tee._batch(b"step 2 loss 1\n")
    assert tee.finish(NO_GROUP) == []
    facts = json.loads((tmp_path / LOG_DIGEST_FILE).read_text())
    body = b"step 1 loss 2\nstep 2 loss 1\n"
    assert facts == {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body),
                     "mtime_ns": log.stat().st_mtime_ns}


def test_a_log_with_bytes_before_the_tee_keeps_them_first_and_gets_no_digest(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"earlier\n")
    tee, _ = _tee(tmp_path)
    assert tee.start_offset == 8 and tee.digest is None
    tee._batch(b"later\n")
    assert tee.finish(NO_GROUP) == [] and log.read_bytes() == b"earlier\nlater\n"
    assert not (tmp_path / LOG_DIGEST_FILE).exists()


def test_a_tee_never_started_closes_its_log_and_clock(tmp_path: Path) -> None:
    tee, _ = _tee(tmp_path)
    assert tee.backlog() == 0
    tee.spool.put(b"abc\n")
    assert tee.backlog() == 4
    tee.close_unstarted()
    assert tee.log.closed and tee.clock.fd is None


def test_a_tee_whose_pumps_never_started_still_logs_what_it_was_given(tmp_path: Path) -> None:
    tee, log = _tee(tmp_path)
    tee.spool.put(b"step 1\nstep 2", when=7.0)
    assert tee.finish(NO_GROUP) == [] and log.read_bytes() == b"step 1\nstep 2"
    assert _clock(tmp_path / "output.clock") == [(1, 7.0)]


# ------------------------------------------------------------------------------------ a consumer attached late
def test_a_consumer_attached_late_gets_this_tees_lines_read_back_in_whole_lines(tmp_path: Path,
                                                                             monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "BATCH", 10)
    log = tmp_path / "output.log"
    log.write_bytes(b"not this tee's\n")
    tee, _ = _tee(tmp_path)
    body = b"".join(b"step %d %s\n" % (i, b"x" * (i % 13)) for i in range(40))
    tee._batch(body)
    seen: list[bytes] = []
    idle = lambda: None  # noqa: E731
    tee.attach(seen.append, idle)
    assert tee.consumer is None  # the writer takes it on between two batches
    tee._take_attach()
    assert tee.consumer == seen.append and tee.idle is idle and tee._attaching is None
    assert b"".join(seen) == body and all(chunk.endswith(b"\n") for chunk in seen)
    assert max(map(len, seen)) <= 10 + 14  # a batch read back and the line it ends in
    tee._batch(b"after\n")
    assert seen[-1] == b"after\n"
    tee._take_attach()  # nothing attached since: nothing read back again
    assert b"".join(seen) == body + b"after\n"
    tee.finish(NO_GROUP)


def test_a_consumer_attached_to_a_log_cut_short_gets_the_lines_still_there(tmp_path: Path) -> None:
    tee, log = _tee(tmp_path)
    tee._batch(b"one\ntwo\nthree\n")
    os.truncate(log, 6)  # another process cut the log: "one\ntw"
    seen: list[bytes] = []
    tee.attach(seen.append)
    tee._take_attach()
    assert seen == [b"one\n"] and tee.consumer is not None  # whole lines only
    tee.finish(NO_GROUP)


def test_a_consumer_attached_before_any_line_gets_only_later_ones(tmp_path: Path) -> None:
    tee, _ = _tee(tmp_path)
    seen: list[bytes] = []
    tee.attach(seen.append)
    tee._take_attach()
    tee._batch(b"first\n")
    assert seen == [b"first\n"]
    tee.attach(None)
    tee._take_attach()
    tee._batch(b"second\n")
    assert seen == [b"first\n"] and tee.consumer is None
    tee.finish(NO_GROUP)


def test_a_consumer_that_fails_on_the_lines_read_back_is_dropped_with_a_note(tmp_path: Path) -> None:
    tee, log = _tee(tmp_path)
    tee._batch(b"one\n")

    def consumer(batch: bytes) -> None:
        raise ValueError("cannot parse")

    tee.attach(consumer, lambda: None)
    tee._take_attach()
    assert tee.consumer is None and tee.idle is None
    tee._batch(b"two\n")
    assert log.read_bytes() == b"one\ntwo\n"
    assert tee.finish(NO_GROUP) == ["output.log: line consumer failed: ValueError: cannot parse"]


# -------------------------------------------------------------------------------------------- whole runs
def _start(tmp_path: Path, consumer=None) -> tuple[Tee, int, int, io.BytesIO]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    terminal = io.BytesIO()
    tee = Tee(tmp_path / "output.log", StreamRedactor(Redactor({})).feed_bytes, (terminal, io.BytesIO()),
              consumer=consumer)
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    return tee, out_w, err_w, terminal


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a pipe, however many writes it takes (a full pipe takes part of it each time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_the_tee_enlarges_the_pipes_and_shortens_the_switch_interval_while_it_runs(tmp_path: Path) -> None:
    """The interval is set to 5 ms first (whatever earlier tests left): the tee shortens it and gives it back."""
    original = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        _enlarge_and_shorten(tmp_path)
    finally:
        sys.setswitchinterval(original)


def _enlarge_and_shorten(tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    tee = Tee(tmp_path / "output.log", lambda b: b, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    try:
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        import fcntl
        assert fcntl.fcntl(out_w, 1032) == 1 << 20 and fcntl.fcntl(err_w, 1032) == 1 << 20  # F_GETPIPE_SZ
        assert [t.name for t in tee.pumps] == ["ledger-tee-pump"] * 2 and all(t.daemon for t in tee.pumps)
    finally:
        os.close(out_w)
        os.close(err_w)
        tee.finish(NO_GROUP)
    assert sys.getswitchinterval() == before


def test_a_line_of_exactly_max_line_bytes_is_one_piece_and_the_next_line_its_own(tmp_path: Path) -> None:
    tee, out_w, err_w, _ = _start(tmp_path)
    data = b"x" * MAX_LINE
    _write_all(out_w, data)
    _until(lambda: tee.read_bytes == MAX_LINE, "the pump read the long line")
    os.write(out_w, b"y\n")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    assert (tmp_path / "output.log").read_bytes() == data + b"\ny\n"


def test_a_line_longer_than_a_batch_reaches_the_consumer_whole(tmp_path: Path) -> None:
    seen: list[bytes] = []
    tee, out_w, err_w, terminal = _start(tmp_path, consumer=seen.append)
    line = b"".join(b"%07d " % i for i in range(75_000)) + b"\n"  # 600 kB: two and a half batches
    os.write(out_w, b"first\n")
    _write_all(out_w, line + b"next\n")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    assert b"".join(seen) == b"first\n" + line + b"next\n" == (tmp_path / "output.log").read_bytes()
    assert all(chunk.endswith(b"\n") for chunk in seen) and terminal.getvalue() == b"first\n" + line + b"next\n"


def test_a_pseudo_terminal_closed_by_its_every_writer_ends_its_stream(tmp_path: Path) -> None:
    import tty

    master, slave = os.openpty()
    tty.setraw(slave)
    err_r, err_w = os.pipe()
    tee = Tee(tmp_path / "output.log", lambda b: b, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(master, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    os.write(slave, b"step 1 loss 2.0\nstep 2")
    _until(lambda: tee.read_bytes == 22, "the pump read the terminal")
    os.close(slave)  # Linux: the master then reads EIO, not end of file
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    assert (tmp_path / "output.log").read_bytes() == b"step 1 loss 2.0\nstep 2\n"


def test_the_idle_hook_runs_when_the_output_pauses_and_is_dropped_when_it_fails(tmp_path: Path) -> None:
    seen: list[bytes] = []
    idle = threading.Event()
    tee, out_w, err_w, _ = _start(tmp_path)
    tee.attach(seen.append, idle.set)
    os.write(out_w, b"step 1\n")
    assert idle.wait(30)
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise OSError("trail not written")

    second: list[bytes] = []
    tee.attach(second.append, failing)  # a new consumer: the log so far, then what comes
    _until(lambda: calls, "the failing idle hook was called")
    os.write(err_w, b"step 2\n")
    os.close(out_w)
    os.close(err_w)
    notes = tee.finish(NO_GROUP)
    assert calls == [1] and tee.idle is None and notes == [
        "output.log: line consumer failed: OSError: trail not written"]
    assert seen == [b"step 1\n"] and tee.consumer == second.append
    assert b"".join(second) == (tmp_path / "output.log").read_bytes() == b"step 1\nstep 2\n"


def test_a_group_left_running_after_the_launch_is_terminated_and_noted(tmp_path: Path) -> None:
    tee, out_w, err_w, _ = _start(tmp_path)
    os.write(out_w, b"step 1\n")
    os.close(out_w)
    os.close(err_w)
    left = _group("import time; print('ready', flush=True); time.sleep(60)")
    notes = tee.finish(left.pid, drain_s=0.25)
    assert notes == ["processes of the launch's group still ran 0.25 s after it exited; terminated"]
    assert left.wait(10) == -signal.SIGTERM and (tmp_path / "output.log").read_bytes() == b"step 1\n"


def test_a_daemon_that_closes_the_output_within_the_grace_period_is_read_to_its_end(tmp_path: Path) -> None:
    """The daemon writes 1,700 bytes a second after the launch exited (the tee's cutoff is set), then closes: all
    recorded, and the note says how much came after the exit."""
    tee, out_w, err_w, _ = _start(tmp_path)
    os.write(out_w, b"b" * 999 + b"\n")
    _until(lambda: tee.read_bytes == 1000, "the pump read the launch's line")

    def daemon() -> None:
        _until(lambda: tee.cutoff is not None, "the launch exited")
        time.sleep(1.0)  # past the drain (0.05 s): the pipe is still open when the tee looks
        os.write(out_w, b"".join(b"daemon line %04d\n" % i for i in range(100)))
        os.close(out_w)

    t = threading.Thread(target=daemon)
    t.start()
    os.close(err_w)
    notes = tee.finish(NO_GROUP, drain_s=0.05, grace_s=60)
    t.join()
    assert not tee.cut and notes == ["a process outside the launch's group kept its output open; it closed it "
                                     "within 60 s of the launch's exit (1.7 kB recorded after the exit)"]
    log = (tmp_path / "output.log").read_bytes()
    assert log == b"b" * 999 + b"\n" + b"".join(b"daemon line %04d\n" % i for i in range(100))


def test_the_spools_file_lies_beside_the_log_without_a_name(tmp_path: Path, monkeypatch) -> None:
    """A backlog past the memory limit goes to a file in the run's directory (the log's filesystem, not /tmp)."""
    monkeypatch.setattr(tee_module, "MEMORY_LIMIT", 0)
    tee, _ = _tee(tmp_path)
    tee.spool.put(b"waiting\n")
    assert tee.spool.file is not None
    where = os.readlink(f"/proc/self/fd/{tee.spool.file.fileno()}")
    assert where.startswith(str(tmp_path) + "/") and sorted(p.name for p in tmp_path.iterdir()) == [
        "output.clock", "output.log"]
    assert tee.writer.name == "ledger-tee-writer" and tee.writer.daemon  # never holds the wrapper's exit
    tee.finish(NO_GROUP)


def test_a_consumer_attached_late_gets_this_tees_bytes_and_not_what_another_process_appended(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    monkeypatch.setattr(tee_module, "BATCH", 10)
    tee, log = _tee(tmp_path)
    tee._batch(b"0123456789\n")  # 11 bytes: a batch read back and one byte
    with log.open("ab") as f:
        f.write(b"appended by another process\n")
    seen: list[bytes] = []
    tee.attach(seen.append)
    tee._take_attach()
    assert seen == [b"0123456789\n"]
    tee.finish(NO_GROUP)


def test_waiting_for_quiet_output_lasts_until_the_limit_while_the_launch_prints(tmp_path: Path) -> None:
    """Never before the limit (monotonic time: a lower bound that holds on any machine), with output that never
    pauses for an hour and a launch that does not end."""
    tee, out_w, err_w, _ = _start(tmp_path)
    stop = threading.Event()

    def chatty() -> None:
        while not stop.is_set():
            os.write(out_w, b"step 1 loss 2.0\n" * 64)
            time.sleep(0.001)

    feeder = threading.Thread(target=chatty)
    feeder.start()
    try:
        _until(lambda: tee.read_bytes > 0, "the pump read output")
        started = time.monotonic()
        tee.wait_quiet(3600, 0.3, lambda: False)
        assert time.monotonic() - started >= 0.3
    finally:
        stop.set()
        feeder.join()
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []


def test_a_consumer_attached_at_the_end_gets_the_last_line_without_its_end(tmp_path: Path) -> None:
    """The log of a launch whose last line had no newline ends without one: read back whole, that line too."""
    tee, _ = _tee(tmp_path)
    tee._batch(b"a\nb")
    seen: list[bytes] = []
    tee.attach(seen.append)
    tee._take_attach()
    assert seen == [b"a\nb"]
    tee.finish(NO_GROUP)


def test_a_line_read_in_pieces_past_max_line_is_cut_at_max_line_once(tmp_path: Path) -> None:
    """MAX_LINE - 1 bytes, then MAX_LINE more, then a newline: one piece of MAX_LINE bytes, then the rest (MAX_LINE
    - 1 bytes) ends the line; every byte once, in order."""
    tee, out_w, err_w, terminal = _start(tmp_path)
    first, second = b"a" * (MAX_LINE - 1), b"b" * MAX_LINE
    for data, total in ((first, MAX_LINE - 1), (second, 2 * MAX_LINE - 1)):
        _write_all(out_w, data)
        _until(lambda total=total: tee.read_bytes == total, "the pump read the piece")
    os.write(out_w, b"\nend\n")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    whole = first + second
    assert (tmp_path / "output.log").read_bytes() == whole[:MAX_LINE] + b"\n" + whole[MAX_LINE:] + b"\nend\n"
    assert terminal.getvalue() == whole + b"\nend\n"


def test_a_line_of_exactly_max_line_bytes_reaches_the_consumer_with_its_end(tmp_path: Path) -> None:
    """The consumer gets whole lines (LineConsumer): a line of MAX_LINE bytes is one, its newline in the same batch."""
    seen: list[bytes] = []
    tee, out_w, err_w, _ = _start(tmp_path, consumer=seen.append)
    data = b"x" * MAX_LINE
    _write_all(out_w, data)
    _until(lambda: tee.read_bytes == MAX_LINE, "the pump read the long line")
    os.write(out_w, b"y\n")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    assert b"".join(seen) == data + b"\ny\n" and all(batch.endswith(b"\n") for batch in seen), [len(b) for b in seen]


def test_a_newline_that_comes_alone_ends_the_line_at_once(tmp_path: Path) -> None:
    """A read that starts with the newline of the line before (``\\nstep 2``) puts that line in the log then, not
    with a later line."""
    tee, out_w, err_w, _ = _start(tmp_path)
    log = tmp_path / "output.log"
    os.write(out_w, b"step 1 loss 2.0")
    _until(lambda: tee.read_bytes == 15, "the pump read the line")
    os.write(out_w, b"\nstep 2")
    _until(lambda: log.read_bytes() == b"step 1 loss 2.0\n", "the line in the log while the launch runs")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == [] and log.read_bytes() == b"step 1 loss 2.0\nstep 2\n"


def test_a_tee_never_started_whose_log_descriptor_is_gone_still_closes_its_clock(tmp_path: Path) -> None:
    tee, _ = _tee(tmp_path)
    os.close(tee.log.fileno())  # closed under it (EBADF when the tee closes it)
    tee.close_unstarted()
    assert tee.clock.fd is None


def test_a_line_gets_the_time_it_was_read_not_when_a_slow_terminal_took_it(tmp_path: Path) -> None:
    """The terminal's pipe is full: the pump reads the line, then waits on the terminal until the test drains it.
    The line's mark is the time of the read, before the drain began (not the time the terminal took it)."""
    term_r, term_w = os.pipe()
    os.set_blocking(term_w, False)
    filled = 0
    try:
        while True:
            filled += os.write(term_w, b"f" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(term_w, True)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    terminal = os.fdopen(term_w, "wb", buffering=0)
    tee = Tee(tmp_path / "output.log", lambda b: b, (terminal, io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    os.write(out_w, b"step 1 loss 2.0\n")
    _until(lambda: tee.read_bytes == 16, "the pump read the line")
    drained_from = time.time()
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(_read_all(term_r)))
    reader.start()
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    terminal.close()
    reader.join()
    os.close(term_r)
    assert len(got) == filled + 16 and got.endswith(b"step 1 loss 2.0\n")
    ((lines, when),) = _clock(tmp_path / "output.clock")
    assert lines == 1 and when < drained_from


def test_an_empty_first_line_counts_in_the_marks(tmp_path: Path) -> None:
    tee, _ = _tee(tmp_path)
    tee.spool.put(b"\nstep 1\n", when=9.0)
    assert tee.spool.take() == b"\nstep 1\n"
    tee._batch(b"\nstep 1\n")
    assert _clock(tmp_path / "output.clock") == [(2, 9.0)]
    tee.finish(NO_GROUP)


def test_a_file_size_limit_reached_mid_batch_stops_the_log_with_a_note(tmp_path: Path) -> None:
    """The kernel writes what fits under the limit and refuses the rest (EFBIG): the log keeps what was written,
    the receipt says writing stopped, and no digest claims the whole batch."""
    import resource

    tee, log = _tee(tmp_path)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (10, hard))
    try:
        tee._batch(b"0123456789abcdef\n")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert tee.written == 10 and log.read_bytes() == b"0123456789" and tee.digest is None
    assert tee.finish(NO_GROUP) == [f"output.log: writing stopped: {os.strerror(errno.EFBIG)}"]
    assert not (tmp_path / LOG_DIGEST_FILE).exists()


def test_an_empty_line_before_a_line_longer_than_a_batch_leaves_the_consumer_whole_lines(tmp_path: Path) -> None:
    """One read of an empty line and a line of BATCH + 5 bytes: the writer's first take is the empty line and part
    of the long one; the consumer gets the empty line, then the long line whole."""
    from ledger.record.tee import BATCH

    seen: list[bytes] = []
    tee, out_w, err_w, _ = _start(tmp_path, consumer=seen.append)
    data = b"\n" + b"y" * (BATCH + 5) + b"\n"
    _write_all(out_w, data)
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(NO_GROUP) == []
    assert b"".join(seen) == data and all(batch.endswith(b"\n") for batch in seen), [len(b) for b in seen]
