"""`ledger fit law`, `ledger fit perf` and `ledger plan`: a scaling law and a performance model fitted on
receipts, and the cluster-optimal MoE geometry under deliverable compute (MOSAIC). Parse, one call of
:mod:`ledger.planning.api`, render with :mod:`ledger.report.plan`."""

from __future__ import annotations

from pathlib import Path

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
    First the design is checked: at least free parameters + 2 distinct (N_tot, D, S, G) points, every
    varying variable spanning at least x2, no two of them collinear (|r| >= 0.95); a design that fails is
    refused (exit 2) with the runs that would make the law identifiable, as commands. Then robust non-linear
    least squares (scipy's least_squares, Huber loss on log-loss residuals, several initialisations); a
    variable that does not vary fixes its exponents (listed with the reason); 95% intervals and the bootstrap
    vectors (which `ledger plan --law-from` resamples) from a bootstrap over receipts; held-out error from
    k-fold cross-validation over receipts, with its n; the support (range of each variable), which becomes
    the plan's frontier.

    Example:

        ledger fit law --where tag.sweep=sparsity --at-tokens 20480,40960 --json > law.json
    """
    from ledger.planning.api import fit_law as run
    from ledger.planning.plan import parse_list
    from ledger.report.plan import render_law

    counts = list(parse_list(at_tokens, "--at-tokens", float)) if at_tokens else None
    report = run(ledger_from(ctx, ledger_path), where, loss, counts, bootstrap=bootstrap, inits=inits,
                 huber_delta=huber_delta, seed=seed)
    if as_json:
        echo_json(report.to_dict())
        return
    render_law(report)


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
    kernel. Four factors (compute, memory, comm, launch) are fitted per hardware profile by robust least
    squares (scipy, soft-L1) of log predicted against log measured step time; held-out error by
    leave-one-out, with its n. Receipts that cannot identify the factors (fewer than factors + 2 distinct
    geometry-and-plan points, or step times that split the same way between operator classes) are refused
    with the runs that would, as commands.

    Example:

        ledger fit perf --where tag.sweep=cpu-sg --json > perf.json
    """
    from ledger.planning.api import fit_perf as run
    from ledger.report.plan import render_perf

    report = run(ledger_from(ctx, ledger_path), where, hardware)
    if as_json:
        echo_json(report.to_dict())
        return
    render_perf(report)


# ---------------------------------------------------------------------------------------------- plan
@click.command()
@click.option("--hardware", "hardware", required=True, metavar="NAME|FILE",
              help="B200, H200, H100, CPU, or a JSON/TOML profile file.")
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Nodes of the cluster.")
@click.option("--days", type=click.FloatRange(min=0, min_open=True), required=True, help="Training window.")
@click.option("--goodput", "goodput", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Share of the window spent on productive steps (default 0.9).")
@click.option("--goodput-from", "goodput_from", metavar="REF|TAG=VALUE",
              help="Use the goodput measured on a run (any attempt's ref) or a group of runs.")
@click.option("--law-from", "law_from", metavar="NAME|FILE",
              help="default (published coefficients, see below), hoffmann2022, or a law written by "
                   "`ledger fit law --json`.")
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
@click.option("--max-sparsity", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="The sparsity frontier of the search (default: the law's support; beyond it the plan says it "
                   "extrapolates).")
@click.option("--seq-len", type=click.IntRange(min=1), default=4096, show_default=True)
@click.option("--vocab", type=click.IntRange(min=1), default=128000, show_default=True)
@click.option("--batch-tokens", type=click.FloatRange(min=1), default=4 * 2**20, show_default=True,
              help="Tokens per optimizer step.")
@click.option("--precision", default="bf16", show_default=True, help="bf16, fp8, fp32...")
@click.option("--draws", type=click.IntRange(0, 100000), default=200, show_default=True,
              help="Draws of the law's coefficients (from their intervals) propagated through the plan.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draws.")
@click.option("--sensitivity", is_flag=True,
              help="Move each coefficient to the ends of its interval and name those that decide interior vs "
                   "frontier.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the loss-against-sparsity plot (SVG) to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@ledger_option
@click.pass_context
def plan(ctx: click.Context, hardware: str, nodes: int, days: float, goodput: float | None,
         goodput_from: str | None, law_from: str | None, perf_from: Path | None, tokens: float | None,
         budget_flops: float | None, geometry: str | None, parallel: str | None, experts: str, top_k: str,
         granularity: str, widths: str, micro_batch: str, aspect: float, max_sparsity: float | None, seq_len: int,
         vocab: int, batch_tokens: float, precision: str, draws: int, seed: int, sensitivity: bool,
         plot: Path | None, as_json: bool, ledger_path: Path | None) -> None:
    """Pick the cluster-optimal MoE geometry and parallel plan for a cluster and a training window.

    Enumerates geometries (widths x experts x top-k x granularity, and dense, up to the frontier) x
    parallel plans (TP, PP, EP, DP, micro-batch, recomputation) that fit in memory, trains each for the
    window at the MFU the performance model predicts (deliverable compute = C_peak x MFU x goodput x window)
    and returns the one with the lowest loss the law predicts. Beside it: the compute-optimal choice under a
    fixed model-FLOP budget (the same compute at one MFU for every geometry), the probability that the
    cluster-optimal choice beats it on this cluster and the loss gap with its 95% interval (the law's
    coefficients drawn from their intervals), and a loss-against-sparsity curve (--plot FILE: SVG).

    \b
    The law: L(N_tot, S, D, G) = a/N_tot^alpha + b/D^beta + c/(1-S)^lam
                                  + j/((1-S)^delta N_tot^gamma G^eta) + e
    The default maps published fits onto it:
      a, alpha, b, beta, e  Besiroglu et al. 2024 (re-fit of Chinchilla, Hoffmann et al. 2022, approach 3):
                            A=482.01, alpha=0.3478, B=2085.43, beta=0.3658, E=1.8172, with their standard
                            errors; N is taken as total parameters (our mapping)
      j, delta, gamma, eta  Krajewski et al. 2024, granularity term g/(G^gamma N_act^alpha), N_act = (1-S) N_tot:
                            j=g=2.1, delta=gamma=alpha=0.115, eta=gamma=0.58 (no intervals published)
      c, lam                no published value we could verify (Abnar et al. 2025): c = 0; fit it on
                            receipts (`ledger fit law --json > law.json`, then --law-from law.json)
    The frontier is the law's support: S <= 63/64 for the default (Krajewski et al.'s MoE runs), the
    sparsity range of the receipts for a fitted law. Beyond it (--max-sparsity) the plan says it extrapolates.

    Example:

        ledger plan --hardware B200 --nodes 32 --days 20 --goodput-from crashy-run --sensitivity --plot plan.svg
    """
    from ledger.planning.api import PlanRequest
    from ledger.planning.api import plan as run

    req = PlanRequest(
        hardware=hardware, nodes=nodes, days=days, goodput=goodput, goodput_from=goodput_from, law=law_from,
        perf_from=perf_from, tokens=tokens, budget_flops=budget_flops, geometry=geometry, parallel=parallel,
        experts=experts, top_k=top_k, granularity=granularity, widths=widths, micro_batch=micro_batch,
        aspect=aspect, max_sparsity=max_sparsity, seq_len=seq_len, vocab=vocab, batch_tokens=batch_tokens,
        precision=precision, draws=draws, seed=seed, sensitivity=sensitivity)
    result = run(req, lambda: ledger_from(ctx, ledger_path))
    if plot is not None:
        from ledger.report.plan_svg import plot as draw

        plot.write_text(draw(result))
    if as_json:
        echo_json(result.to_dict() | ({"plot": str(plot)} if plot else {}))
        return
    from ledger.report.plan import render_plan

    render_plan(result, plot)


def register(cli: click.Group) -> None:
    """Add `fit` (law, perf) and `plan`."""
    cli.add_command(fit)
    cli.add_command(plan)
