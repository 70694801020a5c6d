"""`ledger watch`: follow a run in progress in the terminal (see :mod:`ledger.report.watch`)."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import ledger_from, ledger_option


def register(cli: click.Group) -> None:
    """Add `watch` to the CLI."""

    @cli.command()
    @click.argument("ref")
    @click.option("--interval", type=click.FloatRange(0.05, 60), default=0.5, show_default=True,
                  help="Seconds between redraws.")
    @ledger_option
    @click.pass_context
    def watch(ctx: click.Context, ref: str, interval: float, ledger_path: Path | None) -> None:
        """Show the live steps of a run in progress (step, loss, tokens/s, ETA) until it is published.

        REF: the run's name (the latest run in progress of that name) or a prefix of its staging uuid
        (`ledger serve` and `ls <ledger>/.staging` show them). The rows are read from the staging
        directory's rank files as the ranks flush them (about once a second).

        Example:

            ledger record --name bf16 -- python -m runners.moe --config tiny &
            ledger watch bf16
        """
        from ledger.errors import BadInput
        from ledger.report.console import console
        from ledger.report.watch import watch as follow
        from ledger.store import index, running

        ledger = ledger_from(ctx, ledger_path)
        run = running.find(ledger, ref)
        if run is None:
            live = ", ".join(r.label for r in running.runs_in_progress(ledger)) or "none"
            raise BadInput(f"no run in progress named {ref!r} or with a staging uuid starting so in "
                           f"{ledger.root} (runs in progress: {live}); `ledger ls` lists published runs")

        def published() -> str | None:
            with index.reader(ledger) as con:
                row = con.execute("SELECT id FROM receipts WHERE run_uuid = ? ORDER BY started_at DESC LIMIT 1",
                                  [run.run_uuid]).fetchone()
            return str(row[0]) if row else None

        receipt_id = follow(run, console, interval, published)
        if receipt_id:
            click.echo(f"published as {receipt_id[:8]} ({receipt_id})")
        else:
            click.echo(f"run {run.run_uuid[:8]} left the staging area (not in the index yet: `ledger recover` "
                       "publishes runs whose wrapper died)")
