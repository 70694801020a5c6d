"""Cost to a quality gate: wall time, device-hours, energy and money until the first eval that meets it.

Definition (DESIGN.md, and MLPerf's time to train): the clock starts at the first attempt's start
(MLPerf's ``run_start``) and stops at the first eval, in time order over all attempts, whose value meets
the gate (``min``: value <= threshold; ``max``: value >= threshold). Downtime between attempts counts in
wall time. An imported MLPerf receipt is measured the same way from its evals; its own
``time_to_train_s`` (``run_stop - run_start``) is shown beside it.

- **Interpolated**: the quality was crossed somewhere between the previous eval and the one that met the
  gate. Linear interpolation of the eval value in steps gives the crossing step, and the time that step
  ended (its surviving computation) gives the interpolated wall time. It is always labelled as such;
  the headline figure is the measured one.
- **Device-hours**: each attempt's devices times the part of its wall time before the gate. Devices are
  the ranks (``parallelism.world_size``, else the launcher's, else the GPUs seen, else 1); a CPU run
  counts its ranks. Downtime holds no devices.
- **Energy**: only from measured telemetry — per-GPU NVML energy counters sampled by the wrapper or the
  SDK, or CPU RAPL package counters (:func:`ledger.store.energy.energy_summary`, cut at the gate's time) —
  otherwise ``None`` and "not measured". An attempt without energy samples makes the whole figure "not
  measured": a partial sum would look like a measurement.
- **Money**: device-hours times a price per device-hour, from ``--price-per-device-hour`` or a TOML file
  (``ledger.toml``; see :func:`ledger.analyses.pricing.load_pricing`); without a price, no money figure.
- **Not reached**: the run is right-censored at its total cost and shown as ``not reached (>= cost)``.
  Group summaries keep such runs: the fraction that reached the gate, and Kaplan-Meier medians
  (:mod:`ledger.analyses.km`).
- **Cost per useful checkpoint**: the run's total cost divided by its completed checkpoints whose state
  survives (not computed again by a later attempt).

Which gates (the task's, or an ad-hoc spec) is :mod:`ledger.analyses.gate_spec`; prices and the devices an
attempt held are :mod:`ledger.analyses.pricing`; the tables are rendered by :mod:`ledger.report.goodput`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.analyses.gate_spec import gate_label, logged_series, select_gates, series_key, series_mask
from ledger.analyses.goodput import Goodput
from ledger.analyses.km import KMSummary, kaplan_meier
from ledger.analyses.pricing import Pricing, devices_of
from ledger.errors import BadInput
from schemas import Receipt
from schemas.receipt import QualityGate, Task

if TYPE_CHECKING:
    import duckdb

    from ledger.store.attempts import LogicalRun
    from ledger.store.receipts import Ledger

NOT_MEASURED = "not measured"


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class Cost:
    """What it took to get somewhere (or the total, for a censored run)."""

    wall_s: float
    device_hours: float
    energy_j: float | None
    energy_method: str
    money: float | None
    currency: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "device_hours": self.device_hours,
            "energy_j": self.energy_j,
            "energy_method": self.energy_method,
            "money": self.money,
            "currency": self.currency,
        }


@dataclass(frozen=True)
class Interpolated:
    """The estimated crossing between two evals (always labelled as interpolated)."""

    step: float
    wall_s: float
    device_hours: float
    money: float | None
    between_steps: tuple[int, int]
    method: str


@dataclass(frozen=True)
class GateResult:
    """One run against one gate. When not reached, ``cost`` is the run's total cost (a lower bound)."""

    run_id: str
    name: str | None
    gate: QualityGate
    reached: bool
    cost: Cost
    step: int | None = None
    """Step of the first eval that met the gate."""
    tokens: int | None = None
    value: float | None = None
    """That eval's value (for a censored run: the best value logged)."""
    attempt: int | None = None
    """Attempt that logged it."""
    interpolated: Interpolated | None = None
    evals: int = 0
    """Evals of the gate's series the run logged."""
    time_to_train_s: float | None = None
    """The evidence's own MLPerf time to train (imported receipts), for comparison."""
    surviving_wall_s: float | None = None
    """When the first eval meeting the gate lies in a stretch computed again after a restart (that model
    state was lost): wall time to the first eval meeting it on progress that survived, if any."""
    notes: tuple[str, ...] = ()

    @property
    def censored(self) -> bool:
        return not self.reached

    def display(self, what: str = "wall_s") -> str:
        """The figure as a report shows it: a number, or "not reached (>= total)"."""
        value = getattr(self.cost, what)
        text = human(what, value, self.cost.currency)
        return text if self.reached or value is None else f"not reached (>= {text})"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "name": self.name,
            "gate": self.gate.name,
            "gate_definition": gate_label(self.gate),
            "reached": self.reached,
            "censored": self.censored,
            "cost": self.cost.to_dict(),
            "step": self.step,
            "tokens": self.tokens,
            "value": self.value,
            "attempt": self.attempt,
            "evals": self.evals,
            "time_to_train_s": self.time_to_train_s,
            "surviving_wall_s": self.surviving_wall_s,
            "notes": list(self.notes),
            "interpolated": None,
        }
        if self.interpolated is not None:
            i = self.interpolated
            out["interpolated"] = {
                "step": i.step,
                "wall_s": i.wall_s,
                "device_hours": i.device_hours,
                "money": i.money,
                "between_steps": list(i.between_steps),
                "method": i.method,
            }
        return out


