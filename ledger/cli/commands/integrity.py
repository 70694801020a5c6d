"""`ledger verify` and `ledger attest`: tamper evidence."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option


@click.command()
@click.argument("ref", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@ledger_option
@click.pass_context
def verify(ctx: click.Context, ref: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """Check every receipt (or REF) against its digests: seal, files, sizes, sha256, Parquet rows.

    Exits 1 and names each damaged file when anything fails.

    Example:

        ledger verify            # the whole ledger
        ledger verify 3fa9c2
    """
    from ledger.store.verify import verify_ledger

    ledger = ledger_from(ctx, ledger_path)
    checked, findings = verify_ledger(ledger, ref)
    if as_json:
        echo_json({"checked": checked, "findings": [f.__dict__ for f in findings]})
    else:
        for finding in findings:
            click.echo(str(finding))
        damaged = len({f.receipt_id for f in findings})
        click.echo(f"{checked} receipt(s) checked, {damaged} damaged")
    if findings:
        ctx.exit(1)


@click.command()
@click.argument("ref")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE.")
@ledger_option
@click.pass_context
def attest(ctx: click.Context, ref: str, output: Path | None, ledger_path: Path | None) -> None:
    """Emit an in-toto Statement for a receipt: subjects are its files' sha256, predicate its stack and workload.

    Example:

        ledger attest baseline -o baseline.intoto.json
    """
    import json

    from ledger.store.integrity import statement
    from ledger.store.verify import resolve_any

    ledger = ledger_from(ctx, ledger_path)
    text = json.dumps(statement(ledger, resolve_any(ledger, ref)), indent=2, sort_keys=True)
    if output:
        output.write_text(text + "\n")
    else:
        click.echo(text)


def register(cli: click.Group) -> None:
    cli.add_command(verify)
    cli.add_command(attest)
