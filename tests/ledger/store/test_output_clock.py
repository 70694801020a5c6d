"""The output's clock (ledger.store.clock): the ``output.clock`` file the tee appends to and readers (`ledger
recover`, `ledger watch`, the live page) read while it grows, in every state another process can leave it:
missing, empty, torn mid-record, written by two tees at once, holding a NaN, replaced by a symbolic link,
unwritable. Every expected time is worked out by hand from the marks, and the file's bytes are packed here with
``struct`` (little-endian uint64 line count, float64 Unix time), not by the writer under test."""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.store.clock import CLOCK_FILE, RECORD, RESOLUTION_S, Clock, ClockWriter, read_clock


def packed(marks: list[tuple[int, float]]) -> bytes:
    return b"".join(struct.pack("<Q", n) + struct.pack("<d", t) for n, t in marks)


MARKS = [(2, 100.0), (2, 100.5), (5, 101.25), (9, 103.0)]


def test_the_format_and_names() -> None:
    assert CLOCK_FILE == "output.clock" and RESOLUTION_S == 0.001
    assert RECORD.size == 16 and RECORD.pack(3, 1.5) == packed([(3, 1.5)])


def test_each_line_arrived_with_the_first_mark_that_reaches_it(tmp_path: Path) -> None:
    """Marks (2 lines at 100.0), (2 at 100.5), (5 at 101.25), (9 at 103.0): lines 1-2 at 100.0, 3-5 at 101.25,
    6-9 at 103.0; lines 10 and 11, written after the last mark, have no time."""
    path = tmp_path / CLOCK_FILE
    path.write_bytes(packed(MARKS))
    clock = read_clock(path)
    assert len(clock) == 4 and clock.lines.dtype == np.int64 and clock.time.dtype == np.float64
    got = clock.times([1, 2, 3, 5, 6, 9, 10, 11])
    assert got.dtype == np.float64
    assert got[:6].tolist() == [100.0, 100.0, 101.25, 101.25, 103.0, 103.0] and np.isnan(got[6:]).all()
    assert clock.times(np.array([[4, 7], [1, 12]])).tolist()[0] == [101.25, 103.0]  # any shape
    assert clock.times([]).size == 0 and clock.last_time() == 103.0
    assert isinstance(clock.last_time(), float)


def test_a_missing_empty_or_too_short_file_is_an_empty_clock(tmp_path: Path) -> None:
    assert len(read_clock(tmp_path / "absent")) == 0
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "short").write_bytes(packed([(1, 5.0)])[:15])
    (tmp_path / "dir").mkdir()
    for name in ("empty", "short", "dir"):
        clock = read_clock(tmp_path / name)
        assert len(clock) == 0 and clock.last_time() is None
        assert np.isnan(clock.times([1, 2])).all() and clock.times([1, 2]).shape == (2,)
    empty = Clock.empty()
    assert empty.lines.dtype == np.int64 and empty.time.dtype == np.float64 and len(empty) == 0


def test_a_torn_last_record_is_left_out(tmp_path: Path) -> None:
    """The wrapper killed mid-write: the last record's 16 bytes are not all there; the whole ones count."""
    path = tmp_path / CLOCK_FILE
    for cut in range(1, 16):
        path.write_bytes(packed(MARKS)[:-cut])
        clock = read_clock(path)
        assert clock.lines.tolist() == [2, 2, 5] and clock.time.tolist() == [100.0, 100.5, 101.25], cut


def test_records_out_of_order_keep_those_that_extend_the_order(tmp_path: Path) -> None:
    """Two tees appending to one file: a record whose line count is below one before it is dropped; equal counts
    are kept; a NaN time is dropped (a record that is not a time)."""
    path = tmp_path / CLOCK_FILE
    path.write_bytes(packed([(3, 10.0), (1, 10.1), (3, 10.2), (2, 10.3), (6, 10.4), (7, math.nan), (8, 11.0)]))
    clock = read_clock(path)
    assert clock.lines.tolist() == [3, 3, 6, 8] and clock.time.tolist() == [10.0, 10.2, 10.4, 11.0]
    assert clock.times([1, 4, 7]).tolist() == [10.0, 10.4, 11.0]


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 1e6)), max_size=12), st.integers(0, 60))
def test_read_what_was_written_and_time_every_line(tmp_path_factory: pytest.TempPathFactory,
                                                   marks: list[tuple[int, float]], line: int) -> None:
    """A round trip through the writer and the reader, and each line's time against a plain scan of the marks."""
    path = tmp_path_factory.mktemp("clock") / CLOCK_FILE
    writer = ClockWriter(path)
    writer.write(marks)
    writer.close()
    assert path.read_bytes() == packed(marks)
    kept: list[tuple[int, float]] = []
    most = 0
    for n, t in marks:  # a record counts when its line count is at least every one before it (NaN times too)
        most = max(most, n)
        if n >= most and math.isfinite(t):
            kept.append((n, t))
    clock = read_clock(path)
    assert list(zip(clock.lines.tolist(), clock.time.tolist(), strict=True)) == kept
    want = next((t for n, t in kept if n >= line), math.nan)
    got = float(clock.times([line])[0])
    assert got == want or (math.isnan(got) and math.isnan(want))


def test_the_writer_appends_and_the_reader_sees_a_file_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / CLOCK_FILE
    writer = ClockWriter(path)
    assert writer.error is None and oct(path.stat().st_mode & 0o777) == oct(0o644 & ~_umask())
    writer.write([(1, 5.0)])
    assert read_clock(path).lines.tolist() == [1]
    writer.write([])  # nothing to write: nothing written
    writer.write([(4, 6.0), (4, 6.5)])
    assert read_clock(path).time.tolist() == [5.0, 6.0, 6.5]
    writer.close()
    writer.close()  # twice: harmless
    writer.write([(9, 7.0)])  # after close: nothing
    assert path.read_bytes() == packed([(1, 5.0), (4, 6.0), (4, 6.5)])
    again = ClockWriter(path)  # a second writer appends, never truncates
    again.write([(10, 8.0)])
    again.close()
    assert read_clock(path).lines.tolist() == [1, 4, 4, 10]
    assert Clock.of([]).lines.size == 0 and Clock.of([(2, 1.5)]).time.tolist() == [1.5]
    of = Clock.of([(2, 1), (3, 2)])  # whole seconds are times too
    assert of.lines.dtype == np.int64 and of.time.dtype == np.float64 and of.time.tolist() == [1.0, 2.0]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_clock_that_cannot_be_written_says_so_and_never_raises(tmp_path: Path) -> None:
    """A symbolic link where the clock goes is not followed; a directory without write permission refuses it; a
    write that fails stops the writer with a message."""
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    link = tmp_path / CLOCK_FILE
    link.symlink_to(target)
    refused = ClockWriter(link)
    assert refused.fd is None
    assert refused.error == "output.clock: not written (Too many levels of symbolic links): captured steps have no time"
    refused.write([(1, 1.0)])
    refused.close()
    assert target.read_bytes() == b""
    broken = ClockWriter(tmp_path / "other.clock")
    assert broken.fd is not None
    os.close(broken.fd)  # the descriptor gone under it (as a full or vanished disk fails a write)
    broken.write([(1, 1.0)])
    assert broken.error == "other.clock: writing stopped (Bad file descriptor): later steps have no time"
    assert broken.fd is None
    broken.write([(2, 2.0)])  # stopped: no second error, nothing written
    assert broken.error == "other.clock: writing stopped (Bad file descriptor): later steps have no time"
