"""The output tee: real pipes, the child never waits for the log, memory bounded per line, multi-line
secrets redacted, complete lines handed to a consumer."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from pathlib import Path

import numpy as np

from ledger.record.tee import MAX_LINE, Tee
from ledger.redact import REDACTED, Redactor, StreamRedactor


def _run(tmp_path: Path, writes: list[bytes], consumer=None, redactor: Redactor | None = None) -> tuple[bytes, bytes]:
    """Feed ``writes`` through a real pipe as the child's stdout (stderr empty); the terminal copy and the log."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    terminal = io.BytesIO()
    log = tmp_path / "output.log"
    tee = Tee(log, StreamRedactor(redactor or Redactor({})).feed_bytes, (terminal, io.BytesIO()), consumer=consumer)
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))

    def child() -> None:
        for w in writes:
            os.write(out_w, w) if len(w) < 65536 else _write_all(out_w, w)
        os.close(out_w)
        os.close(err_w)

    t = threading.Thread(target=child)
    t.start()
    t.join()
    notes = tee.finish(os.getpid() + 10**7)  # a group that does not exist
    assert notes == []
    return terminal.getvalue(), log.read_bytes()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def test_terminal_gets_every_byte_and_the_log_every_line(tmp_path: Path) -> None:
    writes = [b"step 1 loss 2.0\nstep 2", b" loss 1.5\n", b"no newline at the end"]
    terminal, log = _run(tmp_path, writes)
    assert terminal == b"".join(writes)
    assert log == b"step 1 loss 2.0\nstep 2 loss 1.5\nno newline at the end\n"


def test_a_line_without_newline_is_cut_into_bounded_pieces(tmp_path: Path) -> None:
    data = b"x" * (3 * MAX_LINE + 12345)
    terminal, log = _run(tmp_path, [data])
    assert terminal == data
    pieces = log.split(b"\n")[:-1]
    assert b"".join(pieces) == data and max(map(len, pieces)) <= MAX_LINE and len(pieces) == 4


def test_pem_key_in_one_write_and_over_many_writes_is_redacted_whole(tmp_path: Path) -> None:
    body = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC" + str(i) * 13 for i in range(5)]
    block = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END PRIVATE KEY-----\n"
    _, log = _run(tmp_path, [b"before\n", block.encode(), b"after\n"])
    assert not any(line.encode() in log for line in body)
    assert log.startswith(b"before\n") and log.endswith(b"after\n") and REDACTED.encode() in log


def test_pem_block_left_open_by_one_batch_is_redacted_in_the_next() -> None:
    feed = StreamRedactor(Redactor({})).feed
    first = feed("ok\n-----BEGIN RSA PRIVATE KEY-----\nAAAAsecretline1\n")
    second = feed("BBBBsecretline2\n-----END RSA PRIVATE KEY-----\nlater line\n")
    assert "secretline" not in first + second and "ok\n" in first and "later line" in second


def _key_lines(n: int, tag: str) -> list[str]:
    return [f"{tag}{i}" + "Qm9keUxpbmU" * 5 for i in range(n)]


def test_another_streams_key_block_inside_an_open_block_does_not_end_it() -> None:
    """What CI once caught: stdout prints an OpenSSH key line by line, and stderr's PGP block, written at once,
    lands between its lines. The PGP END line must not end the OpenSSH block: every body line stays hidden,
    and the lines outside both blocks stay."""
    ssh, pgp = _key_lines(4, "ssh"), _key_lines(3, "pgp")
    feed = StreamRedactor(Redactor({})).feed
    out = feed(f"ok\n-----BEGIN OPENSSH PRIVATE KEY-----\n{ssh[0]}\n{ssh[1]}\n")
    out += feed("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: x\n\n" + "\n".join(pgp)
                + f"\n-----END PGP PRIVATE KEY BLOCK-----\nstderr line\n{ssh[2]}\n")
    out += feed(f"{ssh[3]}\n-----END OPENSSH PRIVATE KEY-----\nafter\nloss: 0.5\n")
    assert [line for line in ssh + pgp if line in out] == []
    assert out.startswith("ok\n") and "\nstderr line\n" in out and out.endswith("\nafter\nloss: 0.5\n")


def test_the_same_interleaving_in_one_text_is_redacted_whole() -> None:
    ssh, pgp = _key_lines(3, "ssh"), _key_lines(2, "pgp")
    text = ("-----BEGIN OPENSSH PRIVATE KEY-----\n" + ssh[0] + "\n-----BEGIN PGP PRIVATE KEY BLOCK-----\n"
            + "\n".join(pgp) + "\n-----END PGP PRIVATE KEY BLOCK-----\n" + "\n".join(ssh[1:])
            + "\n-----END OPENSSH PRIVATE KEY-----\nafter\n")
    out = Redactor({}).text(text)
    assert [line for line in ssh + pgp if line in out] == [] and out.endswith("after\n")


