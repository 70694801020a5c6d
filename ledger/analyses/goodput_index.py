"""Goodput read from the index: a logical run's steps, events and data-loading timing rows, loaded with one
query each, handed to :func:`ledger.analyses.goodput.compute`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ledger.analyses.goodput import DATA_PHASES, TIMELINE_BINS, Goodput, compute
from ledger.store.attempts import LogicalRun
from ledger.store.receipts import Ledger

if TYPE_CHECKING:
    from ledger.analyses.compare import Comparison

STEP_COLUMNS = ("receipt_id", "rank", "step", "time", "step_time_s", "tokens", "skipped")
EVENT_COLUMNS = ("receipt_id", "rank", "time", "kind", "step", "detail")


def _marks(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


def load_tables(con: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> dict[str, pa.Table]:
    """The steps, events (in recorded order) and data-loading timing rows of some receipts."""
    marks = _marks(ids)
    steps = con.sql(
        f"SELECT {', '.join(STEP_COLUMNS)} FROM steps WHERE receipt_id IN ({marks})", params=list(ids)
    ).to_arrow_table()
    events = con.sql(
        f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE receipt_id IN ({marks}) ORDER BY rowid",
        params=list(ids),
    ).to_arrow_table()
    phases = ", ".join("?" for _ in DATA_PHASES)
    timing = con.sql(
        f"SELECT receipt_id, rank, step, phase, seconds FROM timing WHERE receipt_id IN ({marks}) "
        f"AND phase IN ({phases})",
        params=[*ids, *DATA_PHASES],
    ).to_arrow_table()
    return {"steps": steps, "events": events, "timing": timing}


def goodput_of_run(con: duckdb.DuckDBPyConnection, run: LogicalRun, *, bins: int = TIMELINE_BINS) -> Goodput:
    """Goodput of a :class:`ledger.store.attempts.LogicalRun` from the index; for a run whose attempts
    timed the phases of several ranks, with the time lost waiting on slower ranks as the
    ``straggler_wait`` bucket (:func:`with_straggler_wait`)."""
    tables = load_tables(con, run.ids)
    good = compute(run.attempts, tables["steps"], tables["events"], tables["timing"], bins=bins)
    return with_straggler_wait(con, good, run.ids)


def with_straggler_wait(con: duckdb.DuckDBPyConnection, good: Goodput, ids: Sequence[str]) -> Goodput:
    """``good`` with the ``straggler_wait`` bucket (:func:`ledger.analyses.stragglers.straggler_bucket`):
    the waiting time estimated from the timing rows of each attempt that timed several ranks, summed over
    the attempts. Unchanged when no attempt timed more than one rank (nothing to compare)."""
    from ledger.analyses.stragglers import BUCKET, straggler_bucket, stragglers

    marks = _marks(ids)
    timing = con.sql(
        f"SELECT receipt_id, rank, step, phase, seconds FROM timing WHERE receipt_id IN ("
        f"SELECT receipt_id FROM timing WHERE receipt_id IN ({marks}) GROUP BY receipt_id "
        "HAVING count(DISTINCT rank) > 1)",
        params=list(ids),
    ).to_arrow_table()
    if not timing.num_rows:
        return good
    attempts = timing.column("receipt_id")
    wait = 0.0
    for rid in sorted(set(attempts.to_pylist())):
        wait += stragglers(timing.filter(pc.equal(attempts, rid))).wait_s
    out: Goodput = straggler_bucket(good, wait)
    note = (f"{BUCKET}: {wait:.3g} s estimated from the ranks' timers (per step, the slowest rank's work "
            "time minus the median rank's; see ledger.analyses.stragglers)")
    return dataclasses.replace(out, notes=[*out.notes, note])


def goodput(ledger: Ledger, ref: str) -> Goodput:
    """Goodput of the logical run a ref (any attempt's id, prefix or name) belongs to."""
    from ledger.store import index
    from ledger.store.attempts import logical_run

    with index.reader(ledger) as con:
        run = logical_run(con, ref)
        return goodput_of_run(con, run)


def of_sides(con: duckdb.DuckDBPyConnection, c: Comparison) -> dict[str, Goodput | str]:
    """The goodput of the logical run of each side's first receipt (for the HTML report's timelines),
    keyed by the side's label, or the reason it cannot be computed."""
    from ledger.errors import LedgerError
    from ledger.store.attempts import run_of

    out: dict[str, Goodput | str] = {}
    for side, runs in (("A", c.runs_a), ("B", c.runs_b)):
        if not runs:
            continue
        label = f"{side}: {runs[0].label}"
        try:
            out[label] = goodput_of_run(con, run_of(con, runs[0].id))
        except LedgerError as exc:
            out[label] = str(exc)
    return out


__all__ = ["EVENT_COLUMNS", "STEP_COLUMNS", "goodput", "goodput_of_run", "load_tables", "of_sides"]
