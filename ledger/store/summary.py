"""Headline figures of a run, derived from its metric tables when it is published."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ledger.store.merge import finite_or_none
from schemas import Summary


def _pc() -> Any:
    """Arrow's compute functions, imported on first use: about 60 ms, which a run that logged no step row and
    at most one eval (and its `ledger record`) does not pay."""
    import pyarrow.compute as pc

    return pc


def warmup_cut(n: int) -> int:
    """Steps dropped as warm-up from n steps: the first 10%, at least 1 when there are more than 1."""
    return 0 if n <= 1 else max(1, n // 10)


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """The column's values as float64 in row order, nulls left out (NaN and infinities kept)."""
    return np.asarray(_pc().drop_null(column).to_numpy(), dtype=np.float64)


def _largest(column: pa.ChunkedArray) -> int | None:
    """The largest value of an integer column, None when it holds none (empty or all null)."""
    if column.null_count == len(column):
        return None
    # with nulls the values come as float64, NaN for null (exact up to 2**53 bytes), which nanmax skips
    return int(np.nanmax(column.to_numpy()))


def _median_after_warmup(column: pa.ChunkedArray) -> float | None:
    """The median of the finite values in row order after the warm-up cut (:func:`warmup_cut` of their count)."""
    values = _floats(column)
    values = values[np.isfinite(values)]
    values = values[warmup_cut(len(values)) :]
    if not len(values):
        return None
    return float(np.median(values))


PROCESS = "process"
"""The telemetry device of the launch's process tree (the wrapper's sampler: :mod:`ledger.record.telemetry`);
``gpu<i>:process`` is its memory on GPU ``i``."""


def peak_memory(tables: dict[str, pa.Table]) -> tuple[int | None, str | None, int | None]:
    """The run's own peak memory and where it came from: the largest its steps reported (device memory, as the
    training process or its log gave it), else the largest GPU memory its processes held, else the largest memory
    of its process tree; and the process tree's largest (host) memory. Never the machine's memory in use (the
    ``host`` and ``gpu<i>`` telemetry rows count other processes too)."""
    steps = _largest(tables["steps"]["memory_bytes"])
    telemetry = tables["telemetry"]
    gpu = host = None
    if telemetry.num_rows:
        devices = telemetry["device"]
        pc = _pc()
        tree = telemetry.filter(pc.equal(devices, PROCESS))
        on_gpu = telemetry.filter(pc.ends_with(pc.fill_null(devices, ""), ":" + PROCESS))
        host = _largest(tree["memory_bytes"]) if tree.num_rows else None
        gpu = _largest(on_gpu["memory_bytes"]) if on_gpu.num_rows else None
    for value, source in ((steps, "steps"), (gpu, "gpu processes"), (host, "process tree")):
        if value is not None:
            return value, source, host
    return None, None, host


def summarize(
    tables: dict[str, pa.Table], energy_j: float | None = None, energy_method: str = "not measured"
) -> Summary:
    """The receipt's summary from its tables (steps of rank 0, or of the lowest rank that logged)."""
    steps = tables["steps"].select(["rank", "step", "tokens", "loss", "tokens_per_s", "step_time_s"])
    if steps.num_rows:
        lowest = _pc().min(steps["rank"]).as_py()
        if _pc().max(steps["rank"]).as_py() != lowest:
            steps = steps.filter(_pc().equal(steps["rank"], lowest))
        order = _floats(steps["step"])
        if len(order) > 1 and not (order[1:] >= order[:-1]).all():  # already in step order: most logs
            steps = steps.sort_by([("step", "ascending")])
    last = steps.slice(steps.num_rows - 1) if steps.num_rows else None
    evals = tables["evals"]
    final_eval: dict[str, float] = {}
    ordered = evals.sort_by([("step", "ascending")]) if evals.num_rows > 1 else evals  # sort_by loads Arrow compute
    for row in ordered.select(["split", "source", "metric", "value"]).to_pylist():
        value = finite_or_none(row["value"])
        key = "/".join(str(row[k]) if row[k] is not None else "all" for k in ("split", "source", "metric"))
        if value is not None:
            final_eval[key] = value
    peak, source, host = peak_memory(tables)
    return Summary(
        steps=steps.num_rows,
        last_step=last["step"][0].as_py() if last is not None else None,
        tokens=last["tokens"][0].as_py() if last is not None else None,
        final_loss=finite_or_none(last["loss"][0].as_py()) if last is not None else None,
        final_eval=final_eval,
        tokens_per_s=_median_after_warmup(steps["tokens_per_s"]) if steps.num_rows else None,
        step_time_s=_median_after_warmup(steps["step_time_s"]) if steps.num_rows else None,
        peak_memory_bytes=peak,
        peak_memory_source=source,
        peak_host_memory_bytes=host,
        energy_j=finite_or_none(energy_j),
        energy_method=energy_method if finite_or_none(energy_j) is not None else "not measured",
        nonfinite_steps=int((~np.isfinite(_floats(steps["loss"]))).sum()) if steps.num_rows else 0,
        evals=evals.num_rows,
        routing_rows=tables["routing"].num_rows,
    )
