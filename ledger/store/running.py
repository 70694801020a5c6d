"""Runs in progress: what the staging directories under ``<ledger>/.staging/`` hold while a run trains.

Read-only and lock-free: the wrapper's facts (``wrapper.json``), the workload the training process reported
(planned steps), and the step rows flushed so far by every rank (:func:`ledger.store.merge.read_table`,
which keeps every complete batch of a stream still being written). A launch without the SDK has no rank rows
while it runs: its rows are what the capture of its output read so far (``live.json``, written by
:mod:`ledger.ingest.formats.trail`), each timed by when its line arrived (``output.clock``,
:mod:`ledger.store.clock`), its step the counter as printed, its planned steps the total printed beside the
counter (``iter 20/50``). Used by ``ledger watch`` and the live pages of ``ledger serve``; a run leaves this list
when it is published (its staging directory is removed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.store.clock import CLOCK_FILE, read_clock
from ledger.store.layout import LIVE_FILE, WORKLOAD_FILE, WRAPPER_FILE
from ledger.store.merge import rank_dirs, read_json, read_table
from ledger.store.receipts import Ledger

RECENT = 20
"""Steps over which the current rate (tokens/s, seconds per step for the ETA) is taken."""


@dataclass(frozen=True)
class RunInProgress:
    """One staging directory."""

    run_uuid: str
    dir: Path
    name: str | None
    started_at: str | None
    command: list[str]
    tags: dict[str, str]
    planned_steps: int | None
    """``batch.steps`` of the workload the training process reported, else the total a wrapped launch printed
    beside its step counter (None when neither says)."""
    epoch: float | None = None
    """The epoch a wrapped launch printed last (None when it prints none): its planned steps are then the
    epoch's."""

    @property
    def label(self) -> str:
        """Name and short uuid."""
        return f"{self.name} ({self.run_uuid[:8]})" if self.name else self.run_uuid[:8]


@dataclass(frozen=True)
class Progress:
    """Where a run in progress stands."""

    step: int | None
    loss: float | None
    tokens: int | None
    tokens_per_s: float | None
    """Logged tokens/s, median of the last :data:`RECENT` steps (else tokens over time between them)."""
    seconds_per_step: float | None
    """Wall time per step over the last :data:`RECENT` steps."""
    eta_s: float | None
    """(planned - current step) x seconds per step; None without a planned step count."""
    rows: int
    rate: float | None = None
    """The run's rate now: :attr:`tokens_per_s` where it has tokens, else the samples/s it printed last, else steps/s
    (1 / :attr:`seconds_per_step`: a launch without the SDK timed by when its lines arrived)."""
    rate_unit: str = "tok/s"
    """``tok/s``, ``samples/s`` or ``steps/s``."""


