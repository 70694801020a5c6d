"""`ledger verify` and `ledger attest`: tamper evidence."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option
from ledger.errors import BadInput


@click.command()
@click.argument("ref", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print findings as JSON.")
@click.option("--attestation", type=click.Path(dir_okay=False, path_type=Path),
              help="Check this attestation (a DSSE envelope from `attest --sign`, or a Statement) instead.")
@click.option("--key", "key", type=click.Path(dir_okay=False, path_type=Path),
              help="PEM public key the attestation's signature must verify with.")
@ledger_option
@click.pass_context
def verify(ctx: click.Context, ref: str | None, as_json: bool, attestation: Path | None, key: Path | None,
           ledger_path: Path | None) -> None:
    """Check every receipt (or REF) against its digests: seal, files, sizes, sha256, Parquet rows; then that
    the index agrees with the files. With --attestation, check a signed attestation instead.

    Exits 1 and names each damaged file (or failed signature) when anything fails.

    Example:

        ledger verify            # the whole ledger
        ledger verify 3fa9c2
        ledger verify --attestation baseline.dsse.json --key signer.pub
    """
    from ledger.store.verify import verify_ledger

    ledger = ledger_from(ctx, ledger_path)
    if attestation is not None:
        from ledger.store.attestation import verify as verify_attestation

        if ref is not None:
            raise BadInput("give either REF or --attestation FILE, not both")
        problems, notes = verify_attestation(ledger, attestation, key)
        if as_json:
            echo_json({"attestation": str(attestation), "problems": problems, "notes": notes})
        else:
            for line in notes + problems:
                click.echo(line)
            click.echo(f"{attestation}: " + ("FAILED" if problems else "OK"))
        ctx.exit(1 if problems else 0)
    elif key is not None:
        raise BadInput("--key goes with --attestation FILE")
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
@click.option("--sign", "key", type=click.Path(dir_okay=False, path_type=Path), metavar="KEY",
              help="Sign with this PEM private key: a DSSE envelope (needs the `sign` extra).")
@ledger_option
@click.pass_context
def attest(ctx: click.Context, ref: str, output: Path | None, key: Path | None, ledger_path: Path | None) -> None:
    """Emit an in-toto Statement for a receipt: subjects are its files' sha256, predicate its stack and workload.
    With --sign, the Statement is signed into a DSSE envelope; check it with `ledger verify --attestation`.

    Example:

        ledger attest baseline -o baseline.intoto.json
        ledger attest baseline --sign signer.pem -o baseline.dsse.json
    """
    import json

    from ledger.store.integrity import statement
    from ledger.store.verify import resolve_any

    ledger = ledger_from(ctx, ledger_path)
    document = statement(ledger, resolve_any(ledger, ref))
    if key is not None:
        from ledger.store.attestation import sign

        document = sign(document, key)
    text = json.dumps(document, indent=2, sort_keys=True)
    if output:
        output.write_text(text + "\n")
    else:
        click.echo(text)


def register(cli: click.Group) -> None:
    cli.add_command(verify)
    cli.add_command(attest)
