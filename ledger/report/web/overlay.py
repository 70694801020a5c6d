"""The overlay page of ``ledger serve``: any metric of any number of runs on shared axes, smoothed on request.

Metrics (:func:`available`), read from the index for the runs selected:

    training   the steps table's columns: loss, learning rate, gradient norm, step time, tokens/s, TFLOP/s, memory...
    custom     each metric without a column of its own (the steps table's ``extra``: ``moe/layer3_load_cv``)
    evals      each eval series (split / source / metric)
    system     telemetry: utilisation, power, memory, energy, clocks, temperature (a line per run and device)

Without a choice the page draws the training curves the runs have, every eval series, the system's utilisation,
power and memory, and the custom metrics when there are few (:data:`DEFAULT_CUSTOM`). X axes: step, tokens or
training time (``x``; by default loss and evals against tokens, the rest against steps, telemetry against
seconds since the run started).

One colour per run (a dash pattern too past :data:`plots.PALETTE`'s ten colours); the legend is one list above the
plots instead of one per plot (Plotly's legends, eight runs long, covered the axis titles); clicking a run there
hides or shows it in every plot. Smoothing is an exponential moving average with TensorBoard's debiasing, applied
in the page to every line (``smooth`` in the URL sets it on load; values kept to 12 significant digits, so that a
constant stays one); the data sent is the logged values.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
from numpy.typing import NDArray

from ledger.errors import BadInput
from ledger.report.web import plots
from ledger.report.web.pages import e, figures, page, url
from ledger.store import index
from ledger.store.receipts import Ledger
from ledger.store.refs import resolve

STEP_METRICS: dict[str, str] = {
    "loss": "training loss", "lr": "learning rate", "grad_norm": "gradient norm", "step_time_s": "step time (s)",
    "tokens_per_s": "tokens/s", "flops_per_s": "model FLOP/s", "tflops_per_device": "TFLOP/s per device",
    "memory_bytes": "memory of the step (bytes)", "aux_loss": "load-balancing loss", "z_loss": "router z-loss",
    "loss_scale": "loss scale", "epoch": "epoch", "global_batch": "global batch",
}
"""Columns of the steps table that can be drawn, with their titles."""
TELEMETRY: dict[str, str] = {
    "utilization": "utilisation (0..1)", "power_w": "power (W)", "memory_bytes": "memory (bytes)",
    "energy_j": "energy counter (J)", "sm_clock_mhz": "SM clock (MHz)", "memory_clock_mhz": "memory clock (MHz)",
    "temperature_c": "temperature (C)",
}
"""Telemetry columns that can be drawn."""
DEFAULT_STEPS = ("loss", "tokens_per_s", "lr", "grad_norm", "step_time_s")
DEFAULT_TELEMETRY = ("utilization", "power_w", "memory_bytes")
DEFAULT_CUSTOM = 6
"""Custom metrics are drawn without being chosen when the runs have at most this many."""
AXES = ("auto", "step", "tokens", "time")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


@dataclass(frozen=True)
class Metric:
    """Something the overlay can draw."""

    key: str
    """``loss``, ``extra:moe/cv``, ``eval:val/rare/loss``, ``telemetry:power_w`` (the URL's ``m``)."""
    title: str
    group: str
    """training, custom, evals, system."""
    split: str | None = None
    source: str | None = None
    metric: str | None = None


def _ids_sql(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


def available(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> list[Metric]:
    """Every metric at least one of the runs has a value of, grouped and ordered."""
    where = f"receipt_id IN ({_ids_sql(ids)})"
    counts = con.execute(f"SELECT {', '.join(f'count({c})' for c in STEP_METRICS)} FROM steps WHERE {where}",
                         list(ids)).fetchone() or ()
    out = [Metric(k, t, "training") for (k, t), n in zip(STEP_METRICS.items(), counts, strict=True) if n]
    names = con.execute(f"SELECT DISTINCT unnest(map_keys(extra)) AS k FROM steps WHERE {where} ORDER BY k",
                        list(ids)).fetchall()
    out += [Metric(f"extra:{n}", str(n), "custom") for (n,) in names]
    series = con.execute(f"SELECT DISTINCT split, source, metric FROM evals WHERE {where} ORDER BY ALL",
                         list(ids)).fetchall()
    for split, source, metric in series:
        name = "/".join(str(p) for p in (split, source or "all", metric) if p)
        out.append(Metric(f"eval:{name}", f"eval {name}", "evals", split, source, metric))
    counts = con.execute(f"SELECT {', '.join(f'count({c})' for c in TELEMETRY)} FROM telemetry WHERE {where}",
                         list(ids)).fetchone() or ()
    out += [Metric(f"telemetry:{k}", t, "system") for (k, t), n in zip(TELEMETRY.items(), counts, strict=True) if n]
    return out


def defaults(metrics: Sequence[Metric]) -> list[str]:
    """The metrics drawn when none is chosen."""
    custom = [m.key for m in metrics if m.group == "custom"]
    keys = {m.key for m in metrics}
    return ([k for k in DEFAULT_STEPS if k in keys] + [m.key for m in metrics if m.group == "evals"]
            + (custom if len(custom) <= DEFAULT_CUSTOM else [])
            + [f"telemetry:{k}" for k in DEFAULT_TELEMETRY if f"telemetry:{k}" in keys])


def _floats(values: Any) -> NDArray[np.float64]:
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _start(con: duckdb.DuckDBPyConnection, rid: str) -> float | None:
    """The run's clock origin: the start of its first logged step (as the receipt page's training time), else
    when the launch started."""
    row = con.execute("SELECT time, step_time_s FROM steps WHERE receipt_id = ? AND time IS NOT NULL "
                      "ORDER BY rowid LIMIT 1", [rid]).fetchone()
    if row is not None:
        return float(row[0]) - (float(row[1]) if row[1] is not None else 0.0)
    row = con.execute("SELECT epoch(started_at) FROM receipts WHERE id = ?", [rid]).fetchone()
    return float(row[0]) if row is not None and row[0] is not None else None


def axis_of(metric: Metric, x: str) -> str:
    """The x axis a metric is drawn against: telemetry always against time; ``auto``: loss and evals against
    tokens, the rest against steps."""
    if metric.group == "system":
        return "time"
    if x != "auto":
        return x
    return "tokens" if metric.key == "loss" or metric.group == "evals" else "step"


XLABELS = {"step": "step", "tokens": "tokens", "time": "seconds since the first step"}


def series(con: duckdb.DuckDBPyConnection, rid: str, metric: Metric, axis: str
           ) -> list[tuple[str, NDArray[np.float64], NDArray[np.float64]]]:
    """(device or '', x, y) of one run for one metric (one entry per device for telemetry)."""
    if metric.group == "system":
        column = metric.key.split(":", 1)[1]
        rows = con.execute(f"SELECT coalesce(device, ''), time, {column} FROM telemetry WHERE receipt_id = ? "
                           f"AND {column} IS NOT NULL ORDER BY device, time", [rid]).fetchall()
        start = _start(con, rid) or (min(r[1] for r in rows) if rows else 0.0)
        out = []
        for device in dict.fromkeys(r[0] for r in rows):
            mine = [r for r in rows if r[0] == device]
            out.append((device, _floats(r[1] for r in mine) - start, _floats(r[2] for r in mine)))
        return out
    if metric.group == "evals":
        rows = con.execute("SELECT step, tokens, time, value FROM evals WHERE receipt_id = ? AND split IS NOT "
                           "DISTINCT FROM ? AND source IS NOT DISTINCT FROM ? AND metric = ? AND rank = (SELECT "
                           "min(rank) FROM evals WHERE receipt_id = ?) ORDER BY step, time",
                           [rid, metric.split, metric.source, metric.metric, rid]).fetchall()
        xs = {"step": [r[0] for r in rows], "tokens": [r[1] for r in rows], "time": [r[2] for r in rows]}
        x = _floats(xs[axis])
        if axis == "time":
            x = x - (_start(con, rid) or 0.0)
        return [("", x, _floats(r[3] for r in rows))]
    value = metric.key.split(":", 1)[1] if metric.group == "custom" else metric.key
    y_sql = "extra[?]::DOUBLE" if metric.group == "custom" else f'"{value}"::DOUBLE'
    params = [value] if metric.group == "custom" else []
    nan = "'nan'::DOUBLE"
    table = con.execute(f"SELECT coalesce(step::DOUBLE, {nan}), coalesce(tokens::DOUBLE, {nan}), "
                        f"coalesce(time, {nan}), coalesce({y_sql}, {nan}) FROM steps WHERE receipt_id = ? AND "
                        "rank = (SELECT min(rank) FROM steps WHERE receipt_id = ?) ORDER BY rowid",
                        [*params, rid, rid]).fetchnumpy()
    step, tokens, time, y = (np.asarray(table[c], dtype=np.float64) for c in table)
    x = {"step": step, "tokens": tokens, "time": time - (_start(con, rid) or 0.0)}[axis]
    return [("", x, y)]


@dataclass(frozen=True)
class Run:
    id: str
    label: str
    colour: str
    dash: str


def _figure(runs: Sequence[Run], lines: Sequence[tuple[Run, str, NDArray[np.float64], NDArray[np.float64]]],
            title: str, xlabel: str, ylabel: str, markers: bool) -> dict[str, Any]:
    import plotly.graph_objects as go

    fig = go.Figure(layout=plots._layout(title, xlabel, ylabel, showlegend=False))
    devices = sorted({d for _, d, _, _ in lines})
    for run, device, x, y in lines:
        x, y = plots.decimate(x, y)
        if not x.size:
            continue
        dash = DASHES[devices.index(device) % len(DASHES)] if len(devices) > 1 else run.dash
        name = run.label + (f" · {device}" if device else "")
        fig.add_trace(go.Scatter(x=x, y=y, name=html.escape(name), legendgroup=run.id, meta=run.id,
                                 mode="lines+markers" if markers else "lines",
                                 line={"color": run.colour, "width": 1.6, "dash": dash}))
    if not fig.data:
        fig.add_annotation(text="no data", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return plots.as_dict(fig)


def overlay_page(ledger: Ledger, refs: Sequence[str], chosen: Sequence[str] = (), x: str = "auto",
                 smooth: float = 0.0) -> str:
    """The chosen metrics (default: :func:`defaults`) of the runs, one plot each, on axis ``x``."""
    if not refs:
        raise BadInput("select at least one run to overlay (tick its box in the receipts table)")
    if x not in AXES:
        raise BadInput(f"unknown x axis {x!r}; choose one of: {', '.join(AXES)}")
    if not 0 <= smooth < 1:
        raise BadInput(f"smoothing must be at least 0 and below 1 (got {smooth:g})")
    from ledger.store.agreement import check_involved

    with index.reader(ledger) as con:
        ids = list(dict.fromkeys(resolve(con, ref) for ref in refs))
        check_involved(ledger, con, ids, store=False)  # as `ledger report` does: nothing drawn from damage
        names = dict(con.execute(f"SELECT id, name FROM receipts WHERE id IN ({_ids_sql(ids)})", ids).fetchall())
        runs = [Run(rid, f"{names.get(rid)} ({rid[:8]})" if names.get(rid) else rid[:12],
                    plots.PALETTE[i % len(plots.PALETTE)], DASHES[i // len(plots.PALETTE) % len(DASHES)])
                for i, rid in enumerate(ids)]
        metrics = available(con, ids)
        by_key = {m.key: m for m in metrics}
        unknown = [k for k in chosen if k not in by_key]
        if unknown:
            raise BadInput(f"no run selected has the metric(s) {', '.join(map(repr, unknown))}; they have: "
                           f"{', '.join(by_key) or 'none'}")
        keys = list(chosen) or defaults(metrics)
        figs: list[tuple[str, dict[str, Any]]] = []
        for key in keys:
            metric = by_key[key]
            axis = axis_of(metric, x)
            lines = [(run, device, xs, ys) for run in runs for device, xs, ys in series(con, run.id, metric, axis)]
            lacking = [run.label for run, _, xs, ys in lines
                       if np.isfinite(ys).any() and not (np.isfinite(xs) & np.isfinite(ys)).any()]
            note = ""
            if lacking and axis != "step" and metric.group != "system":  # one axis for every run: steps
                having = {run.label for run, _, _, ys in lines if np.isfinite(ys).any()}
                if x != "auto" or len(lacking) < len(having):  # say so, unless no run has that axis
                    shown = ", ".join(lacking[:3]) + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else "")
                    note = f" (no {axis} for {shown})"
                axis = "step"
                lines = [(run, device, xs, ys) for run in runs for device, xs, ys in series(con, run.id, metric,
                                                                                             axis)]
            ylabel = metric.title if metric.group != "evals" else (metric.metric or "value")
            title = (f"{metric.title} vs {XLABELS[axis].split(' ')[0]}{note}" if metric.group != "system"
                     else metric.title)
            figs.append((f"overlay-{len(figs)}", _figure(runs, lines, title, XLABELS[axis], ylabel,
                                                         markers=metric.group == "evals")))
    return render(runs, metrics, keys, x, smooth, figs)


def _legend(runs: Sequence[Run]) -> str:
    items = "".join(
        f'<li data-run="{e(r.id)}"><span class="swatch" style="background:{e(r.colour)}"></span>'
        f'<a href="{url("/receipt/" + r.id)}">{e(r.label)}</a> '
        f'<button type="button" class="toggle" data-run="{e(r.id)}">hide</button></li>' for r in runs)
    return f'<ul id="runs" class="legend">{items}</ul>'


def _chooser(runs: Sequence[Run], metrics: Sequence[Metric], keys: Sequence[str], x: str, smooth: float) -> str:
    hidden = "".join(f'<input type="hidden" name="id" value="{e(r.id)}">' for r in runs)
    groups: dict[str, list[Metric]] = {}
    for m in metrics:
        groups.setdefault(m.group, []).append(m)
    sets = "".join(
        f'<fieldset><legend>{e(group)}</legend>' + "".join(
            f'<label><input type="checkbox" name="m" value="{e(m.key)}"{" checked" if m.key in keys else ""}> '
            f'{e(m.title)}</label>' for m in ms) + "</fieldset>" for group, ms in groups.items())
    axes = "".join(f'<option value="{a}"{" selected" if a == x else ""}>{a}</option>' for a in AXES)
    return (f'<form method="get" action="/overlay" id="metrics">{hidden}'
            f'<details{" open" if len(metrics) <= 12 else ""}><summary>metrics</summary>{sets}</details>'
            f'<label>x axis <select name="x">{axes}</select></label> '
            f'<label>smoothing <input type="range" id="smooth" name="smooth" min="0" max="0.99" step="0.01" '
            f'value="{smooth:g}"> <output id="smooth-value">{smooth:g}</output></label> '
            '<button type="submit" id="draw">draw</button></form>')


def render(runs: Sequence[Run], metrics: Sequence[Metric], keys: Sequence[str], x: str, smooth: float,
           figs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The page: the metric chooser, the runs' legend, the plots."""
    body = _chooser(runs, metrics, keys, x, smooth) + _legend(runs) + figures(figs)
    return page(f"{len(runs)} runs overlaid", body, SMOOTH % json.dumps(smooth))


SMOOTH = """
var RAW={};
function values(a){if(a&&a.bdata!==undefined){var s=atob(a.bdata),b=new Uint8Array(s.length);
  for(var i=0;i<s.length;i++){b[i]=s.charCodeAt(i);}return Array.from(new Float64Array(b.buffer));}
  return Array.from(a||[]);}
function ema(ys,w){var out=[],last=0,n=0;for(var i=0;i<ys.length;i++){var y=ys[i];
  if(!isFinite(y)){out.push(y);continue;}last=last*w+(1-w)*y;n++;
  out.push(w>0?parseFloat((last/(1-Math.pow(w,n))).toPrecision(12)):y);}
  return out;}
function smooth(w){document.getElementById('smooth-value').textContent=w;
  document.querySelectorAll('div.plot').forEach(function(gd){if(!gd.data){return;}
    if(!RAW[gd.id]){RAW[gd.id]=gd.data.map(function(t){return values(t.y);});}
    var ys=RAW[gd.id].map(function(y){return ema(y,w);});
    if(ys.length){Plotly.restyle(gd,{y:ys});}});}
var slider=document.getElementById('smooth');
slider.addEventListener('input',function(){smooth(+slider.value);});
if(%s>0){smooth(+slider.value);}
document.querySelectorAll('#runs .toggle').forEach(function(b){b.addEventListener('click',function(){
  var run=b.dataset.run,hide=b.textContent==='hide';b.textContent=hide?'show':'hide';
  b.parentNode.classList.toggle('hidden',hide);
  document.querySelectorAll('div.plot').forEach(function(gd){if(!gd.data){return;}
    var idx=[];gd.data.forEach(function(t,i){if(t.legendgroup===run){idx.push(i);}});
    if(idx.length){Plotly.restyle(gd,{visible:hide?false:true},idx);}});});});
"""
