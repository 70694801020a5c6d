"""``compare()``: the review of A against B — factor diff, metrics side by side, attribution, missing runs.

    with index.reader(Ledger("receipts")) as con:
        result = compare(con, Ref("baseline"), Ref(group="sweep=bf16"))
    print(to_json(result)["metrics"])

A pure function of the index's contents: it reads the receipts and their tables through the connection and
returns a :class:`Comparison`; rendering is elsewhere (:mod:`ledger.report`). JSON keys (stable):
``comparable``, ``changed_factors``, ``metrics`` (name, a, b, delta, ratio, ci, verdict, ...),
``attribution`` (metric, factor, share, ci, ...), ``confounded``, ``missing_ablations``, and more
(see :func:`to_json`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import duckdb
import numpy as np

from ledger.analyses.ablations import MissingRun, missing_run
from ledger.analyses.attribution import (
    Headline,
    HeadlineAttribution,
    Lattice,
    Share,
    attribute,
    build_lattice,
    confounded_sets,
    headlines,
    missing_nodes,
)
from ledger.analyses.builtin_metrics import compare_all
from ledger.analyses.diff import FactorDiff, check_task, factor_diff
from ledger.analyses.evidence import (
    Floor,
    commands_for_replicates,
    floor_groups,
    learn_floor,
    replicates_of,
    stack_class,
)
from ledger.analyses.groups import SEED, Catalog, Side, check_distinct, resolve_side
from ledger.analyses.metrics import INCONCLUSIVE, MetricRow, Plugins, Settings, plugins
from ledger.analyses.nodes import node_differences
from ledger.analyses.series import RunData, load_run, load_run_cached
from ledger.jsonsafe import json_safe
from schemas import Factor, Receipt


@dataclass(frozen=True)
class Ref:
    """What the user named as one side: a ref (name or id prefix) or a group ``TAG=VALUE``."""

    ref: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class CompareOptions:
    """Options of a comparison."""

    allow_task_change: bool = False
    """Compare runs of different tasks (otherwise refused)."""
    settings: Settings = field(default_factory=Settings)
    """Statistics: alpha, confidence level, bootstrap draws and seed, noise threshold override."""
    attribution: bool = True
    """Build the ablation lattice and split the headline metrics over factors."""
    plugins: bool = True
    """Add the metrics and headlines of the other modules of :mod:`ledger.analyses` (goodput, gates...)."""
    replicates: bool = True
    """A one-receipt side also takes the ledger's replicates of it (same configuration, another seed)."""
    noise_floor: bool = True
    """Use the noise floor learned from the ledger's replicate groups on the same hardware and drivers."""


@dataclass(frozen=True)
class Comparison:
    """Everything ``ledger compare`` reports."""

    a: Side
    b: Side
    comparable: bool
    """The tasks match."""
    diff: FactorDiff
    """Changed fields by factor (between the first receipts of the sides; the seed is left out when a side
    is a replicate group)."""
    same_config: bool
    """A and B differ in no causal factor but, possibly, the seed, and the nodes of each agree: replicates of
    one configuration. They are still tested: two replicates that differ beyond the run-to-run noise are a
    finding about the runs (a node, a driver, a noisy neighbour), not about the configuration."""
    identical: bool
    """One run per side, the same configuration and bit-identical loss curves."""
    replicates: dict[str, list[str]]
    """Per one-receipt side: the replicates of it that joined the side (identical but for the seed)."""
    confounded_sets: list[tuple[str, ...]]
    """Factor sets that changed together (from the factor diff and the lattice, whatever metrics exist)."""
    next_steps: list[str]
    """Commands that get the missing evidence (replicates, ablation runs)."""
    metrics: list[MetricRow]
    """Every metric side by side."""
    attribution: list[HeadlineAttribution]
    lattice: Lattice | None
    missing: list[MissingRun]
    problems: list[str]
    """What could not be done (a broken analysis module...)."""
    notes: list[str]
    settings: Settings
    runs_a: list[RunData] = field(repr=False)
    runs_b: list[RunData] = field(repr=False)
    catalog: Catalog = field(repr=False)
    node_sets: list[tuple[str, ...]] = field(default_factory=list)
    """Of ``confounded_sets``, the factors on which the nodes of one side's run disagree."""

    def confounded(self) -> list[dict[str, Any]]:
        """Factor sets that changed together, with each headline's share of them where it was measured."""
        found: dict[tuple[str, ...], dict[str, Any]] = {
            s: {"factors": list(s), "message": f"confounded: {', '.join(s)} "
                + ("differ between the nodes of one run" if s in self.node_sets else "changed together"), "shares": {}}
            for s in self.confounded_sets
        }
        for att in self.attribution:
            for share in att.confounded:
                if share.factors in found:
                    found[share.factors]["shares"][att.headline] = {
                        "share": share.share, "ci": list(share.ci) if share.ci else None, "verdict": share.verdict}
        return list(found.values())


