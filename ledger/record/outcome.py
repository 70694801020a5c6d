"""How a launch ended, and whether a process of it still runs: shared by the wrapper, a multi-node job's
assembly and ``ledger recover``, so that none of them imports another for it.

The wrapper writes :data:`EXIT_FILE` into the staging directory as soon as its child exited; whoever
publishes the run later (node 0 of a job, ``ledger recover``) reads the outcome back with
:func:`outcome_of`. :func:`say` prints a line of the wrapper's own on the launch's stderr.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import IO

from ledger.store.staging import Outcome

EXIT_FILE = "exit.json"
"""Written into the staging directory as soon as the child has exited, so that `ledger recover` can give
a run whose wrapper died afterwards its true status."""


def outcome_of(returncode: int, forwarded: Sequence[int], ended: datetime | None) -> Outcome:
    """Status, exit code and signal of a child that exited with ``returncode`` (negative: killed by a
    signal) after the wrapper forwarded the signals ``forwarded`` to it."""
    if returncode >= 0:
        exit_code, signame = returncode, None
    else:
        exit_code, signame = 128 - returncode, signal.Signals(-returncode).name
    if returncode == 0:
        status = "succeeded"
    elif forwarded and (-returncode in forwarded or returncode - 128 in forwarded or returncode in (130, 143)):
        status = "interrupted"
    else:
        status = "failed"
    return Outcome(status=status, exit_code=exit_code, signal=signame, ended_at=ended)


def proc_start(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot), to tell a live pid from a reused one."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def process_alive(pid: int | None, start: str | None) -> bool:
    """True when the process with this pid and start time still runs (on this host)."""
    if not pid:
        return False
    current = proc_start(pid)
    if current is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # it ended between the two reads
        return False
    return state != "Z" and (start is None or current == start)


def say(stream: IO[bytes], text: str) -> None:
    """A line of the wrapper's own (``ledger: ...``) on the launch's stderr; never raises: a closed or broken
    stream must not fail a run that trained."""
    try:
        stream.write((text + "\n").encode())
        stream.flush()
    except (OSError, ValueError):
        pass