@dataclass(frozen=True)
class RunCost:
    """A logical run's total cost and its cost per useful checkpoint."""

    run_id: str
    total: Cost
    checkpoints_saved: int
    checkpoints_useful: int

    def per_useful_checkpoint(self) -> Cost | None:
        n = self.checkpoints_useful
        if not n:
            return None
        t = self.total
        return Cost(
            wall_s=t.wall_s / n,
            device_hours=t.device_hours / n,
            energy_j=None if t.energy_j is None else t.energy_j / n,
            energy_method=t.energy_method,
            money=None if t.money is None else t.money / n,
            currency=t.currency,
        )

    def to_dict(self) -> dict[str, Any]:
        per = self.per_useful_checkpoint()
        return {
            "run_id": self.run_id,
            "total": self.total.to_dict(),
            "checkpoints_saved": self.checkpoints_saved,
            "checkpoints_useful": self.checkpoints_useful,
            "per_useful_checkpoint": per.to_dict() if per else None,
        }


# ------------------------------------------------------------------------------------------- compute
def _receipt_mask(table: pa.Table, receipt_id: str) -> pa.Table:
    return table.filter(pc.equal(table.column("receipt_id"), receipt_id)) if table.num_rows else table


def clock_start(good: Goodput) -> float:
    """Where the time-to-gate clock starts: the first attempt's ``run_start`` event when the evidence has
    one (MLPerf logs, where it follows initialisation), else the first attempt's start."""
    return good.run_start if good.run_start is not None else good.start


def _cost_until(
    attempts: Sequence[Receipt],
    good: Goodput,
    until: float,
    telemetry: pa.Table | None,
    pricing: Pricing | None,
    since: float | None = None,
) -> Cost:
    """Cost from ``since`` (default: the clock start) to Unix time ``until``: wall time, device-hours,
    energy and money."""
    from ledger.store.energy import energy_summary

    since = clock_start(good) if since is None else since

    by_id = {r.id: r for r in attempts}
    device_hours = 0.0
    money: float | None = 0.0 if pricing is not None else None
    currency = pricing.currency if pricing is not None else None
    energy: float | None = 0.0
    methods: set[str] = set()
    for span in good.attempts:
        a0, a1 = good.start + span.start_s, good.start + span.end_s
        if a0 > until or a1 < since:
            continue
        held = max(0.0, min(a1, until) - max(a0, since))
        count, model = devices_of(by_id[span.id])
        hours = count * held / 3600.0
        device_hours += hours
        if money is not None and pricing is not None:
            price = pricing.price(model)
            money = None if price is None else money + hours * price
        if energy is not None:
            rows = _receipt_mask(telemetry, span.id) if telemetry is not None else None
            if rows is not None and rows.num_rows:
                times = rows.column("time")
                rows = rows.filter(pc.and_(pc.less_equal(times, until), pc.greater_equal(times, since)))
            joules, method = energy_summary(rows) if rows is not None and rows.num_rows else (None, NOT_MEASURED)
            if joules is None:
                energy = None
                methods = {NOT_MEASURED}
            else:
                energy += joules
                methods.add(method)
    method = NOT_MEASURED if energy is None else ("power-integral" if "power-integral" in methods else "counter")
    return Cost(
        wall_s=max(0.0, min(until, good.end) - since),
        device_hours=device_hours,
        energy_j=energy,
        energy_method=method,
        money=money,
        currency=currency,
    )


