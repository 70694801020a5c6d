"""`ledger rerun`: replay a receipt (optionally at another scale) and say whether it reproduced."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli.kit import echo_json, facade_from, ledger_from, ledger_option
from ledger.errors import BadInput

if TYPE_CHECKING:
    from ledger.replay.replicates import Planned
    from ledger.store.receipts import Ledger


def _record_plan(ledger: Ledger, plan: list[Planned], replicates: str | None = None) -> int:
    """Record the planned runs in order under `ledger record`; 0, or the first failing exit status."""
    from ledger.record.wrapper import RecordOptions, record
    from ledger.replay.replicates import describe

    click.echo(f"ledger: {describe(plan)}", err=True)
    for item in plan:
        result = record(ledger, RecordOptions(command=item.command, name=item.name, tags=item.tags,
                                              replicates=replicates or item.original.id))
        if result.receipt is None or result.exit_code:
            click.echo(f"ledger: {item.name} failed (exit {result.exit_code}); stopping", err=True)
            return result.exit_code or 1
        click.echo(f"{item.side} {item.name} {result.receipt.id[:12]}")
    return 0


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--rounds", type=int, default=None, help="Rounds of A then B (default 3; not with --until-verdict).")
@click.option("--same-seed", is_flag=True, help="Keep each side's seed (measures machine noise only).")
@click.option("--until-verdict", is_flag=True,
              help="Judge after every round with an always-valid sequential test (mixture SPRT) and stop when the "
                   "speed is decided, or at the cap.")
@click.option("--max-rounds", type=int, default=None, metavar="N",
              help="With --until-verdict: the cap (default: the runs per side that give a fixed design 80% power "
                   "for the 5% minimum change at the measured noise, as `compare` prints it).")
@click.option("--json", "as_json", is_flag=True,
              help="With --until-verdict: print the result as JSON (`rounds`, `verdict`, ...); the runs' output "
                   "goes to stderr.")
@ledger_option
@click.pass_context
def ab(ctx: click.Context, a: str, b: str, rounds: int | None, same_seed: bool, until_verdict: bool,
       max_rounds: int | None, as_json: bool, ledger_path: Path | None) -> None:
    """Re-run the configurations of A and B alternately (A B A B ...) so that `ledger compare A B` has
    replicates of both, and drift of a shared machine falls on both sides alike.

    Runner receipts get a new seed each round (the original's + round); wrapped commands are replayed as
    recorded. Every run is tagged ab=<experiment id>.

    With --until-verdict, judge after each round with an always-valid sequential test (a mixture SPRT: valid
    however often it is looked at) and stop as soon as the speed is decided: faster, slower, or no change as
    large as the 5% minimum (futility); or at the cap, inconclusive. Prints the rounds used, the verdict with
    the rule that decided it, and the device-hours spent against the fixed design of 80% power.

    Example:

        ledger ab baseline fp8 --rounds 3 && ledger compare baseline fp8
        ledger ab baseline fp8 --until-verdict
    """
    from ledger.replay.replicates import plan_ab
    from ledger.store import reading
    from ledger.store.integrity import check_intact

    if not until_verdict and (max_rounds is not None or as_json):
        raise BadInput("--max-rounds and --json go with --until-verdict; e.g. ledger ab A B --until-verdict "
                       "--max-rounds 10")
    if until_verdict and rounds is not None:
        raise BadInput("--rounds records a fixed number of rounds; --until-verdict decides when to stop (cap it "
                       "with --max-rounds N)")
    ledger = ledger_from(ctx, ledger_path)
    first = check_intact(ledger, reading.resolve_ref(ledger, a))
    second = check_intact(ledger, reading.resolve_ref(ledger, b))
    if not until_verdict:
        ctx.exit(_record_plan(ledger, plan_ab(first, second, 3 if rounds is None else rounds, same_seed=same_seed)))
    from ledger.replay.until_verdict import Options, run_ab

    result = run_ab(ledger, first, second, Options(max_rounds=max_rounds), same_seed=same_seed,
                    stdout=sys.stderr.buffer if as_json else None,
                    progress=lambda line: click.echo(f"ledger: {line}", err=True))
    if as_json:
        echo_json(result.to_json())
        return
    click.echo(result.summary())
    for h in result.headlines:
        if h.role != "speed":
            click.echo(f"{h.name}: {h.verdict}: {h.rule}")
    click.echo(result.cost())
    if result.stopped == "cap":
        click.echo(f"not decided within {result.rounds} rounds (the cap: {result.cap_from}); more rounds narrow "
                   f"the interval: ledger ab {a} {b} --until-verdict --max-rounds N")


@click.command()
@click.argument("ref")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a runner config key.")
@click.option("--scale", "scales", multiple=True, metavar="DIM=V|DIM=xK",
              help="Replay at another scale: layers, width, experts, ranks, batch or steps.")
@click.option("--name", help="Name of the new receipt (default: the original's name + '-rerun').")
@click.option("--times", type=int, default=None, metavar="N",
              help="Record N replicates of REF (runner receipts: seeds +1..+N) for `ledger compare` to use.")
@click.option("--same-seed", is_flag=True, help="With --times: keep the seed (measures machine noise only).")
@ledger_option
@click.pass_context
def rerun(ctx: click.Context, ref: str, sets: tuple[str, ...], scales: tuple[str, ...], name: str | None,
          times: int | None, same_seed: bool, ledger_path: Path | None) -> None:
    """Replay a receipt under `ledger record` (linked with replicates: REF) and say whether it reproduced.

    With --times N, record N replicates instead (the run is the unit of evidence: a verdict between two
    configurations needs several runs of each); `ledger compare` finds them by their configuration.

    Warns about stack drift (commit, packages, drivers, hardware). An unchanged replay of a CPU runner
    receipt must give a bit-identical loss curve; otherwise the final loss must fall within the original's
    late-training spread. Exits 1 when it did not reproduce. With --set or --scale the rerun is a new
    experiment: it is recorded and linked, and `ledger compare` judges it.

    Example:

        ledger rerun baseline
        ledger rerun baseline --times 2
        ledger rerun baseline --scale layers=x2 --set steps=100
    """
    from ledger.record.wrapper import RecordOptions, record
    from ledger.replay.rerun import (
        current_stack,
        is_deterministic,
        load_steps,
        loss_verdict,
        rebuild_command,
        stack_drift,
    )
    from ledger.replay.scale import parse_scale
    from ledger.store import reading
    from ledger.store.integrity import check_intact

    ledger = ledger_from(ctx, ledger_path)
    original = check_intact(ledger, reading.resolve_ref(ledger, ref))
    if times is not None:
        from ledger.replay.replicates import plan_replicates

        if sets or scales:
            raise BadInput("--times records replicates of REF as it is: drop --set/--scale (rerun at the new "
                           "scale first, then replicate that receipt)")
        ctx.exit(_record_plan(ledger, plan_replicates(original, times, same_seed=same_seed), original.id))
    command = rebuild_command(original, sets, [parse_scale(s) for s in scales])
    drift = stack_drift(original.stack, current_stack(command))
    for line in drift.lines():
        click.echo(f"ledger: warning: stack drift since {original.id[:12]}: {line}", err=True)
    opts = RecordOptions(command=command, name=name or f"{original.name or original.id[:12]}-rerun",
                         tags=dict(original.tags) | {"rerun_of": original.id[:12]}, replicates=original.id)
    result = record(ledger, opts)
    if result.receipt is None or result.exit_code:
        ctx.exit(result.exit_code)
    if sets or scales:
        click.echo(f"ledger: rerun with changes recorded as {result.receipt.id[:12]}; "
                   f"compare: ledger compare {original.id[:12]} {result.receipt.id[:12]}", err=True)
        return
    verdict = loss_verdict(load_steps(ledger, original), load_steps(ledger, result.receipt),
                           is_deterministic(original, drift))
    click.echo(f"{'reproduced' if verdict.reproduced else 'NOT reproduced'}: {verdict.how}")
    if not verdict.reproduced:
        ctx.exit(1)




@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--at", "at", metavar="DIM=V|DIM=xK",
              help="Replay both runs at another scale (layers, width, experts, ranks, batch, steps) and check "
                   "that the claim holds there.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@ledger_option
@click.pass_context
def claim(ctx: click.Context, a: str, b: str, at: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """State the claim that the comparison of A and B supports, with its CI; with --at, replay both sides'
    runs at another scale and say whether the claim holds there (exit 1 when it does not).

    No claim is stated without between-run evidence (replicates or the ledger's noise floor): identical
    runs, two runs of one configuration, or one run per side get "no claim", what is missing, and exit 1.

    Example:

        ledger claim baseline fp8
        ledger claim baseline fp8 --at layers=x2
    """
    check = facade_from(ctx, ledger_path).claim(a, b, at=at, replay_output=sys.stderr.buffer if as_json else None)
    if as_json:
        echo_json(check.to_json())  # the replays' output went to stderr: stdout is the JSON
    elif check.scaled is None:
        click.echo(check.original.text)
    else:
        click.echo(f"as recorded:  {check.original.text}")
        click.echo(f"at {check.at}:  {check.scaled.text}")
        click.echo(f"the claim {'holds' if check.holds else 'does NOT hold'} at {check.at}: {check.why}")
    if not check.ok:
        ctx.exit(1)


def register(cli: click.Group) -> None:
    for command in (rerun, ab, claim):
        cli.add_command(command)
