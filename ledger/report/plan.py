"""Terminal rendering of `ledger fit law`, `ledger fit perf` and `ledger plan` (no logic here: every figure
comes from :mod:`ledger.planning`). User text (receipt names, file paths) is escaped for rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ledger.planning.api import LawReport, PerfReport
from ledger.planning.calibrate import held_out_phrase
from ledger.planning.law import FORM, PARAMS
from ledger.planning.plan import Choice, PlanResult
from ledger.planning.ranks import ranks
from ledger.report.console import console


def _human(x: float, unit: str = "") -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {suffix}{unit}"
    return f"{x:.3g} {unit}".strip()


def _say(text: str) -> None:
    console.print(escape(text))


# ------------------------------------------------------------------------------------------- fit law
def render_law(r: LawReport) -> None:
    f = r.fit
    what = f"{r.loss} loss" + (f" at {', '.join(f'{t:.4g}' for t in r.at_tokens)} tokens" if r.at_tokens
                               else " (final)")
    console.print(f"[bold]scaling law[/bold] fitted on {f.n_observations} observations from {f.n_receipts} "
                  f"receipts ({escape(what)})")
    _say(f.variation)
    if f.design is not None:
        _say(f"design: {f.design.points} distinct (N_tot, D, S, G) points for {f.design.free} free parameters")
    table = Table(title=FORM)
    for col in ("parameter", "value", "95% interval", "status"):
        table.add_column(col)
    for p in PARAMS:
        lo, hi = f.ci[p]
        status = f"fixed: {f.fixed[p]}" if p in f.fixed else "fitted"
        table.add_row(p, f"{getattr(f.law, p):.4g}", "-" if p in f.fixed else f"[{lo:.4g}, {hi:.4g}]",
                      escape(status))
    console.print(table)
    i, h = f.in_sample, f.held_out
    console.print(f"in-sample: RMSE of log loss {i['rmse_log']:.4f}, MAPE {i['mape_pct']:.2f}% "
                  f"(max {i['max_ape_pct']:.2f}%, n = {int(i['n'])})")
    console.print(f"held-out ({int(h['folds'])}-fold over {int(h['receipts'])} receipts): RMSE of log loss "
                  f"{h['rmse_log']:.4f}, MAPE {h['mape_pct']:.2f}% (max {h['max_ape_pct']:.2f}%, n = {int(h['n'])})")
    sup = ", ".join(f"{k} {lo:.4g}..{hi:.4g}" for k, (lo, hi) in f.support.items())
    _say(f"support (a plan with --law-from searches up to its sparsity): {sup}")
    console.print(f"Huber delta {f.huber_delta:.3g} on log residuals; {f.inits} initialisations; "
                  f"{f.bootstrap} bootstrap refits")
    for note in f.notes:
        _say(f"note: {note}")
    for s in r.skipped:
        _say(f"skipped {s.label}: {s.reason}")


# ------------------------------------------------------------------------------------------ fit perf
def render_perf(r: PerfReport) -> None:
    for f in r.fits:
        m = f.metrics
        factors = ", ".join(f"{k} x{v:.3g}" + (" (fixed)" if k in f.fixed else "")
                            for k, v in f.calibration.to_dict().items())
        console.print(f"[bold]{escape(f.hardware)}[/bold]: {int(m['receipts'])} receipts; calibration {factors}")
        if f.design is not None:
            _say(f"design: {f.design.points} distinct (geometry, plan) points for {f.design.free} free factors")
        table = Table(title="step time and MFU: measured vs predicted (calibrated; held out = its point left out)")
        for col in ("receipt", "E", "k", "G", "S", "batch", "step measured", "predicted", "held out",
                    "MFU measured", "MFU held out", "rank measured", "rank held out"):
            table.add_column(col)
        rm = ranks([-row["measured_mfu"] for row in f.rows])
        rh = ranks([-row["held_out_mfu"] for row in f.rows])
        for i, row in enumerate(f.rows):
            g = row["geometry"]
            table.add_row(escape(row["label"]), str(g["experts"]), str(g["top_k"]), f"{g['granularity']:g}",
                          f"{g['sparsity']:.4g}", str(row["plan"]["global_batch"]),
                          f"{row['measured_step_s'] * 1e3:.2f} ms", f"{row['predicted_step_s'] * 1e3:.2f} ms",
                          f"{row['held_out_step_s'] * 1e3:.2f} ms", f"{100 * row['measured_mfu']:.2f}%",
                          f"{100 * row['held_out_mfu']:.2f}%", f"{rm[i]:g}", f"{rh[i]:g}")
        console.print(table)
        console.print(f"MAPE of step time: nominal {m['mape_nominal_pct']:.1f}%, calibrated in-sample "
                      f"{m['mape_in_sample_pct']:.1f}%, held out {m['mape_held_out_pct']:.1f}% "
                      f"({held_out_phrase(m)})")
        if "replicate_spread_max_pct" in m:
            console.print(f"replicates: the same point's runs differ by up to {m['replicate_spread_max_pct']:.1f}% "
                          f"(median {m['replicate_spread_median_pct']:.1f}% over {int(m['replicated_points'])} "
                          f"points); per receipt, held out {m['mape_held_out_receipts_pct']:.1f}%")
        console.print(f"MFU rank agreement (Spearman / Kendall): held out {m['spearman_held_out']:.3f} / "
                      f"{m['kendall_held_out']:.3f}; in-sample {m['spearman_in_sample']:.3f} / "
                      f"{m['kendall_in_sample']:.3f}; uncalibrated {m['spearman_nominal']:.3f} / "
                      f"{m['kendall_nominal']:.3f}")
        for k, why in f.fixed.items():
            _say(f"{k}: {why}")
        for note in f.notes:
            _say(f"note: {note}")
    for s in r.skipped:
        _say(f"skipped {s.label}: {s.reason}")


# ---------------------------------------------------------------------------------------------- plan
def render_plan(r: PlanResult, plot: Path | None = None) -> None:
    inp = r.inputs
    nodes = f"{inp['nodes']} node{'s' if inp['nodes'] != 1 else ''}"
    console.print(f"[bold]{escape(inp['hardware'])}[/bold] x {inp['devices']} ({nodes}), {inp['days']:g} days, "
                  f"peak {_human(inp['peak_flops_per_device'], 'FLOP/s')} per device ({inp['peak']}), "
                  f"C_peak {_human(inp['c_peak'], 'FLOP/s')}")
    _say(f"goodput {inp['goodput']:.3f}: {inp['goodput_source']}")
    _say(f"performance model: {inp['calibration_source']}")
    _render_law_sources(r.law)
    table = Table(title="cluster-optimal (deliverable compute) vs compute-optimal (fixed model-FLOP budget)")
    table.add_column("")
    table.add_column("cluster-optimal", justify="right")
    table.add_column("compute-optimal", justify="right")
    a, b = r.cluster_optimal, r.compute_optimal

    def geo(c: Choice) -> str:
        g = c.geometry
        return f"{g['layers']} x {g['hidden']}, E={g['experts']}, k={g['top_k']}, G={g['granularity']:g}"

    def par(c: Choice) -> str:
        p = c.plan
        return (f"tp={p['tp']} pp={p['pp']} ep={p['ep']} dp={p['dp']} mb={p['micro_batch']} "
                f"recompute={p['recompute']}")

    rows = [
        ("sparsity S", f"{a.geometry['sparsity']:.4g}", f"{b.geometry['sparsity']:.4g}"),
        ("geometry", geo(a), geo(b)),
        ("total / active params", f"{_human(a.total_params)} / {_human(a.active_params)}",
         f"{_human(b.total_params)} / {_human(b.active_params)}"),
        ("parallel plan", par(a), par(b)),
        ("predicted MFU", f"{100 * a.mfu:.1f}%", f"{100 * b.mfu:.1f}%"),
        ("memory per device", _human(a.memory_bytes, "B"), _human(b.memory_bytes, "B")),
        ("tokens (own budget)", _human(a.tokens), _human(b.tokens)),
        ("predicted loss (own budget)", f"{a.loss:.4f}", f"{b.loss:.4f}"),
        ("tokens on this cluster", _human(a.tokens), _human(r.compute_optimal_deliverable_tokens)),
        ("predicted loss on this cluster", f"{a.loss:.4f}", f"{r.compute_optimal_deliverable_loss:.4f}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    curve = Table(title="best predicted loss at each sparsity (point law)")
    for col in ("S", "fixed model-FLOP budget", "deliverable compute", "MFU (deliverable best)"):
        curve.add_column(col, justify="right")
    for c in r.curves:
        curve.add_row(f"{c['sparsity']:.4g}", f"{c['loss_fixed_budget']:.4f}", f"{c['loss_deliverable']:.4f}",
                      f"{100 * c.get('mfu_of_deliverable_best', float('nan')):.1f}%")
    console.print(curve)
    v, sup, u = r.verdict, r.support, r.uncertainty
    _say(f"frontier S = {sup['frontier']:.6g}: {sup['frontier_source']}")
    console.print(f"[bold]{escape(v['finding'])}[/bold]")
    console.print(f"compute-optimal sparsity {v['compute_optimal_sparsity']:.4g}"
                  f"{' (at the frontier)' if v['compute_optimal_at_frontier'] else ''}; cluster-optimal "
                  f"{v['cluster_optimal_sparsity']:.4g}{' (interior)' if v['cluster_optimal_interior'] else ''}; "
                  f"on this cluster the cluster-optimal choice is {v['loss_gain_over_compute_optimal']:.4f} lower in "
                  "predicted loss (point law)")
    if u.get("draws"):
        gap = u["loss_gap"]
        console.print(f"uncertainty ({u['draws']} draws of {', '.join(u['resampled'])} from {escape(u['from'])}; "
                      f"held fixed: {', '.join(u['held_fixed'])}): P(cluster-optimal beats compute-optimal on this "
                      f"cluster) = {u['p_cluster_optimal_beats_compute_optimal']:.2f}"
                      f"{' (they are the same geometry)' if u['same_choice'] else ''}; loss gap {gap['point']:.4f} "
                      f"(95% interval {gap['ci95'][0]:.4f} to {gap['ci95'][1]:.4f}); P(interior cluster-optimal) = "
                      f"{u['p_cluster_optimal_interior']:.2f}; P(compute-optimal at the frontier) = "
                      f"{u['p_compute_optimal_at_frontier']:.2f}")
    else:
        _say(f"uncertainty: {u.get('note', 'none')}")
    for line in sup["extrapolation"]:
        _say(f"extrapolation: {line}")
    if r.sensitivity is not None:
        _render_sensitivity(r.sensitivity)
    console.print(f"fixed model-FLOP budget {r.fixed_budget_flops:.3g} FLOP; searched {r.search['geometries']} "
                  f"geometries ({r.search['memory_feasible']} fit in memory), {r.search['plans_evaluated']:,} "
                  f"plans in {r.search['seconds']:.2f} s")
    for note in r.notes:
        _say(f"note: {note}")
    if plot is not None:
        _say(f"plot written to {plot}")


def _render_law_sources(law: dict[str, Any]) -> None:
    _say(f"law: {law['name']}")
    table = Table(title=law["form"])
    for col in ("parameter", "value", "95% interval", "source"):
        table.add_column(col)
    for p, d in law["parameters"].items():
        iv = d["ci95"]
        table.add_row(p, f"{d['value']:.4g}", f"[{iv[0]:.4g}, {iv[1]:.4g}]" if iv else "-", escape(d["source"]))
    console.print(table)
    for c in law["caveats"]:
        _say(f"caveat: {c}")


def _render_sensitivity(rows: list[dict[str, Any]]) -> None:
    table = Table(title="sensitivity: one coefficient at a time (others at their values)")
    for col in ("parameter", "moved to", "cluster-optimal S", "interior", "loss gap", "optimum changes side at",
                "decides"):
        table.add_column(col)
    for row in rows:
        flip = row["flips_at"]
        where = "-" if flip is None else f"{flip:.4g}" + (" (inside its interval)" if row["flip_inside_interval"]
                                                           else "")
        table.add_row(row["parameter"], f"{row['kind']}: " + ", ".join(f"{x:.4g}" for x in row["values"]),
                      ", ".join(f"{x:.4g}" for x in row["cluster_optimal_sparsity"]),
                      ", ".join("yes" if x else "no" for x in row["cluster_optimal_interior"]),
                      ", ".join(f"{x:.4f}" for x in row["loss_gap"]), where, "yes" if row["decides"] else "no")
    console.print(table)
    deciding = [row["parameter"] for row in rows if row["decides"]]
    console.print("coefficients that decide interior against frontier within their intervals: "
                  + (", ".join(deciding) if deciding else "none (no single coefficient within its interval moves "
                     "the cluster-optimal choice between interior and frontier)"))
