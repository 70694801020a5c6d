"""``ledger report A B --html FILE``: one self-contained page, readable offline.

No JavaScript, no fonts, no stylesheets or images fetched from anywhere: the CSS is inline and every plot
is an inline SVG drawn in Python (:mod:`ledger.report.svg`): loss against tokens and against training
time, B - A at matched tokens (:func:`ledger.analyses.curves.difference`, with the spread over replicate
pairs as its band), eval curves per source, step-time distributions after warm-up, the median time per
phase of each side (compare's timing rows), and the routing heatmap of each MoE layer (experts x steps,
load relative to the mean) for the first run of each side. A checkbox (CSS only) swaps the raw curves for
smoothed ones. The factor diff, the metrics, the attribution, the missing runs, the goodput timelines (one
time axis for both) and the raw tables follow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import duckdb
import numpy as np

from ledger.analyses.compare import Comparison
from ledger.analyses.curves import difference, smooth
from ledger.analyses.diff import summarize_change
from ledger.analyses.goodput import Goodput
from ledger.analyses.matched import curve
from ledger.analyses.series import HEATMAP_LAYERS, Columns, RunData, imbalanced_layers, layers_of, routing_matrices
from ledger.report import fmt, svg
from ledger.report.goodput import timeline_svg
from ledger.report.safe import xml

A_COLORS = ("#1f5fa8", "#4b8fd6", "#86b6e8", "#0b3b6f")
B_COLORS = ("#c8372d", "#e8743b", "#f0a65a", "#8a1c14")
RAW_ROWS = 1000
"""At most this many rows of a run's steps table (evenly spaced) in the raw tables."""

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1240px;color:#222;
font-size:14px;line-height:1.4;padding:0 16px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}
tr.fam td{background:#fafafa;font-weight:600;text-align:left}
.better{color:#17802f;font-weight:600}.worse{color:#c0261b;font-weight:600}
.higher,.lower{color:#a86b00;font-weight:600}.inconclusive{color:#a86b00}
.unavailable,.nsd{color:#777}.reason{color:#888;font-size:11.5px}
.note{background:#fff8e1;border-left:3px solid #f0b400;padding:4px 8px;margin:4px 0}
.problem{background:#fdecea;border-left:3px solid #c0261b;padding:4px 8px;margin:4px 0}
.plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;border:1px solid #e3e3e3;padding:6px;background:#fff}
figcaption{font-size:12px;color:#555;max-width:600px}
pre{background:#f6f6f6;padding:6px 8px;overflow-x:auto;font-size:12px;white-space:pre-wrap;word-break:break-all}
code{font-size:12px}details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.conf{color:#c0261b;font-weight:600}
.smooth{display:none}#smoothing:checked~.plots .smooth{display:inline}
#smoothing:checked~.plots .raw{stroke-opacity:0.2}
"""
SMOOTH_SHARE = 0.05
"""Window of the smoothed curves: this share of a run's points (at least 3)."""


def _e(text: object) -> str:
    return xml(text)


def _verdict_class(verdict: str) -> str:
    return {"no significant difference": "nsd", "same configuration": "same"}.get(verdict, verdict)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw``."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = []
    for row in rows:
        cells = "".join(f'<td class="{"l" if i < left else ""}">{c if raw else _e(c)}</td>' for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _colors(c: Comparison) -> dict[str, tuple[str, bool]]:
    out = {r.id: (A_COLORS[i % len(A_COLORS)], False) for i, r in enumerate(c.runs_a)}
    out.update({r.id: (B_COLORS[i % len(B_COLORS)], True) for i, r in enumerate(c.runs_b)})
    return out


def _series(c: Comparison, axis: str) -> list[svg.Series]:
    colors = _colors(c)
    out = []
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        for r in runs:
            cv = curve(r, axis)
            if isinstance(cv, str):
                continue
            color, dash = colors[r.id]
            window = max(3, int(SMOOTH_SHARE * cv.y.size))
            out.append(svg.Series(f"{side}: {r.label}", color, cv.x, cv.y, dash, smooth(cv.y, window)))
    return out


def _difference_plot(c: Comparison) -> tuple[str, str]:
    d = difference(c.runs_a, c.runs_b, "tokens")
    title = "loss difference B - A at matched tokens"
    if isinstance(d, str):
        return svg.line_chart([], title, "tokens", "B - A loss"), f"No difference curve: {d}."
    bands = [] if d.lo is None or d.hi is None else [svg.Band(B_COLORS[0], d.x, d.lo, d.hi)]
    line = svg.Series("B - A (mean of each side)", B_COLORS[0], d.x, d.diff, False,
                      smooth(d.diff, max(3, int(SMOOTH_SHARE * d.x.size))))
    band = (f"band: the spread over the {d.pairs} replicate pairs" if bands else
            "no band: one run per side (replicates give one)")
    return (svg.line_chart([line], title, "tokens", "B - A loss", bands=bands, hline=0.0),
            f"Below 0: B has the lower loss at the same tokens; {band}. The verdict is in the metrics table.")


def _eval_plots(c: Comparison) -> list[tuple[str, str]]:
    colors = _colors(c)
    keys: dict[str, list[svg.Series]] = {}
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        for r in runs:
            points: dict[str, list[tuple[float, float]]] = {}
            for ev in r.evals:
                x = ev["tokens"] if ev["tokens"] is not None else ev["step"]
                if ev["value"] is None or x is None:
                    continue
                key = "/".join(str(p) for p in (ev["split"], ev["source"] or "all", ev["metric"]) if p)
                points.setdefault(key, []).append((float(x), float(ev["value"])))
            color, dash = colors[r.id]
            for key, pts in points.items():
                keys.setdefault(key, []).append(svg.Series(f"{side}: {r.label}", color, np.array([p[0] for p in pts]),
                                                           np.array([p[1] for p in pts]), dash, markers=True))
    return [(svg.line_chart(series, f"eval {key} vs tokens", "tokens", key), f"Eval {key} of each run.")
            for key, series in sorted(keys.items())]


def _timing_plot(c: Comparison) -> tuple[str, str] | None:
    rows = [m for m in c.metrics if m.family == "timing" and (m.a is not None or m.b is not None)]
    if not rows:
        return None
    labels = [m.name.removeprefix("time: ") for m in rows]
    groups = [(f"A: {c.a.label}", A_COLORS[0], [m.a for m in rows]), (f"B: {c.b.label}", B_COLORS[0],
                                                                       [m.b for m in rows])]
    return (svg.bars(labels, groups, "time per phase (median per step after warm-up)", "seconds"),
            "Each phase's median seconds per step, as the metrics table reports them.")


def _step_time_plot(c: Comparison) -> str:
    colors = _colors(c)
    groups = []
    marks = []
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        for r in runs:
            if r.n_steps == 0:
                continue
            st = np.asarray(r.steps["step_time_s"], dtype=np.float64)[r.steady]
            st = st[np.isfinite(st)]
            if st.size:
                groups.append((f"{side}: {r.label}", colors[r.id][0], st))
                marks.append((colors[r.id][0], float(np.median(st))))
    return svg.histogram(groups, "step time after warm-up (outliers removed; dashed: medians)", "seconds", marks=marks)


def _plots(c: Comparison, heatmaps: Mapping[str, Mapping[int, Columns]]) -> str:
    figs = [
        (svg.line_chart(_series(c, "tokens"), "training loss vs tokens", "tokens", "loss"),
         "Loss at equal tokens seen (A solid, B dashed)."),
        _difference_plot(c),
        (svg.line_chart(_series(c, "time"), "training loss vs training time", "seconds since the first step",
                        "loss"), "Loss at equal wall time: a faster stack gets further in the same time."),
        *_eval_plots(c),
        (_step_time_plot(c), "Distribution of step times after warm-up, MAD outliers removed."),
    ]
    timing = _timing_plot(c)
    if timing is not None:
        figs.append(timing)
    parts = ['<input type="checkbox" id="smoothing"> <label for="smoothing">smooth the curves (moving mean over '
             f'{100 * SMOOTH_SHARE:g}% of each run\'s points)</label><div class="plots">']
    parts += [f"<figure>{fig}<figcaption>{_e(cap)}</figcaption></figure>" for fig, cap in figs]
    parts.append('</div><h3>Routing: load per expert over steps, per MoE layer (1x = the mean load)</h3>'
                 f'<p class="note">At most {HEATMAP_LAYERS} layers per run: those of highest mean load CV.</p>'
                 '<div class="plots">')
    shown = False
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        if not runs:
            continue
        r = runs[0]
        for layer, m in sorted(heatmaps.get(r.id, {}).items()):
            if m["load"].size == 0:
                continue
            shown = True
            title = f"{side}: {r.label}, layer {layer}"
            parts.append(f"<figure>{svg.heatmap(m['load'], m['step'], title)}</figure>")
    if not shown:
        parts.append('<p class="reason">no routing rows (dense models, or routing not logged)</p>')
    parts.append("</div>")
    return "".join(parts)


def _metrics_table(c: Comparison) -> str:
    head = ["metric", "A", "B", "delta", "B/A", f"{100 * c.settings.level:g}% CI", "p", "runs", "min change",
            "verdict"]
    rows = []
    family = None
    for row in c.metrics:
        if row.family != family:
            family = row.family
            rows.append(f'<tr class="fam"><td colspan="{len(head)}">{_e(family)}</td></tr>')
        verdict = f'<span class="{_verdict_class(row.verdict)}">{_e(row.verdict)}</span>'
        if row.reason:
            verdict += f'<br><span class="reason">{_e(row.reason)}</span>'
        if row.headline and row.rule:
            verdict += f'<br><span class="reason">{_e(row.rule)}</span>'
        name = f"<b>{_e(row.name)}</b>" if row.headline else _e(row.name)
        if row.note:
            name += f'<br><span class="reason">{_e(row.note)}</span>'
        cells = [name, *(_e(x) for x in (
            fmt.value(row.a, row.unit), fmt.value(row.b, row.unit), fmt.delta(row.delta, row.unit),
            fmt.ratio(row.ratio), fmt.ci(row, c.settings.level, c.settings.alpha), fmt.p(row.p_value), fmt.runs(row),
            fmt.threshold(row))), verdict]
        rows.append("<tr>" + "".join(f'<td class="{"l" if i in (0, 9) else ""}">{x}</td>'
                                     for i, x in enumerate(cells)) + "</tr>")
    th = "".join(f'<th class="{"l" if i in (0, 9) else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    return (f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p>Headline metrics in bold. A verdict rests on the variance between runs (replicates, or the "
            "ledger's noise floor); one run per side is inconclusive. A change counts only when it is significant "
            f"(p below alpha {c.settings.alpha:g}, or its share of it: the headline families share one alpha, the "
            "other rows another) and larger than the min change.</p>")


def _attribution(c: Comparison) -> str:
    parts = []
    for att in c.attribution:
        if att.reason:
            parts.append(f"<h3>{_e(att.headline)}</h3><p class='reason'>unavailable: {_e(att.reason)}</p>")
            continue
        how = ((("Shapley over all " if att.shapley else f"average over {att.orders} of ")
                + f"{att.orders_possible} orders") if att.orders else "no single-factor path")
        noise = f"noise: {att.noise.source}" if att.noise else "no between-run evidence: point estimates only"
        parts.append(f"<h3>{_e(att.headline)} ({_e(att.metric)})</h3><p>total {_e(fmt.share(att.total))} "
                     f"{_e(fmt.interval(att.total_ci))} {_e(att.total_verdict)}; {_e(how)}; {_e(noise)}; "
                     f"{_e(att.note)}</p>")
        rows = [[_e(s.factors[0]) + f' <span class="reason">{_e(s.verdict)}</span>', _e(fmt.share(s.share)),
                 _e(fmt.fraction(s.fraction)), _e(fmt.interval(s.ci)), _e(f"{s.spread[0]:+.3f}..{s.spread[1]:+.3f}")]
                for s in att.shares]
        rows += [[f'<span class="conf">confounded: {_e(", ".join(s.factors))} changed together</span>',
                  _e(fmt.share(s.share)), _e(fmt.fraction(s.fraction)), _e(fmt.interval(s.ci)), ""]
                 for s in att.confounded]
        frac = att.unexplained / att.total if att.total and att.unexplained is not None else None
        rows.append(["unexplained", _e(fmt.share(att.unexplained)), _e(fmt.fraction(frac)),
                     _e(fmt.interval(att.unexplained_ci)), ""])
        parts.append(_table(["factor", "share of log(B/A)", "of total", "CI", "spread over orders"], rows, raw=True))
    if c.missing:
        parts.append("<h3>Missing ablation runs</h3><ul>")
        for m in c.missing:
            body = f"<pre>{_e(m.command)}</pre>" if m.command else f"<p class='reason'>{_e(m.how)}</p>"
            parts.append(f"<li>{_e(m.description)}{body}</li>")
        parts.append("</ul>")
    return "".join(parts)


def _diff(c: Comparison) -> str:
    rows = [[f, ch.path, summarize_change(ch.path, ch.a, ch.b, 120)] for f, changes in c.diff.changed.items()
            for ch in changes]
    out = _table(["factor", "field", "A -> B"], rows, left=3) if rows else "<p>No causal factor changed.</p>"
    out += f"<p>Unchanged factors: {_e(', '.join(c.diff.unchanged) or '-')}</p>"
    if c.diff.record:
        rec = [["record", ch.path, summarize_change(ch.path, ch.a, ch.b, 120)] for ch in c.diff.record]
        out += ("<details><summary>bookkeeping fields that differ (never a cause)</summary>"
                + _table(["factor", "field", "A -> B"], rec, left=3) + "</details>")
    return out


def _raw_steps(r: RunData) -> str:
    n = r.n_steps
    if n == 0:
        return "<p class='reason'>no step rows</p>"
    idx = np.arange(n) if n <= RAW_ROWS else np.linspace(0, n - 1, RAW_ROWS).round().astype(np.int64)
    t = r.train_time
    cols = ("step", "tokens", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "memory_bytes")
    rows = []
    for i in idx:
        rows.append([fmt.num(float(r.steps[c][i])) if c != "step" else str(int(r.steps["step"][i])) for c in cols[:2]]
                    + [fmt.num(float(t[i]))] + [fmt.num(float(r.steps[c][i])) for c in cols[2:]])
    note = f" (every {n / RAW_ROWS:.1f}th of {n:,} rows)" if n > RAW_ROWS else ""
    return (f"<details><summary>steps of {_e(r.label)}: {n:,} rows{_e(note)}</summary>"
            + _table(["step", "tokens", "time s", *cols[2:]], rows, left=0) + "</details>")


def _raw_other(r: RunData) -> str:
    parts = []
    if r.evals:
        rows = [[str(e["step"]), fmt.num(e["tokens"]), str(e["split"] or "-"), str(e["source"] or "all"),
                 str(e["metric"]), fmt.num(e["value"])] for e in r.evals]
        parts.append(f"<details><summary>evals of {_e(r.label)}: {len(rows)} rows</summary>"
                     + _table(["step", "tokens", "split", "source", "metric", "value"], rows, left=0) + "</details>")
    if r.timing:
        rows = []
        for phase, t in r.timing.items():
            x = np.asarray(t["seconds"], dtype=np.float64)
            x = x[np.isfinite(x)]
            rows.append([phase, str(x.size), fmt.num(float(np.median(x)) if x.size else None),
                         fmt.num(float(x.sum()) if x.size else None)])
        parts.append(f"<details><summary>timing per phase of {_e(r.label)}</summary>"
                     + _table(["phase", "rows", "median s", "total s"], rows) + "</details>")
    if r.routing and r.routing.get("step") is not None and r.routing["step"].size:
        rows = []
        for layer in layers_of(r):
            m = r.routing["layer"] == layer
            n, e = r.routing["n_sum"][m], r.routing["experts"][m]
            with np.errstate(divide="ignore", invalid="ignore"):
                cv = np.nanmean(r.routing["n_std"][m] / (n / e))
                mx = np.nanmean(r.routing["n_max"][m] / (n / e))
                dropped = 100 * np.nansum(r.routing["d_sum"][m]) / max(1.0, float(np.nansum(n)))
            entropy = r.routing["entropy"][m]  # none logged: '-', without numpy's "Mean of empty slice" warning
            rows.append([str(layer), str(int(m.sum())), fmt.num(float(cv)), fmt.num(float(mx)), f"{dropped:.3g}%",
                         fmt.num(float(np.nanmean(entropy)) if np.isfinite(entropy).any() else None)])
        parts.append(f"<details><summary>routing per layer of {_e(r.label)}</summary>"
                     + _table(["layer", "steps", "load CV", "max/mean", "dropped", "router entropy"], rows)
                     + "</details>")
    return "".join(parts)


def render(c: Comparison, heatmaps: Mapping[str, Mapping[int, Columns]],
           timelines: Mapping[str, str] | None = None, nodes: str = "") -> str:
    """The page. ``heatmaps``: run id -> layer -> :func:`ledger.analyses.series.routing_matrix` result;
    ``timelines``: side label -> goodput timeline (inline SVG, or a sentence saying why there is none)."""
    title = f"ledger compare: {c.a.label} vs {c.b.label}"
    head = [f"<p><b>A</b> {_e(c.a.label)}: {_e(', '.join(r.label for r in c.runs_a))}<br>"
            f"<b>B</b> {_e(c.b.label)}: {_e(', '.join(r.label for r in c.runs_b))}</p>"]
    if not c.comparable:
        head.append("<p class='problem'>The tasks differ (compared because --allow-task-change was given).</p>")
    head += [f"<p class='note'>{_e(n)}</p>" for n in c.notes]
    head += [f"<p class='problem'>{_e(p)}</p>" for p in c.problems]
    raw = "".join(_raw_steps(r) + _raw_other(r) for r in [*c.runs_a, *c.runs_b])
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>{''.join(head)}"
        f"<h2 id=\"plots\">Plots</h2>{_plots(c, heatmaps)}"
        f"<h2 id=\"diff\">What changed, by factor</h2>{_diff(c)}"
        f"<h2 id=\"metrics\">Metrics</h2>{_metrics_table(c)}"
        f"<h2 id=\"attribution\">Attribution</h2>{_attribution(c) or '<p>not computed</p>'}"
        f"{_timelines(timelines or {})}{nodes}"
        f"<h2 id=\"raw\">Raw tables</h2>{raw}"
        f"<p class='reason'>generated by stackreceipt {_e(generated)}; self-contained, no external resources.</p>"
        "</body></html>\n"
    )


def timelines_of(goodputs: Mapping[str, Goodput | str]) -> dict[str, str]:
    """Side label -> the goodput timeline (inline SVG) of its run, or the sentence saying why there is none.
    The timelines share one time axis (the longest run's), so equal widths are equal times."""
    span = max([g.wall_s for g in goodputs.values() if isinstance(g, Goodput)] + [0.0])
    return {label: timeline_svg(g, span_s=span) if isinstance(g, Goodput)
            else f"<p class='reason'>unavailable: {_e(g)}</p>" for label, g in goodputs.items()}


def _timelines(timelines: Mapping[str, str]) -> str:
    if not timelines:
        return ""
    parts = ["<h2 id=\"goodput\">Goodput timeline</h2>",
             "<p class='note'>attempts, steps and badput of each side's logical run (all its attempts), on one "
             "time axis</p>"]
    for label, body in timelines.items():
        parts.append(f"<h3>{_e(label)}</h3>{body}")
    return "".join(parts)


def report(con: duckdb.DuckDBPyConnection, c: Comparison, goodputs: Mapping[str, Goodput | str] | None = None,
           max_bins: int = 120) -> str:
    """The page for a comparison, with the routing heatmaps read from the index and the goodput timelines of
    ``goodputs`` (side label -> the goodput of its first run, or why there is none: see
    :func:`ledger.analyses.goodput_index.of_sides`); this module computes no goodput itself."""
    heatmaps: dict[str, dict[int, Columns]] = {}
    for runs in (c.runs_a, c.runs_b):
        if runs:
            r = runs[0]
            heatmaps[r.id] = routing_matrices(con, r.id, max_bins, imbalanced_layers(con, r.id))
    return render(c, heatmaps, timelines_of(goodputs or {}), nodes_and_stragglers(con, c))


def nodes_and_stragglers(con: duckdb.DuckDBPyConnection, c: Comparison) -> str:
    """For the first run of each side with several ranks: differences between its nodes and its slowest
    ranks (:mod:`ledger.analyses.stragglers`); empty when no side has more than one rank."""
    from ledger.analyses.nodes import node_differences
    from ledger.analyses.stragglers import stragglers

    parts = []
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        if not runs:
            continue
        r = runs[0]
        timing = con.sql("SELECT rank, step, phase, seconds FROM timing WHERE receipt_id = ?",
                         params=[r.id]).to_arrow_table()
        s = stragglers(timing, r.receipt.stack.nodes)
        if len(s.ranks) < 2:
            continue
        body = [f"<p class='problem'>nodes differ ({_e(f)}): {_e(t)}</p>" for f, t in node_differences(r.receipt)]
        rows = [[str(x.rank), "-" if x.node_rank is None else f"{x.node_rank} ({x.hostname})", str(x.steps),
                 f"{x.median_s:.4g}", f"{x.relative:.2f}", f"{x.individual:.2f}",
                 "straggler" if x in s.stragglers else ""] for x in s.ranks[:max(3, len(s.stragglers))]]
        body.append(_table(["rank", "node", "steps", "median work s", "relative", "individual", ""], rows))
        body.append(f"<p class='note'>waiting on slower ranks: {s.wait_s:.3g} s over {s.steps_compared} steps "
                    f"(straggler scores below {s.threshold:g} are named)</p>")
        parts.append(f"<h3>{side}: {_e(r.label)}</h3>{''.join(body)}")
    return ("<h2 id=\"stragglers\">Nodes and stragglers</h2>" + "".join(parts)) if parts else ""

