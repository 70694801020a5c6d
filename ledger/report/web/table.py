"""The receipts table of ``ledger serve``: choose columns (hyperparameters included), filter on any column, sort by
any column, and a table that refreshes itself while runs are in progress.

Columns are the ls columns (:data:`BUILTIN`) and any column of the runs table (:mod:`ledger.store.runs`:
``params.lr``, ``workload.optimizer.lr``, ``summary.step_time_s``, ``tags.sweep``...). Without a choice, the
table shows the built-in columns and the hyperparameters that differ between the runs listed (at most
:data:`DEFAULT_PARAMS`). Each column has a filter box under its title: ``<3``, ``bf16``, ``fp8*``, ``in (1e-3, 3e-3)``
becomes a condition of the ``--where`` language on that column (:func:`column_condition`), joined with the where box
by ``and``; a bad one is said on the page in the language's one-line message.

While runs are in progress the page asks ``/api/table`` for the table's version every poll interval (a cheap
fingerprint of the journal, the staging area and the annotations: :func:`version`) and replaces the table's body
when it changed, keeping the ticked boxes; when nothing is in progress it asks five times less often.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import LedgerError
from ledger.report.console import field_text
from ledger.report.web.pages import COLUMNS, cell, e, page, url
from ledger.store import reading, running
from ledger.store.receipts import Ledger

BUILTIN = tuple(k for k, _ in COLUMNS)
"""The ls columns the table has always shown (each name is also a --where key)."""
SHOWN = ("workload.precision.compute", "workload.model.num_experts", "workload.model.top_k")
"""Workload fields a built-in column shows already (precision, experts)."""
DEFAULT_PARAMS = 4
"""Hyperparameter columns shown without a choice: those that differ between the runs listed."""
_OPERATOR = re.compile(r"^\s*(!=|<=|>=|==|=|<|>|!~|~)\s*(.*)$", re.S)


@dataclass
class TableQuery:
    """What the page was asked for (its URL's query)."""

    where: str = ""
    sort: str | None = None
    desc: bool = False
    columns: list[str] = field(default_factory=list)
    """Chosen columns (empty: the default)."""
    filters: dict[str, str] = field(default_factory=dict)
    """Column -> its filter box's text."""
    archived: bool = False
    """Show archived runs too."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TableQuery:
        """From Starlette's ``QueryParams`` (or a plain mapping of lists)."""
        def get_list(key: str) -> list[str]:
            getter = getattr(params, "getlist", None)
            if getter is not None:
                return list(getter(key))
            value = params.get(key)
            return list(value) if isinstance(value, list | tuple) else [] if value is None else [str(value)]

        filters = {k[2:]: str(v) for k, v in params.items() if k.startswith("f.") and str(v).strip()}
        return cls(where=str(params.get("where") or ""), sort=params.get("sort") or None,
                   desc=params.get("desc") == "1", columns=[c for c in get_list("col") if c],
                   filters=filters, archived=params.get("all") == "1")

    def params(self, **change: Any) -> dict[str, Any]:
        """The query as URL parameters (lists repeat), with ``change`` applied."""
        out: dict[str, Any] = {"where": self.where or None, "sort": self.sort, "desc": "1" if self.desc else None,
                               "col": self.columns or None, "all": "1" if self.archived else None}
        out.update({f"f.{k}": v for k, v in self.filters.items()})
        out.update(change)
        return out


def _quote(value: str) -> str:
    if value.strip().lower() in ("null", "none"):
        return value.strip()
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_condition(column: str, text: str) -> str:
    """A filter box's text as a --where condition on its column: an operator first (``<3``, ``!=bf16``, ``~fp8*``)
    is kept, ``in (...)`` / ``not in (...)`` too, a glob (``*``, ``?``, ``[``) means ``~``, anything else ``=``; the
    value is quoted (it is never read as the language's words)."""
    text = text.strip()
    if re.match(r"^(not\s+)?in\s*\(", text, re.I):
        return f"{column} {text}"
    m = _OPERATOR.match(text)
    if m:
        op, value = m.groups()
        return f"{column}{op}{_quote(value.strip())}"
    op = "~" if any(c in text for c in "*?[") else "="
    return f"{column}{op}{_quote(text)}"


def expression(q: TableQuery) -> str | None:
    """The where box and every column's filter, joined by ``and`` (None when there is nothing to filter on)."""
    parts = [f"({q.where})"] if q.where.strip() else []
    parts += [column_condition(c, t) for c, t in q.filters.items()]
    return " and ".join(parts) or None


def version(ledger: Ledger) -> str:
    """A fingerprint that changes when the table may have: a receipt published (the journal grows), a run started
    or ended (the staging area), a note or archive flag added. Cheap: a few stats and listings."""
    from ledger.store import annotation
    from ledger.store.layout import JOURNAL, listdir

    root = ledger.root
    try:
        journal = (root / JOURNAL).stat().st_size
    except OSError:
        journal = 0
    staging = sorted(listdir(ledger.staging))
    notes = len(annotation.files(root))
    return hashlib.sha256(json.dumps([journal, staging, notes]).encode()).hexdigest()[:16]


@dataclass
class Table:
    """The table's content for one query."""

    rows: list[dict[str, Any]]
    columns: list[str]
    available: list[str]
    """Every column the runs have (the chooser's choices beyond the built-in ones)."""
    live: list[running.RunInProgress]
    error: str | None = None


def build(ledger: Ledger, q: TableQuery) -> Table:
    """Rows, columns and runs in progress for a query; a bad filter or column is said, never a crash."""
    from ledger.store.runs import columns as run_columns
    from ledger.store.runs import hyperparameters, resolve

    error = None
    rows: list[dict[str, Any]] = []
    try:
        rows = reading.list_receipts(ledger, expression(q), archived=q.archived, fields=True)
    except LedgerError as exc:
        error = str(exc)
    fields = [r["fields"] for r in rows]
    available = [c for c in run_columns(fields) if c not in ("id", "name", "status")]
    if q.columns:
        columns = []
        for c in q.columns:
            found = c if c in BUILTIN else resolve(c, available)
            if found is None:
                error = error or (f"unknown column {c!r}; choose from: {', '.join(BUILTIN)}, or a column of these "
                                  f"runs: {', '.join(available[:30])}")
            elif found not in columns:
                columns.append(found)
    else:
        columns = [*BUILTIN, *[c for c in hyperparameters(fields) if c not in SHOWN][:DEFAULT_PARAMS]]
    if q.sort and error is None:
        try:
            rows = reading.sort_rows(rows, q.sort if q.sort in BUILTIN or q.sort in reading.SORT_KEYS
                                     else resolve(q.sort, available) or q.sort, q.desc)
        except LedgerError as exc:
            error = str(exc)
    return Table(rows, columns, available, running.runs_in_progress(ledger), error)


def _field_cell(column: str, r: Mapping[str, Any]) -> str:
    value = r.get("fields", {}).get(column)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    klass = ' class="n"' if numeric else ""
    return f"<td{klass}>{e('-' if value is None else field_text(value))}</td>"


def _title(column: str) -> str:
    return column.removeprefix("params.").removeprefix("workload.") if column not in BUILTIN else dict(COLUMNS)[column]


def body(t: Table) -> str:
    """The rows (``<tr>`` elements) of the receipts table."""
    out = []
    for r in t.rows:
        rid = str(r["id"])
        tags = ", ".join(f"{k}={v}" for k, v in (r["tags"] or {}).items())
        cells = "".join(cell(c, r) if c in BUILTIN else _field_cell(c, r) for c in t.columns)
        klass = ' class="archived"' if r.get("archived") else ""
        out.append(f'<tr data-id="{e(rid)}"{klass}><td><input type="checkbox" name="id" value="{e(rid)}"></td>'
                   f'<td><a href="{url("/receipt/" + rid)}"><code>{e(rid[:8])}</code></a></td>'
                   f'{cells}<td>{e(tags)}</td><td class="n">{e(r.get("notes") or "")}</td></tr>')
    return "".join(out)


def live_rows(t: Table) -> str:
    """The runs in progress, each linked to its live page."""
    return "".join(f'<tr data-run="{e(r.run_uuid)}"><td><a href="{url("/live/" + r.run_uuid)}">{e(r.label)}</a>'
                   f'</td><td>{e((r.started_at or "-")[:19].replace("T", " "))}</td><td class="live">running</td></tr>'
                   for r in t.live)


def damaged(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A sentence for each listed receipt whose files or index row disagree (shown above the table; its pages are
    refused)."""
    return [f"receipt {r['id'][:12]} ({r['name'] or 'unnamed'}): {r['index_problem']}; its pages are refused "
            f"until `ledger verify {r['id'][:12]}` passes" for r in rows if r.get("index_problem")]


def render(t: Table, q: TableQuery, poll_ms: int, stamp: str) -> str:
    """The page: the where box and the column chooser, the runs in progress, the receipts table (a filter box
    under each column title, sortable titles, a checkbox per row) and the overlay and compare buttons."""
    from ledger.store.filters import HELP

    hidden = "".join(f'<input type="hidden" name="col" value="{e(c)}">' for c in q.columns)
    parts = [
        '<form method="get" action="/" id="filter">'
        f'<label>where <input type="text" name="where" value="{e(q.where)}" '
        'placeholder="precision=bf16 and (loss&lt;3 or param.lr in (1e-3, 3e-3))"></label> '
        f'<input type="hidden" name="sort" value="{e(q.sort or "")}">'
        f'<input type="hidden" name="desc" value="{"1" if q.desc else ""}">{hidden}'
        f'<label><input type="checkbox" name="all" value="1"{" checked" if q.archived else ""} '
        'onchange="this.form.submit()"> show archived</label> '
        '<button type="submit">filter</button> '
        f'<details class="help"><summary>the --where language</summary><pre>{e(HELP)}</pre></details></form>',
        _chooser(t, q),
    ]
    if t.error:
        parts.append(f'<p class="error">{e(t.error)}</p>')
    parts += [f'<p class="error damaged">{e(d)}</p>' for d in damaged(t.rows)]
    live = (f'<p class="live"><a href="/live">{len(t.live)} run(s) in progress</a></p>' if t.live else "")
    parts.append(f'<div id="live-runs">{live}<table id="running"><tbody>{live_rows(t)}</tbody></table></div>')
    parts.append('<form method="get" action="/overlay" id="select">'
                 '<p><button type="submit" id="overlay">overlay curves of the selected runs</button> '
                 '<button type="submit" id="compare" formaction="/compare">compare the two selected runs</button> '
                 f'<span class="note" id="count">{len(t.rows)} receipt(s)</span></p>')
    head = ['<th></th><th>id</th>']
    boxes = ['<td></td><td></td>']
    for col in t.columns:
        on = q.sort == col
        link = url("/", **q.params(sort=col, desc="1" if on and not q.desc else None))
        arrow = (" \u25bc" if q.desc else " \u25b2") if on else ""
        head.append(f'<th title="{e(col)}"><a href="{link}" class="{"on" if on else ""}" data-sort="{e(col)}">'
                    f"{e(_title(col))}{arrow}</a></th>")
        boxes.append(f'<td><input type="text" class="colfilter" form="filter" name="f.{e(col)}" '
                     f'value="{e(q.filters.get(col, ""))}" placeholder="filter" data-key="{e(col)}"></td>')
    head.append("<th>tags</th><th>notes</th>")
    boxes.append("<td></td><td></td>")
    parts.append(f'<table id="receipts" data-version="{e(stamp)}"><thead><tr>{"".join(head)}</tr>'
                 f'<tr class="filters">{"".join(boxes)}</tr></thead><tbody>{body(t)}</tbody></table></form>')
    script = REFRESH % (poll_ms, len(t.live), json.dumps("/api/table?" + _query(q)).replace("<", "\\u003c"),
                        json.dumps(stamp))
    return page("receipts", "".join(parts), script)


def _query(q: TableQuery) -> str:
    from urllib.parse import urlencode

    items = [(k, v) for k, vs in q.params().items() if vs is not None
             for v in (vs if isinstance(vs, list | tuple) else [vs])]
    return urlencode(items)


def _chooser(t: Table, q: TableQuery) -> str:
    """The column chooser: a checkbox per column, grouped (built-in, params, workload, summary, tags, stack)."""
    groups: dict[str, list[str]] = {"columns": list(BUILTIN)}
    for c in t.available:
        prefix = c.split(".", 1)[0] if "." in c else "columns"
        groups.setdefault(prefix, []).append(c)
    hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in q.params(col=None).items()
                     if v is not None and not isinstance(v, list))
    parts = ['<details id="columns"><summary>columns</summary><form method="get" action="/" id="chooser">', hidden]
    for group, cols in groups.items():
        boxes = "".join(f'<label><input type="checkbox" name="col" value="{e(c)}"'
                        f'{" checked" if c in t.columns else ""}> {e(_title(c) if group != "columns" else c)}</label>'
                        for c in cols)
        parts.append(f'<fieldset><legend>{e(group)}</legend>{boxes}</fieldset>')
    parts.append('<button type="submit" id="apply-columns">show these columns</button></form></details>')
    return "".join(parts)


def refresh_state(ledger: Ledger, q: TableQuery, since: str | None) -> dict[str, Any]:
    """``/api/table``: the version, how many runs are in progress, and when the version changed since the page's
    (``since``), the table's new body, runs in progress and count."""
    stamp = version(ledger)
    if since == stamp:
        return {"version": stamp, "changed": False, "live": len(running.runs_in_progress(ledger))}
    t = build(ledger, q)
    return {"version": stamp, "changed": True, "live": len(t.live), "rows": body(t), "running": live_rows(t),
            "count": f"{len(t.rows)} receipt(s)",
            "live_line": f'<a href="/live">{len(t.live)} run(s) in progress</a>' if t.live else ""}


REFRESH = """
var POLL_MS=%d, LIVE=%d, SOURCE=%s, VERSION=%s;
function refresh(){
  fetch(SOURCE+'&since='+encodeURIComponent(VERSION),{cache:'no-store'}).then(function(r){return r.json();})
  .then(function(d){
    LIVE=d.live;
    if(d.changed){
      var ticked={};document.querySelectorAll('#receipts tbody input:checked').forEach(function(i){ticked[i.value]=1;});
      var tb=document.querySelector('#receipts tbody');tb.innerHTML=d.rows;
      tb.querySelectorAll('input[name=id]').forEach(function(i){if(ticked[i.value]){i.checked=true;}});
      document.querySelector('#running tbody').innerHTML=d.running;
      var line=document.querySelector('#live-runs p');
      if(line){line.innerHTML=d.live_line;}else if(d.live_line){var p=document.createElement('p');p.className='live';
        p.innerHTML=d.live_line;document.getElementById('live-runs').prepend(p);}
      document.getElementById('count').textContent=d.count;
      VERSION=d.version;document.getElementById('receipts').dataset.version=d.version;
      window.__refreshed=(window.__refreshed||0)+1;}
    setTimeout(refresh,LIVE>0?POLL_MS:5*POLL_MS);})
  .catch(function(){setTimeout(refresh,5*POLL_MS);});}
setTimeout(refresh,LIVE>0?POLL_MS:5*POLL_MS);
"""


def table_page(ledger: Ledger, params: Mapping[str, Any], poll_ms: int) -> str:
    """The receipts page for a request's query parameters."""
    q = TableQuery.from_params(params)
    return render(build(ledger, q), q, poll_ms, version(ledger))