def test_a_block_never_ended_stops_hiding_lines_after_its_limit() -> None:
    from ledger.redact import MAX_BLOCK_LINES
    feed = StreamRedactor(Redactor({})).feed
    body = _key_lines(3, "k")
    out = feed("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n")
    out += feed("".join(f"step {i} loss 1.0\n" for i in range(MAX_BLOCK_LINES)))
    out += feed("loss: 0.25\n")
    assert [line for line in body if line in out] == [] and out.endswith("loss: 0.25\n")
    assert "step 3 loss 1.0\n" in out  # a line that is no key body is never hidden


def test_consumer_gets_complete_lines_as_the_log_keeps_them(tmp_path: Path) -> None:
    seen: list[bytes] = []
    token = "glpat-" + "Zq8" * 8
    _, log = _run(tmp_path, [b"a\nb", b"c\nd\n", f"key {token}\n".encode()], consumer=seen.append)
    assert all(batch.endswith(b"\n") for batch in seen)
    assert b"".join(seen) == log == f"a\nbc\nd\nkey {REDACTED}\n".encode()


def test_secrets_in_the_log_are_redacted_but_not_on_the_terminal(tmp_path: Path) -> None:
    token = "glpat-" + "Zq8" * 8
    terminal, log = _run(tmp_path, [f"pushing with {token}\n".encode()])
    assert token.encode() in terminal and token.encode() not in log


