"""``ledger compare --markdown``: the comparison as Markdown to paste into a review."""

from __future__ import annotations

from ledger.analyses.compare import Comparison
from ledger.analyses.diff import summarize_change
from ledger.report import fmt
from ledger.report.safe import markdown, visible


def _cell(text: str) -> str:
    return markdown(text)


def render(c: Comparison) -> str:
    """The Markdown text."""
    lines = [
        f"## `ledger compare`: {_cell(c.a.label)} vs {_cell(c.b.label)}",
        "",
        f"- **A**: {_cell(', '.join(r.label for r in c.runs_a))}",
        f"- **B**: {_cell(', '.join(r.label for r in c.runs_b))}",
    ]
    if not c.comparable:
        lines.append("- **The tasks differ** (compared because `--allow-task-change` was given)")
    lines += [f"- note: {_cell(n)}" for n in c.notes]
    lines += [f"- problem: {_cell(p)}" for p in c.problems]
    lines += ["", "### What changed, by factor", ""]
    if not c.diff.changed:
        lines.append("No causal factor changed.")
    for factor, changes in c.diff.changed.items():
        lines.append(f"- **{factor}**: " + "; ".join(
            f"`{ch.path}` {_cell(summarize_change(ch.path, ch.a, ch.b))}" for ch in changes))
    lines.append(f"- unchanged: {', '.join(c.diff.unchanged) or '-'}")
    if c.diff.record:
        lines.append("- bookkeeping (never a cause): " + "; ".join(
            f"`{ch.path}` {_cell(summarize_change(ch.path, ch.a, ch.b, 40))}" for ch in c.diff.record))
    lines += ["", "### Metrics", "",
              f"| metric | A | B | delta | B/A | {100 * c.settings.level:g}% CI | p | runs | min change | verdict |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in c.metrics:
        verdict = f"**{row.verdict}**" if row.verdict in ("better", "worse", "higher", "lower") else row.verdict
        if row.reason:
            verdict += f" ({_cell(row.reason)})"
        if row.headline and row.rule:
            verdict += f": {_cell(row.rule)}"
        lines.append(
            f"| {'**' + _cell(row.name) + '**' if row.headline else _cell(row.name)} | {fmt.value(row.a, row.unit)}"
            f"{fmt.within(row.ci_a, row.a)} | {fmt.value(row.b, row.unit)}{fmt.within(row.ci_b, row.b)} | "
            f"{fmt.delta(row.delta, row.unit)} | {fmt.ratio(row.ratio)} | "
            f"{fmt.ci(row, c.settings.level, c.settings.alpha)} | {fmt.p(row.p_value)} | "
            f"{fmt.runs(row)} | {fmt.threshold(row)} | {verdict} |")
    lines += ["", "A verdict rests on the variance between runs (replicates, or the ledger's noise floor): one run "
              "per side is inconclusive. A change counts when it is significant and larger than the min change; "
              "±x% is one run's own precision (within-run interval).", ""]
    if c.attribution:
        lines += ["### Attribution (shares of log(B/A))", ""]
    for att in c.attribution:
        if att.reason:
            lines += [f"- **{att.headline}**: unavailable ({_cell(att.reason)})", ""]
            continue
        how = (("Shapley over all " if att.shapley else f"average over {att.orders} of ")
               + f"{att.orders_possible} orders") if att.orders else "no single-factor path"
        noise = f"noise: {att.noise.source}" if att.noise else "no between-run evidence: point estimates only"
        lines += [f"**{att.headline}** ({att.metric}): total {fmt.share(att.total)} {fmt.interval(att.total_ci)} "
                  f"{att.total_verdict}; {how}; {_cell(noise)}", "",
                  "| factor | share | of total | CI | spread over orders | verdict |", "|---|---:|---:|---:|---:|---|"]
        for s in att.shares:
            lines.append(f"| {s.factors[0]} | {fmt.share(s.share)} | {fmt.fraction(s.fraction)} | "
                         f"{fmt.interval(s.ci)} | {s.spread[0]:+.3f}..{s.spread[1]:+.3f} | {s.verdict} |")
        for s in att.confounded:
            lines.append(f"| confounded: {', '.join(s.factors)} changed together | {fmt.share(s.share)} | "
                         f"{fmt.fraction(s.fraction)} | {fmt.interval(s.ci)} | | {s.verdict} |")
        frac = att.unexplained / att.total if att.total and att.unexplained is not None else None
        lines += [f"| unexplained | {fmt.share(att.unexplained)} | {fmt.fraction(frac)} | "
                  f"{fmt.interval(att.unexplained_ci)} | | |", ""]
    shown = {tuple(s.factors) for att in c.attribution for s in att.confounded}
    lines += [f"- **{item['message']}**" for item in c.confounded() if tuple(item["factors"]) not in shown]
    if c.missing:
        lines += ["### Missing ablation runs", ""]
        for m in c.missing:
            lines.append(f"- {_cell(m.description)}")
            command = visible(m.command).replace("```", "` ` `")  # never closes the fence
            lines += ["", "  ```sh", f"  {command}", "  ```", ""] if m.command else [f"  ({_cell(m.how)})"]
    ablations = {m.command for m in c.missing}
    replicate_steps = [visible(s).replace("```", "` ` `") for s in c.next_steps if s not in ablations]
    if replicate_steps:
        lines += ["### Next steps: get the evidence", "", "```sh", *replicate_steps, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