def run_cost(
    attempts: Sequence[Receipt], good: Goodput, telemetry: pa.Table | None, pricing: Pricing | None
) -> RunCost:
    """The run's total cost and its checkpoint counts."""
    return RunCost(
        run_id=good.run_id,
        total=_cost_until(attempts, good, good.end, telemetry, pricing, since=good.start),
        checkpoints_saved=good.checkpoints_saved,
        checkpoints_useful=good.checkpoints_useful,
    )


def gate_result(
    attempts: Sequence[Receipt],
    good: Goodput,
    evals: pa.Table,
    telemetry: pa.Table | None,
    gate: QualityGate,
    pricing: Pricing | None = None,
) -> GateResult:
    """One run against one gate. ``evals``/``telemetry`` are index tables (with ``receipt_id``) of the
    run's attempts. Raises :class:`BadInput` when the run logged evals but none of the gate's series."""
    ids = [r.id for r in attempts]
    if evals.num_rows:
        evals = evals.filter(pc.is_in(evals.column("receipt_id"), value_set=pa.array(ids, pa.string())))
    notes: list[str] = []
    mask = series_mask(evals, gate)
    if evals.num_rows and not mask.any():
        raise BadInput(
            f"run {good.name or good.run_id[:12]} never logged the eval series of gate {gate.name!r} "
            f"({series_key(gate.split, gate.source, gate.metric)}); it logged: {', '.join(logged_series(evals))}"
        )
    series = evals.filter(pa.array(mask)) if evals.num_rows else evals
    ttt = next((r.summary.time_to_train_s for r in attempts if r.summary.time_to_train_s is not None), None)

    def result(**figures: Any) -> GateResult:
        return GateResult(run_id=good.run_id, name=good.name, gate=gate, time_to_train_s=ttt, **figures)

    if series.num_rows == 0:
        notes.append("no evals logged")
        total = _cost_until(attempts, good, good.end, telemetry, pricing)
        return result(reached=False, cost=total, evals=0, notes=tuple(notes))

    t = _float(series, "time")
    step = _float(series, "step")
    value = _float(series, "value")
    tokens = _float(series, "tokens")
    attempt_of = {r.id: r.attempt for r in attempts}
    rid = series.column("receipt_id").to_pylist()
    untimed = ~np.isfinite(t)
    if untimed.any():
        notes.append(f"{int(untimed.sum())} evals carry no time and were left out")
    order = np.lexsort((step, t))
    order = order[np.isfinite(t[order])]
    meets = (value <= gate.threshold) if gate.direction == "min" else (value >= gate.threshold)
    meets &= np.isfinite(value)
    hits = order[meets[order]]
    if hits.size == 0:
        finite = value[np.isfinite(value)]
        best = None if finite.size == 0 else float(finite.min() if gate.direction == "min" else finite.max())
        total = _cost_until(attempts, good, good.end, telemetry, pricing)
        return result(reached=False, cost=total, value=best, evals=int(series.num_rows), notes=tuple(notes))
    h = int(hits[0])
    t_hit = float(t[h])
    start = clock_start(good)
    if good.run_start is not None:
        notes.append("timed from the run_start event (as MLPerf times it), not from the launch")
    if t_hit < start:
        notes.append("the first eval meeting the gate is timed before the run's start; counted from the start")
    cost = _cost_until(attempts, good, max(t_hit, start), telemetry, pricing)
    interp = _interpolate(order, h, t, step, value, gate, good, attempts, telemetry, pricing)
    surviving_wall: float | None = None
    if _recomputed_later(good, float(step[h]), t_hit):
        kept = [int(i) for i in hits if not _recomputed_later(good, float(step[i]), float(t[i]))]
        if kept:
            surviving_wall = max(0.0, float(t[kept[0]]) - start)
        notes.append(
            f"the first eval meeting it (step {int(step[h])}) lies in a stretch computed again after a restart: "
            "that model state was lost; "
            + (f"on surviving progress the gate was first met after {human('wall_s', surviving_wall)} "
               f"(step {int(step[kept[0]])})" if kept else "no eval on surviving progress met it")
        )
    return result(
        reached=True,
        cost=cost,
        step=int(step[h]) if math.isfinite(step[h]) else None,
        tokens=int(tokens[h]) if math.isfinite(tokens[h]) else None,
        value=float(value[h]),
        attempt=attempt_of.get(rid[h]),
        interpolated=interp,
        evals=int(series.num_rows),
        surviving_wall_s=surviving_wall,
        notes=tuple(notes),
    )


