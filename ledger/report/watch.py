"""``ledger watch REF``: the live steps of a run in progress as a rich Live table, until it is published.

The rows come from :mod:`ledger.store.running` (the staging directory's rank files); nothing is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ledger.report import fmt
from ledger.store import running

ROWS = 10
"""Recent steps shown."""


def render(run: running.RunInProgress, table: pa.Table, now: float | None = None) -> Group:
    """The header line and the table of the last :data:`ROWS` steps (step, loss, rate, ETA). The rate is tokens/s
    where the run logs tokens, else the samples/s it printed, else steps/s from when its lines arrived (a wrapped
    launch); a launch that prints its epoch shows it, and its ETA is then the epoch's."""
    p = running.progress(table, run.planned_steps)
    planned = f"/{run.planned_steps}" if run.planned_steps else ""
    last = table.slice(max(0, table.num_rows - ROWS))
    rate_name, rates, head_rate = _rates(table, last, p)
    epoch = f"epoch {run.epoch:g}  " if run.epoch is not None else ""
    eta_name = "ETA (epoch)" if run.epoch is not None else "ETA"
    head = Text.from_markup(
        f"[bold]{escape(run.label)}[/bold]  {epoch}step {p.step if p.step is not None else '-'}{planned}  "
        f"loss {fmt.num(p.loss)}  {head_rate}  {eta_name} {fmt.duration(p.eta_s)}")
    out = Table("step", "loss", rate_name, eta_name, box=None, pad_edge=False)
    for col in out.columns:
        col.justify = "right"
    steps, loss = running.column(last, "step"), running.column(last, "loss")
    for i in range(last.num_rows):
        eta = None
        if run.planned_steps is not None and p.seconds_per_step is not None:
            eta = max(0.0, run.planned_steps - steps[i]) * p.seconds_per_step
        out.add_row(f"{int(steps[i])}", fmt.num(float(loss[i])), fmt.si(float(rates[i])), fmt.duration(eta))
    if table.num_rows == 0:
        out.add_row("-", "-", "-", "-")
    return Group(head, out)


def _rates(table: pa.Table, last: pa.Table, p: running.Progress) -> tuple[str, np.ndarray, str]:
    """The rate column's name, its values for ``last``'s rows, and the header's figure (:attr:`Progress.rate`)."""
    head = fmt.si(p.rate, p.rate_unit)
    if p.rate_unit == "tok/s":
        return "tokens/s", running.column(last, "tokens_per_s"), head
    if p.rate_unit == "samples/s":
        return "samples/s", running.column(last, "samples_per_s"), head
    s, t = running.column(last, "step"), running.column(last, "time")
    per_row = np.full(last.num_rows, np.nan)
    if last.num_rows > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            ds, dt = np.diff(s), np.diff(t)
            per_row[1:] = np.where((ds > 0) & (dt > 0), ds / dt, np.nan)
    return "steps/s", per_row, head


def watch(run: running.RunInProgress, console: Console, interval: float = 0.5,
          published: Callable[[], str | None] = lambda: None) -> str | None:
    """Redraw every ``interval`` seconds until the staging directory is gone; returns ``published()`` then
    (the receipt id, when the caller can find it)."""
    table = running.steps(run)
    with Live(render(run, table), console=console, refresh_per_second=4, transient=False) as live:
        while run.dir.exists():
            time.sleep(interval)
            if not run.dir.exists():
                break
            try:
                run = running.reload(run)
                latest = running.steps(run)
            except FileNotFoundError:  # published between the check and the read
                break
            if latest.num_rows >= table.num_rows:  # fewer rows: the publisher is removing the directory
                table = latest
                live.update(render(run, table))
    console.line()
    return published()
