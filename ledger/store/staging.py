"""A live run's staging directory, as its wrapper keeps it before anything is published: the lock that
says a live process owns it, the wrapper's facts, the notes the receipt will carry as problems, and how the
run ended.

These are what `ledger record` needs before and while its launch runs, so this module imports the standard
library and the layout only: the launch starts before pyarrow, numpy and the receipt models are loaded
(:mod:`ledger.store.publish`, which imports them, is needed once the launch has ended).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ledger.store.layout import LOCK_FILE, WRAPPER_FILE

PROBLEMS_FILE = "problems.jsonl"
"""Notes of the wrapper about its own capture (telemetry, log, log parsing), one JSON object a line."""

YIELD_NICENESS = 10
"""How much a `ledger record` lowers its CPU priority once its launch exited (:func:`yield_cpu`)."""


@dataclass(frozen=True)
class Outcome:
    """How the run ended."""

    status: str
    exit_code: int | None = None
    signal: str | None = None
    ended_at: datetime | None = None


class StagingBusy(Exception):
    """Another process is publishing this staging directory right now."""


def add_problems(run_dir: Path, notes: list[tuple[str, str]]) -> None:
    """Append (source, message) notes that the receipt will carry as problems."""
    if notes:
        with open(run_dir / PROBLEMS_FILE, "a") as f:
            f.write("".join(json.dumps({"source": s, "message": m}) + "\n" for s, m in notes))


def acquire_staging_lock(run_dir: Path) -> int:
    """Take the exclusive lock of a staging directory and return its fd (close it to release).
    Raises :class:`StagingBusy` when a live process holds it."""
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StagingBusy(str(run_dir)) from exc
    return fd


@contextmanager
def staging_lock(run_dir: Path) -> Iterator[None]:
    """Hold the staging directory's lock for the duration of the block."""
    fd = acquire_staging_lock(run_dir)
    try:
        yield
    finally:
        os.close(fd)


FALLBACK_PREFIX = "ledger-staging-"
"""The name of a user's fallback staging root under $TMPDIR (:func:`private_fallback`), before the uid."""


def private_fallback(tmp: str | os.PathLike[str] | None = None) -> Path:
    """A staging root under ``tmp`` (default $TMPDIR) that only this user can enter, for a run whose ledger
    cannot be written: ``ledger-staging-<uid>`` when it is this user's own directory (not a symbolic link,
    owned by this user, closed to others), made with mode 0700 when it does not exist; otherwise a new
    private directory made by :func:`tempfile.mkdtemp` (0700). A directory or link planted under the shared
    name by another user is never used: a run staged there could be read, or redirected, by them."""
    base = Path(tmp if tmp is not None else tempfile.gettempdir())
    uid = os.getuid()
    path = base / f"{FALLBACK_PREFIX}{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not stat.S_IMODE(st.st_mode) & 0o077:
        return path
    return Path(tempfile.mkdtemp(prefix=f"{FALLBACK_PREFIX}{uid}-", dir=base))


def yield_cpu() -> None:
    """Lower the calling thread's CPU priority by :data:`YIELD_NICENESS` for what it has left to do: publishing
    a finished run can wait a little for interactive readers (`ledger ls`) on a busy machine, and on an idle
    one nothing changes. Threads started afterwards (DuckDB's, the hashing pools) inherit it. A
    process cannot raise its priority again, so only one about to end calls this (`ledger record`)."""
    with contextlib.suppress(OSError):
        os.nice(YIELD_NICENESS)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write a small JSON file so that readers see the old or the new content, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def write_wrapper_facts(run_dir: Path, facts: dict[str, Any]) -> None:
    """Write wrapper.json atomically."""
    write_json_atomic(run_dir / WRAPPER_FILE, facts)
