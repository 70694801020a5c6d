"""Goodput and time-to-gate rows for ``ledger compare``, and time to a gate as an attribution headline.

:func:`ledger.analyses.metrics.plugins` picks up this module's ``METRICS`` and ``HEADLINES``; nothing else
has to be wired. Compare hands each provider one :class:`~ledger.analyses.series.RunData` per receipt, so
these rows see one receipt: a receipt that is a later attempt of a logical run (``attempt_of`` set) is
``unavailable`` here, with the reason; ``ledger goodput REF`` and ``ledger gate REF`` cover every attempt.

Rows: goodput and token goodput (:mod:`ledger.analyses.goodput`), and per quality gate of the task the
wall time and energy to reach it (:mod:`ledger.analyses.gates`), plus "time to first gate" (the task's
first gate), which is also the headline attribution splits over factors. A run that never reached the gate
is censored: its row is ``unavailable`` with "not reached (>= total)" (``ledger gate --group`` summarises
censored runs with Kaplan-Meier), never a number that would look like a measurement.

RunData's evals carry no time of their own: an eval's time is taken from its row's ``time`` when compare
provides one, else from the ``eval_end``/``eval_stop`` event at its step, else from its step's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ledger.analyses.attribution import NodeValues, node_values
from ledger.analyses.metrics import Direction, MetricProvider, Observation, RunMetric, Spec, unavailable
from ledger.analyses.series import RunData
from schemas.tables import EVALS, EVENTS, STEPS, TELEMETRY

FIRST_GATE = "time to first gate"
"""The headline row: wall time to the task's first quality gate."""

_EVAL_DONE = ("eval_end", "eval_stop")


def _table(schema: pa.Schema, rid: str, columns: dict[str, Any], n: int) -> pa.Table:
    # one receipt: its id as a dictionary column (one string, n zero indices) rather than n copies
    full = pa.schema([pa.field("receipt_id", pa.dictionary(pa.int32(), pa.string())), *schema])
    arrays = []
    for f in full:
        if f.name == "receipt_id":
            arrays.append(pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([rid])))
        elif f.name in columns:
            values = columns[f.name]
            if isinstance(values, np.ndarray) and values.dtype.kind == "f" and not pa.types.is_floating(f.type):
                # non-finite floats stand for missing values of an integer or boolean column (vectorised)
                missing = ~np.isfinite(values)
                mask = missing if missing.any() else None
                filled = np.where(missing, 0, values) if mask is not None else values
                cast = filled.astype(bool) if pa.types.is_boolean(f.type) else filled.astype(np.int64)
                arrays.append(pa.array(cast, f.type, mask=mask))
                continue
            arrays.append(pa.array(values, f.type, from_pandas=True))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=full)


def tables_of(run: RunData) -> dict[str, pa.Table]:
    """RunData back into index-shaped tables (steps, events, evals with times, telemetry)."""
    steps = run.steps
    n = int(steps["step"].size) if "step" in steps else 0
    step_cols: dict[str, Any] = {k: steps[k] for k in ("step", "time", "step_time_s", "tokens") if k in steps}
    if "skipped" in steps:
        step_cols["skipped"] = np.asarray(steps["skipped"], dtype=float)
    step_table = _table(STEPS, run.id, step_cols, n)
    ev = run.events
    events = _table(EVENTS, run.id, {k: [e.get(k) for e in ev] for k in ("rank", "time", "kind", "step", "detail")},
                    len(ev))
    done: dict[int, float] = {}
    for e in ev:
        if e.get("kind") in _EVAL_DONE and e.get("step") is not None:
            done.setdefault(int(e["step"]), float(e["time"]))
    step_numbers = np.asarray(steps.get("step", np.zeros(0)), dtype=float)
    step_times = np.asarray(steps.get("time", np.zeros(0)), dtype=float)
    by_step = step_numbers.size < 2 or bool((step_numbers[1:] >= step_numbers[:-1]).all())

    def time_of_step(step: float) -> float | None:
        """The end time of a logged step (the first row with that number), without a 1M-entry dict (a
        binary search when the rows are by step, as RunData's are)."""
        if by_step:
            i = int(np.searchsorted(step_numbers, step, side="left"))
            return float(step_times[i]) if i < step_numbers.size and step_numbers[i] == step else None
        hits = np.flatnonzero(step_numbers == step)
        return float(step_times[hits[0]]) if hits.size else None

    times = []
    for row in run.evals:
        t = row.get("time")
        if t is None and row.get("step") is not None:
            t = done.get(int(row["step"])) or time_of_step(float(row["step"]))
        times.append(t)
    eval_cols = {k: [r.get(k) for r in run.evals] for k in ("step", "tokens", "split", "source", "metric", "value")}
    eval_cols["time"] = times
    evals = _table(EVALS, run.id, eval_cols, len(run.evals))
    tele = run.telemetry
    m = int(tele["time"].size) if tele and "time" in tele else 0
    telemetry = _table(TELEMETRY, run.id, {k: tele[k] for k in ("time", "device", "power_w", "energy_j") if k in tele}
                       | {"rank": [-1] * m}, m)
    return {"steps": step_table, "events": events, "evals": evals, "telemetry": telemetry}


_MEMO = "goodput_compare.analysis"
"""Key of the analysis in :attr:`RunData.memo` (kept with the run, so it lives exactly as long)."""


