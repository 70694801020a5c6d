"""`ledger goodput` and `ledger gate`: goodput and badput of a run across its attempts; cost to a gate."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import echo_json, facade_from, ledger_option


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
    from ledger.report.goodput import goodput_tables, timeline_svg

    g = facade_from(ctx, ledger_path).goodput(ref)
    if svg_path is not None:
        svg_path.write_text(timeline_svg(g))
    if as_json:
        echo_json(g.to_json())
        return
    goodput_tables(g)
    if svg_path is not None:
        click.echo(f"timeline written to {svg_path}")


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
    from ledger.analyses.gates import GroupGates
    from ledger.errors import BadInput
    from ledger.report.goodput import gate_group, gate_run

    if (ref is None) == (group is None):
        raise BadInput("give either a REF or --group TAG=VALUE (not both)")
    result = facade_from(ctx, ledger_path).gate(ref, group=group, gate=gate,
                                               price_per_device_hour=price_per_device_hour, config=config)
    if as_json:
        echo_json(result.to_json())
    elif isinstance(result, GroupGates):
        gate_group(result)
    else:
        gate_run(result)


def register(cli: click.Group) -> None:
    """Add `goodput` and `gate`."""
    cli.add_command(goodput)
    cli.add_command(gate)