def test_output_before_the_parser_attaches_is_logged_at_once_and_reaches_it_in_order(tmp_path: Path) -> None:
    """The wrapper starts the tee with the launch and attaches the parser once it exists: whatever the child printed
    in between is in the log at once (a wrapper killed then loses none of it), and reaches the parser first, read
    back from the log, before the lines that come after, each once."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    terminal = io.BytesIO()
    log = tmp_path / "output.log"
    tee = Tee(log, StreamRedactor(Redactor({})).feed_bytes, (terminal, io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    lines = [f"step {i} loss {i / 7:.4f}\n".encode() for i in range(20_000)]  # 500 KB: more than a pipe holds
    first = b"".join(lines[:15_000])
    _write_all(out_w, first)  # returns once the pipe took it all: the pumps read on
    deadline = time.monotonic() + 30
    while len(log.read_bytes()) < len(first) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert terminal.getvalue() == first and log.read_bytes() == first  # logged with no parser attached
    seen: list[bytes] = []
    tee.attach(seen.append)
    _write_all(out_w, b"".join(lines[15_000:]))
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(os.getpid() + 10**7) == []
    assert log.read_bytes() == b"".join(lines) == b"".join(seen)
    assert all(chunk.endswith(b"\n") for chunk in seen)  # whole lines, as every batch


def test_a_launch_that_never_stops_printing_has_its_log_written_while_it_runs(tmp_path: Path) -> None:
    """The writer defers to a child that writes fast, but not for good: a launch printing a line every few
    milliseconds (never the pause the deferral waits for) finds its lines in the log while it still runs. Before
    the deferral had a limit, the log stayed empty until the launch ended."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    log = tmp_path / "output.log"
    tee = Tee(log, StreamRedactor(Redactor({})).feed_bytes, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    printed, deadline = 0, time.monotonic() + 30
    while log.stat().st_size == 0 and time.monotonic() < deadline:  # the launch: printing until it sees its log
        os.write(out_w, f"step {printed} loss {1 / (printed + 1):.4f}\n".encode())
        printed += 1
        time.sleep(0.002)
    seen = log.read_bytes()
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(os.getpid() + 10**7) == []
    assert seen, f"nothing in the log after {printed} lines printed over 30 s"
    assert log.read_bytes() == b"".join(f"step {i} loss {1 / (i + 1):.4f}\n".encode() for i in range(printed))


def test_a_parser_never_attached_leaves_the_log_whole(tmp_path: Path) -> None:
    """A wrapper that failed between the launch and its parser: the log still has every line."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    log = tmp_path / "output.log"
    tee = Tee(log, StreamRedactor(Redactor({})).feed_bytes, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    os.write(out_w, b"step 1 loss 2.0\n")
    os.write(err_w, b"warning\n")
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(os.getpid() + 10**7) == []
    assert sorted(log.read_bytes().splitlines()) == [b"step 1 loss 2.0", b"warning"]


def test_wait_quiet_returns_on_a_pause_on_the_end_of_the_launch_or_at_its_limit(tmp_path: Path) -> None:
    """The wrapper's imports wait for a pause in the launch's output (they would hold the pumps back), but never
    past the launch's end or the limit: each way out, with output that never pauses for the other ones."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    tee = Tee(tmp_path / "output.log", StreamRedactor(Redactor({})).feed_bytes, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    tee.wait_quiet(0.02, 3600, lambda: False)  # no output at all: quiet
    stop = threading.Event()

    def chatty() -> None:
        while not stop.is_set():
            os.write(out_w, b"step 1 loss 2.0\n" * 64)

    feeder = threading.Thread(target=chatty)
    feeder.start()
    try:
        tee.wait_quiet(3600, 0.2, lambda: False)  # never quiet for an hour: the limit
        assert feeder.is_alive()
        tee.wait_quiet(3600, 3600, lambda: True)  # the launch ended
        assert feeder.is_alive()
    finally:
        stop.set()
        feeder.join()
    tee.attach(None)
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(os.getpid() + 10**7) == []


def test_the_logs_digest_is_kept_beside_it_for_publishing(tmp_path: Path) -> None:
    """The tee hashes the log as it writes it; publishing takes that digest only while the log is as the tee
    left it (a log another process wrote to is read again), and a log that had bytes before the tee gets none."""
    import hashlib

    from ledger.store.integrity import recorded_sha256
    from ledger.store.layout import LOG_DIGEST_FILE

    _, log = _run(tmp_path, [b"step 1 loss 2.0\n" * 5000, b"no newline"])
    path, record = tmp_path / "output.log", tmp_path / LOG_DIGEST_FILE
    assert log == path.read_bytes() and recorded_sha256(path, record) == hashlib.sha256(log).hexdigest()
    with path.open("ab") as f:
        f.write(b"written after the tee\n")
    assert recorded_sha256(path, record) is None
    record.write_text("{not json")
    assert recorded_sha256(path, record) is None
    before = tmp_path / "before"
    before.mkdir()
    (before / "output.log").write_bytes(b"an earlier line\n")
    _, log = _run(before, [b"step 2 loss 1.0\n"])
    assert log == b"an earlier line\nstep 2 loss 1.0\n" and not (before / LOG_DIGEST_FILE).exists()


def test_a_backlog_past_the_memory_limit_goes_through_the_file_in_order(tmp_path: Path, monkeypatch) -> None:
    """The spool keeps its backlog in memory up to MEMORY_LIMIT, then in its file until the writer caught up
    with it; puts and takes in any interleaving give back every byte in order, in batches of at most BATCH,
    and memory holds at most the limit."""
    import random

    from ledger.record import tee as tee_module

    monkeypatch.setattr(tee_module, "MEMORY_LIMIT", 3000)
    monkeypatch.setattr(tee_module, "BATCH", 700)
    spool = tee_module._Spool(tmp_path)
    rng = random.Random(7)
    sent, got = bytearray(), bytearray()
    used_file = False
    for i in range(2000):
        if rng.random() < 0.55:
            data = bytes([i % 251]) * rng.randint(1, 1500)
            spool.put(data)
            sent += data
        elif spool.waiting():
            piece = spool.take()
            assert piece is not None and 0 < len(piece) <= 700
            got += piece
        used_file |= spool.tail > spool.head
        assert spool.in_memory <= 3000
    spool.close()
    while (piece := spool.take()) is not None:
        got += piece
    assert used_file and bytes(got) == bytes(sent)
    spool.discard()


def test_small_pieces_are_taken_together_up_to_a_batch(tmp_path: Path, monkeypatch) -> None:
    """A pseudo-terminal gives the pumps at most 4 KiB a read: the writer takes what waits together, up to BATCH
    bytes a take, in order (before, one piece a take: 50 MB printed at a terminal took the wrapper 8.5 s instead
    of 1.6 s, its cost being per batch)."""
    from ledger.record import tee as tee_module

    monkeypatch.setattr(tee_module, "BATCH", 10_000)
    spool = tee_module._Spool(tmp_path)
    pieces = [bytes([65 + i % 26]) * (100 + i % 7) for i in range(300)]
    for piece in pieces:
        spool.put(piece)
    spool.close()
    taken = []
    while (data := spool.take()) is not None:
        taken.append(data)
    assert b"".join(taken) == b"".join(pieces)
    assert all(len(t) <= 10_000 for t in taken)
    assert all(len(t) > 10_000 - 107 for t in taken[:-1]) and len(taken) == 4  # each filled to within a piece
    spool.discard()


# ------------------------------------------------------------------------------- the output's clock
def _start(tmp_path: Path) -> tuple[Tee, int, int]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    tee = Tee(tmp_path / "output.log", StreamRedactor(Redactor({})).feed_bytes, (io.BytesIO(), io.BytesIO()))
    tee.start((os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0)))
    return tee, out_w, err_w