def compare(con: duckdb.DuckDBPyConnection, a: Ref, b: Ref, options: CompareOptions | None = None) -> Comparison:
    """Compare side ``a`` with side ``b`` (see the module docstring). Raises :class:`~ledger.errors.BadInput`
    subclasses for unknown or ambiguous refs, a receipt compared with itself, groups that are not
    replicate groups, and a task mismatch (unless allowed)."""
    options = options or CompareOptions()
    settings = options.settings
    catalog = Catalog.load(con)
    side_a = resolve_side(con, catalog, "A", a.ref, a.group)
    side_b = resolve_side(con, catalog, "B", b.ref, b.group)
    check_distinct(side_a, side_b)
    receipts: dict[str, Receipt] = {}

    def receipt(rid: str) -> Receipt:
        if rid not in receipts:
            receipts[rid] = Receipt.model_validate(catalog[rid].data)
        return receipts[rid]

    groups = side_a.is_group or side_b.is_group
    diff = factor_diff(receipt(side_a.ids[0]), receipt(side_b.ids[0]), ignore=(SEED,) if groups else ())
    comparable = check_task(diff, options.allow_task_change)
    # a job whose nodes disagree is not one configuration: its metrics mix configurations (confounded)
    def nodes_of(side: Side) -> list[tuple[Factor, str]]:  # over every run of the side, each finding once
        return list(dict.fromkeys(d for rid in side.ids for d in node_differences(receipt(rid))))

    within = {side.name: nodes_of(side) for side in (side_a, side_b)}
    same_config = not (set(diff.factors) - {SEED}) and not any(within.values())
    replicates: dict[str, list[str]] = {}
    if options.replicates and not same_config:  # one configuration's replicates would belong to both sides
        taken = set(side_a.ids) | set(side_b.ids)
        sides = []
        for side in (side_a, side_b):
            extra = [] if side.is_group else replicates_of(catalog, side.ids[0], taken)
            replicates[side.name] = extra
            sides.append(replace(side, ids=side.ids + tuple(extra)) if extra else side)
        side_a, side_b = sides
    loaded: dict[str, RunData] = {}

    def run(rid: str) -> RunData:
        if rid not in loaded:
            loaded[rid] = load_run(con, rid, receipt(rid))
        return loaded[rid]

    from ledger import progress

    with progress.task("reading the runs' tables", len(side_a.ids) + len(side_b.ids), "runs") as advance:
        runs_a: list[RunData] = []
        runs_b: list[RunData] = []
        for i in side_a.ids + side_b.ids:
            (runs_a if len(runs_a) < len(side_a.ids) else runs_b).append(run(i))
            advance(len(runs_a) + len(runs_b))
    floor_runs: list[list[RunData]] = []
    if options.noise_floor:
        stacks = {stack_class(catalog[side_a.ids[0]]), stack_class(catalog[side_b.ids[0]])}
        floor_runs = [[load_run_cached(con, i, receipt(i)) for i in g]
                      for g in floor_groups(catalog, stacks, side_a.ids + side_b.ids)]
    found = plugins() if options.plugins else Plugins()
    heads = headlines(found.headlines)
    with progress.task("comparing the metrics"):
        rows = compare_all(runs_a, runs_b, settings, found.metrics, [h.metric for h in heads], floor_runs)
    identical = same_config and len(runs_a) == len(runs_b) == 1 and _same_losses(runs_a[0], runs_b[0])
    lattice = build_lattice(catalog, side_a, side_b)
    attribution: list[HeadlineAttribution] = []
    missing: list[MissingRun] = []
    if options.attribution and not same_config:  # no factor changed: nothing to attribute
        with progress.task("reading the ablation lattice's runs"):
            node_runs = {s: [run(i) for i in ids] for s, ids in lattice.nodes.items()}
        for h in heads:
            floor = _headline_floor(h, floor_runs)
            attribution.append(attribute(lattice, h, node_runs, settings.rng(f"attribution:{h.name}"),
                                         settings.n_boot, settings.level, floor))
        b_entry = catalog[side_b.ids[0]]
        for base, target in missing_nodes(lattice):
            (adds,) = tuple(target - base)
            factors = tuple(f for f in lattice.factors if f in target)
            missing.append(missing_run(catalog, catalog[lattice.nodes[base][0]], b_entry, factors, adds))
    next_steps: list[str] = []
    if any(r.verdict == INCONCLUSIVE or (r.headline and r.runs_for_power is not None) for r in rows):
        next_steps += commands_for_replicates(_ref_text(side_a, catalog), _ref_text(side_b, catalog))
    next_steps += [m.command for m in missing if m.command]
    notes = _notes(diff, same_config, identical, comparable, runs_a + runs_b, replicates, rows)
    within_sets: list[tuple[str, ...]] = []
    for side in (side_a, side_b):
        differing = nodes_of(side)  # the replicates found since included
        if differing:
            within_sets.append(tuple(dict.fromkeys(f.value for f, _ in differing)))
            notes.append(f"the nodes of {side.name} ({_ref_text(side, catalog)}) differ: "
                         + "; ".join(f"{f.value}: {text}" for f, text in differing)
                         + " - its metrics mix configurations (confounded)")
    sets = confounded_sets(lattice) + [s for s in within_sets if s not in confounded_sets(lattice)]
    return Comparison(side_a, side_b, comparable, diff, same_config, identical, replicates, sets,
                      next_steps, rows, attribution, lattice, missing, list(found.problems), notes, settings,
                      runs_a, runs_b, catalog, within_sets)


