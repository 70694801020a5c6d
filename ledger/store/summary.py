"""Headline figures of a run, derived from its metric tables when it is published."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from ledger.store.merge import finite_or_none
from schemas import Summary


def warmup_cut(n: int) -> int:
    """Steps dropped as warm-up from n steps: the first 10%, at least 1 when there are more than 1."""
    return 0 if n <= 1 else max(1, n // 10)


def _median_after_warmup(column: pa.ChunkedArray) -> float | None:
    values = [v for v in column.to_pylist() if v is not None and math.isfinite(v)]
    values = values[warmup_cut(len(values)) :]
    if not values:
        return None
    values.sort()
    mid = len(values) // 2
    return float(values[mid]) if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def summarize(
    tables: dict[str, pa.Table], energy_j: float | None = None, energy_method: str = "not measured"
) -> Summary:
    """The receipt's summary from its tables (steps of rank 0, or of the lowest rank that logged)."""
    steps = tables["steps"]
    if steps.num_rows:
        lowest = pc.min(steps["rank"]).as_py()
        steps = steps.filter(pc.equal(steps["rank"], lowest))
        steps = steps.sort_by([("step", "ascending")])
    last = steps.slice(steps.num_rows - 1) if steps.num_rows else None
    evals = tables["evals"]
    final_eval: dict[str, float] = {}
    for row in evals.sort_by([("step", "ascending")]).select(["split", "source", "metric", "value"]).to_pylist():
        value = finite_or_none(row["value"])
        key = "/".join(str(row[k]) if row[k] is not None else "all" for k in ("split", "source", "metric"))
        if value is not None:
            final_eval[key] = value
    memory = [
        pc.max(t["memory_bytes"]).as_py() for t in (tables["steps"], tables["telemetry"]) if t.num_rows
    ]
    memory = [m for m in memory if m is not None]
    return Summary(
        steps=steps.num_rows,
        last_step=last["step"][0].as_py() if last is not None else None,
        tokens=last["tokens"][0].as_py() if last is not None else None,
        final_loss=finite_or_none(last["loss"][0].as_py()) if last is not None else None,
        final_eval=final_eval,
        tokens_per_s=_median_after_warmup(steps["tokens_per_s"]) if steps.num_rows else None,
        step_time_s=_median_after_warmup(steps["step_time_s"]) if steps.num_rows else None,
        peak_memory_bytes=max(memory) if memory else None,
        energy_j=finite_or_none(energy_j),
        energy_method=energy_method if finite_or_none(energy_j) is not None else "not measured",
        nonfinite_steps=sum(
            1 for v in steps["loss"].to_pylist() if v is not None and not math.isfinite(v)
        ),
        evals=evals.num_rows,
        routing_rows=tables["routing"].num_rows,
    )
