"""Logical runs: a first attempt and the restarts that link to it.

Every later attempt's ``links.attempt_of`` is the id of the *first* attempt (``ledger record
--attempt-of REF`` resolves REF to its first attempt), so a logical run is the first attempt plus every
receipt whose ``attempt_of`` is its id — one indexed query.

    with index.reader(ledger) as con:
        run = logical_run(con, "baseline")     # any attempt's id, prefix or name
        run.attempts                           # receipts in attempt order, checked

Checks (each a :class:`~ledger.errors.BadInput` naming the receipts): attempts that overlap in time
(two restarts of one run cannot run at once) and attempts of different tasks. An attempt that crashed
before it reported its workload has an empty task and is compatible with any.

:func:`auto_link` lets the wrapper link a resumed launch to the earlier attempt of the same name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import AmbiguousRef, BadInput
from ledger.store.receipts import Ledger
from ledger.store.refs import resolve

if TYPE_CHECKING:  # `ledger record` calls auto_link before its launch: DuckDB and the models only when needed
    import duckdb

    from schemas import Receipt
    from schemas.receipt import Task

OVERLAP_TOLERANCE_S = 1e-3
"""Attempts may touch (one ends as the next starts) but not overlap by more than this."""


@dataclass(frozen=True)
class LogicalRun:
    """A first attempt and its restarts, in attempt order."""

    attempts: tuple[Receipt, ...]

    @property
    def id(self) -> str:
        """The first attempt's id: the logical run's id."""
        return self.attempts[0].id

    @property
    def ids(self) -> list[str]:
        """Receipt ids in attempt order."""
        return [r.id for r in self.attempts]

    @property
    def name(self) -> str | None:
        """The latest attempt's name (attempts of one run usually share it)."""
        return next((r.name for r in reversed(self.attempts) if r.name), None)

    @property
    def task(self) -> Task:
        """The task the attempts report (the first non-empty one)."""
        from schemas.receipt import Task

        return next((r.workload.task for r in self.attempts if r.workload.task != Task()), Task())


def unix(value: datetime | None) -> float | None:
    """A receipt time as Unix seconds (naive times are UTC, as the index stores them)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def root_of(con: duckdb.DuckDBPyConnection, receipt_id: str) -> str:
    """The id of the first attempt of the logical run a receipt belongs to."""
    row = con.execute("SELECT coalesce(attempt_of, id) FROM receipts WHERE id = ?", [receipt_id]).fetchone()
    return str(row[0]) if row else receipt_id


def attempt_ids(con: duckdb.DuckDBPyConnection, root: str) -> list[str]:
    """Ids of a logical run's attempts (the first attempt's id given), in attempt order."""
    rows = con.execute(
        "SELECT id FROM receipts WHERE id = ? OR attempt_of = ? ORDER BY attempt, started_at, id", [root, root]
    ).fetchall()
    return [str(r[0]) for r in rows]


def load_receipts(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, Receipt]:
    """Receipts by id, from the index's copy of each receipt.json."""
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    rows = con.execute(f"SELECT id, receipt FROM receipts WHERE id IN ({marks})", list(ids)).fetchall()
    from schemas import Receipt

    return {str(i): Receipt.model_validate_json(text) for i, text in rows}


def logical_run(con: duckdb.DuckDBPyConnection, ref: str) -> LogicalRun:
    """The logical run that the receipt ``ref`` (id, prefix or name; any attempt) belongs to, checked."""
    return run_of(con, resolve(con, ref))


def run_of(con: duckdb.DuckDBPyConnection, receipt_id: str) -> LogicalRun:
    """The logical run of a receipt id, checked with :func:`check_attempts`."""
    ids = attempt_ids(con, root_of(con, receipt_id))
    receipts = load_receipts(con, ids)
    run = LogicalRun(tuple(receipts[i] for i in ids if i in receipts))
    check_attempts(run.attempts)
    return run


