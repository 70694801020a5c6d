"""Quality gates as users name them: the task's declared gates, or an ad-hoc spec like ``val/loss<=2.6``;
and which rows of an evals table a gate reads (its series: split/source/metric)."""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.errors import BadInput
from schemas.receipt import QualityGate, Task

_SPEC = re.compile(r"^\s*(?P<lhs>[A-Za-z0-9_.:/-]+)\s*(?P<op><=|>=)\s*(?P<x>[-+0-9.eE]+|nan|inf)\s*$")


def series_key(split: str | None, source: str | None, metric: str) -> str:
    """The eval series name as receipts' summaries spell it: split/source/metric ("all" for none)."""
    return "/".join(x if x is not None else "all" for x in (split, source, metric))


def gate_label(g: QualityGate) -> str:
    op = "<=" if g.direction == "min" else ">="
    return f"{series_key(g.split, g.source, g.metric)} {op} {g.threshold:g}"


def parse_gate(spec: str) -> QualityGate:
    """An ad-hoc gate: ``[split/][source/]metric<=X`` (min) or ``...>=X`` (max); "all" as the source
    means the whole split. E.g. ``val/loss<=2.6``, ``val/arith/loss<=2.2``, ``eval_accuracy>=0.9``."""
    m = _SPEC.match(spec)
    if not m:
        raise BadInput(f"--gate {spec!r}: not a gate name of the task nor a spec like 'val/loss<=2.6'")
    parts = m["lhs"].split("/")
    if len(parts) > 3 or not all(parts):
        raise BadInput(f"--gate {spec!r}: the left side is [split/][source/]metric")
    split = parts[0] if len(parts) >= 2 else None
    source = parts[1] if len(parts) == 3 and parts[1] != "all" else None
    try:
        threshold = float(m["x"])
    except ValueError as exc:
        raise BadInput(f"--gate {spec!r}: {m['x']!r} is not a number") from exc
    if not math.isfinite(threshold):
        raise BadInput(f"--gate {spec!r}: the threshold must be finite")
    return QualityGate(
        name=spec.replace(" ", ""),
        metric=parts[-1],
        threshold=threshold,
        direction="min" if m["op"] == "<=" else "max",
        split=split,
        source=source,
    )


def select_gates(task: Task, spec: str | None) -> list[QualityGate]:
    """The task's gates, or the one named by ``spec``, or the ad-hoc gate ``spec`` describes."""
    declared = list(task.quality_gates)
    if spec is None:
        if not declared:
            raise BadInput("the task declares no quality gates; give one with --gate, e.g. --gate 'val/loss<=2.6'")
        return declared
    for g in declared:
        if g.name == spec:
            return [g]
    if "<=" in spec or ">=" in spec:
        return [parse_gate(spec)]
    names = ", ".join(g.name for g in declared) or "none"
    raise BadInput(f"no quality gate named {spec!r}; the task declares: {names} (or give a spec like 'val/loss<=2.6')")


def series_mask(evals: pa.Table, g: QualityGate) -> np.ndarray:
    """Rows of an evals table that belong to the gate's series (split, source, metric)."""
    if evals.num_rows == 0:
        return np.zeros(0, bool)
    mask = pc.equal(evals.column("metric"), g.metric)
    if g.split is not None:
        mask = pc.and_(mask, pc.equal(evals.column("split"), g.split))
    source = evals.column("source")
    mask = pc.and_(mask, pc.is_null(source) if g.source is None else pc.equal(source, g.source))
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def logged_series(evals: pa.Table) -> list[str]:
    """The eval series a table holds, as split/source/metric."""
    if evals.num_rows == 0:
        return []
    seen = set()
    for split, source, metric in zip(*(evals.column(c).to_pylist() for c in ("split", "source", "metric")),
                                     strict=True):
        seen.add(series_key(split, source, metric))
    return sorted(seen)


__all__ = ["gate_label", "logged_series", "parse_gate", "select_gates", "series_key", "series_mask"]
