"""`ledger goodput` and `ledger gate`: goodput and badput of a run across its attempts; cost to a gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option


@click.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--svg", "svg_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the timeline (attempts, steps, badput) as an SVG file.")
@ledger_option
@click.pass_context
def goodput(ctx: click.Context, ref: str, as_json: bool, svg_path: Path | None, ledger_path: Path | None) -> None:
    """Goodput and badput of a logical run (REF: any attempt's id, prefix or name).

    Goodput = productive step time / wall time from the first attempt's start to the last one's end,
    downtime between attempts included; a step computed again after a restart counts once. Badput is
    split into start-up, data loading, checkpoint save, checkpoint restore, progress lost to disruption,
    downtime between attempts, eval and other.

    Example:

        ledger goodput crashy-run --svg timeline.svg
    """
    from ledger.analyses.goodput import goodput as compute_goodput
    from ledger.analyses.goodput import timeline_svg

    g = compute_goodput(ledger_from(ctx, ledger_path), ref)
    if svg_path is not None:
        svg_path.write_text(timeline_svg(g))
    if as_json:
        echo_json(g.to_dict())
        return
    _render_goodput(g)
    if svg_path is not None:
        click.echo(f"timeline written to {svg_path}")


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 7200:
        return f"{value / 3600:.2f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.3f} s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _render_goodput(g: Any) -> None:
    from rich.table import Table

    from ledger.report.console import console

    console.print(f"[bold]{g.name or 'unnamed'}[/bold]  run {g.run_id[:12]}  {len(g.attempts)} attempt(s)  "
                  f"wall {_s(g.wall_s)}")
    attempts = Table(title="attempts")
    for col in ("#", "id", "status", "start", "end", "duration", "steps", "recomputed later", "restored from"):
        attempts.add_column(col)
    for a in g.attempts:
        attempts.add_row(str(a.attempt), a.id[:12], a.status, _s(a.start_s), _s(a.end_s), _s(a.duration_s),
                         "-" if a.first_step is None else f"{a.first_step}-{a.last_step} ({a.steps_computed})",
                         str(a.steps_lost), "-" if a.restored_step is None else f"step {a.restored_step}")
    console.print(attempts)
    table = Table(title="where the wall time went")
    table.add_column("bucket")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    table.add_row("[bold]productive[/bold]", _s(g.productive_s), _pct(g.goodput))
    shares = g.shares()
    for bucket, seconds in g.buckets.items():
        table.add_row(bucket.replace("_", " "), _s(seconds), _pct(shares[bucket]))
    console.print(table)
    tokens = (f" ({g.tokens_useful:,} useful / {g.tokens_processed:,} processed tokens)"
              if g.tokens_processed is not None else "")
    console.print(f"goodput {_pct(g.goodput)}   token goodput {_pct(g.token_goodput)}{tokens}")
    console.print(f"steps: {g.steps_useful} useful, {g.steps_recomputed} computed again after a restart; "
                  f"steady-state step time {_s(g.steady_step_time_s)} "
                  f"(median of {g.steady_steps} steps within median + 3 MAD)")
    console.print(f"checkpoints: {g.checkpoints_useful} useful of {g.checkpoints_saved} saved")
    for note in g.notes:
        console.print(f"note: {note}")
    for problem in g.problems:
        console.print(f"[yellow]problem:[/yellow] {problem}")


@click.command()
@click.argument("ref", required=False)
@click.option("--group", "group", metavar="TAG=VALUE", help="Every run tagged TAG=VALUE, summarised.")
@click.option("--gate", "gate", metavar="NAME|SPEC",
              help="One gate of the task, or a spec like 'val/loss<=2.6' (default: every gate of the task).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--price-per-device-hour", type=float, metavar="X", help="Price of one device-hour (any model).")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file with [prices] per device model (default: ./ledger.toml when present).")
@ledger_option
@click.pass_context
def gate(
    ctx: click.Context,
    ref: str | None,
    group: str | None,
    gate: str | None,
    as_json: bool,
    price_per_device_hour: float | None,
    config: Path | None,
    ledger_path: Path | None,
) -> None:
    """Wall time, device-hours, energy and money to first reach each quality gate.

    The clock runs from the first attempt's start to the first eval that meets the gate (MLPerf's time
    to train); an interpolated crossing between evals is shown beside it, labelled. Energy comes only from
    measured counters, else "not measured". Runs that never reach a gate are listed as "not reached
    (>= their total cost)" and kept in --group summaries (fraction reached, Kaplan-Meier medians).

    Example:

        ledger gate --group sweep=seeds --gate val-loss --price-per-device-hour 2.5
    """
    from ledger.analyses.gates import gate_report, group_report, load_pricing
    from ledger.errors import BadInput

    if (ref is None) == (group is None):
        raise BadInput("give either a REF or --group TAG=VALUE (not both)")
    pricing = load_pricing(config, price_per_device_hour)
    ledger = ledger_from(ctx, ledger_path)
    if group is not None:
        report = group_report(ledger, group, gate, pricing)
        if as_json:
            echo_json(report.to_dict())
        else:
            _render_group(report)
        return
    assert ref is not None
    run = gate_report(ledger, ref, gate, pricing)
    if as_json:
        echo_json(run.to_dict())
    else:
        _render_run(run)


def _gate_row(r: Any) -> list[str]:
    at = "-"
    if r.reached:
        at = f"step {r.step} (attempt {r.attempt}): {r.value:.4g}"
    elif r.value is not None:
        at = f"best {r.value:.4g} in {r.evals} evals"
    interp = "-"
    if r.interpolated is not None:
        i = r.interpolated
        interp = f"~{_s(i.wall_s)} at step ~{i.step:.1f} (interpolated)"
    return [r.display("wall_s"), r.display("device_hours"), r.display("energy_j"), r.display("money"), at, interp]


def _render_run(run: Any) -> None:
    from rich.table import Table

    from ledger.analyses.gates import gate_label
    from ledger.report.console import console

    g = run.good
    console.print(f"[bold]{g.name or 'unnamed'}[/bold]  run {g.run_id[:12]}  {len(g.attempts)} attempt(s)")
    table = Table(title="cost to first reach each gate (from the first attempt's start)")
    for col in ("gate", "definition", "wall time", "device-hours", "energy", "money", "reached at", "interpolated"):
        table.add_column(col)
    for r in run.results:
        table.add_row(r.gate.name, gate_label(r.gate), *_gate_row(r))
    console.print(table)
    for r in run.results:
        if r.time_to_train_s is not None:
            console.print(f"{r.gate.name}: the evidence's own MLPerf time to train is {_s(r.time_to_train_s)}")
        for note in r.notes:
            console.print(f"note ({r.gate.name}): {note}")
    c = run.cost
    per = c.per_useful_checkpoint()
    from ledger.analyses.gates import human

    console.print(
        f"run total: {human('wall_s', c.total.wall_s)}, {human('device_hours', c.total.device_hours)}, "
        f"energy {human('energy_j', c.total.energy_j)}, money {human('money', c.total.money, c.total.currency)}"
    )
    if per is not None:
        console.print(
            f"per useful checkpoint ({c.checkpoints_useful} of {c.checkpoints_saved} saved): "
            f"{human('wall_s', per.wall_s)}, {human('device_hours', per.device_hours)}, "
            f"energy {human('energy_j', per.energy_j)}, money {human('money', per.money, per.currency)}"
        )
    else:
        console.print(f"per useful checkpoint: - (no useful checkpoint; {c.checkpoints_saved} saved)")
    for note in run.notes:
        console.print(f"note: {note}")


def _render_group(report: Any) -> None:
    from rich.table import Table

    from ledger.analyses.gates import gate_label
    from ledger.report.console import console

    console.print(f"[bold]group {report.tag}[/bold]: {len(report.runs)} run(s)")
    for summary in report.summaries:
        table = Table(title=f"{summary.gate.name}: {gate_label(summary.gate)}")
        for col in ("run", "id", "attempts", "wall time", "device-hours", "energy", "money", "reached at",
                    "interpolated"):
            table.add_column(col)
        for run, r in zip(report.runs, summary.results, strict=True):
            table.add_row(r.name or "-", r.run_id[:12], str(len(run.good.attempts)), *_gate_row(r))
        console.print(table)
        for r in summary.results:
            for note in r.notes:
                console.print(f"note ({r.name or r.run_id[:12]}): {note}")
        console.print(
            f"reached by {summary.reached} of {summary.n} ({100 * summary.fraction_reached:.0f}%); "
            f"median (Kaplan-Meier, censored runs kept): wall {summary.median_display('wall_s')}, "
            f"{summary.median_display('device_hours')}, energy {summary.median_display('energy_j')}, "
            f"money {summary.median_display('money')}"
        )
    notes = sorted({n for run in report.runs for n in run.notes})
    for note in notes:
        console.print(f"note: {note}")


def register(cli: click.Group) -> None:
    """Add `goodput` and `gate`."""
    cli.add_command(goodput)
    cli.add_command(gate)