def check_attempts(attempts: Sequence[Receipt]) -> None:
    """Raise :class:`BadInput` when attempts overlap in time or belong to different tasks."""
    from schemas.receipt import Task

    if not attempts:
        raise BadInput("a logical run needs at least one attempt")
    tasks = [(r, r.workload.task) for r in attempts if r.workload.task != Task()]
    for r, task in tasks[1:]:
        if task != tasks[0][1]:
            first = tasks[0][0]
            diff = sorted(
                k for k in type(task).model_fields if getattr(task, k) != getattr(tasks[0][1], k)
            )
            raise BadInput(
                f"attempt {r.attempt} ({r.id[:12]}) has a different task from attempt {first.attempt} "
                f"({first.id[:12]}): {', '.join(diff)} differ; attempts of one run must train the same task "
                "(record the new launch without --attempt-of)"
            )
    spans = sorted(((unix(r.started_at), unix(r.ended_at), r) for r in attempts), key=lambda s: s[0] or 0.0)
    for (s0, e0, a), (s1, _, b) in zip(spans, spans[1:], strict=False):
        if s0 is None or e0 is None or s1 is None:
            continue
        if s1 < e0 - OVERLAP_TOLERANCE_S:
            raise BadInput(
                f"attempts {a.attempt} ({a.id[:12]}) and {b.attempt} ({b.id[:12]}) overlap in time: "
                f"{b.id[:12]} started {e0 - s1:.3f} s before {a.id[:12]} ended; attempts of one run "
                "run one after another (was one of them linked with --attempt-of by mistake?)"
            )


# ------------------------------------------------------------------------------------------ auto-link
def _option(command: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in an argv, else None."""
    for i, arg in enumerate(command):
        if arg == name and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(name + "="):
            return arg[len(name) + 1 :]
    return None


def is_resume(command: Sequence[str]) -> bool:
    """True when the launch asks to resume from a checkpoint (``--resume``, as runners.moe spells it)."""
    return any(arg == "--resume" or arg.startswith("--resume=") for arg in command)


def auto_link(
    ledger: Ledger, name: str | None, command: Sequence[str], cwd: str | os.PathLike[str] | None = None
) -> str | None:
    """The first attempt a resumed launch continues, or None.

    A launch is a resume when its command has ``--resume``. It then continues the earlier logical run
    recorded under the same ``name``; when the command names a ``--checkpoint-dir``, only earlier
    attempts that used the same directory (resolved against each launch's working directory) count.
    Returns None when the launch is not a resume, has no name, or no earlier run matches. Raises
    :class:`AmbiguousRef` when several logical runs match (then ``--attempt-of REF`` must say which).
    """
    if not name or not is_resume(command) or not ledger.root.is_dir() or not ledger.ids():
        return None
    from ledger.store import index
    here = Path(cwd) if cwd is not None else Path.cwd()
    wanted = _option(command, "--checkpoint-dir")
    wanted_dir = os.path.normpath(here / wanted) if wanted else None
    with index.reader(ledger) as con:
        rows = con.execute(
            "SELECT id, coalesce(attempt_of, id) AS root, receipt->>'$.command', receipt->>'$.stack.code.path', "
            "started_at "
            "FROM receipts WHERE name = ? ORDER BY started_at",
            [name],
        ).fetchall()
    roots: dict[str, object] = {}
    for _rid, root, text, path, started in rows:
        if wanted_dir is not None:
            theirs = _option(json.loads(text or "[]"), "--checkpoint-dir")
            if theirs is None:
                continue
            if os.path.normpath(Path(path or here) / theirs) != wanted_dir:
                continue
        roots[str(root)] = started
    if not roots:
        return None
    if len(roots) > 1:
        listing = ", ".join(f"{r[:12]} (started {str(s)[:19]})" for r, s in roots.items())
        raise AmbiguousRef(
            f"--resume under the name {name!r} matches {len(roots)} earlier runs: {listing}; "
            "say which with --attempt-of REF"
        )
    return next(iter(roots))


__all__ = [
    "LogicalRun",
    "attempt_ids",
    "auto_link",
    "check_attempts",
    "is_resume",
    "load_receipts",
    "logical_run",
    "root_of",
    "run_of",
    "unix",
]
