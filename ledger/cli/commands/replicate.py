"""`ledger rerun`: replay a receipt (optionally at another scale) and say whether it reproduced."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option
from ledger.errors import BadInput, LedgerError

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
@click.option("--rounds", type=int, default=3, show_default=True, help="Rounds of A then B.")
@click.option("--same-seed", is_flag=True, help="Keep each side's seed (measures machine noise only).")
@ledger_option
@click.pass_context
def ab(ctx: click.Context, a: str, b: str, rounds: int, same_seed: bool, ledger_path: Path | None) -> None:
    """Re-run the configurations of A and B alternately (A B A B ...) so that `ledger compare A B` has
    replicates of both, and drift of a shared machine falls on both sides alike.

    Runner receipts get a new seed each round (the original's + round); wrapped commands are replayed as
    recorded. Every run is tagged ab=<experiment id>.

    Example:

        ledger ab baseline fp8 --rounds 3 && ledger compare baseline fp8
    """
    from ledger.replay.replicates import plan_ab
    from ledger.store import reading
    from ledger.store.integrity import check_intact

    ledger = ledger_from(ctx, ledger_path)
    first = check_intact(ledger, reading.resolve_ref(ledger, a))
    second = check_intact(ledger, reading.resolve_ref(ledger, b))
    ctx.exit(_record_plan(ledger, plan_ab(first, second, rounds, same_seed=same_seed)))


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
    from ledger.analyses.compare import CompareOptions, Ref, compare, to_json
    from ledger.record.wrapper import RecordOptions, record
    from ledger.replay.claims import holds, state
    from ledger.replay.rerun import rebuild_command
    from ledger.replay.scale import parse_scale
    from ledger.store import index
    from ledger.store.integrity import check_intact

    ledger = ledger_from(ctx, ledger_path)
    change = parse_scale(at) if at else None
    with index.reader(ledger) as con:
        first = to_json(compare(con, Ref(ref=a), Ref(ref=b), CompareOptions(plugins=False)))
    original = state(first, a, b)
    if change is None or not original.supported:
        if as_json:
            echo_json(original.as_json())
        else:
            click.echo(original.text)
        if not original.supported:
            ctx.exit(1)
        return
    replayed: dict[str, list[str]] = {}
    for side, ref in ((first["a"], a), (first["b"], b)):
        for rid in side["ids"]:  # every run of the evidence, each with its own seed, at the other scale
            receipt = check_intact(ledger, rid)
            command = rebuild_command(receipt, scale=[change])
            result = record(ledger, RecordOptions(
                command=command, name=f"{receipt.name or ref}@{change}", replicates=receipt.id,
                tags=dict(receipt.tags) | {"claim_scale": str(change)},
                stdout=sys.stderr.buffer if as_json else None))  # keep stdout for the JSON
            if result.receipt is None or result.exit_code:
                raise LedgerError(f"the replay of {ref} at {change} did not finish (exit {result.exit_code})")
            replayed.setdefault(ref, []).append(result.receipt.id)
    with index.reader(ledger) as con:
        second = to_json(compare(con, Ref(ref=replayed[a][0]), Ref(ref=replayed[b][0]),
                                 CompareOptions(plugins=False)))
    scaled = state(second, f"{a}@{change}", f"{b}@{change}")
    ok, why = holds(original, scaled)
    if as_json:
        echo_json({"original": original.as_json(), "scaled": scaled.as_json(), "at": str(change),
                   "holds": ok, "why": why, "replayed": [i for ids in replayed.values() for i in ids]})
    else:
        click.echo(f"as recorded:  {original.text}")
        click.echo(f"at {change}:  {scaled.text}")
        click.echo(f"the claim {'holds' if ok else 'does NOT hold'} at {change}: {why}")
    if not ok:
        ctx.exit(1)


def register(cli: click.Group) -> None:
    for command in (rerun, ab, claim):
        cli.add_command(command)
