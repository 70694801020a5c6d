"""The times the capture derives from the output's clock (ledger.ingest.formats.scan.spread_arrivals and
step_times), against a reading of their docstrings written here row by row in plain Python: arrivals are runs of
rows with one known time and one generation; rows that arrived together are spread evenly by step between the
arrival before and theirs (not the first arrival, not after a restart or an unknown time, not where the steps do
not rise); a step's time is the time between two arrivals over the steps between them, shared by the rows of an
arrival. Drawn by Hypothesis (buffered output, restarts, unknown times, counters that fall), and a few by hand.
The times of evals come from the step rows printed at or before them."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.formats.base import Parsed
from ledger.ingest.formats.scan import Rows, spread_arrivals, step_times

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def _arrivals(times: list[float], generation: list[int]) -> list[tuple[int, int]]:
    """(first row, last row) of each arrival."""
    out, i, n = [], 0, len(times)
    while i < n:
        j = i
        while (j + 1 < n and math.isfinite(times[i]) and math.isfinite(times[j + 1]) and times[j + 1] == times[i]
               and generation[j + 1] == generation[i]):
            j += 1
        out.append((i, j))
        i = j + 1
    return out


def _spread(steps: list[int], times: list[float], generation: list[int]) -> list[float]:
    out = list(times)
    for a, b in _arrivals(times, generation):
        if b == a or a == 0 or not math.isfinite(times[a - 1]) or generation[a - 1] != generation[a]:
            continue
        s0, t0 = steps[a - 1], times[a - 1]
        rows = steps[a:b + 1]
        if rows[0] <= s0 or any(y <= x for x, y in zip(rows, rows[1:], strict=False)):
            continue
        for k in range(a, b + 1):
            out[k] = t0 + (times[b] - t0) * (steps[k] - s0) / (steps[b] - s0)
    return out


def _step_times(steps: list[int], times: list[float], generation: list[int]) -> list[float]:
    out = [math.nan] * len(steps)
    arrivals = _arrivals(times, generation)
    for (pa, pb), (a, b) in zip(arrivals, arrivals[1:], strict=False):
        gap = times[a] - times[pa]
        rose = steps[b] - steps[pb]
        if rose > 0 and math.isfinite(gap) and gap >= 0 and generation[a] == generation[pb]:
            for k in range(a, b + 1):
                out[k] = gap / rose
    return [x if math.isfinite(t) else math.nan for x, t in zip(out, times, strict=True)]


def _same(a: np.ndarray, b: list[float]) -> bool:
    return a.dtype == np.float64 and len(a) == len(b) and all(
        (math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a.tolist(), b, strict=True))


ROWS = st.lists(st.tuples(st.integers(0, 6),  # step rise (0: none; the counter may also fall, below)
                          st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5, math.nan, -1.0]),  # time since the row before
                          st.integers(0, 12)),  # 0: a restart before this row; 1: the counter falls
                min_size=0, max_size=14)


@FAST
@given(ROWS, st.floats(0, 1e6))
def test_spread_and_step_times_are_what_their_definitions_give(rows: list, start: float) -> None:
    steps, times, generation = [], [], []
    step, t, gen = 0, start, 0
    for rise, dt, event in rows:
        if event == 0 and steps:
            gen += 1
            step = max(0, step - 5)
        elif event == 1:
            step -= 3
        step += rise
        if math.isnan(dt):
            times.append(math.nan)
        else:
            t += dt
            times.append(t)
        steps.append(step)
        generation.append(gen)
    s, tt, g = np.array(steps, np.int64), np.array(times, np.float64), np.array(generation, np.int64)
    assert _same(spread_arrivals(s, tt, g), _spread(steps, times, generation))
    assert _same(step_times(s, tt, g), _step_times(steps, times, generation))


def test_buffered_output_by_hand() -> None:
    """Steps 10, 20 arrive at 100 s; 30, 40, 50 arrive together at 106 s (the launch buffers): spread at 102, 104,
    106; their step time 6 s over 30 steps. After a restart (generation 1), steps 41 and 42 arrive together at
    110 s, then 43, 45 together at 112 s: the restart's first arrival keeps its time; the next is spread from the
    row before (42 at 110 s) over 3 steps."""
    steps = np.array([10, 20, 30, 40, 50, 41, 42, 43, 45], np.int64)
    times = np.array([100.0, 100.0, 106.0, 106.0, 106.0, 110.0, 110.0, 112.0, 112.0])
    gen = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1], np.int64)
    assert spread_arrivals(steps, times, gen).tolist() == [100.0, 100.0, 102.0, 104.0, 106.0, 110.0, 110.0,
                                                           110.0 + 2.0 / 3.0, 112.0]
    got = step_times(steps, times, gen)
    assert np.isnan(got[:2]).all() and got[2:5].tolist() == [0.2, 0.2, 0.2] and np.isnan(got[5:7]).all()
    assert got[7:].tolist() == [2.0 / 3.0] * 2
    # two rows: never spread (the first arrival keeps its time)
    two = spread_arrivals(np.array([1, 2]), np.array([5.0, 5.0]), np.array([0, 0]))
    assert two.tolist() == [5.0, 5.0]
    assert spread_arrivals(np.array([3]), np.array([7.0]), np.array([0])).tolist() == [7.0]
    # the first arrival keeps its time, whatever comes last (a later counter below it, at a later time)
    assert spread_arrivals(np.array([5, 6, 2]), np.array([1.0, 1.0, 3.0]), np.array([0, 0, 0])).tolist() == [
        1.0, 1.0, 3.0]
    assert np.isnan(step_times(np.array([3]), np.array([7.0]), np.array([0]))).all()


def test_evals_take_the_time_of_the_step_row_printed_at_or_before_them() -> None:
    rows = Rows("x")
    rows.add(Parsed(step=None, evals=[("val", "loss", 4.0)]), 1)  # before any step row: no time
    rows.add(Parsed(step=1, metrics={"loss": 3.0}), 2)
    rows.add(Parsed(step=None, evals=[("val", "ppl", 20.0)]), 3)  # after the first step row
    rows.add(Parsed(step=2, metrics={"loss": 2.5}, evals=[("val", "loss", 2.75)]), 4)  # on its own line
    rows.add(Parsed(step=None, evals=[("val", "acc", 0.5)]), 5)  # after step 2's line
    rows.add(Parsed(step=3, metrics={"loss": 2.0}), 9)
    tables, derived = rows.build_tables(np.array([10.0, 12.0, 15.0]))
    ev = tables["evals"].to_pydict()
    assert ev["step"] == [0, 1, 2, 2] and ev["metric"] == ["loss", "ppl", "loss", "acc"] and ev["split"] == ["val"] * 4
    assert ev["rank"] == [0] * 4 and tables["steps"].column("rank").to_pylist() == [0, 0, 0]
    assert ev["time"] == [None, 10.0, 12.0, 12.0] and ev["value"] == [4.0, 20.0, 2.75, 0.5]
    assert tables["steps"].column("step_time_s").to_pylist() == [None, 2.0, 3.0] and "step_time_s" in derived.columns
    assert rows.build_tables()[0]["evals"].column("time").null_count == 4  # no clock: no time
