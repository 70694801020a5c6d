"""Runs in progress: progress and ETA from the step rows flushed so far (hand-computed expectations)."""

from __future__ import annotations

import pyarrow as pa

from ledger.store.running import RECENT, progress
from schemas.tables import TABLES


def _steps(n: int, seconds: float, tps: list[float | None]) -> pa.Table:
    rows = [{"rank": 0, "step": s, "time": 1000.0 + seconds * s, "tokens": 256 * s, "loss": 4.0 / s,
             "tokens_per_s": tps[s - 1]} for s in range(1, n + 1)]
    return pa.Table.from_pylist(rows, schema=TABLES["steps"])


def test_eta_is_the_remaining_steps_at_the_recent_pace() -> None:
    p = progress(_steps(30, 2.0, [1000.0] * 30), planned_steps=50)
    assert (p.step, p.loss, p.tokens, p.rows) == (30, 4.0 / 30, 256 * 30, 30)
    assert p.seconds_per_step == 2.0 and p.eta_s == 20 * 2.0 and p.tokens_per_s == 1000.0
    assert progress(_steps(30, 2.0, [1000.0] * 30), planned_steps=None).eta_s is None


def test_rate_from_tokens_and_time_when_not_logged() -> None:
    p = progress(_steps(RECENT + 5, 0.5, [None] * (RECENT + 5)), planned_steps=None)
    assert p.tokens_per_s == 256 / 0.5  # 256 tokens per step, a step every 0.5 s
    empty = progress(_steps(0, 1.0, []), planned_steps=10)
    assert empty.step is None and empty.eta_s is None and empty.rows == 0
