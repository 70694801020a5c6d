"""`ledger history` on a terminal: each series' change points, the shift with its interval, and the suspects
(rich; user text through :func:`ledger.report.safe.terminal`)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ledger.analyses.history import MIN_RUNS, History
from ledger.report.safe import terminal


def render(h: History, console: Console | None = None) -> None:
    """Print the history."""
    out = console or Console(emoji=False)
    if not h.series:
        out.print(terminal(f"no series with at least {MIN_RUNS} runs"
                           + (f" matches --where {h.where}" if h.where else " of one configuration")
                           + "; record more runs of one configuration (e.g. ledger rerun REF --times 5)"))
    for s in h.series:
        out.rule(terminal(s.label))
        out.print(terminal(f"{s.metric}: {len(s.points)} runs, {len(s.change_points)} change point(s) (E-divisive "
                           f"means, permutation test at alpha {h.alpha:g})"))
        for cp in s.change_points:
            first = f"{cp.first.name or '-'} ({cp.first.id[:8]})"
            out.print(Text("change ", style="bold yellow") + terminal(
                f"at run {cp.index + 1} of {len(s.points)}, first run after: {first}: {cp.shift_text()} "
                f"({cp.runs_after} runs after vs {cp.runs_before} before; p = {cp.p_value:.3g})"))
            if not cp.suspects:
                out.print(terminal("  suspects: none: the runs on either side differ in no recorded factor (the "
                                   "machine's state, other jobs)"), style="dim")
            for suspect in cp.suspects:
                out.print(terminal(f"  suspect {suspect.text()}"))
        for rid, why in s.unavailable[:5]:
            out.print(terminal(f"  {rid[:8]} left out: {why}"), style="dim")
    if h.skipped:
        shown = ", ".join(f"{label}" for label, _, _ in h.skipped[:3])
        more = f" and {len(h.skipped) - 3} more" if len(h.skipped) > 3 else ""
        out.print(terminal(f"not searched (fewer than {MIN_RUNS} runs): {shown}{more}"), style="dim")
