"""`ledger compare` and `ledger report`: the review of A against B (see :mod:`ledger.analyses.compare`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ledger.cli.kit import echo_json, facade_from, ledger_from, ledger_option
from ledger.errors import BadInput

F = TypeVar("F", bound=Callable[..., Any])


def _selection(f: F) -> F:
    """The options that choose and compare the two sides (shared by compare and report)."""
    for option in reversed([
        click.argument("refs", nargs=-1, metavar="[A] [B]"),
        click.option("--group", "groups", multiple=True, metavar="TAG=VALUE",
                     help="A replicate group (receipts tagged TAG=VALUE) as a side, in the order given."),
        click.option("--allow-task-change", is_flag=True, help="Compare runs of different tasks anyway."),
        click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05,
                     show_default=True, help="Significance level of the tests."),
        click.option("--noise", type=click.FloatRange(0, min_open=True), default=None,
                     help="Smallest relative change worth reporting, for every ratio metric (default: per metric, "
                          "e.g. 0.05). Whether a change is real is decided between runs, not by this."),
        click.option("--bootstrap", "n_boot", type=click.IntRange(100, 100_000), default=2000, show_default=True,
                     help="Draws of the attribution intervals."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of those draws."),
        click.option("--no-replicates", is_flag=True,
                     help="Use only the named receipts, not their replicates found in the ledger."),
        click.option("--no-floor", is_flag=True,
                     help="Do not use the noise floor learned from the ledger's replicate groups."),
        ledger_option,
    ]):
        f = option(f)
    return f


class SidesCommand(click.Command):
    """Remembers the order in which the sides were given (``REF`` arguments and ``--group`` options mixed),
    so that ``ledger compare --group k=v baseline`` makes the group side A."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {o for p in self.params if isinstance(p, click.Option) and not p.is_flag for o in p.opts}
        order: list[str] = []
        it = iter(args)
        for token in it:
            if token == "--":
                order.extend("ref" for _ in it)
                break
            if token == "--group" or token.startswith("--group="):
                order.append("group")
                if token == "--group":
                    next(it, None)
            elif token.startswith("-") and len(token) > 1:
                if token in takes_value:
                    next(it, None)
            else:
                order.append("ref")
        ctx.meta["compare.sides"] = order
        return super().parse_args(ctx, args)


def _sides(ctx: click.Context, refs: tuple[str, ...], groups: tuple[str, ...]) -> list[Any]:
    from ledger.analyses.compare import Ref

    order = ctx.meta.get("compare.sides") or []
    if sorted(order) != sorted(["ref"] * len(refs) + ["group"] * len(groups)):
        order = ["ref"] * len(refs) + ["group"] * len(groups)
    r, g = iter(refs), iter(groups)
    return [Ref(ref=next(r)) if kind == "ref" else Ref(group=next(g)) for kind in order]


def _two(sides: list[Any]) -> tuple[Any, Any]:
    if len(sides) != 2:
        raise BadInput(f"give exactly two sides (refs or --group TAG=VALUE), got {len(sides)}; "
                       "e.g. ledger compare baseline bf16")
    return sides[0], sides[1]


def _report(ctx: click.Context, refs: tuple[str, ...], groups: tuple[str, ...], allow_task_change: bool,
            alpha: float, noise: float | None, n_boot: int, seed: int, no_replicates: bool, no_floor: bool,
            ledger_path: Path | None, html_out: Path) -> None:
    """`ledger report`: the comparison (as the facade's, on one connection) and its HTML page, which reads
    the sides' goodputs and tables from the same index."""
    from ledger.analyses.compare import CompareOptions, compare
    from ledger.analyses.metrics import Settings
    from ledger.store import index

    sides = _two(_sides(ctx, refs, groups))
    options = CompareOptions(allow_task_change, Settings(alpha=alpha, n_boot=n_boot, seed=seed, noise=noise),
                             replicates=not no_replicates, noise_floor=not no_floor)
    from ledger.store.agreement import check_involved

    ledger = ledger_from(ctx, ledger_path)
    with index.reader(ledger) as con:
        result = compare(con, sides[0], sides[1], options)
        check_involved(ledger, con, [r.id for r in result.runs_a + result.runs_b])  # files and index agree
        from ledger.analyses.goodput_index import of_sides
        from ledger.report.html import report as html_report

        page = html_report(con, result, of_sides(con, result))
    try:
        html_out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot write {html_out}: {exc.strerror or exc}") from exc