def _float(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name)
    if column.null_count:
        column = pc.fill_null(column.cast(pa.float64()), math.nan)
    return np.asarray(column.to_numpy(), dtype=np.float64)


def _recomputed_later(good: Goodput, step: float, t_eval: float, tolerance: float = 1e-3) -> bool:
    """True when the surviving computation of ``step`` ended after this eval: the eval saw a model state
    that a restart threw away."""
    steps_, times_ = good.surviving_steps, good.surviving_times
    j = int(np.searchsorted(steps_, step))
    return bool(j < steps_.size and steps_[j] == step and times_[j] > t_eval + tolerance)


def _eval_follows_step(good: Goodput, step: float, t_eval: float, tolerance: float = 1e-3) -> bool:
    """True when an eval at ``step`` was run after that step's surviving computation and before the next
    step's: then eval steps and training steps count the same thing (MLPerf evals count samples, not
    steps) and the eval was not in a stretch computed again later."""
    steps_, times_ = good.surviving_steps, good.surviving_times
    j = int(np.searchsorted(steps_, step))
    if j >= steps_.size or steps_[j] != step:
        return False
    return bool(times_[j] <= t_eval + tolerance and (j + 1 == steps_.size or times_[j + 1] >= t_eval - tolerance))


def _interpolate(
    order: np.ndarray,
    h: int,
    t: np.ndarray,
    step: np.ndarray,
    value: np.ndarray,
    gate: QualityGate,
    good: Goodput,
    attempts: Sequence[Receipt],
    telemetry: pa.Table | None,
    pricing: Pricing | None,
) -> Interpolated | None:
    """Linear interpolation between the last earlier eval (in time) that did not meet the gate, at an
    earlier step, and the first one that did."""
    where = int(np.flatnonzero(order == h)[0])
    before = [int(i) for i in order[:where] if math.isfinite(value[i]) and step[i] < step[h]]
    if not before or not math.isfinite(step[h]):
        return None
    p = before[-1]
    v0, v1 = float(value[p]), float(value[h])
    if v1 == v0:
        return None
    frac = min(max((gate.threshold - v0) / (v1 - v0), 0.0), 1.0)
    s0, s1 = float(step[p]), float(step[h])
    crossing = s0 + frac * (s1 - s0)
    steps_, times_ = good.surviving_steps, good.surviving_times
    if _eval_follows_step(good, s0, float(t[p])) and _eval_follows_step(good, s1, float(t[h])):
        at = float(np.interp(crossing, steps_.astype(np.float64), times_))
        method = (f"linear in step between the evals at steps {int(s0)} and {int(s1)}; the crossing step's "
                  "end time from the surviving step computations")
    else:
        at = float(t[p] + frac * (t[h] - t[p]))
        method = f"linear in step and time between the evals at steps {int(s0)} and {int(s1)}"
    at = min(at, float(t[h]))
    cost = _cost_until(attempts, good, at, telemetry, pricing)
    return Interpolated(
        step=crossing,
        wall_s=cost.wall_s,
        device_hours=cost.device_hours,
        money=cost.money,
        between_steps=(int(s0), int(s1)),
        method=method,
    )


