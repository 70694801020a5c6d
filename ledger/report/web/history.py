"""The history page of ``ledger serve`` (``/history?where=...&metric=...``): each series' per-run values in time
order with its change points marked (a dashed line before the first run after each, labelled with the shift),
and a table of the change points with their suspects. What `ledger history` prints, drawn
(:func:`ledger.analyses.history.history`). Every user text is escaped (:func:`ledger.report.web.pages.e`; in the
figures, :func:`ledger.report.web.plots._e`)."""

from __future__ import annotations

from typing import Any

from ledger.analyses.history import SPEED, History, Series
from ledger.report.web import pages, plots
from ledger.store import index
from ledger.store.receipts import Ledger


def figure(series: Series) -> dict[str, Any]:
    """The series' values by run (markers and a line), a dashed vertical line at each change point."""
    import plotly.graph_objects as go

    x = list(range(1, len(series.points) + 1))
    names = [plots._e(p.name or p.id[:12]) for p in series.points]
    fig = go.Figure(layout=plots._layout(f"{series.metric}: {series.label}", "run (in time order)",
                                         f"{series.metric} ({series.unit})" if series.unit else series.metric))
    fig.add_trace(go.Scatter(x=x, y=[p.value for p in series.points], mode="lines+markers",
                             name=plots._e(series.metric), text=names, hovertemplate="%{text}: %{y}<extra></extra>",
                             line={"color": plots.PALETTE[0]}))
    for cp in series.change_points:
        fig.add_vline(x=cp.index + 0.5, line={"color": plots.PALETTE[1], "dash": "dash", "width": 2},
                      annotation_text=plots._e(cp.shift_text().split(" [")[0]), annotation_position="top left")
    return plots.as_dict(fig)


def page(result: History, where: str, metric: str, error: str | None = None) -> str:
    """The page: a form (where, metric), then per series its figure and its change points."""
    e, url = pages.e, pages.url
    parts = ['<form method="get" action="/history" id="history-form">'
             f'<label>where <input type="text" name="where" value="{e(where)}" '
             'placeholder="name~baseline* (empty: every configuration with enough runs)"></label> '
             f'<label>metric <input type="text" name="metric" value="{e(metric)}"></label> '
             '<button type="submit">find change points</button></form>']
    if error:
        parts.append(f'<p class="error">{e(error)}</p>')
    if not result.series:
        parts.append("<p>No series with enough runs to search (at least 6 runs of one configuration).</p>")
    for i, series in enumerate(result.series):
        found = len(series.change_points)
        parts.append(f'<h2>{e(series.label)}</h2><p class="note">{found} change point(s) in {len(series.points)} '
                     f"runs (E-divisive means, permutation test at alpha {result.alpha:g})</p>")
        parts.append(pages.figures([(f"history-{i}", figure(series))]))
        if not series.change_points:
            continue
        rows = []
        for cp in series.change_points:
            suspects = ("<br>".join(e(s.text()) for s in cp.suspects)
                        or "none: the runs on either side differ in no recorded factor")
            rows.append(f'<tr class="change-point" data-index="{cp.index}"><td>{cp.index + 1}</td>'
                        f'<td><a href="{url("/receipt/" + cp.first.id)}">{e(cp.first.name or cp.first.id[:12])}</a> '
                        f"<code>{e(cp.first.id[:8])}</code></td><td>{e(cp.shift_text())}</td>"
                        f'<td class="n">{cp.p_value:.3g}</td><td>{suspects}</td></tr>')
        parts.append('<table class="change-points"><thead><tr><th>run #</th><th>first run after</th>'
                     "<th>shift (95% CI)</th><th>p</th><th>suspects</th></tr></thead><tbody>"
                     + "".join(rows) + "</tbody></table>")
    if result.skipped:
        parts.append(f'<p class="note">{len(result.skipped)} series with fewer than 6 runs not searched.</p>')
    return pages.page(f"history: {metric}", "".join(parts))


def history_page(ledger: Ledger, where: str, metric: str) -> str:
    """The page for ``/history``; a bad filter or metric is shown on the page (the form stays usable)."""
    from ledger.analyses.history import history
    from ledger.errors import LedgerError

    metric = metric or SPEED
    try:
        with index.reader(ledger) as con:
            result = history(con, where or None, metric)
    except LedgerError as exc:
        return page(History(metric, where or None, []), where, metric, str(exc))
    return page(result, where, metric)


__all__ = ["figure", "history_page", "page"]