def test_each_line_gets_the_time_its_read_was_made(tmp_path: Path) -> None:
    """Three writes 0.3 s apart, two lines in the middle one, on two streams: the clock file beside the log
    times lines 1, 2-3 and 4 by when they were written (each within the pause, never all at the end)."""
    from ledger.store.clock import read_clock

    tee, out_w, err_w = _start(tmp_path)
    written = []
    for data, fd in ((b"step 1 loss 2.0\n", out_w), (b"step 2 loss 1.9\nstep 3 loss 1.8\n", err_w),
                     (b"step 4 loss 1.7\n", out_w)):
        written.append(time.time())
        os.write(fd, data)
        time.sleep(0.3)
    os.close(out_w)
    os.close(err_w)
    assert tee.finish(os.getpid() + 10**7) == []
    clock = read_clock(tmp_path / "output.clock")
    times = clock.times([1, 2, 3, 4, 5])
    for line, w in ((1, 0), (2, 1), (3, 1), (4, 2)):
        assert written[w] <= times[line - 1] < written[w] + 0.25, (line, times, written)
    assert times[1] == times[2] and not np.isfinite(times[4])  # one read, one time; no fifth line
    assert (tmp_path / "output.log").read_bytes().count(b"\n") == 4 == int(clock.lines[-1])


def test_a_private_key_block_made_one_line_moves_no_mark_past_the_log(tmp_path: Path) -> None:
    """Redaction makes a private key's block one line: the marks count the log's lines, never the output's."""
    from ledger.store.clock import read_clock

    block = b"-----BEGIN PRIVATE KEY-----\n" + b"QUJD\n" * 5 + b"-----END PRIVATE KEY-----\n"
    tee, out_w, err_w = _start(tmp_path)
    os.write(out_w, b"step 1 loss 2.0\n" + block)
    time.sleep(0.05)
    os.write(out_w, b"step 2 loss 1.9\n")
    os.close(out_w)
    os.close(err_w)
    tee.finish(os.getpid() + 10**7)
    log = (tmp_path / "output.log").read_bytes()
    clock = read_clock(tmp_path / "output.clock")
    assert int(clock.lines[-1]) == log.count(b"\n") and (np.diff(clock.lines) >= 0).all()


def test_a_line_the_writer_took_is_in_the_log_file_before_the_wrapper_closes_it(tmp_path: Path) -> None:
    """No user-space buffer between the writer and the log: a killed wrapper loses nothing the writer took.
    The log is read while the tee still holds it open, a second after a pause in the output."""
    tee, out_w, err_w = _start(tmp_path)
    os.write(out_w, b"".join(b"step %d loss 2.0\n" % i for i in range(1, 101)))
    deadline = time.monotonic() + 5
    while (tmp_path / "output.log").stat().st_size < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    assert (tmp_path / "output.log").read_bytes().count(b"\n") == 100
    os.close(out_w)
    os.close(err_w)
    tee.finish(os.getpid() + 10**7)


def test_a_daemon_that_keeps_the_output_open_is_read_for_the_grace_period_then_cut(tmp_path: Path) -> None:
    """A process outside the launch's group that keeps printing: read for ``grace_s`` after the launch exited,
    then cut, and the note says how much was recorded after the exit and that the rest was cut."""
    tee, out_w, err_w = _start(tmp_path)
    stop = threading.Event()

    def daemon() -> None:
        while not stop.is_set():
            try:
                os.write(out_w, b"daemon line\n" * 100)
            except OSError:
                return
            time.sleep(0.001)

    t = threading.Thread(target=daemon, daemon=True)
    t.start()
    started = time.monotonic()
    notes = tee.finish(os.getpid() + 10**7, drain_s=0.2, grace_s=1.0)
    took = time.monotonic() - started
    stop.set()
    t.join()
    os.close(err_w)
    with contextlib.suppress(OSError):
        os.close(out_w)
    assert tee.cut and 1.0 <= took < 30, took
    (note,) = notes
    assert "were recorded; its output after that was cut" in note and "in the 1 s after the launch exited" in note
    assert (tmp_path / "output.log").read_bytes().startswith(b"daemon line\n")
