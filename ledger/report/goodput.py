"""Goodput and quality gates rendered: the run's timeline as one inline SVG (``ledger goodput --svg``, the
HTML report), and the terminal tables of ``ledger goodput`` and ``ledger gate``."""

from __future__ import annotations

import html
import math
from typing import Any

from rich.markup import escape

from ledger.analyses.gate_spec import gate_label
from ledger.analyses.gates import GateResult, GroupGates, RunGates, human
from ledger.analyses.goodput import BUCKETS, Goodput

COLOURS = {
    "productive": "#2e7d32",
    "progress_lost": "#c62828",
    "startup": "#6a1b9a",
    "checkpoint_restore": "#ef6c00",
    "checkpoint_save": "#f9a825",
    "eval": "#1565c0",
    "data_loading": "#00838f",
    "downtime": "#9e9e9e",
    "other": "#e0e0e0",
    "straggler_wait": "#8d6e63",
}
_STATUS_COLOURS = {"succeeded": "#c8e6c9", "failed": "#ffcdd2", "interrupted": "#ffe0b2", "imported": "#e1f5fe"}


def _s(seconds: float | None) -> str:
    """A duration as the gate figures spell it (:func:`ledger.analyses.gates.human`)."""
    return human("wall_s", seconds)


def _tick_step(span: float, count: int = 5) -> float:
    """A 1-2-5 step (x a power of ten) giving about ``count`` ticks over ``span``."""
    raw = span / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    return float(min((m * mag for m in (1, 2, 5, 10)), key=lambda st: abs(math.log(span / st / count))))