def _run(run_dir: Path) -> RunInProgress:
    facts, _ = read_json(run_dir / WRAPPER_FILE)
    facts = facts or {}
    planned = None
    for _, rank_dir in rank_dirs(run_dir):
        workload, _ = read_json(rank_dir / WORKLOAD_FILE)
        steps = ((workload or {}).get("batch") or {}).get("steps")
        if isinstance(steps, int) and steps > 0:
            planned = steps
            break
    epoch = None
    if planned is None:
        trail = _trail(run_dir)
        value = trail.get("planned")
        planned = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
        recent = trail.get("recent")
        fields = trail.get("fields")
        if isinstance(recent, list) and recent and isinstance(fields, list) and "epoch" in fields:
            last = recent[-1]
            at = fields.index("epoch")
            if isinstance(last, list) and len(last) > at and isinstance(last[at], int | float):
                epoch = float(last[at])
    command = facts.get("command")
    tags = facts.get("tags")
    return RunInProgress(
        run_uuid=run_dir.name,
        dir=run_dir,
        name=facts.get("name") if isinstance(facts.get("name"), str) else None,
        started_at=facts.get("started_at") if isinstance(facts.get("started_at"), str) else None,
        command=[str(c) for c in command] if isinstance(command, list) else [],
        tags={str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {},
        planned_steps=planned,
        epoch=epoch,
    )


def _trail(run_dir: Path) -> dict[str, object]:
    data, _ = read_json(run_dir / LIVE_FILE)
    return data if isinstance(data, dict) else {}


LIVE_COLUMNS = {"loss": pa.float64(), "lr": pa.float64(), "tokens_per_s": pa.float64(),
                "samples_per_s": pa.float64(), "steps_per_s": pa.float64(), "epoch": pa.float64()}


def live_steps(run: RunInProgress) -> pa.Table:
    """What the capture of a wrapped launch's output read so far: its recent step lines in full and a thinned
    history of its loss, in the order printed, each timed by when its line arrived (NaN before the clock has it).
    Columns: ``line``, ``step`` (the counter as printed), ``time``, ``tokens`` (null), and :data:`LIVE_COLUMNS`."""
    trail = _trail(run.dir)
    fields = trail.get("fields")
    rows: dict[int, dict[str, object]] = {}
    history = trail.get("history")
    if isinstance(history, list):
        for point in history:
            if isinstance(point, list) and len(point) == 3:
                rows[int(point[0])] = {"line": int(point[0]), "step": int(point[1]), "loss": point[2]}
    recent = trail.get("recent")
    if isinstance(recent, list) and isinstance(fields, list):
        for entry in recent:
            if isinstance(entry, list) and len(entry) == len(fields):
                row = dict(zip(fields, entry, strict=True))
                rows[int(row["line"])] = row
    ordered = [rows[k] for k in sorted(rows)]
    lines = np.asarray([r["line"] for r in ordered], dtype=np.int64)
    times = read_clock(run.dir / CLOCK_FILE).times(lines)
    columns: dict[str, pa.Array] = {
        "line": pa.array(lines, pa.int64()),
        "step": pa.array([r["step"] for r in ordered], pa.int64()),
        "time": pa.array(times, pa.float64(), mask=~np.isfinite(times)),
        "tokens": pa.nulls(len(ordered), pa.int64()),
    }
    for name, kind in LIVE_COLUMNS.items():
        columns[name] = pa.array([r.get(name) for r in ordered], kind)
    return pa.table(columns)


def reload(run: RunInProgress) -> RunInProgress:
    """The run read again (the training process reports its workload, and so the planned steps, after the
    wrapper starts it); the same run when its directory is gone."""
    return _run(run.dir) if (run.dir / WRAPPER_FILE).exists() else run


def runs_in_progress(ledger: Ledger) -> list[RunInProgress]:
    """Every staging directory of the ledger, oldest first."""
    if not ledger.staging.is_dir():
        return []
    runs = [_run(d) for d in ledger.staging.iterdir() if d.is_dir() and (d / WRAPPER_FILE).exists()]
    return sorted(runs, key=lambda r: (r.started_at or "", r.run_uuid))


def find(ledger: Ledger, ref: str) -> RunInProgress | None:
    """The run in progress whose staging uuid starts with ``ref`` (at least 4 characters) or whose name is
    ``ref`` (the latest one if several); None when there is none."""
    runs = runs_in_progress(ledger)
    by_uuid = [r for r in runs if len(ref) >= 4 and r.run_uuid.startswith(ref)]
    if len(by_uuid) == 1:
        return by_uuid[0]
    by_name = [r for r in runs if r.name == ref]
    return by_name[-1] if by_name else None


def steps(run: RunInProgress) -> pa.Table:
    """The step rows flushed so far by the lowest rank that logged any, sorted by step; for a launch whose ranks
    write none, the step lines its output's capture read so far (:func:`live_steps`), in the order printed."""
    table, _ = read_table(run.dir, "steps")
    if table.num_rows == 0:
        live = live_steps(run)
        return live if live.num_rows else table
    lowest = pc.min(table["rank"]).as_py()
    table = table.filter(pc.equal(table["rank"], lowest))
    return table.sort_by("step")


def column(table: pa.Table, name: str) -> np.ndarray:
    """A column as float64 with NaN for nulls."""
    return np.asarray(pc.cast(table[name], pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def _last(values: np.ndarray) -> float | None:
    return float(values[-1]) if values.size and math.isfinite(values[-1]) else None


def progress(table: pa.Table, planned_steps: int | None) -> Progress:
    """The last step of ``table`` (:func:`steps`), its loss, the recent rate and the ETA."""
    n = table.num_rows
    if n == 0:
        return Progress(None, None, None, None, None, None, 0)
    recent = table.slice(max(0, n - RECENT))
    s, t, k = column(recent, "step"), column(recent, "time"), column(recent, "tokens")
    logged = column(recent, "tokens_per_s")
    logged = logged[np.isfinite(logged)]
    rate = float(np.median(logged)) if logged.size else None
    seconds_per_step = None
    ok = np.isfinite(t)
    ts, ss = t[ok], s[ok]
    rise = (np.diff(ss) > 0) & (np.diff(ts) >= 0)  # pairs where the counter rose (not across a new epoch)
    if rise.any() and np.diff(ts)[rise].sum() > 0:
        seconds_per_step = float(np.diff(ts)[rise].sum() / np.diff(ss)[rise].sum())
        kk = ok & np.isfinite(k)
        if rate is None and kk.sum() >= 2 and t[kk][-1] > t[kk][0]:
            rate = float((k[kk][-1] - k[kk][0]) / (t[kk][-1] - t[kk][0]))
    step = int(s[-1])
    eta = None
    if planned_steps is not None and seconds_per_step is not None:
        eta = max(0, planned_steps - step) * seconds_per_step
    tokens = _last(k)
    value, unit = rate, "tok/s"
    if value is None:
        printed = column(recent, "samples_per_s") if "samples_per_s" in recent.column_names else np.empty(0)
        printed = printed[np.isfinite(printed)]
        if printed.size:
            value, unit = float(printed[-1]), "samples/s"
        elif seconds_per_step:
            value, unit = 1.0 / seconds_per_step, "steps/s"
    return Progress(step, _last(column(recent, "loss")), None if tokens is None else int(tokens), rate,
                    seconds_per_step, eta, n, value, unit)
