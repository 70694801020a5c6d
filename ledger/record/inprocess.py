"""Recording from Python, in this process: ``with recording(ledger, name=...) as rec:`` around a function
or a notebook cell.

The same path as ``ledger record`` with this process as the launch: a staging directory under the ledger,
the wrapper's facts (this interpreter's command line, redacted), the stack captured from outside the body
(git, packages, container, hardware, launcher), and an SDK :class:`~ledger.sdk.Run` that is also what
:func:`ledger.sdk.current` returns inside the block — training code written for ``ledger record`` runs
unchanged. On leaving the block the receipt is published (:func:`ledger.store.publish.publish`) with status
``succeeded``, ``interrupted`` (KeyboardInterrupt) or ``failed`` (any other exception, which then propagates
unchanged), and the index is synced when its lock is free. The wrapper's node telemetry sampler and output
log are not used (nothing is launched; the block's prints are the caller's).
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger import __version__
from ledger.errors import LedgerError
from ledger.redact import Redactor
from ledger.sdk import Run, set_current
from ledger.store.layout import STACK_FILE
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome, acquire_staging_lock, write_json_atomic, write_wrapper_facts
from schemas import Receipt


@dataclass
class Recording:
    """A run being recorded in this process; ``receipt`` is set once the block has left."""

    run: Run
    """The SDK run (also :func:`ledger.sdk.current` inside the block)."""
    run_dir: Path
    receipt: Receipt | None = None
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The published receipt's id, name and status (None before the block has left)."""
        r = self.receipt
        return {"receipt_id": r.id if r else None, "name": r.name if r else None,
                "status": r.status if r else None, "problems": self.problems}


@contextmanager
def recording(
    ledger: Ledger,
    *,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    attempt_of: str | None = None,
    replicates: str | None = None,
    baseline: str | None = None,
    attempt: int = 1,
    env_names: tuple[str, ...] = (),
    cwd: Path | None = None,
) -> Iterator[Recording]:
    """Record the body of the ``with`` block as one receipt (see the module docstring). Links are ids
    (resolve refs first: :func:`ledger.store.links.resolve_links`)."""
    from ledger.record.capture import capture_stack, merge_runtime
    from ledger.store.index import try_sync

    ledger.ensure_writable()
    env = dict(os.environ)
    redactor = Redactor(env, env_names)
    command = [sys.executable, *sys.argv]
    run_uuid = uuid.uuid4().hex
    run_dir = ledger.staging / run_uuid
    run_dir.mkdir(parents=True)
    lock_fd = acquire_staging_lock(run_dir)
    where = Path.cwd() if cwd is None else cwd
    write_wrapper_facts(run_dir, {
        "run_uuid": run_uuid, "pid": os.getpid(), "host": socket.gethostname(),
        "started_at": datetime.now(UTC).isoformat(), "command": redactor.argv(command), "cwd": str(where),
        "name": name, "tags": dict(tags or {}), "attempt": attempt,
        "links": {"attempt_of": attempt_of, "replicates": replicates, "baseline": baseline},
        "ledger_version": __version__, "in_process": True,
    })
    try:
        stack = capture_stack(where, env, command, redactor).model_dump(mode="json")
    except Exception as exc:  # capture never fails the run
        stack = {"hardware": {"error": f"stack capture failed: {type(exc).__name__}: {exc}"}}
    write_json_atomic(run_dir / STACK_FILE, stack)

    run = Run(run_dir, rank=0)
    previous = set_current(run)
    rec = Recording(run=run, run_dir=run_dir)
    outcome = Outcome("succeeded", exit_code=0)
    try:
        yield rec
    except KeyboardInterrupt:
        outcome = Outcome("interrupted", exit_code=130, signal="SIGINT")
        raise
    except BaseException:
        outcome = Outcome("failed", exit_code=1)
        raise
    finally:
        set_current(previous)
        run.close()
        ended = Outcome(outcome.status, outcome.exit_code, outcome.signal, datetime.now(UTC))
        try:
            rec.receipt = publish(ledger, run_dir, ended, redact=redactor.text, locked=True,
                                  runtime=merge_runtime)
        except (LedgerError, OSError) as exc:
            rec.problems.append(
                f"could not publish the receipt ({exc}); the run's data is kept in {run_dir}; publish it with "
                f"`ledger recover --ledger {ledger.root}`")
        finally:
            os.close(lock_fd)
        if rec.receipt is not None:
            try_sync(ledger)
    if rec.receipt is None:
        raise LedgerError(rec.problems[-1])


__all__ = ["Recording", "recording"]