def _same_losses(a: RunData, b: RunData) -> bool:
    """Bit-identical loss curves (same steps, same values, NaN where the other has NaN)."""
    if a.n_steps == 0 or a.n_steps != b.n_steps:
        return False
    la, lb = np.asarray(a.steps["loss"], dtype=np.float64), np.asarray(b.steps["loss"], dtype=np.float64)
    return bool(np.array_equal(np.asarray(a.steps["step"]), np.asarray(b.steps["step"]))
                and np.array_equal(la, lb, equal_nan=True))


def _headline_floor(headline: Headline, groups: list[list[RunData]]) -> Floor | None:
    """The headline's noise floor: its per-run values in each replicate group."""
    if not groups:
        return None
    vals = headline.values(groups)
    return learn_floor([[math.exp(v) for v in runs] for runs in vals.runs], log_scale=True)


def _ref_text(side: Side, catalog: Catalog) -> str:
    """How to name a side in a command: its name when it has one, else a short id."""
    entry = catalog[side.ids[0]]
    return entry.name or entry.id[:12]


def _notes(diff: FactorDiff, same_config: bool, identical: bool, comparable: bool, runs: list[RunData],
           replicates: dict[str, list[str]], rows: list[MetricRow]) -> list[str]:
    notes = []
    if not comparable:
        notes.append("the tasks differ (compared because --allow-task-change was given): metrics of different "
                     "tasks are not evidence that either stack is better")
    differing = (f" (record fields that differ: {', '.join(sorted({c.path for c in diff.record}))})"
                 if diff.record and same_config else "")
    if identical:
        notes.append("identical: one configuration and bit-identical loss curves; the speed is still tested "
                     "against the run-to-run noise: a difference beyond it is a finding about the runs" + differing)
    elif same_config:
        which = "only in the seed" if diff.factors else "in no causal factor"
        notes.append(f"A and B differ {which}: they are replicates of one configuration. They are still tested: "
                     "a difference beyond the run-to-run noise is a finding about the runs (a node, a driver, a "
                     "noisy neighbour), not about the configuration" + differing)
    if same_config:
        found = [r for r in rows if r.verdict in ("better", "worse", "higher", "lower")]
        if found:
            notes.append("finding: A and B are one configuration and differ in " + ", ".join(r.name for r in found)
                         + ": compare what differed between their runs (host, load, drivers, the time they ran: "
                           "`ledger history` finds when) before trusting either")
    for run in runs:
        if run.n_steps == 0:
            notes.append(f"{run.label} has no step rows: its step metrics are unavailable")
    for side, ids in replicates.items():
        if ids:
            notes.append(f"{side} includes {len(ids)} replicate(s) from the ledger (identical but for the seed)")
    notes += _evidence_banners(rows)
    return notes


