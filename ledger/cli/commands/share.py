"""`ledger push`, `ledger pull`: a team's ledger on a remote (S3 first); `ledger export`: the index tables
as Parquet or Delta Lake for other engines."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import ledger_from, ledger_option

_REMOTE_HELP = ("A DVC remote name, or a URL (s3://bucket/prefix, a local path). Default: the default DVC remote "
                "of the repository that holds the ledger.")


@click.command()
@click.option("--remote", "-r", help=_REMOTE_HELP)
@ledger_option
@click.pass_context
def push(ctx: click.Context, remote: str | None, ledger_path: Path | None) -> None:
    """Share the ledger: upload the receipts the remote does not hold (each verified first).

    Receipts are immutable and named by their content, so pushes from several clones at once lose nothing.
    Credentials come from the environment or the AWS configuration and are never stored.

    Example:

        dvc remote add -d team s3://bucket/ledger && ledger push
    """
    from ledger.replay.share import push as do_push

    result = do_push(ledger_from(ctx, ledger_path), remote)
    click.echo(result.message)
    if result.damaged:
        ctx.exit(1)


@click.command()
@click.option("--remote", "-r", help=_REMOTE_HELP)
@ledger_option
@click.pass_context
def pull(ctx: click.Context, remote: str | None, ledger_path: Path | None) -> None:
    """Fetch the receipts of a shared ledger that this one does not hold, verify each, and index them.

    Example:

        ledger pull && ledger compare baseline fp8
    """
    from ledger.replay.share import pull as do_pull
    from ledger.store import index

    ledger = ledger_from(ctx, ledger_path)
    result = do_pull(ledger, remote)
    if result.moved:
        index.try_sync(ledger)  # incremental; a busy index is synced by the next reader
    click.echo(result.message)
    if result.damaged:
        ctx.exit(1)


@click.command()
@click.argument("target", metavar="PATH_OR_URL")
@click.option("--format", "fmt", type=click.Choice(["parquet", "delta"]), default="parquet", show_default=True,
              help="A Hive-partitioned Parquet dataset, or Delta Lake tables (written with deltalake, no Spark).")
@ledger_option
@click.pass_context
def export(ctx: click.Context, target: str, fmt: str, ledger_path: Path | None) -> None:
    """Write the index tables (receipts, steps, evals, routing, timing, events, telemetry) to a local path or
    an object-store URL, adding only the receipts not exported there yet. Every table is partitioned by
    started_date and carries schema_version (docs/export.md).

    Example:

        ledger export s3://team-bucket/ledger-tables --format delta
    """
    from ledger.replay.export import export as do_export

    click.echo(do_export(ledger_from(ctx, ledger_path), target, fmt).message)


def register(cli: click.Group) -> None:
    for command in (push, pull, export):
        cli.add_command(command)