def _analysis(run: RunData) -> Any:
    """(goodput, tables) of one receipt, or the reason there is none (computed once per RunData)."""
    if _MEMO in run.memo:
        return run.memo[_MEMO]
    from ledger.analyses.goodput import compute
    from ledger.errors import LedgerError

    r = run.receipt
    if r.links.attempt_of is not None:
        result: Any = (f"attempt {r.attempt} of the logical run {r.links.attempt_of[:12]}: compare sees one "
                       "receipt; `ledger goodput` and `ledger gate` cover every attempt")
    else:
        try:
            tables = tables_of(run)
            result = (compute([r], tables["steps"], tables["events"], bins=1), tables)
        except LedgerError as exc:
            result = str(exc)
    run.memo[_MEMO] = result
    return result


def _goodput_obs(run: RunData) -> Observation:
    found = _analysis(run)
    if isinstance(found, str):
        return unavailable(found)
    value = found[0].goodput
    return Observation(value) if value is not None else unavailable("the run has no duration")


def _token_goodput_obs(run: RunData) -> Observation:
    found = _analysis(run)
    if isinstance(found, str):
        return unavailable(found)
    value = found[0].token_goodput
    return Observation(value) if value is not None else unavailable("no token counts in the step rows")


def _gate_obs(run: RunData, gate_name: str | None, what: str) -> Observation:
    from ledger.analyses.gates import gate_result, human
    from ledger.errors import LedgerError

    gates = run.receipt.workload.task.quality_gates
    gate = gates[0] if gate_name is None and gates else next((g for g in gates if g.name == gate_name), None)
    if gate is None:
        return unavailable("the task declares no such quality gate")
    found = _analysis(run)
    if isinstance(found, str):
        return unavailable(found)
    good, tables = found
    try:
        r = gate_result([run.receipt], good, tables["evals"], tables["telemetry"], gate)
    except LedgerError as exc:
        return unavailable(str(exc))
    value = getattr(r.cost, what)
    if not r.reached:
        bound = f" (>= {human(what, value)})" if value is not None else ""
        return unavailable(f"{gate.name} not reached{bound}: censored; `ledger gate --group` summarises "
                           "censored runs")
    if value is None:
        return unavailable("energy not measured")
    return Observation(float(value), note=f"{gate.name}: first eval meeting it at step {r.step}")


def _goodput_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Any]:
    note = "productive step time / wall time of the receipt (ledger goodput REF covers all attempts)"
    return [
        RunMetric(Spec("goodput", "goodput", "ratio", "higher", 0.02, scale="delta", statistic="value",
                       note=note), _goodput_obs),
        RunMetric(Spec("token goodput", "goodput", "ratio", "higher", 0.01, scale="delta", statistic="value",
                       note="useful tokens / processed tokens"), _token_goodput_obs),
    ]


def _gate_metrics(a: Sequence[RunData], b: Sequence[RunData]) -> list[Any]:
    gates = []
    for run in [*a, *b]:
        for g in run.receipt.workload.task.quality_gates:
            if g.name not in gates:
                gates.append(g.name)
    if not gates:
        return []
    note = "from the run's start to the first eval meeting the gate (MLPerf's time to train)"
    out: list[Any] = [RunMetric(Spec(FIRST_GATE, "time to gate", "s", "lower", 0.05, statistic="value",
                                     note=f"{note}; the task's first gate"), _observer(None, "wall_s"))]
    for name in gates:
        out.append(RunMetric(Spec(f"time to {name}", "time to gate", "s", "lower", 0.05, statistic="value", note=note),
                             _observer(name, "wall_s")))
        out.append(RunMetric(Spec(f"energy to {name}", "time to gate", "J", "lower", 0.05, statistic="value",
                                  note="measured counters only"), _observer(name, "energy_j")))
    return out


def _observer(gate_name: str | None, what: str) -> Callable[[RunData], Observation]:
    def observe(run: RunData) -> Observation:
        return _gate_obs(run, gate_name, what)

    return observe


METRICS = [
    MetricProvider("goodput", _goodput_metrics),
    MetricProvider("time to quality gate", _gate_metrics),
]
"""Rows for ``ledger compare`` (collected by :func:`ledger.analyses.metrics.plugins`)."""


@dataclass(frozen=True)
class TimeToGate:
    """Attribution headline: wall time to the task's first quality gate, on a log scale. Each node's value
    is the mean log time of its runs; its uncertainty is the run-to-run variance (attribution). A node
    with a run that never reached the gate has no value (censored: its time is only a lower bound)."""

    name: str = "time to gate"
    metric: str = FIRST_GATE
    direction: Direction = "lower"

    def values(self, nodes: Sequence[Sequence[RunData]]) -> NodeValues:
        per_run: list[list[float | str]] = []
        for runs in nodes:
            got: list[float | str] = []
            for run in runs:
                obs = _gate_obs(run, None, "wall_s")
                if obs.value is not None and obs.value > 0:
                    got.append(math.log(obs.value))
                else:
                    got.append(f"{run.label}: {obs.reason or 'no positive time'}")
            per_run.append(got)
        return node_values(per_run, "log of the wall time to the first quality gate")


HEADLINES = [TimeToGate()]
"""Headline metrics attribution splits (collected by :func:`ledger.analyses.metrics.plugins`)."""
