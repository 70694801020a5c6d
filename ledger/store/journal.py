"""The journal: what was published, so that syncing one receipt never lists every receipt.

``<root>/journal`` holds one id a line, appended (``O_APPEND``, one ``write`` per line, fsync'ed) by
:func:`ledger.store.publish.publish` once the receipt is in place and before the staging directory goes.
A publisher that dies between the two leaves its staging directory marked with the id (in its lock's file),
and ``ledger recover`` appends the line then; an id written twice is harmless. A reader keeps the byte offset
it has read up to and reads only what follows. A line torn by a crash is followed by the next complete line on the
same line: a line's id is its last 64 characters, so the torn start is ignored and nothing after it is lost.
Receipts that arrive without a publish (``dvc pull``, a copy) are found by the index's shard check
(:mod:`ledger.store.index`), not here.

No symbolic link is followed: a journal or gate planted as a link is neither written nor read through (a link's
target would get every published id appended, or be created). A linked journal is refused before a publish
(:func:`check`), reads as empty (the index then lists every shard), and an append that finds one raises.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ledger.errors import LinkRefused
from ledger.store.layout import ID_RE, JOURNAL, PUBLISHERS_GATE

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
"""Flags of every open of a file of the ledger's own: a symbolic link fails (ELOOP) instead of being followed."""


def check(root: Path) -> None:
    """Raise :class:`LinkRefused` when the journal is a symbolic link (a publish then stops before anything is
    published: the run stays staged for `ledger recover`, once the link is removed)."""
    path = root / JOURNAL
    if path.is_symlink():
        raise LinkRefused(f"{path} is a symbolic link (to {os.readlink(path)}); ledger never writes through one: "
                          f"remove it (`rm {path}`: the index finds every receipt without it), then run "
                          "`ledger recover`")


def append(root: Path, receipt_id: str) -> None:
    """Add one published id to the journal (one write, so concurrent publishers never interleave)."""
    append_many(root, [receipt_id])


def append_many(root: Path, receipt_ids: list[str]) -> None:
    """Add published ids to the journal: one ``O_APPEND`` write of all their lines and one fsync (a write to
    a regular file is not interleaved with another's; a crash may tear the last line, which reading skips)."""
    if not receipt_ids:
        return
    data = "".join(f"{i}\n" for i in receipt_ids).encode()
    try:
        fd = os.open(root / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError:
        if (root / JOURNAL).is_symlink():
            check(root)
        raise
    try:
        written = 0
        while written < len(data):  # a short write (rare: a signal, a full disk) continues where it stopped
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def size(root: Path) -> int:
    """Bytes in the journal (0 when there is none, or it is a symbolic link)."""
    try:
        st = (root / JOURNAL).lstat()
    except FileNotFoundError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_from(root: Path, offset: int) -> tuple[list[str], int]:
    """The ids appended after byte ``offset`` and the offset after the last complete line (a line still
    being written is left for the next read). An offset past the end (a journal replaced) reads none."""
    try:
        fd = os.open(root / JOURNAL, os.O_RDONLY | NOFOLLOW)
    except OSError:  # none, or a symbolic link (not read through)
        return [], 0
    with open(fd, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    ids = []
    for line in data[:end].decode("ascii", "replace").splitlines():
        tail = line[-64:]
        if ID_RE.match(tail):
            ids.append(tail)
    return ids, offset + end


@contextmanager
def hold(gate: Path) -> Iterator[None]:
    """Hold a shared ``flock`` of the file ``gate`` for the duration of the block (released by the kernel if the
    process dies), saying that something is under way; nothing when the file cannot be opened for writing (a
    ledger this process cannot write)."""
    try:
        fd = os.open(gate, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


def held(gate: Path, create: bool = False) -> bool:
    """Whether some process holds ``gate`` right now (:func:`hold`): an exclusive probe that does not wait.
    ``create``: open the file for writing, creating it (else a missing or unreadable gate is not held)."""
    try:
        flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        fd = os.open(gate, flags | NOFOLLOW, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's lock
    return False


@contextmanager
def publishing(root: Path) -> Iterator[None]:
    """Say, for the duration of the block, that a publish is under way (:func:`hold` of ``index.publishers``):
    readers that find the index behind then answer from it as it is instead of indexing receipts that keep
    arriving (:mod:`ledger.store.index`)."""
    with hold(root / PUBLISHERS_GATE):
        yield


def publishing_now(root: Path) -> bool:
    """Whether some process is publishing into the ledger right now (:func:`publishing`; a gate never created
    means nobody ever published since it exists)."""
    return held(root / PUBLISHERS_GATE)