def timeline_svg(g: Goodput, width: int = 960, span_s: float | None = None) -> str:
    """The run's timeline as one self-contained inline ``<svg>`` element: a lane of attempts (coloured
    by status, downtime between them), a lane of step activity (productive and lost step time per
    time bin) and a lane of badput (start-up, restore, save, eval, data loading, downtime), with a time
    axis (ticks at 1-2-5 steps) and a legend; every shape has a ``<title>`` tooltip. No scripts, styles or
    external links. ``span_s``: the axis length, at least the run's wall time (timelines drawn one above
    the other share it, so equal widths are equal times)."""
    left, right, lane, gap = 90, 20, 26, 10
    top = 10
    plot_w = max(100, width - left - right)
    wall = max(g.wall_s, span_s or 0.0)
    wall = wall if wall > 0 else 1.0

    def x(seconds: float) -> float:
        return left + plot_w * min(max(seconds / wall, 0.0), 1.0)

    rows_y = [top + i * (lane + gap) for i in range(3)]
    axis_y = rows_y[-1] + lane + 6
    legend_y = axis_y + 30
    # legend entries flow left to right and wrap onto another row rather than run off the right edge
    legend: list[tuple[float, float, str, str]] = []
    lx: float = left
    ly: float = legend_y
    shares = g.shares()
    for key in ("productive", *BUCKETS, *(k for k in g.buckets if k not in BUCKETS)):
        value = g.goodput if key == "productive" else shares.get(key, 0.0)
        label = f"{key.replace('_', ' ')} {_pct(value)}"
        entry_w = 14 + 6.5 * len(label) + 12
        if lx > left and lx + entry_w > width - right:
            lx, ly = left, ly + 18
        legend.append((lx, ly, key, label))
        lx += entry_w
    height = int(ly) + 22
    e = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11" role="img" '
        f'aria-label="{e(f"timeline of run {g.name or g.run_id[:12]}")}">',
        f"<title>{e(f'{g.name or g.run_id[:12]}: goodput {_pct(g.goodput)} over {_s(g.wall_s)}')}</title>",
    ]
    for label, y in zip(("attempts", "steps", "badput"), rows_y, strict=True):
        out.append(f'<text x="{left - 6}" y="{y + lane / 2 + 4:.1f}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{plot_w}" height="{lane}" fill="#fafafa" stroke="#ddd"/>')
    # attempts
    y = rows_y[0]
    for a in g.attempts:
        x0, x1 = x(a.start_s), x(a.end_s)
        tip = (f"attempt {a.attempt} ({a.id[:12]}), {a.status}: {_s(a.start_s)} to {_s(a.end_s)}, "
               f"steps {a.first_step}-{a.last_step}, {a.steps_lost} recomputed later")
        out.append(f'<rect x="{x0:.2f}" y="{y}" width="{max(x1 - x0, 0.5):.2f}" height="{lane}" '
                   f'fill="{_STATUS_COLOURS.get(a.status, "#eee")}" stroke="#555"><title>{e(tip)}</title></rect>')
        if x1 - x0 > 24:
            out.append(f'<text x="{x0 + 4:.2f}" y="{y + lane / 2 + 4:.1f}">#{a.attempt}</text>')
    # steps
    y = rows_y[1]
    edges = g.bin_edges_s
    for i in range(len(edges) - 1):
        span = edges[i + 1] - edges[i]
        if span <= 0:
            continue
        prod, lost = g.bin_productive_s[i], g.bin_lost_s[i]
        x0, x1 = x(edges[i]), x(edges[i + 1])
        h_p = lane * min(prod / span, 1.0)
        h_l = lane * min(lost / span, 1.0 - min(prod / span, 1.0))
        if h_p > 0:
            out.append(f'<rect x="{x0:.2f}" y="{y + lane - h_p:.2f}" width="{x1 - x0:.2f}" height="{h_p:.2f}" '
                       f'fill="{COLOURS["productive"]}"><title>{e(_s(edges[i]))}: productive '
                       f'{_s(prod)}</title></rect>')
        if h_l > 0:
            out.append(f'<rect x="{x0:.2f}" y="{y + lane - h_p - h_l:.2f}" width="{x1 - x0:.2f}" '
                       f'height="{h_l:.2f}" fill="{COLOURS["progress_lost"]}"><title>{e(_s(edges[i]))}: '
                       f'lost (recomputed later) {_s(lost)}</title></rect>')
    # badput segments, merged below a pixel
    y = rows_y[2]
    merged: list[list[Any]] = []
    for s in g.segments:
        x0, x1 = x(s.start_s), x(s.end_s)
        if merged and merged[-1][2] == s.bucket and x0 - merged[-1][1] < 1.0:
            merged[-1][1] = x1
            merged[-1][3] += s.end_s - s.start_s
        else:
            merged.append([x0, x1, s.bucket, s.end_s - s.start_s, s.start_s])
    for x0, x1, bucket, seconds, at in merged:
        tip = f"{bucket.replace('_', ' ')} at {_s(at)}: {_s(seconds)}"
        out.append(f'<rect x="{x0:.2f}" y="{y}" width="{max(x1 - x0, 0.5):.2f}" height="{lane}" '
                   f'fill="{COLOURS[bucket]}"><title>{e(tip)}</title></rect>')
    # axis
    out.append(f'<line x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}" stroke="#333"/>')
    step = _tick_step(wall)
    for k in range(int(wall / step * (1 + 1e-9)) + 1):
        sec = k * step
        out.append(f'<line x1="{x(sec):.2f}" y1="{axis_y}" x2="{x(sec):.2f}" y2="{axis_y + 4}" stroke="#333"/>')
        out.append(f'<text x="{x(sec):.2f}" y="{axis_y + 16}" text-anchor="middle">{e(_s(sec))}</text>')
    for lx, ly, key, label in legend:
        out.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{COLOURS.get(key, "#bdbdbd")}"/>')
        out.append(f'<text x="{lx + 14}" y="{ly + 9}">{e(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# ------------------------------------------------------------------------------------------ terminal
def goodput_tables(g: Goodput) -> None:
    """``ledger goodput REF`` on the terminal: the attempts, where the wall time went, the figures."""
    from rich.table import Table

    from ledger.report.console import console

    console.print(f"[bold]{escape(g.name or 'unnamed')}[/bold]  run {g.run_id[:12]}  {len(g.attempts)} attempt(s)  "
                  f"wall {_s(g.wall_s)}")
    attempts = Table(title="attempts")
    for col in ("#", "id", "status", "start", "end", "duration", "steps", "recomputed later", "restored from"):
        attempts.add_column(col)
    for a in g.attempts:
        attempts.add_row(str(a.attempt), a.id[:12], a.status, _s(a.start_s), _s(a.end_s), _s(a.duration_s),
                         "-" if a.first_step is None else f"{a.first_step}-{a.last_step} ({a.steps_computed})",
                         str(a.steps_lost), "-" if a.restored_step is None else f"step {a.restored_step}")
    console.print(attempts)
    table = Table(title="where the wall time went")
    table.add_column("bucket")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    table.add_row("[bold]productive[/bold]", _s(g.productive_s), _pct(g.goodput))
    shares = g.shares()
    for bucket, seconds in g.buckets.items():
        table.add_row(bucket.replace("_", " "), _s(seconds), _pct(shares[bucket]))
    console.print(table)
    tokens = (f" ({g.tokens_useful:,} useful / {g.tokens_processed:,} processed tokens)"
              if g.tokens_processed is not None else "")
    console.print(f"goodput {_pct(g.goodput)}   token goodput {_pct(g.token_goodput)}{tokens}")
    console.print(f"steps: {g.steps_useful} useful, {g.steps_recomputed} computed again after a restart; "
                  f"steady-state step time {_s(g.steady_step_time_s)} "
                  f"(median of {g.steady_steps} steps within median + 3 MAD)")
    console.print(f"checkpoints: {g.checkpoints_useful} useful of {g.checkpoints_saved} saved")
    for note in g.notes:
        console.print(f"note: {escape(note)}")
    for problem in g.problems:
        console.print(f"[yellow]problem:[/yellow] {escape(problem)}")


def _gate_row(r: GateResult) -> list[str]:
    at = "-"
    if r.reached:
        at = f"step {r.step} (attempt {r.attempt}): {r.value:.4g}"
    elif r.value is not None:
        at = f"best {r.value:.4g} in {r.evals} evals"
    interp = "-"
    if r.interpolated is not None:
        i = r.interpolated
        interp = f"~{_s(i.wall_s)} at step ~{i.step:.1f} (interpolated)"
    return [r.display("wall_s"), r.display("device_hours"), r.display("energy_j"), r.display("money"), at, interp]


def gate_run(run: RunGates) -> None:
    """``ledger gate REF`` on the terminal: the cost to first reach each gate, and the run's total."""
    from rich.table import Table

    from ledger.report.console import console

    g = run.good
    console.print(f"[bold]{escape(g.name or 'unnamed')}[/bold]  run {g.run_id[:12]}  {len(g.attempts)} attempt(s)")
    table = Table(title="cost to first reach each gate (from the first attempt's start)")
    for col in ("gate", "definition", "wall time", "device-hours", "energy", "money", "reached at", "interpolated"):
        table.add_column(col)
    for r in run.results:
        table.add_row(escape(r.gate.name), escape(gate_label(r.gate)), *_gate_row(r))
    console.print(table)
    for r in run.results:
        if r.time_to_train_s is not None:
            console.print(f"{escape(r.gate.name)}: the evidence's own MLPerf time to train is {_s(r.time_to_train_s)}")
        for note in r.notes:
            console.print(f"note ({escape(r.gate.name)}): {escape(note)}")
    c = run.cost
    per = c.per_useful_checkpoint()
    console.print(
        f"run total: {human('wall_s', c.total.wall_s)}, {human('device_hours', c.total.device_hours)}, "
        f"energy {human('energy_j', c.total.energy_j)}, money {human('money', c.total.money, c.total.currency)}"
    )
    if per is not None:
        console.print(
            f"per useful checkpoint ({c.checkpoints_useful} of {c.checkpoints_saved} saved): "
            f"{human('wall_s', per.wall_s)}, {human('device_hours', per.device_hours)}, "
            f"energy {human('energy_j', per.energy_j)}, money {human('money', per.money, per.currency)}"
        )
    else:
        console.print(f"per useful checkpoint: - (no useful checkpoint; {c.checkpoints_saved} saved)")
    for note in run.notes:
        console.print(f"note: {escape(note)}")


def gate_group(report: GroupGates) -> None:
    """``ledger gate --group TAG=VALUE`` on the terminal: each gate's runs and its censored summary."""
    from rich.table import Table

    from ledger.report.console import console

    console.print(f"[bold]group {escape(report.tag)}[/bold]: {len(report.runs)} run(s)")
    for summary in report.summaries:
        table = Table(title=escape(f"{summary.gate.name}: {gate_label(summary.gate)}"))
        for col in ("run", "id", "attempts", "wall time", "device-hours", "energy", "money", "reached at",
                    "interpolated"):
            table.add_column(col)
        for run, r in zip(report.runs, summary.results, strict=True):
            table.add_row(escape(r.name or "-"), r.run_id[:12], str(len(run.good.attempts)), *_gate_row(r))
        console.print(table)
        for r in summary.results:
            for note in r.notes:
                console.print(f"note ({escape(r.name or r.run_id[:12])}): {escape(note)}")
        console.print(
            f"reached by {summary.reached} of {summary.n} ({100 * summary.fraction_reached:.0f}%); "
            f"median (Kaplan-Meier, censored runs kept): wall {summary.median_display('wall_s')}, "
            f"{summary.median_display('device_hours')}, energy {summary.median_display('energy_j')}, "
            f"money {summary.median_display('money')}"
        )
    notes = sorted({n for run in report.runs for n in run.notes})
    for note in notes:
        console.print(f"note: {escape(note)}")
