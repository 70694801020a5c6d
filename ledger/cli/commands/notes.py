"""`ledger note`, `ledger archive`, `ledger unarchive`: what a team adds to a sealed receipt, as records beside it
(:mod:`ledger.store.annotation`)."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import facade_from, ledger_option

AUTHOR_HELP = "Who writes it (default: $LEDGER_AUTHOR, else user@host)."


def register(cli: click.Group) -> None:
    """Add `note`, `archive` and `unarchive` to the CLI."""

    @cli.command()
    @click.argument("ref")
    @click.argument("text")
    @click.option("--author", metavar="NAME", help=AUTHOR_HELP)
    @ledger_option
    @click.pass_context
    def note(ctx: click.Context, ref: str, text: str, author: str | None, ledger_path: Path | None) -> None:
        """Add a note to a receipt, with its author and time: `show`, `compare` and the web view show it.

        The sealed receipt never changes: notes are append-only records beside it, shared by push and pull.

        Example:

            ledger note fp8-grouped "ran on a degraded node (ECC errors on gpu3)"
        """
        record = facade_from(ctx, ledger_path).note(ref, text, author=author)
        click.echo(f"noted on {record.receipt_id[:12]} by {record.author} at {record.at[:19]}Z")

    @cli.command()
    @click.argument("refs", nargs=-1, required=True, metavar="REF...")
    @click.option("--reason", default="", help="Why (kept with the flag).")
    @click.option("--author", metavar="NAME", help=AUTHOR_HELP)
    @ledger_option
    @click.pass_context
    def archive(ctx: click.Context, refs: tuple[str, ...], reason: str, author: str | None,
                ledger_path: Path | None) -> None:
        """Hide receipts from `ledger ls` and the web view (`ls --all` and the view's "show archived" list
        them); compare, show and every ref still reach them. Undone by `ledger unarchive`.

        Example:

            ledger archive 3f9c01ab --reason "mistyped launch"
        """
        lg = facade_from(ctx, ledger_path)
        for ref in refs:
            record = lg.archive(ref, reason=reason, author=author)
            click.echo(f"archived {record.receipt_id[:12]}")

    @cli.command()
    @click.argument("refs", nargs=-1, required=True, metavar="REF...")
    @click.option("--reason", default="", help="Why (kept with the flag).")
    @click.option("--author", metavar="NAME", help=AUTHOR_HELP)
    @ledger_option
    @click.pass_context
    def unarchive(ctx: click.Context, refs: tuple[str, ...], reason: str, author: str | None,
                  ledger_path: Path | None) -> None:
        """Show archived receipts again in `ledger ls` and the web view.

        Example:

            ledger unarchive 3f9c01ab
        """
        lg = facade_from(ctx, ledger_path)
        for ref in refs:
            record = lg.unarchive(ref, reason=reason, author=author)
            click.echo(f"unarchived {record.receipt_id[:12]}")