# ------------------------------------------------------------------------------------------- groups
@dataclass(frozen=True)
class GateSummary:
    """Runs of a group against one gate: censored runs kept, medians by Kaplan-Meier."""

    gate: QualityGate
    results: tuple[GateResult, ...]
    km: dict[str, KMSummary | None]
    """Per cost measure (wall_s, device_hours, energy_j, money): the estimate, or None when some run
    lacks the figure (energy not measured, no price)."""

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def reached(self) -> int:
        return sum(1 for r in self.results if r.reached)

    @property
    def fraction_reached(self) -> float:
        return self.reached / self.n if self.n else 0.0

    def median(self, what: str) -> float | None:
        km = self.km.get(what)
        return km.median if km is not None else None

    def median_display(self, what: str) -> str:
        km = self.km.get(what)
        currency = next((r.cost.currency for r in self.results if r.cost.currency), None)
        if km is None:
            return NOT_MEASURED if what == "energy_j" else "-"
        if km.median is not None:
            return human(what, km.median, currency)
        # S stays above 0.5 over everything observed: the median exceeds the largest cost seen
        bound = max((float(getattr(r.cost, what)) for r in self.results), default=0.0)
        return f"not reached by half the runs (> {human(what, bound, currency)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gate": self.gate.name,
            "gate_definition": gate_label(self.gate),
            "runs": self.n,
            "reached": self.reached,
            "fraction_reached": self.fraction_reached,
            "median": {k: (v.median if v is not None else None) for k, v in self.km.items()},
            "median_method": "Kaplan-Meier; runs that never reached the gate are right-censored at their "
                             "total cost; median = smallest cost with S <= 0.5 (null when S stays above 0.5)",
            "kaplan_meier": {
                k: None if v is None else [
                    {"cost": s.time, "at_risk": s.at_risk, "events": s.events, "survival": s.survival}
                    for s in v.steps
                ]
                for k, v in self.km.items()
            },
            "results": [r.to_dict() for r in self.results],
        }


MEASURES = ("wall_s", "device_hours", "energy_j", "money")


def summarise(gate: QualityGate, results: Sequence[GateResult]) -> GateSummary:
    """Kaplan-Meier over each cost measure, censored runs included."""
    km: dict[str, KMSummary | None] = {}
    for what in MEASURES:
        values = [getattr(r.cost, what) for r in results]
        if not results or any(v is None for v in values):
            km[what] = None
            continue
        km[what] = kaplan_meier([float(v) for v in values], [r.reached for r in results])
    return GateSummary(gate=gate, results=tuple(results), km=km)


