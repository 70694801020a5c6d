"""The HTML pages of ``ledger serve``: every user text escaped, plots as Plotly figures in JSON elements.

Each function takes what the store and the analyses return and gives one page (a string). Plots are
``<div class="plot">`` elements followed by ``<script type="application/json" class="fig">`` holding the
figure; one small script draws them all with the Plotly bundled in the package (``/static/plotly.min.js``).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from ledger.report import fmt
from ledger.report.web.plots import script_json

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;font-size:14px;line-height:1.4}
header{background:#1f2d3d;color:#fff;padding:8px 20px;display:flex;gap:18px;align-items:baseline}
header a{color:#dfe8f2;text-decoration:none}header b{font-size:16px;color:#fff}
main{padding:12px 20px;max-width:1400px}
h1{font-size:20px;margin:8px 0}h2{font-size:16px;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:22px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0 12px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
th a{color:#222;text-decoration:none}th a.on{color:#1f5fa8}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
.plot{border:1px solid #e3e3e3;min-height:340px}
.error{background:#fdecea;border-left:3px solid #c0261b;padding:6px 10px}
.note{color:#666}.live{color:#c0261b;font-weight:600}
input[type=text]{width:520px;padding:4px}code{font-size:12px}
.factors{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:4px 18px}
.failure pre{background:#fdf3f2;border:1px solid #f0c9c5;padding:8px;overflow-x:auto;font-size:12px;max-height:420px}
#notes ul{margin:4px 0}#notes li.archive,#notes li.unarchive{color:#8a6d00}
tr.archived td{color:#888}tr.filters td{padding:1px 2px}input.colfilter{width:100%;min-width:60px;box-sizing:border-box}
details#columns fieldset,#metrics fieldset{display:inline-block;vertical-align:top;border:1px solid #ddd;margin:4px}
details#columns label,#metrics label{display:block;white-space:nowrap}#metrics label.inline{display:inline}
details.help pre{font-size:12px;background:#f6f6f6;padding:6px}
ul.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:4px 16px;margin:8px 0}
ul.legend li.hidden{opacity:.4}.swatch{display:inline-block;width:24px;height:8px;margin-right:6px;
vertical-align:middle}.legend .toggle{font-size:11px;padding:0 4px}
"""

DRAW = """
function draw(){document.querySelectorAll('script.fig').forEach(function(s){
  var f=JSON.parse(s.textContent);
  Plotly.react(s.dataset.target,f.data,f.layout,{responsive:true,displaylogo:false});});}
draw();
"""


def e(text: object) -> str:
    """Escaped text for HTML content and attribute values."""
    return html.escape(str(text), quote=True)


def url(path: str, **params: Any) -> str:
    """A local URL with query parameters (lists repeat the key), escaped for an attribute."""
    items = [(k, v) for k, vs in params.items() if vs is not None
             for v in (vs if isinstance(vs, list | tuple) else [vs])]
    return e(path + ("?" + urlencode(items) if items else ""))


