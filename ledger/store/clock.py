"""When each line of a run's ``output.log`` arrived: the output's clock.

A wrapped launch prints its steps with no time on them, or with a time of its own that nobody can trust to
be a clock (a formatted date, an ETA). What the wrapper can trust is when each line reached it: the output
tee's pumps read the child's pipes as the bytes come, and note the time of each read
(:mod:`ledger.record.tee`). The tee's writer turns those notes into **marks**: ``(lines, time)``, the log's
line count once a read's bytes were written (its lines are complete) and the Unix time the read was made. A
line ``n`` (1-based, as every parser numbers the log's lines) arrived at the time of the first mark whose line
count reaches ``n`` (:meth:`Clock.times`).

The marks are appended to ``output.clock`` beside the log as the log is written, 16 bytes each
(little-endian uint64 line count, float64 Unix time), so that a run whose wrapper died still has the times of
what it logged (``ledger recover``), and a reader of a run in progress (``ledger watch``, the web view's live
page) can time the steps parsed so far. A torn last record (the wrapper killed mid-write) is ignored.

Reads closer together than :data:`RESOLUTION_S` share one mark (the later one's line count, the earlier one's
time): a launch that pours out megabytes at a terminal, 4 KiB a read, makes a mark per millisecond at most.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is loaded by the readers only: the tee that writes marks starts before the launch
    import numpy as np
    import numpy.typing as npt

CLOCK_FILE = "output.clock"
"""The marks of ``output.log``, beside it in the staging directory (and never published: the steps table's
``time`` column is what they become)."""
RESOLUTION_S = 0.001
"""Reads of the output closer together than this share one mark."""
RECORD = struct.Struct("<Qd")
"""One mark as written: the log's line count (little-endian uint64) and the Unix time (float64)."""


def _dtype() -> Any:
    import numpy as np

    return np.dtype([("lines", "<u8"), ("time", "<f8")])


@dataclass(frozen=True)
class Clock:
    """The marks of one log, in order (line counts non-decreasing)."""

    lines: npt.NDArray[np.int64]
    """Line count of the log once each mark's lines were written."""
    time: npt.NDArray[np.float64]
    """Unix time each mark's read was made."""

    @classmethod
    def empty(cls) -> Clock:
        import numpy as np

        return cls(np.zeros(0, np.int64), np.zeros(0, np.float64))

    @classmethod
    def of(cls, marks: list[tuple[int, float]]) -> Clock:
        """A clock of ``(lines, time)`` marks."""
        import numpy as np

        if not marks:
            return cls.empty()
        lines, times = zip(*marks, strict=True)
        return cls(np.asarray(lines, np.int64), np.asarray(times, np.float64))

    def __len__(self) -> int:
        return int(self.lines.size)

    def times(self, line_numbers: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The arrival time of each line (1-based line numbers of the log); NaN for a line no mark reaches (a
        line written after the last mark, or a clock that was not kept)."""
        import numpy as np

        numbers = np.asarray(line_numbers, dtype=np.int64)
        out = np.full(numbers.shape, math.nan)
        if not self.lines.size or not numbers.size:
            return out
        at = np.searchsorted(self.lines, numbers, side="left")
        ok = at < self.lines.size
        out[ok] = self.time[at[ok]]
        return out

    def last_time(self) -> float | None:
        """When the latest mark's read was made (None for an empty clock)."""
        return float(self.time[-1]) if self.time.size else None


def read_clock(path: Path) -> Clock:
    """The marks of a clock file; an empty clock when the file is missing or unreadable. Records out of order
    (a file written by two tees) keep only those that extend the order."""
    import numpy as np

    try:
        data = path.read_bytes()
    except OSError:
        return Clock.empty()
    whole = len(data) - len(data) % RECORD.size
    if not whole:
        return Clock.empty()
    records = np.frombuffer(data[:whole], dtype=_dtype())
    lines = records["lines"].astype(np.int64)
    times = records["time"].astype(np.float64)
    keep = np.isfinite(times) & (lines >= np.maximum.accumulate(lines))
    return Clock(lines[keep], times[keep])


class ClockWriter:
    """Appends marks to a clock file as the log is written (never raises: a clock that cannot be written leaves
    the steps without a time, never the run without its log)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        try:
            self.fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            self.fd = None
            self.error = f"{path.name}: not written ({exc.strerror or exc}): captured steps have no time"

    def write(self, marks: list[tuple[int, float]]) -> None:
        if self.fd is None or not marks:
            return
        records = b"".join(RECORD.pack(lines, when) for lines, when in marks)
        try:
            view = memoryview(records)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            self.error = f"{self.path.name}: writing stopped ({exc.strerror or exc}): later steps have no time"
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


__all__ = ["CLOCK_FILE", "RECORD", "RESOLUTION_S", "Clock", "ClockWriter", "read_clock"]