def register(cli: click.Group) -> None:
    """Add `compare` and `report` to the CLI."""

    @cli.command(cls=SidesCommand)
    @_selection
    @click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys).")
    @click.option("--markdown", is_flag=True, help="Print Markdown to paste into a review.")
    @click.pass_context
    def compare(ctx: click.Context, refs: tuple[str, ...], groups: tuple[str, ...], allow_task_change: bool,
                alpha: float, noise: float | None, n_boot: int, seed: int, no_replicates: bool, no_floor: bool,
                ledger_path: Path | None, as_json: bool, markdown: bool) -> None:
        """Compare two receipts or replicate groups: what changed by factor, every metric side by side with
        a CI and a verdict, which factor explains which share of the change, and the missing ablation runs.

        A and B are names, id prefixes, or --group TAG=VALUE (a replicate group: receipts identical but for
        the seed). A named receipt's replicates in the ledger join its side. Verdicts rest on the variance
        between runs (replicates, else the noise floor the ledger learned on the same hardware and drivers); one run per
        side is "inconclusive", with the commands that get replicates. Runs of different tasks are refused
        unless --allow-task-change.

        Example:

            ledger compare baseline bf16 --markdown
        """
        if as_json and markdown:
            raise BadInput("choose one of --json and --markdown")
        side_a, side_b = _two(_sides(ctx, refs, groups))
        result = facade_from(ctx, ledger_path).compare(side_a, side_b, allow_task_change=allow_task_change,
                                                       replicates=not no_replicates, noise_floor=not no_floor,
                                                       alpha=alpha, n_boot=n_boot, seed=seed, noise=noise)
        from ledger.store import annotation

        root = ledger_from(ctx, ledger_path).root
        runs = {r.id: r.label for r in result.runs_a + result.runs_b}
        notes = {rid: annotation.of(root, rid) for rid in runs}
        if as_json:
            echo_json({**result.to_json(), "annotations": {rid: [a.to_json() for a in records]
                                                     for rid, records in notes.items() if records}})
        elif markdown:
            from ledger.report.markdown import render as render_markdown
            from ledger.report.notes import render_markdown as notes_markdown

            text = render_markdown(result)
            extra = notes_markdown(notes, runs)
            click.echo(text + ("\n" + extra if extra else ""), nl=False)
        else:
            from rich.console import Console

            from ledger.report.notes import render_compare
            from ledger.report.terminal import render as render_terminal

            console = Console(emoji=False)
            render_terminal(result, console)
            render_compare(notes, runs, console)

    @cli.command(cls=SidesCommand)
    @_selection
    @click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), required=True,
                  help="Write one self-contained HTML page here.")
    @click.pass_context
    def report(ctx: click.Context, refs: tuple[str, ...], groups: tuple[str, ...], allow_task_change: bool,
               alpha: float, noise: float | None, n_boot: int, seed: int, no_replicates: bool, no_floor: bool,
               ledger_path: Path | None, html_out: Path) -> None:
        """Write the comparison of A and B as one self-contained HTML page (plots as inline SVG, no external
        resources): loss vs tokens and vs time, step-time distributions, routing heatmaps, raw tables.

        Example:

            ledger report baseline bf16 --html compare.html
        """
        _report(ctx, refs, groups, allow_task_change, alpha, noise, n_boot, seed, no_replicates, no_floor, ledger_path,
                html_out)
        click.echo(f"wrote {html_out}")