def page(title: str, body: str, script: str = "") -> str:
    """The frame of every page."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{e(title)}</title><link rel=\"icon\" href=\"data:,\"><style>{CSS}</style>"
        "<script src=\"/static/plotly.min.js\"></script></head><body>"
        "<header><b>stackreceipt</b><a href=\"/\">receipts</a><a href=\"/live\">runs in progress</a>"
        "<a href=\"/history\">history</a></header>"
        f"<main><h1>{e(title)}</h1>{body}</main>"
        f"<script>{DRAW}{script}</script></body></html>\n"
    )


def figures(figs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """Plot divs (``id`` -> figure) in a grid."""
    parts = ['<div class="plots">']
    for div_id, fig in figs:
        parts.append(f'<div class="plot" id="{e(div_id)}"></div>'
                     f'<script type="application/json" class="fig" data-target="{e(div_id)}">'
                     f"{script_json(fig)}</script>")
    parts.append("</div>")
    return "".join(parts)


def unverified(html_page: str, reason: str) -> str:
    """A page with a line at its top saying that the index it was read from is unverified, and why."""
    note = (f'<p class="error" id="unverified">The index is unverified: {e(reason)}. What this page shows from it '
            "may not be what the receipt files say: <code>ledger verify</code> compares them, "
            "<code>ledger reindex</code> rebuilds it.</p>")
    return html_page.replace("<main>", "<main>" + note, 1)


def error_page(title: str, message: str) -> str:
    """A page that says what was wrong."""
    return page(title, f'<p class="error">{e(message)}</p><p><a href="/">back to the receipts</a></p>')


# the receipts table's built-in columns (the table: ledger.report.web.table) -----------------------------------

COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "name"), ("status", "status"), ("started", "started"), ("time", "time"), ("steps", "steps"),
    ("loss", "loss"), ("tok/s", "tok/s"), ("precision", "precision"), ("experts", "experts"), ("gpu", "gpu"),
)
_NUMERIC = {"time", "steps", "loss", "tok/s"}


def cell(col: str, r: Mapping[str, Any]) -> str:
    value = {
        "name": r["name"] or "-",
        "status": r["status"] + (f" ({r['problems']} problems)" if r["problems"] else ""),
        "started": (r["started_at"] or "-")[:16].replace("T", " "),
        "time": fmt.duration(r["duration_s"]),
        "steps": "-" if r["steps"] is None else str(r["steps"]),
        "loss": fmt.num(r["final_loss"]),
        "tok/s": fmt.si(r["tokens_per_s"]),
        "precision": r["precision"] or "-",
        "experts": f"{r['num_experts']}x top{r['top_k']}" if r["num_experts"] else "-",
        "gpu": r["gpu_model"] or "-",
    }[col]
    klass = ' class="n"' if col in _NUMERIC else ""
    return f"<td{klass}>{e(value)}</td>"


# one receipt -------------------------------------------------------------------------------------------------

def receipt(title: str, header: Sequence[tuple[str, str]], factors: Mapping[str, Sequence[tuple[str, str]]],
            summary: Sequence[tuple[str, str]], figs: Sequence[tuple[str, dict[str, Any]]], goodput: str,
            notes: Sequence[str] = (), top: str = "") -> str:
    """A receipt: bookkeeping, plots, the goodput timeline, summary, then stack and workload by factor.
    ``goodput`` is an inline SVG made by :func:`ledger.report.goodput.timeline_svg` (its texts escaped
    there) or an escaped sentence; ``top``: sections rendered (and escaped) elsewhere, shown under the bookkeeping
    (why a failed run failed: :mod:`ledger.report.failure`; the team's notes: :mod:`ledger.report.notes`)."""
    kv = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in header)
    parts = [f'<table id="bookkeeping">{kv}</table>', top]
    parts += [f'<p class="note">{e(n)}</p>' for n in notes]
    parts.append("<h2>Metrics</h2>" + figures(figs))
    parts.append(f'<h2>Goodput</h2><div id="goodput">{goodput}</div>')
    parts.append("<h2>Summary</h2><table id=\"summary\">"
                 + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in summary) + "</table>")
    parts.append('<h2>Stack and workload, by factor</h2><div class="factors">')
    for factor, items in factors.items():
        rows = "".join(f"<tr><td><code>{e(p)}</code></td><td>{e(v)}</td></tr>" for p, v in items)
        parts.append(f'<div><h3>{e(factor)}</h3><table class="factor">{rows}</table></div>')
    parts.append("</div>")
    return page(title, "".join(parts))


def live_list(runs: Sequence[tuple[str, str, str]]) -> str:
    """Runs in progress: (uuid, label, started)."""
    if not runs:
        return page("runs in progress", "<p>No run in progress.</p>")
    rows = "".join(f'<tr><td><a href="{url("/live/" + u)}">{e(label)}</a></td><td>{e(started)}</td></tr>'
                   for u, label, started in runs)
    return page("runs in progress", f'<table id="live"><tr><th>run</th><th>started</th></tr>{rows}</table>')


POLL = """
var POLL_MS=%d, SOURCE=%s;
function poll(){fetch(SOURCE,{cache:'no-store'}).then(function(r){return r.json();}).then(function(d){
  document.getElementById('status').textContent=d.status;
  if(d.figure){Plotly.react('live-loss',d.figure.data,d.figure.layout,{responsive:true,displaylogo:false});}
  document.getElementById('live-loss').dataset.rows=d.rows;
  if(d.receipt){var a=document.getElementById('done');a.href='/receipt/'+encodeURIComponent(d.receipt);
    a.textContent='published: open the receipt';return;}
  setTimeout(poll,POLL_MS);}).catch(function(){setTimeout(poll,POLL_MS);});}
poll();
"""


def live(label: str, source: str, poll_ms: int) -> str:
    """A run in progress: its curves, redrawn from ``source`` (JSON: status, rows, figure, receipt) every
    ``poll_ms`` until it is published."""
    import json

    body = ('<p><span id="status" class="live">waiting for the first steps</span> <a id="done"></a></p>'
            '<div class="plots"><div class="plot" id="live-loss" data-rows="0"></div></div>')
    return page(f"{label} (in progress)", body, POLL % (poll_ms, json.dumps(source).replace("<", "\\u003c")))
