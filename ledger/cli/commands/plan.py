"""`ledger fit law`, `ledger fit perf` and `ledger plan`: a scaling law and a performance model fitted on
receipts, and the cluster-optimal MoE geometry under deliverable compute (issue 9, MOSAIC)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option


@click.group()
def fit() -> None:
    """Fit models on receipts: a sparse-MoE scaling law (law) or the performance model (perf).

    Example:

        ledger fit law --where tag.sweep=sparsity --json > law.json
    """


@fit.command("law")
@click.option("--where", "where", metavar="EXPR", help="Only receipts matching this filter (see `ledger ls`).")
@click.option("--loss", "loss", type=click.Choice(["train", "val"]), default="train", show_default=True,
              help="train: mean training loss over the last 5% of tokens; val: the last validation loss.")
@click.option("--at-tokens", "at_tokens", metavar="T1,T2,...",
              help="Losses at these matched token counts (one observation per receipt and count) instead of "
                   "the final loss.")
@click.option("--bootstrap", type=click.IntRange(0, 10000), default=200, show_default=True,
              help="Bootstrap resamples (over receipts) for the 95% intervals.")
@click.option("--inits", type=click.IntRange(1, 1000), default=24, show_default=True,
              help="Initialisations of the non-linear fit.")
@click.option("--huber-delta", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Huber threshold on log-loss residuals (default: 1.345 x their robust scale).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of initialisations and resampling.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON (what `ledger plan --law-from` reads).")
@ledger_option
@click.pass_context
def fit_law(ctx: click.Context, where: str | None, loss: str, at_tokens: str | None, bootstrap: int, inits: int,
            huber_delta: float | None, seed: int, as_json: bool, ledger_path: Path | None) -> None:
    """Fit L(N_tot, S, D, G) = a/N_tot^alpha + b/D^beta + c/(1-S)^lam + j/((1-S)^delta N_tot^gamma G^eta) + e.

    N_tot: total parameters; D: training tokens; S = 1 - top_k/experts; G = dense FFN width / expert width.
    Robust non-linear least squares (Huber loss on log-loss residuals, Levenberg-Marquardt, several
    initialisations); parameters the receipts cannot identify are fixed at the default law's values and
    listed with the reason; 95% intervals from a bootstrap over receipts; held-out error from k-fold
    cross-validation over receipts.

    Example:

        ledger fit law --where tag.sweep=sparsity --at-tokens 20480,40960 --json > law.json
    """
    from ledger.planning.fitting import fit_law as run_fit
    from ledger.planning.observations import law_data, select
    from ledger.planning.plan import parse_list
    from ledger.store import index

    counts = parse_list(at_tokens, "--at-tokens", float) if at_tokens else None
    with index.reader(ledger_from(ctx, ledger_path)) as con:
        receipts = select(con, where)
        data, labels, skipped = law_data(con, receipts, loss, counts)
    from ledger.planning.errors import TooFewReceipts

    try:
        result = run_fit(data, inits=inits, bootstrap=bootstrap, huber_delta=huber_delta, seed=seed)
    except TooFewReceipts as exc:
        if skipped:
            reasons = sorted({s.reason for s in skipped})
            raise TooFewReceipts(f"{exc} ({len(receipts)} matched; {len(skipped)} skipped: "
                                 f"{'; '.join(reasons[:3])})") from None
        raise
    payload = result.to_dict() | {"loss": loss, "at_tokens": list(counts) if counts else None,
                                  "receipts_used": labels,
                                  "skipped": [{"receipt": s.label, "reason": s.reason} for s in skipped]}
    if as_json:
        echo_json(payload)
        return
    _render_law(result, skipped, loss, counts)


def _render_law(result: Any, skipped: list[Any], loss: str, counts: Any) -> None:
    from rich.table import Table

    from ledger.planning.law import PARAMS
    from ledger.report.console import console

    what = f"{loss} loss" + (f" at {', '.join(f'{t:.4g}' for t in counts)} tokens" if counts else " (final)")
    console.print(f"[bold]scaling law[/bold] fitted on {result.n_observations} observations from "
                  f"{result.n_receipts} receipts ({what})")
    console.print(result.variation)
    table = Table(title="L = a/N_tot^alpha + b/D^beta + c/(1-S)^lam + j/((1-S)^delta N_tot^gamma G^eta) + e")
    for col in ("parameter", "value", "95% interval", "status"):
        table.add_column(col)
    for p in PARAMS:
        lo, hi = result.ci[p]
        status = f"fixed: {result.fixed[p]}" if p in result.fixed else "fitted"
        table.add_row(p, f"{getattr(result.law, p):.4g}", "-" if p in result.fixed else f"[{lo:.4g}, {hi:.4g}]",
                      status)
    console.print(table)
    i, h = result.in_sample, result.held_out
    console.print(f"in-sample: RMSE of log loss {i['rmse_log']:.4f}, MAPE {i['mape_pct']:.2f}% "
                  f"(max {i['max_ape_pct']:.2f}%)")
    console.print(f"held-out ({int(h['folds'])}-fold over receipts): RMSE of log loss {h['rmse_log']:.4f}, "
                  f"MAPE {h['mape_pct']:.2f}% (max {h['max_ape_pct']:.2f}%)")
    console.print(f"Huber delta {result.huber_delta:.3g} on log residuals; {result.inits} initialisations; "
                  f"{result.bootstrap} bootstrap refits")
    for note in result.notes:
        console.print(f"note: {note}")
    for s in skipped:
        console.print(f"skipped {s.label}: {s.reason}")


@fit.command("perf")
@click.option("--where", "where", metavar="EXPR", help="Only receipts matching this filter (see `ledger ls`).")
@click.option("--hardware", "hardware", metavar="NAME|FILE",
              help="Treat every receipt as run on this profile (default: matched from each receipt's GPU, or CPU).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON (what `ledger plan "
              "--perf-from` reads).")
@ledger_option
@click.pass_context
def fit_perf(ctx: click.Context, where: str | None, hardware: str | None, as_json: bool,
             ledger_path: Path | None) -> None:
    """Calibrate the operator-level performance model on receipts; MFU ranking and held-out MAPE.

    The model predicts step time, MFU and memory per device from the geometry (layers, hidden, experts,
    top-k, granularity, sequence length, batch), the parallel plan (TP/EP/PP/DP, micro-batch) and a
    hardware profile: dense and grouped GEMMs (rooflines), attention, all-to-all, tensor-parallel and
    pipeline communication, pipeline bubbles, data-parallel gradient traffic, CPU launch latency per
    kernel. Four factors (compute, memory, comm, launch) are fitted per hardware profile by least squares
    of log predicted against log measured step time; held-out error by leave-one-out.

    Example:

        ledger fit perf --where tag.sweep=cpu-sg --json > perf.json
    """
    from ledger.planning import hardware as hwmod
    from ledger.planning.calibrate import fit_perf as run_fit
    from ledger.planning.observations import perf_obs, select
    from ledger.store import index

    hw = hwmod.resolve(hardware) if hardware else None
    with index.reader(ledger_from(ctx, ledger_path)) as con:
        receipts = select(con, where)
    obs, skipped = perf_obs(receipts, hw)
    from ledger.planning.errors import TooFewReceipts

    try:
        fits = run_fit(obs)
    except TooFewReceipts as exc:
        if skipped:
            reasons = sorted({s.reason for s in skipped})
            raise TooFewReceipts(f"{exc} ({len(receipts)} matched; {len(skipped)} skipped: "
                                 f"{'; '.join(reasons[:3])})") from None
        raise
    if as_json:
        echo_json({"profiles": [f.to_dict() for f in fits],
                   "skipped": [{"receipt": s.label, "reason": s.reason} for s in skipped]})
        return
    _render_perf(fits, skipped)


def _render_perf(fits: list[Any], skipped: list[Any]) -> None:
    from rich.table import Table

    from ledger.planning.ranks import ranks
    from ledger.report.console import console

    for f in fits:
        m = f.metrics
        factors = ", ".join(f"{k} x{v:.3g}" + (" (fixed)" if k in f.fixed else "")
                            for k, v in f.calibration.to_dict().items())
        console.print(f"[bold]{f.hardware}[/bold]: {int(m['receipts'])} receipts; calibration {factors}")
        table = Table(title="step time and MFU: measured vs predicted (calibrated; held out = leave-one-out)")
        for col in ("receipt", "E", "k", "G", "S", "step measured", "predicted", "held out", "MFU measured",
                    "MFU held out", "rank measured", "rank held out"):
            table.add_column(col)
        rm = ranks([-r["measured_mfu"] for r in f.rows])
        rh = ranks([-r["held_out_mfu"] for r in f.rows])
        for i, r in enumerate(f.rows):
            g = r["geometry"]
            table.add_row(r["label"], str(g["experts"]), str(g["top_k"]), f"{g['granularity']:g}",
                          f"{g['sparsity']:.4g}", f"{r['measured_step_s'] * 1e3:.2f} ms",
                          f"{r['predicted_step_s'] * 1e3:.2f} ms", f"{r['held_out_step_s'] * 1e3:.2f} ms",
                          f"{100 * r['measured_mfu']:.2f}%", f"{100 * r['held_out_mfu']:.2f}%",
                          f"{rm[i]:g}", f"{rh[i]:g}")
        console.print(table)
        console.print(f"MAPE of step time: nominal {m['mape_nominal_pct']:.1f}%, calibrated in-sample "
                      f"{m['mape_in_sample_pct']:.1f}%, held out {m['mape_held_out_pct']:.1f}%")
        console.print(f"MFU rank agreement (Spearman / Kendall): held out {m['spearman_held_out']:.3f} / "
                      f"{m['kendall_held_out']:.3f}; in-sample {m['spearman_in_sample']:.3f} / "
                      f"{m['kendall_in_sample']:.3f}; uncalibrated {m['spearman_nominal']:.3f} / "
                      f"{m['kendall_nominal']:.3f}")
        for k, why in f.fixed.items():
            console.print(f"{k}: {why}")
        for note in f.notes:
            console.print(f"note: {note}")
    for s in skipped:
        console.print(f"skipped {s.label}: {s.reason}")


# ---------------------------------------------------------------------------------------------- plan
def _calibration(path: Path | None, hw_name: str) -> tuple[Any, str]:
    from ledger.errors import BadInput
    from ledger.planning.perf import NOMINAL, Calibration

    if path is None:
        return NOMINAL, f"nominal {hw_name} profile (no --perf-from)"
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"--perf-from {path}: not readable JSON of `ledger fit perf --json` ({exc})") from exc
    profiles = data.get("profiles", []) if isinstance(data, dict) else []
    for p in profiles:
        if isinstance(p, dict) and str(p.get("hardware", "")).lower() == hw_name.lower():
            try:
                return Calibration(**{k: float(v) for k, v in p["calibration"].items()}), \
                    f"calibrated on {int(p['metrics']['receipts'])} {hw_name} receipts ({path})"
            except (KeyError, TypeError, ValueError) as exc:
                raise BadInput(f"--perf-from {path}: malformed calibration ({exc})") from exc
    names = ", ".join(str(p.get("hardware")) for p in profiles if isinstance(p, dict)) or "none"
    return NOMINAL, f"nominal {hw_name} profile ({path} holds calibrations for {names} only)"


@click.command()
@click.option("--hardware", "hardware", required=True, metavar="NAME|FILE",
              help="B200, H200, H100, CPU, or a JSON/TOML profile file.")
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Nodes of the cluster.")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), required=True, help="Training window.")
@click.option("--goodput", "goodput", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Share of the window spent on productive steps (default 0.9).")
@click.option("--goodput-from", "goodput_from", metavar="REF|TAG=VALUE",
              help="Use the goodput measured on a run (any attempt's ref) or a group of runs.")
@click.option("--law-from", "law_from", type=click.Path(dir_okay=False, path_type=Path),
              help="A law written by `ledger fit law --json` (default: the documented default law).")
@click.option("--perf-from", "perf_from", type=click.Path(dir_okay=False, path_type=Path),
              help="A calibration written by `ledger fit perf --json` (used for the matching profile).")
@click.option("--tokens", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Fixed training tokens: keep geometries whose model FLOPs fit the deliverable compute.")
@click.option("--budget-flops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The fixed model-FLOP budget (default: C_peak x goodput x window x the chosen plan's MFU).")
@click.option("--geometry", "geometry", metavar="SPEC",
              help="Evaluate one geometry, e.g. 'layers=32,hidden=4096,experts=64,top_k=4,granularity=2'.")
@click.option("--parallel", "parallel", metavar="SPEC",
              help="Pin plan dimensions, e.g. 'tp=2,pp=4,ep=8,micro_batch=1,recompute=0'.")
@click.option("--experts", default="8,16,32,64,128,256,512", show_default=True, help="Experts to search.")
@click.option("--top-k", "top_k", default="1,2,4,8", show_default=True, help="Top-k values to search.")
@click.option("--granularity", default="1,2,4,8", show_default=True, help="Granularities to search.")
@click.option("--widths", default="1024,1536,2048,3072,4096,5120,6144,7168,8192", show_default=True,
              help="Model widths (hidden) to search; layers = hidden / --aspect.")
@click.option("--micro-batch", "micro_batch", default="1,2", show_default=True,
              help="Micro-batch sizes (sequences) to search.")
@click.option("--aspect", type=click.FloatRange(min=0, min_open=True), default=128, show_default=True,
              help="hidden / layers of the searched geometries.")
@click.option("--max-sparsity", type=click.FloatRange(0, 1, max_open=True), default=0.985, show_default=True,
              help="The sparsity frontier of the search.")
@click.option("--seq-len", type=click.IntRange(min=1), default=4096, show_default=True)
@click.option("--vocab", type=click.IntRange(min=1), default=128000, show_default=True)
@click.option("--batch-tokens", type=click.FloatRange(min=1), default=4 * 2**20, show_default=True,
              help="Tokens per optimizer step.")
@click.option("--precision", default="bf16", show_default=True, help="bf16, fp8, fp32...")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the loss-against-sparsity plot (SVG) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@ledger_option
@click.pass_context
def plan(ctx: click.Context, hardware: str, nodes: int, days: float, goodput: float | None,
         goodput_from: str | None, law_from: Path | None, perf_from: Path | None, tokens: float | None,
         budget_flops: float | None, geometry: str | None, parallel: str | None, experts: str, top_k: str,
         granularity: str, widths: str, micro_batch: str, aspect: float, max_sparsity: float, seq_len: int, vocab: int,
         batch_tokens: float, precision: str, plot: Path | None, as_json: bool, ledger_path: Path | None) -> None:
    """Pick the cluster-optimal MoE geometry and parallel plan for a cluster and a training window.

    Enumerates geometries (widths x experts x top-k x granularity, and dense) x parallel plans (TP, PP,
    EP, DP, micro-batch, recomputation) that fit in memory, trains each for the window at the MFU the
    performance model predicts (deliverable compute = C_peak x MFU x goodput x window) and returns the one
    with the lowest loss the law predicts. Beside it: the compute-optimal choice under a fixed model-FLOP
    budget (the same compute at one MFU for every geometry), which ignores how MFU falls as experts get
    sparser and finer, and a loss-against-sparsity curve for both budgets (--plot FILE writes it as SVG).

    Example:

        ledger plan --hardware B200 --nodes 32 --days 20 --goodput-from crashy-run --plot plan.svg
    """
    from ledger.errors import BadInput
    from ledger.planning import hardware as hwmod
    from ledger.planning import law as lawmod
    from ledger.planning.geometry import Geometry, parse_spec
    from ledger.planning.plan import Space, parse_list, search

    if goodput is not None and goodput_from is not None:
        raise BadInput("give --goodput X or --goodput-from REF|TAG=VALUE, not both")
    hw = hwmod.resolve(hardware)
    if goodput_from is not None:
        from ledger.planning.observations import goodput_from as measure

        goodput, goodput_source = measure(ledger_from(ctx, ledger_path), goodput_from)
        if not goodput > 0:
            raise BadInput(f"--goodput-from {goodput_from}: measured goodput is 0; no productive time to plan with")
    elif goodput is not None:
        goodput_source = f"given: {goodput:g}"
    else:
        goodput = 0.9
        goodput_source = "default 0.9 (Meta reports >90% effective training time for Llama 3; measure yours " \
                         "with --goodput-from)"
    law, law_source = lawmod.load(law_from) if law_from else (lawmod.DEFAULT_LAW, lawmod.DEFAULT_SOURCE)
    cal, cal_source = _calibration(perf_from, hw.name)
    space = Space(
        widths=parse_list(widths, "--widths"), experts=parse_list(experts, "--experts"),
        top_k=parse_list(top_k, "--top-k"), granularity=parse_list(granularity, "--granularity", float),
        micro_batch=parse_list(micro_batch, "--micro-batch"), aspect=aspect, max_sparsity=max_sparsity,
        seq_len=seq_len, vocab=vocab, batch_tokens=batch_tokens,
        precision=precision,
    )
    geo = None
    if geometry:
        hidden = parse_spec(geometry, {}).get("hidden", 4096.0)
        spec = parse_spec(geometry, {
            "hidden": hidden, "layers": max(1.0, round(hidden / space.aspect)), "heads": max(1.0, hidden // 128),
            "ffn_hidden": space.ffn_mult * hidden, "experts": 1.0, "top_k": 1.0, "granularity": 1.0,
            "seq_len": float(seq_len), "vocab": float(vocab), "shared_experts": 0.0})
        spec.setdefault("moe_layers", spec["layers"] if spec["experts"] > 1 else 0.0)
        if spec["top_k"] > spec["experts"]:
            raise BadInput(f"--geometry: top_k ({spec['top_k']:g}) must be <= experts ({spec['experts']:g})")
        geo = Geometry.of(**spec)
    pinned = _parallel(parallel) if parallel else None
    inputs = {"hardware": hw.name, "hardware_source": hw.source, "nodes": nodes, "days": days,
              "goodput_source": goodput_source, "law": law.to_dict(), "law_source": law_source,
              "calibration": cal.to_dict(), "calibration_source": cal_source, "precision": precision}
    result = search(space, hw, nodes, days, goodput, law, cal, tokens=tokens, budget_flops=budget_flops,
                    geometry=geo, plan=pinned, inputs=inputs)
    if plot is not None:
        from ledger.planning.svg import plot as draw

        plot.write_text(draw(result))
    if as_json:
        echo_json(result.to_dict() | ({"plot": str(plot)} if plot else {}))
        return
    _render_plan(result, plot)


def _parallel(text: str) -> dict[str, int]:
    from ledger.errors import BadInput

    keys = ("tp", "pp", "ep", "dp", "micro_batch", "recompute")
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = item.partition("=")
        k = k.strip().replace("-", "_")
        if not sep or k not in keys:
            raise BadInput(f"--parallel: {item!r} is not KEY=VALUE with KEY one of {', '.join(keys)}")
        try:
            out[k] = int(v)
        except ValueError:
            raise BadInput(f"--parallel: {k} must be an integer, got {v.strip()!r}") from None
    return out


def _human(x: float, unit: str = "") -> str:
    for scale, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {suffix}{unit}"
    return f"{x:.3g} {unit}".strip()


def _render_plan(r: Any, plot: Path | None) -> None:
    from rich.table import Table

    from ledger.report.console import console

    inp = r.inputs
    nodes = f"{inp['nodes']} node{'s' if inp['nodes'] != 1 else ''}"
    console.print(f"[bold]{inp['hardware']}[/bold] x {inp['devices']} ({nodes}), {inp['days']:g} days, "
                  f"peak {_human(inp['peak_flops_per_device'], 'FLOP/s')} per device ({inp['peak']}), "
                  f"C_peak {_human(inp['c_peak'], 'FLOP/s')}")
    console.print(f"goodput {inp['goodput']:.3f}: {inp['goodput_source']}")
    console.print(f"law: {inp['law_source']}")
    console.print(f"performance model: {inp['calibration_source']}")
    table = Table(title="cluster-optimal (deliverable compute) vs compute-optimal (fixed model-FLOP budget)")
    table.add_column("")
    table.add_column("cluster-optimal", justify="right")
    table.add_column("compute-optimal", justify="right")
    a, b = r.cluster_optimal, r.compute_optimal

    def geo(c: Any) -> str:
        g = c.geometry
        return f"{g['layers']} x {g['hidden']}, E={g['experts']}, k={g['top_k']}, G={g['granularity']:g}"

    def par(c: Any) -> str:
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
    curve = Table(title="best predicted loss at each sparsity")
    for col in ("S", "fixed model-FLOP budget", "deliverable compute", "MFU (deliverable best)"):
        curve.add_column(col, justify="right")
    for c in r.curves:
        curve.add_row(f"{c['sparsity']:.4g}", f"{c['loss_fixed_budget']:.4f}", f"{c['loss_deliverable']:.4f}",
                      f"{100 * c.get('mfu_of_deliverable_best', float('nan')):.1f}%")
    console.print(curve)
    v = r.verdict
    console.print(f"compute-optimal sparsity {v['compute_optimal_sparsity']:.4g}"
                  f"{' (the frontier of the search)' if v['compute_optimal_at_frontier'] else ''}; "
                  f"cluster-optimal {v['cluster_optimal_sparsity']:.4g}"
                  f"{' (interior)' if v['cluster_optimal_interior'] else ''}; on this cluster the cluster-optimal "
                  f"choice is {v['loss_gain_over_compute_optimal']:.4f} lower in predicted loss")
    console.print(f"fixed model-FLOP budget {r.fixed_budget_flops:.3g} FLOP; searched {r.search['geometries']} "
                  f"geometries ({r.search['memory_feasible']} fit in memory), {r.search['plans_evaluated']:,} "
                  f"plans in {r.search['seconds']:.2f} s")
    for note in r.notes:
        console.print(f"note: {note}")
    if plot is not None:
        console.print(f"plot written to {plot}")


def register(cli: click.Group) -> None:
    """Add `fit` (law, perf) and `plan`."""
    cli.add_command(fit)
    cli.add_command(plan)
