"""What each page of ``ledger serve`` shows, read from the index, the receipt files and the staging area.

Functions here return page HTML (:mod:`ledger.report.web.pages`) or JSON-ready dicts and raise
:class:`~ledger.errors.LedgerError` subclasses for bad refs and filters; the app turns those into pages.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ledger.errors import BadInput, LedgerError
from ledger.report import fmt
from ledger.report.web import pages, plots
from ledger.store import index, running
from ledger.store.receipts import Ledger
from ledger.store.refs import resolve

CURVES: tuple[tuple[str, str, str, str], ...] = (
    ("loss", "tokens", "training loss vs tokens", "tokens"),
    ("loss", "time", "training loss vs training time", "seconds since the first step"),
    ("tokens_per_s", "step", "tokens/s per step", "step"),
    ("lr", "step", "learning rate", "step"),
    ("grad_norm", "step", "gradient norm", "step"),
    ("step_time_s", "step", "step time", "step"),
)
"""(y column, x axis, title, x label) of the curves drawn per run."""


def _x(run: Any, axis: str) -> np.ndarray:
    if axis == "time":
        return np.asarray(run.train_time, dtype=np.float64)
    return np.asarray(run.steps[axis], dtype=np.float64)


def receipt_page(ledger: Ledger, ref: str) -> str:
    """One receipt: bookkeeping, metric curves, evals per source, timing per phase, routing heatmaps,
    goodput, summary, and the stack and workload by factor."""
    from ledger.analyses.goodput_index import goodput_of_run
    from ledger.analyses.series import imbalanced_layers, load_run, routing_matrices
    from ledger.report.console import human
    from ledger.report.goodput import timeline_svg
    from ledger.store.agreement import check_involved
    from ledger.store.attempts import run_of
    from schemas import Factor, flatten, leaves

    with index.reader(ledger) as con:
        rid = resolve(con, ref)
        check_involved(ledger, con, [rid], store=False)  # its files verify and the index holds exactly their data
        r = ledger.load(rid)
        run = load_run(con, rid, r)
        heat = routing_matrices(con, rid, layers=imbalanced_layers(con, rid))
        try:
            goodput = timeline_svg(goodput_of_run(con, run_of(con, rid)))
        except LedgerError as exc:
            goodput = f'<p class="note">unavailable: {pages.e(exc)}</p>'
    figs: list[tuple[str, dict[str, Any]]] = []
    drawn: set[tuple[str, str]] = set()
    for y, axis, title, xlabel in CURVES:
        values = np.asarray(run.steps[y], dtype=np.float64) if run.n_steps else np.empty(0)
        if not np.isfinite(values).any():
            continue
        xs = _x(run, axis)
        if not (np.isfinite(xs) & np.isfinite(values)).any():  # a wrapped run that printed no tokens or times
            missing = "tokens" if axis == "tokens" else "step times"
            axis, xs = "step", _x(run, "step")
            title, xlabel = f"{title.split(' vs ')[0]} vs step (the run logged no {missing})", "step"
        if (y, axis) in drawn:
            continue
        drawn.add((y, axis))
        line = plots.Line(run.label, xs, values)
        figs.append((f"curve-{y}-{axis}", plots.lines([line], title, xlabel, y)))
    evals: dict[str, list[tuple[float, float]]] = {}
    for ev in run.evals:
        key = "/".join(str(p) for p in (ev["split"], ev["source"] or "all", ev["metric"]) if p)
        x = ev["tokens"] if ev["tokens"] is not None else ev["step"]
        if ev["value"] is not None and x is not None:
            evals.setdefault(key, []).append((float(x), float(ev["value"])))
    if evals:
        lines = [plots.Line(k, np.array([p[0] for p in v]), np.array([p[1] for p in v])) for k, v in evals.items()]
        figs.append(("evals", plots.lines(lines, "evals per source", "tokens", "value", markers=True)))
    if run.timing:
        totals = {phase: float(np.nansum(t["seconds"])) for phase, t in run.timing.items()}
        order = sorted(totals, key=lambda p: totals[p])
        figs.append(("timing", plots.bars(order, [totals[p] for p in order], "time per phase (sum over steps)",
                                          "seconds")))
    for layer, m in sorted(heat.items()):
        if m["load"].size:
            figs.append((f"routing-{layer}", plots.heatmap(m["load"], m["step"], f"routing, layer {layer}: load "
                                                                                "per expert (1 = the mean)")))
    header = [("id", r.id), ("name", r.name or "-"), ("status", r.status), ("exit code", str(r.exit_code)),
              ("started", str(r.started_at)), ("duration", fmt.duration(r.duration_s)), ("attempt", str(r.attempt)),
              ("command", " ".join(r.command)), ("tags", ", ".join(f"{k}={v}" for k, v in r.tags.items()) or "-")]
    factors_of = dict(leaves())
    by_factor: dict[str, list[tuple[str, str]]] = {}
    for path, value in flatten(r).items():
        if value in (None, [], {}, "") or path.startswith(("summary.", "artifacts", "problems")):
            continue
        factor = factors_of.get(path)
        if factor is None or factor is Factor.RECORD:
            continue
        shown = f"{len(value)} packages" if path == "stack.software.packages" else human(path, value)
        by_factor.setdefault(factor.value, []).append((path, shown))
    ordered: dict[str, list[tuple[str, str]]] = {f.value: by_factor[f.value] for f in Factor if f.value in by_factor}
    summary = [(k, human(k, v)) for k, v in r.summary.model_dump().items()]
    notes = [f"problem: {p.source}: {p.message}" for p in r.problems]
    from ledger.report import failure
    from ledger.report import notes as team_notes
    from ledger.store import annotation

    top = failure.render_html(r) + team_notes.render_html(annotation.of(ledger.root, r.id))
    return pages.receipt(f"receipt {r.name or r.id[:8]}", header, ordered, summary, figs, goodput, notes, top)


def compare_page(ledger: Ledger, refs: list[str]) -> str:
    """The HTML report of ``ledger report A B`` for the two selected runs."""
    from ledger.analyses.compare import CompareOptions, Ref, compare
    from ledger.report.html import report
    from ledger.store.agreement import check_involved

    if len(refs) != 2:
        raise BadInput(f"select exactly two runs to compare (got {len(refs)})")
    with index.reader(ledger) as con:
        sides = []
        for ref in refs:  # the run's name labels the side when it names this receipt alone
            rid = resolve(con, ref)
            name = con.execute("SELECT name FROM receipts WHERE id = ?", [rid]).fetchone()
            try:
                sides.append(Ref(ref=name[0]) if name and name[0] and resolve(con, name[0]) == rid else Ref(ref=rid))
            except LedgerError:
                sides.append(Ref(ref=rid))
        result = compare(con, sides[0], sides[1], CompareOptions())
        check_involved(ledger, con, [r.id for r in result.runs_a + result.runs_b], store=False)  # files and index agree
        return report(con, result)


def live_list_page(ledger: Ledger) -> str:
    """The runs in progress."""
    return pages.live_list([(r.run_uuid, r.label, r.started_at or "-") for r in running.runs_in_progress(ledger)])


def live_page(ledger: Ledger, ref: str, poll_ms: int) -> str:
    """A run in progress (its page polls :func:`live_state`)."""
    run = running.find(ledger, ref)
    if run is None:
        raise BadInput(f"no run in progress named {ref!r} or with that staging uuid (it may be published: "
                       "see the receipts table)")
    return pages.live(run.label, f"/api/live/{run.run_uuid}", poll_ms)


def live_state(ledger: Ledger, run_uuid: str) -> dict[str, Any]:
    """JSON for the live page: status line, rows, the loss figure, and the receipt id once published."""
    run = running.find(ledger, run_uuid) if len(run_uuid) >= 4 else None
    if run is None:
        with index.reader(ledger) as con:
            row = con.execute("SELECT id FROM receipts WHERE run_uuid = ? LIMIT 1", [run_uuid]).fetchone()
        if row is None:
            return {"status": "not in progress and not published (yet)", "rows": 0, "figure": None,
                    "receipt": None}
        return {"status": "published", "rows": 0, "figure": None, "receipt": str(row[0])}
    table = running.steps(run)
    p = running.progress(table, run.planned_steps)
    planned = f"/{run.planned_steps}" if run.planned_steps else ""
    epoch = f"epoch {run.epoch:g}, " if run.epoch is not None else ""
    status = (f"{epoch}step {p.step if p.step is not None else '-'}{planned}, loss {fmt.num(p.loss)}, "
              f"{fmt.si(p.rate, p.rate_unit)}, ETA{' (epoch)' if epoch else ''} {fmt.duration(p.eta_s)}")
    figure = None
    if table.num_rows:
        y = running.column(table, "loss")
        x, axis = running.column(table, "tokens"), "tokens"
        if not np.isfinite(x).any():  # a launch without the SDK: its lines' arrival, else their order
            t = running.column(table, "time")
            ok = np.isfinite(t)
            x, axis = (t - t[ok].min(), "seconds since its first step line") if ok.any() else (
                np.arange(1, table.num_rows + 1, dtype=np.float64), "step line")
        figure = plots.lines([plots.Line(run.label, x, y)], f"training loss vs {axis} (live)", axis, "loss")
    return {"status": status, "rows": table.num_rows, "figure": figure, "receipt": None,
            "eta_s": p.eta_s if p.eta_s is not None and math.isfinite(p.eta_s) else None}