# ------------------------------------------------------------------------------------------- index
@dataclass
class RunGates:
    """One logical run against its gates."""

    good: Goodput
    results: list[GateResult]
    cost: RunCost
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``ledger gate REF --json``."""
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.good.run_id,
            "name": self.good.name,
            "attempts": len(self.good.attempts),
            "gates": [r.to_dict() for r in self.results],
            "run_cost": self.cost.to_dict(),
            "notes": self.notes,
        }


@dataclass
class GroupGates:
    """A group of logical runs against their gates."""

    tag: str
    runs: list[RunGates]
    summaries: list[GateSummary]

    def to_json(self) -> dict[str, Any]:
        """``ledger gate --group TAG=VALUE --json``."""
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.tag,
            "runs": [r.to_dict() for r in self.runs],
            "summaries": [s.to_dict() for s in self.summaries],
        }


def _telemetry(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> pa.Table:
    marks = ", ".join("?" for _ in ids)
    table: pa.Table = con.sql(
        f"SELECT receipt_id, rank, time, node, device, power_w, energy_j FROM telemetry "
        f"WHERE receipt_id IN ({marks}) AND (energy_j IS NOT NULL OR power_w IS NOT NULL)",
        params=list(ids),
    ).to_arrow_table()
    return table


def _evals(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> pa.Table:
    marks = ", ".join("?" for _ in ids)
    table: pa.Table = con.sql(
        f"SELECT receipt_id, rank, step, time, tokens, split, source, metric, value FROM evals "
        f"WHERE receipt_id IN ({marks})",
        params=list(ids),
    ).to_arrow_table()
    return table


def run_gates(
    con: duckdb.DuckDBPyConnection,
    run: LogicalRun,
    spec: str | None = None,
    pricing: Pricing | None = None,
    gates: list[QualityGate] | None = None,
    good: Goodput | None = None,
) -> RunGates:
    """A :class:`ledger.store.attempts.LogicalRun` against ``gates`` (default: the task's, or ``spec``), from an
    index connection; ``good`` is the run's goodput when the caller has it already."""
    from ledger.analyses.goodput_index import goodput_of_run

    good = good if good is not None else goodput_of_run(con, run, bins=1)
    evals, telemetry = _evals(con, run.ids), _telemetry(con, run.ids)
    chosen = gates if gates is not None else select_gates(run.task, spec)
    results = [gate_result(run.attempts, good, evals, telemetry, g, pricing) for g in chosen]
    notes = []
    if pricing is None:
        notes.append("no price per device-hour (--price-per-device-hour or ledger.toml): no money figures")
    elif any(pricing.price(devices_of(r)[1]) is None for r in run.attempts):
        models = sorted({devices_of(r)[1] for r in run.attempts if pricing.price(devices_of(r)[1]) is None})
        notes.append(f"no price for {', '.join(models)} in {pricing.source}: no money figures")
    return RunGates(good=good, results=results, cost=run_cost(run.attempts, good, telemetry, pricing), notes=notes)


def gate_report(ledger: Ledger, ref: str, spec: str | None = None, pricing: Pricing | None = None) -> RunGates:
    """One logical run (any attempt's ref) against the task's gates (or ``spec``)."""
    from ledger.store import index
    from ledger.store.attempts import logical_run

    with index.reader(ledger) as con:
        run = logical_run(con, ref)
        return run_gates(con, run, spec, pricing, None)


def group_report(ledger: Ledger, tag: str, spec: str | None = None, pricing: Pricing | None = None) -> GroupGates:
    """Every logical run tagged ``TAG=VALUE`` against the task's gates (or ``spec``), summarised with
    censoring. Raises :class:`BadInput` when the runs train different tasks."""
    from ledger.analyses.groups import group_runs
    from ledger.store import index

    with index.reader(ledger) as con:
        runs = group_runs(con, tag)
        tasks = [(r, r.task) for r in runs if r.task != Task()]
        for r, task in tasks[1:]:
            if task != tasks[0][1]:
                raise BadInput(
                    f"runs of group {tag} train different tasks ({tasks[0][0].name or tasks[0][0].id[:12]} and "
                    f"{r.name or r.id[:12]}): their gates are not comparable; tag them apart"
                )
        task = tasks[0][1] if tasks else Task()
        gates = select_gates(task, spec)
        out = [run_gates(con, run, spec, pricing, gates) for run in runs]
    summaries = [summarise(g, [r.results[i] for r in out]) for i, g in enumerate(gates)]
    return GroupGates(tag=tag, runs=out, summaries=summaries)


# ------------------------------------------------------------------------------------------- text
def human(what: str, value: float | None, currency: str | None = None) -> str:
    if value is None:
        return NOT_MEASURED if what == "energy_j" else "-"
    if what == "wall_s":
        if value >= 7200:
            return f"{value / 3600:.2f} h"
        if value >= 120:
            return f"{value / 60:.1f} min"
        return f"{value:.3g} s"
    if what == "device_hours":
        return f"{value:.3g} device-h"
    if what == "energy_j":
        if value >= 3.6e6:
            return f"{value / 3.6e6:.3g} kWh"
        return f"{value:.3g} J"
    if what == "money":
        return (f"{value:,.2f}" if value >= 1 else f"{value:.3g}") + (f" {currency}" if currency else "")
    return f"{value:.4g}"


__all__ = [
    "Cost",
    "GateResult",
    "GateSummary",
    "GroupGates",
    "Interpolated",
    "RunCost",
    "RunGates",
    "gate_report",
    "gate_result",
    "group_report",
    "human",
    "run_cost",
    "run_gates",
    "summarise",
]