def _evidence_banners(rows: list[MetricRow]) -> list[str]:
    """What the inconclusive and undecided rows need, in words that agree with the rows: a headline that was
    judged is never summed up as lacking evidence because a side row was."""
    out = []
    heads = [r for r in rows if r.headline and r.verdict == INCONCLUSIVE]
    side = [r for r in rows if not r.headline and r.verdict == INCONCLUSIVE]
    judged = [r for r in rows if r.headline and r.verdict not in (INCONCLUSIVE, "unavailable")]
    if heads:
        out.append("inconclusive: " + ", ".join(r.name for r in heads) + " had one run per side and no noise floor "
                   "on this hardware and drivers; a verdict between two configurations needs between-run variance "
                   "(see next steps)")
    if side:
        names = ", ".join(r.name for r in side[:6]) + (f" and {len(side) - 6} more" if len(side) > 6 else "")
        out.append(f"{len(side)} row(s) outside the headlines are inconclusive ({names}): no noise floor for them "
                   "on this hardware and drivers"
                   + (f"; the headline rows ({', '.join(r.name for r in judged)}) were judged" if judged else ""))
    for r in rows:
        if r.headline and r.runs_for_power is not None:
            out.append(f"{r.name} is not decided: its interval still holds a change of {100 * r.threshold:g}% or "
                       f"more; {r.runs_for_power} runs per side would give 80% power for that change at the "
                       "measured noise (next steps: `ledger ab --until-verdict` records rounds until it is decided)")
    return out


# ------------------------------------------------------------------------------------------------ JSON
def _share_json(metric: str, share: Share) -> dict[str, Any]:
    return {"metric": metric, "factor": share.factors[0] if len(share.factors) == 1 else list(share.factors),
            "share": share.share, "ci": list(share.ci) if share.ci else None, "spread": list(share.spread),
            "fraction": share.fraction, "verdict": share.verdict}


def to_json(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-able data with stable keys (non-finite numbers as null)."""
    data: dict[str, Any] = json_safe(_to_json(c))
    return data


def _to_json(c: Comparison) -> dict[str, Any]:
    return {
        "a": c.a.to_json(c.catalog),
        "b": c.b.to_json(c.catalog),
        "comparable": c.comparable,
        "same_config": c.same_config,
        "identical": c.identical,
        "next_steps": c.next_steps,
        "changed_factors": [
            {"factor": f, "changes": [{"path": ch.path, "a": ch.a, "b": ch.b} for ch in changes]}
            for f, changes in c.diff.changed.items()
        ],
        "unchanged_factors": c.diff.unchanged,
        "record_changes": [{"path": ch.path, "a": ch.a, "b": ch.b} for ch in c.diff.record],
        "metrics": [row.to_json() for row in c.metrics],
        "attribution": [_share_json(att.headline, s) for att in c.attribution for s in att.shares],
        "attribution_totals": [
            {
                "metric": att.headline, "row": att.metric, "direction": att.direction, "total": att.total,
                "ci": list(att.total_ci) if att.total_ci else None, "unexplained": att.unexplained,
                "unexplained_ci": list(att.unexplained_ci) if att.unexplained_ci else None,
                "orders": att.orders, "orders_possible": att.orders_possible, "shapley": att.shapley,
                "paths": att.paths, "confounded": [_share_json(att.headline, s) for s in att.confounded],
                "noise": None if att.noise is None else asdict(att.noise), "total_verdict": att.total_verdict,
                "reason": att.reason, "note": att.note,
            }
            for att in c.attribution
        ],
        "confounded": c.confounded(),
        "missing_ablations": [m.to_json() for m in c.missing],
        "lattice": None if c.lattice is None else {
            "factors": list(c.lattice.factors),
            "nodes": [{"factors": sorted(s), "ids": list(ids)} for s, ids in
                      sorted(c.lattice.nodes.items(), key=lambda kv: (len(kv[0]), sorted(kv[0])))],
            "edges": len(c.lattice.edges()),
        },
        "replicates": c.replicates,
        "settings": asdict(c.settings),
        "problems": c.problems,
        "notes": c.notes,
    }
