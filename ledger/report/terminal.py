"""``ledger compare`` on a terminal: factor diff, metrics side by side, attribution, missing runs (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ledger.analyses.attribution import HeadlineAttribution
from ledger.analyses.compare import Comparison
from ledger.analyses.diff import summarize_change
from ledger.report import fmt, layout
from ledger.report.safe import markup, terminal

VERDICT_STYLE = {
    "better": "bold green",
    "worse": "bold red",
    "higher": "bold yellow",
    "lower": "bold yellow",
    "no significant difference": "dim",
    "inconclusive": "yellow",
    "same configuration": "dim",
    "identical": "dim",
    "unavailable": "dim italic",
}


def render(c: Comparison, console: Console | None = None) -> None:
    """Print the comparison."""
    out = console or Console(emoji=False)  # piped output follows $COLUMNS like a terminal
    out.print(Text("A ", style="bold") + terminal(f"{c.a.label}: " + ", ".join(r.label for r in c.runs_a)))
    out.print(Text("B ", style="bold") + terminal(f"{c.b.label}: " + ", ".join(r.label for r in c.runs_b)))
    if not c.comparable:
        out.print("[bold red]the tasks differ[/bold red] (compared because --allow-task-change was given)")
    for note in c.notes:
        out.print(Text("note ", style="yellow") + terminal(note))
    for problem in c.problems:
        out.print(Text("problem ", style="red") + terminal(problem))

    out.rule("what changed, by factor")
    if not c.diff.changed:
        out.print("no causal factor changed")
    for factor, changes in c.diff.changed.items():
        out.print(f"[bold]{factor}[/bold]")
        for ch in changes:
            out.print(terminal(f"  {ch.path}: {summarize_change(ch.path, ch.a, ch.b)}"))
    out.print(f"[dim]unchanged: {markup(', '.join(c.diff.unchanged) or '-')}[/dim]")
    if c.diff.record:
        out.print(terminal("bookkeeping (shown, never a cause): " + "; ".join(
            f"{ch.path}: {summarize_change(ch.path, ch.a, ch.b, 40)}" for ch in c.diff.record), style="dim"))

    out.rule("metrics")
    _metrics(c, out)
    for row in c.metrics:  # each headline's verdict with the rule that decided it
        if row.headline and row.rule:
            line = Text("* ", style="bold") + terminal(f"{row.name}: ") + Text(
                row.verdict, style=VERDICT_STYLE.get(row.verdict, "")) + terminal(f": {row.rule}")
            if row.runs_for_power is not None:
                line += terminal(f"; {row.runs_for_power} runs per side would give 80% power for the "
                                 f"{100 * row.threshold:g}% minimum change")
            out.print(line)
    out.print("[dim]* headline metric. A verdict rests on the variance between runs (replicates, or the ledger's "
              "noise floor); one run per side is inconclusive. A change counts when significant (p below alpha, "
              "or the share of alpha its rows were tested at) and larger than the min change; +-x% is one run's "
              "own precision (within-run interval); an interval that holds both a halving and a doubling says how "
              "many runs per side would find the min change instead.[/dim]")

    if c.attribution:
        out.rule("attribution (shares of log(B/A))")
    for att in c.attribution:
        if att.reason:
            out.print(Text(att.headline, style="bold") + Text(f": unavailable ({att.reason})"))
            continue
        how = ((("Shapley over all " if att.shapley else f"average over {att.orders} of ")
                + f"{att.orders_possible} orders") if att.orders else "no single-factor path")
        noise = f"noise: {att.noise.source}" if att.noise else "no between-run evidence: point estimates only"
        out.print(f"[bold]{escape(att.headline)}[/bold] ({escape(att.metric)}): total {fmt.share(att.total)} "
                  f"{escape(fmt.interval(att.total_ci))} {escape(att.total_verdict)}  "
                  f"[dim]{escape(how)}; {escape(noise)}; {escape(att.note)}[/dim]", highlight=False)
        _shares(att, out)
    shown = {tuple(s.factors) for att in c.attribution for s in att.confounded}
    for item in c.confounded():
        if tuple(item["factors"]) not in shown:
            out.print(Text(item["message"], style="bold red"))
    if c.missing:
        out.rule("missing ablation runs")
        for m in c.missing:
            out.print(terminal(f"- {m.description}"))
            if m.command:
                out.print(Text("  $ ", style="green") + terminal(m.command), soft_wrap=True)
            else:
                out.print(Text(f"  {m.how}", style="dim"))
    replicate_steps = [s for s in c.next_steps if s not in {m.command for m in c.missing}]
    if replicate_steps:
        out.rule("next steps: get the evidence")
        for step in replicate_steps:
            out.print(Text("  $ ", style="green") + Text(step), soft_wrap=True)


METRIC_COLUMNS = ("A", "B", "delta", "B/A", "CI", "p", "runs", "min change")


def _metrics(c: Comparison, out: Console) -> None:
    """The metrics side by side: a table where every word fits its column, else a block per metric (names,
    verdicts and figures whole at any width: :mod:`ledger.report.layout`). A reason is a numbered note under them."""
    level = f"{100 * c.settings.level:g}% CI"
    reasons: dict[str, int] = {}
    rows: list[tuple[str | None, Text, list[str], Text]] = []
    family = None
    for row in c.metrics:
        if row.family != family:
            family = row.family
            rows.append((family, Text(), [], Text()))
        verdict = Text(row.verdict, style=VERDICT_STYLE.get(row.verdict, ""))
        if row.reason:
            verdict.append(f" [{reasons.setdefault(row.reason, len(reasons) + 1)}]", style="dim")
        figures = [fmt.value(row.a, row.unit) + fmt.within(row.ci_a, row.a),
                   fmt.value(row.b, row.unit) + fmt.within(row.ci_b, row.b), fmt.delta(row.delta, row.unit),
                   fmt.ratio(row.ratio), fmt.ci(row, c.settings.level, c.settings.alpha), fmt.p(row.p_value),
                   fmt.runs(row), fmt.threshold(row)]
        rows.append((None, terminal(("* " if row.headline else "  ") + row.name), figures, verdict))
    columns = [layout.Column("metric", "left", words=True), *(layout.Column(level if t == "CI" else t)
                                                              for t in METRIC_COLUMNS),
               layout.Column("verdict", "left", words=True)]
    cells: list[list[str | Text]] = [[Text(fam, style="bold underline"), *[""] * 9] if fam is not None
                                     else [name, *figures, verdict] for fam, name, figures, verdict in rows]
    table = layout.fitted(columns, cells, out.width)
    if table is not None:
        out.print(table)
    else:
        for fam, name, figures, verdict in rows:
            if fam is not None:
                out.print(Text(fam, style="bold underline"))
                continue
            shown = [] if verdict.plain.startswith("unavailable") else [
                (t, v) for t, v in zip((*METRIC_COLUMNS[:4], level, *METRIC_COLUMNS[5:]), figures, strict=True)
                if v not in ("-", "")]
            layout.block(out, name, verdict, shown)
    for reason, number in reasons.items():
        out.print(Text(f"[{number}] {reason}", style="dim"))


def _shares(att: HeadlineAttribution, out: Console) -> None:
    """One headline's shares by factor, confounded sets and the unexplained rest (a table, or blocks)."""
    rows: list[tuple[Text, list[str], str]] = []
    for s in att.shares:
        rows.append((Text(s.factors[0]), [fmt.share(s.share), fmt.fraction(s.fraction), fmt.interval(s.ci),
                                          f"{s.spread[0]:+.3f}..{s.spread[1]:+.3f}"], s.verdict))
    for s in att.confounded:
        rows.append((Text(f"confounded: {', '.join(s.factors)} changed together", style="bold red"),
                     [fmt.share(s.share), fmt.fraction(s.fraction), fmt.interval(s.ci), ""], s.verdict))
    rows.append((Text("unexplained", style="dim"), [
        fmt.share(att.unexplained),
        fmt.fraction(att.unexplained / att.total if att.total and att.unexplained is not None else None),
        fmt.interval(att.unexplained_ci), ""], ""))
    titles = ("share", "of total", "CI", "spread over orders")
    columns = [layout.Column("factor", "left", words=True), *(layout.Column(t) for t in titles),
               layout.Column("verdict", "left", words=True)]
    table = layout.fitted(columns, [[name, *figures, verdict] for name, figures, verdict in rows], out.width)
    if table is not None:
        out.print(table)
        return
    for name, figures, verdict in rows:
        layout.block(out, name, verdict, [(t, v) for t, v in zip(titles, figures, strict=True) if v not in ("-", "")])
