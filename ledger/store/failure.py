"""Why a run failed, as its output says: the last lines of its traceback, read from the end of ``output.log``.

A failed launch's receipt keeps the lines a reader looks for first (``receipt.failure``): the Python traceback
that ended it, its exception line, and where in the log they are. Only the end of the log is read
(:data:`TAIL_BYTES`): a failure is printed last. Of several tracebacks there (each rank prints its own; ``torchrun``
prints its launcher's ``ChildFailedError`` after the ranks'), the last that is not the launcher's own is kept,
since the launcher's only says that a child failed. A launcher's rank prefix (``[rank3]:``) is removed from the
lines, and so are terminal escape sequences (colours). Without a traceback (a C++ abort, a shell script that
exited 1, ``Killed``), the log's last :data:`LAST_LINES` non-empty lines are kept.

The log was redacted as it was written (:mod:`ledger.record.tee`); the lines pass the caller's redaction again
when the receipt is built.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO

from schemas.receipt import Failure

TAIL_BYTES = 256 << 10
"""Bytes of the log's end read for the failure."""
MAX_LINES = 40
"""Lines of a traceback kept (its last ones: where it failed and the exception)."""
LAST_LINES = 20
"""Lines kept when the log holds no traceback."""
MAX_CHARS = 500
"""Characters kept of each line."""
_START = "Traceback (most recent call last):"
_LAUNCHER = ("ChildFailedError", "torch.distributed.elastic", "torch/distributed/elastic")
# torchrun's ``[rank3]: `` and srun's ``3: `` separate the line by a space; mpirun's ``[1,3]<stderr>:`` does not (a
# space after it is the line's own indentation)
_PREFIX = re.compile(r"^\s*(?:(?:\[(?:default|rank)?\d+\]:|\d+:(?=\s))\s?|\[\d+,\d+\]<std(?:out|err)>:)")
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)\b.*|"
                        r"^[A-Za-z_][\w.]*: .+")


def failure_of(log: Path) -> Failure | None:
    """The failure the end of a log shows; None when the log is missing or has nothing to show."""
    try:
        with log.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            start = max(0, size - TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    base = 1  # the log's line number of lines[0]
    if start > 0:  # the first line read is likely cut: drop it
        lines = lines[1:]
        try:
            with log.open("rb") as f:
                base = _count_lines(f, start) + 2
        except OSError:
            return None
    # what a terminal shows of each line: after its last carriage return (a progress bar redrawn), except one that
    # ends it (``\r\n``: a log written with Windows line ends)
    clean = [_PREFIX.sub("", _ESCAPES.sub("", line.rstrip("\r").split("\r")[-1])).rstrip() for line in lines]
    while clean and not clean[-1]:
        clean.pop()
    if not clean:
        return None
    starts = [i for i, line in enumerate(clean) if line.strip() == _START]
    if starts:
        chosen = starts[-1]
        for i in reversed(starts):
            end = next((j for j in starts if j > i), len(clean))
            if not any(marker in line for line in _traceback(clean[i:end]) for marker in _LAUNCHER):
                chosen = i
                break
        end = next((j for j in starts if j > chosen), len(clean))
        block = _traceback(clean[chosen:end])
        kept = block[-MAX_LINES:]
        exception = next((line.strip() for line in block[1:] if _exception_line(line)), None)
        first = chosen + (len(block) - len(kept))
    else:
        body = [i for i, line in enumerate(clean) if line.strip()]
        at = body[-LAST_LINES:]
        kept = clean[at[0]:at[-1] + 1]
        exception = None
        first = at[0]
    return Failure(exception=_cut(exception) if exception else None, lines=tuple(_cut(line) for line in kept),
                   first_line=base + first, log=log.name)


def _exception_line(line: str) -> bool:
    """Whether a line of a traceback after its first is its exception line: not indented (frames are), and read as
    an exception (``ValueError: ...``, ``torch.OutOfMemoryError: ...``, ``KeyboardInterrupt``)."""
    return bool(line) and not line[0].isspace() and _EXCEPTION.match(line.strip()) is not None


def _traceback(lines: list[str]) -> list[str]:
    """A traceback's lines: from its first line up to its exception line, the first after the frames (and the
    indented lines of a multi-line message after it), not the output printed after it (``wandb: Synced ...``
    reads like an exception line too)."""
    end = len(lines)
    for i in range(1, len(lines)):
        if _exception_line(lines[i]):
            end = i + 1
            while end < len(lines) and lines[end] and lines[end][0].isspace():  # a multi-line message
                end += 1
            break
    while end > 1 and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _cut(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[:MAX_CHARS - 3] + "..."


def _count_lines(f: BinaryIO, upto: int) -> int:
    """Newlines in the first ``upto`` bytes of an open binary file."""
    count = 0
    read = 0
    f.seek(0)
    while read < upto:
        block = f.read(min(1 << 20, upto - read))
        if not block:
            break
        count += block.count(b"\n")
        read += len(block)
    return count


__all__ = ["LAST_LINES", "MAX_LINES", "TAIL_BYTES", "failure_of"]
