"""`ledger history`: change points over a ledger's history (see :mod:`ledger.analyses.history`)."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import echo_json, facade_from, ledger_option


def register(cli: click.Group) -> None:
    """Add `history` to the CLI."""

    @cli.command()
    @click.option("--where", metavar="EXPR", help="One series: the runs this filter selects, in time order "
                                                  "(default: each configuration with enough runs).")
    @click.option("--metric", default="tokens/s per device", show_default=True,
                  help="A per-run metric: a compare row (step time (median), MFU, peak host memory...) or "
                       "'final loss'.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON: `change_points` (each names its first run "
                                                          "after, `name` and `id`) and every series.")
    @ledger_option
    @click.pass_context
    def history(ctx: click.Context, where: str | None, metric: str, as_json: bool, ledger_path: Path | None) -> None:
        """Find change points in a ledger's history: per configuration (the stack may change: commit, packages,
        drivers, node, container), in time order, by E-divisive means with a permutation test. For each: the
        first run after it, the shift with a 95% interval, and the suspects (what changed between the runs on
        either side).

        Example:

            ledger history
            ledger history --where "name~nightly*" --metric "step time (median)" --json
        """
        result = facade_from(ctx, ledger_path).history(where=where, metric=metric)
        if as_json:
            echo_json(result.to_json())
            return
        from ledger.report.history import render

        render(result)
