"""Goodput and gates at their exact edges, with hand-computed answers: steps whose logged times overlap
count their wall time once; an eval exactly at a gate's threshold meets it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from ledger.analyses.gates import gate_result
from ledger.analyses.goodput import compute
from schemas import Receipt
from schemas.receipt import QualityGate, Task, Workload
from schemas.tables import EVALS, EVENTS, STEPS

T0 = 1_700_000_000.0
A = "a" * 64


def receipt(end: float, gate: QualityGate | None = None) -> Receipt:
    task = Task(dataset="synthetic", quality_gates=(gate,) if gate else ())
    return Receipt(id=A, run_uuid=A[:32], name="hand", status="succeeded",
                   started_at=datetime.fromtimestamp(T0, UTC), ended_at=datetime.fromtimestamp(T0 + end, UTC),
                   attempt=1, workload=Workload(task=task))


def table(schema: pa.Schema, rows: list[dict[str, Any]]) -> pa.Table:
    full = pa.schema([pa.field("receipt_id", pa.string()), *schema])
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in full} for r in rows], schema=full)


def steps(ends: list[float], dt: float) -> pa.Table:
    return table(STEPS, [{"receipt_id": A, "rank": 0, "step": i + 1, "time": T0 + t, "step_time_s": dt,
                          "tokens": (i + 1) * 10} for i, t in enumerate(ends)])


def test_overlapping_step_times_count_once() -> None:
    # steps of 2 s logged as ending at 2, 3, 4 and 8: step 1 [0, 2]; step 2 would start at 1, inside step 1,
    # so it is [2, 3]; step 3 [3, 4]; step 4 [6, 8]. Productive 2 + 1 + 1 + 2 = 6 s of a 10 s wall.
    # (Without the clamp it would be 4 x 2 = 8 s.)
    g = compute([receipt(10.0)], steps([2.0, 3.0, 4.0, 8.0], 2.0), table(EVENTS, []))
    assert g.wall_s == pytest.approx(10.0)
    assert g.productive_s == pytest.approx(6.0)
    assert g.goodput == pytest.approx(0.6)
    assert g.productive_s + g.badput_s == pytest.approx(g.wall_s)


def evals(values: list[tuple[int, float, float]]) -> pa.Table:
    return table(EVALS, [{"receipt_id": A, "rank": 0, "step": s, "time": T0 + t, "tokens": s * 10, "split": "val",
                          "source": None, "metric": "loss", "value": v} for s, t, v in values])


@pytest.mark.parametrize(("direction", "values", "step"), [
    ("min", [(1, 2.1, 3.9), (2, 3.1, 3.8), (4, 8.1, 3.7)], 2),
    ("max", [(1, 2.1, 3.7), (2, 3.1, 3.8), (4, 8.1, 3.9)], 2),
    ("min", [(1, 2.1, 3.9), (2, 3.1, 3.8000001), (4, 8.1, 3.7)], 4),
    ("max", [(1, 2.1, 3.7), (2, 3.1, 3.7999999), (4, 8.1, 3.9)], 4),
])
def test_an_eval_exactly_at_the_gate_meets_it(direction: str, values: list[tuple[int, float, float]],
                                              step: int) -> None:
    gate = QualityGate(name="g", metric="loss", threshold=3.8, direction=direction, split="val")  # type: ignore[arg-type]
    r = receipt(10.0, gate)
    good = compute([r], steps([2.0, 3.0, 4.0, 8.0], 1.0), table(EVENTS, []))
    got = gate_result([r], good, evals(values), None, gate)
    assert got.reached and got.step == step
    assert got.cost.wall_s == pytest.approx(dict(values_by_step(values))[step])


def values_by_step(values: list[tuple[int, float, float]]) -> list[tuple[int, float]]:
    return [(s, t) for s, t, _ in values]
