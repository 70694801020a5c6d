"""Hand-built runs shared by the analyses tests (importable: tests/ is on pythonpath).

Goodput and gates: receipts of attempts whose times are offsets in seconds from ``T0``, metric tables with a
``receipt_id`` column, events, and the two-attempt scenario of ``test_goodput.py``. Attribution: runs known
only by their id and a headline whose per-run values are given by id. Every figure a test expects from these
is computed by hand in that test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from ledger.analyses.attribution import NodeValues, node_values
from schemas import Receipt
from schemas.receipt import Links, QualityGate, Task, Workload

T0 = 1_700_000_000.0
A1, A2 = "a" * 64, "b" * 64
TASK = Task(dataset="synthetic", quality_gates=(QualityGate(name="val-loss", metric="loss", threshold=3.5),))
VAL_GATE = QualityGate(name="val-loss", metric="loss", threshold=3.5, direction="min", split="val")
"""The gate of the gates tests: val loss at most 3.5, on evals of the ``val`` split."""
VAL_TASK = Task(dataset="synthetic", quality_gates=(VAL_GATE,))


def receipt(rid: str, attempt: int, start: float | None, end: float | None, status: str = "succeeded",
            task: Task = TASK, **extra: Any) -> Receipt:
    """Attempt ``attempt`` of the run whose first attempt is ``A1``, from ``T0 + start`` to ``T0 + end``."""
    extra.setdefault("workload", Workload(task=task))
    return Receipt(
        id=rid,
        run_uuid=rid[:32],
        name="hand",
        status=status,  # type: ignore[arg-type]
        started_at=None if start is None else datetime.fromtimestamp(T0 + start, UTC),
        ended_at=None if end is None else datetime.fromtimestamp(T0 + end, UTC),
        attempt=attempt,
        links=Links(attempt_of=None if attempt == 1 else A1),
        **extra,
    )


def val_receipt(rid: str, attempt: int, start: float, end: float, status: str = "succeeded",
                **extra: Any) -> Receipt:
    """``receipt`` of a run whose task has the gate ``VAL_GATE``."""
    return receipt(rid, attempt, start, end, status, task=VAL_TASK, **extra)


def table(schema: pa.Schema, rows: list[dict[str, Any]], rid: bool = True) -> pa.Table:
    """A metric table of ``schema`` (with a leading ``receipt_id`` column unless ``rid`` is false)."""
    full = pa.schema([pa.field("receipt_id", pa.string()), *schema]) if rid else schema
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in full} for r in rows], schema=full)


def ev(rid: str, t: float, kind: str, step: int | None = None, rank: int = 0, detail: Any = None) -> dict[str, Any]:
    """An event row at ``T0 + t``; a ``detail`` that is not already text is stored as JSON."""
    return {"receipt_id": rid, "rank": rank, "time": T0 + t, "kind": kind, "step": step,
            "detail": None if detail is None else (detail if isinstance(detail, str) else json.dumps(detail))}


def scenario_events() -> list[dict[str, Any]]:
    """The events of test_goodput.py's scenario: attempt 1 [0, 10] fails at 9.5 after an eval at step 3 and a
    save at step 4; attempt 2 [12, 25] restores step 4 and saves step 8."""
    return [
        ev(A1, 0.5, "init_start"), ev(A1, 3.0, "init_end", 0),
        ev(A1, 6.0, "eval_start", 3), ev(A1, 6.2, "eval_end", 3),
        ev(A1, 7.0, "checkpoint_save_start", 4), ev(A1, 7.2, "checkpoint_save_end", 4),
        ev(A1, 9.5, "failure", 7),
        ev(A2, 12.5, "init_start"), ev(A2, 14.0, "checkpoint_restore_start"),
        ev(A2, 15.0, "checkpoint_restore_end", 4), ev(A2, 15.0, "init_end", 4),
        ev(A2, 19.0, "checkpoint_save_start", 8), ev(A2, 19.5, "checkpoint_save_end", 8),
    ]


@dataclass(frozen=True)
class Run:
    """A run of an attribution lattice, known only by its id."""

    id: str


@dataclass(frozen=True)
class Fixed:
    """A headline whose per-run log values are given by run id."""

    values_by_id: Mapping[str, float]
    name: str = "fixed"
    metric: str = "fixed metric"
    direction: Any = "higher"

    def values(self, nodes: Sequence[Sequence[Any]]) -> NodeValues:
        return node_values([[self.values_by_id[r.id] for r in runs] for runs in nodes], "fixed note")
