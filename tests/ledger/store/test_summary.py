"""The receipt summary's headline figures, against values worked out by hand."""

from __future__ import annotations

import math

import pyarrow as pa

from ledger.store.summary import summarize, warmup_cut
from schemas.tables import TABLES


def _tables(steps: dict[str, list[object]]) -> dict[str, pa.Table]:
    tables = {name: schema.empty_table() for name, schema in TABLES.items()}
    n = len(steps["step"])
    columns = {f.name: steps.get(f.name, [None] * n) for f in TABLES["steps"]}
    tables["steps"] = pa.table(columns, schema=TABLES["steps"])
    return tables


def test_medians_skip_warmup_nulls_and_nonfinite_values() -> None:
    # rank 0: 11 steps given out of order; step 3's throughput is null, step 5's is NaN: 9 finite values remain,
    # the warm-up cut drops the first (step 1's, 1000.0), the median of the other 8 (steps 2, 4, 6..11) is
    # the mean of the 4th and 5th of 20, 40, 60, 70, 80, 90, 100, 110 -> (70 + 80) / 2 = 75.
    order = [11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    tps = {1: 1000.0, 2: 20.0, 3: None, 4: 40.0, 5: math.nan, 6: 60.0, 7: 70.0, 8: 80.0, 9: 90.0, 10: 100.0,
           11: 110.0}
    loss = {s: (math.inf if s == 4 else math.nan if s == 9 else None if s == 2 else 3.0 - s / 10) for s in order}
    # rank 1 logs other values; the summary reads the lowest rank only
    steps = {
        "rank": [0] * 11 + [1] * 3,
        "step": order + [1, 2, 3],
        "loss": [loss[s] for s in order] + [9.0, 9.0, 9.0],
        "tokens_per_s": [tps[s] for s in order] + [1.0, 1.0, 1.0],
        "step_time_s": [0.5 if s % 2 else 0.25 for s in order] + [7.0, 7.0, 7.0],
        "tokens": [s * 100 for s in order] + [1, 2, 3],
    }
    summary = summarize(_tables(steps))
    assert summary.steps == 11
    assert summary.last_step == 11
    assert summary.tokens == 1100
    assert summary.final_loss == 3.0 - 1.1
    assert summary.tokens_per_s == 75.0
    # step times of steps 2..11 (step 1 cut): 0.25 x 5 (even), 0.5 x 5 (odd: 3, 5, 7, 9, 11) -> (0.25 + 0.5) / 2
    assert summary.step_time_s == 0.375
    assert summary.nonfinite_steps == 2  # step 4 (inf) and step 9 (NaN); step 2's null is no value
    assert warmup_cut(9) == 1 and warmup_cut(1) == 0


def test_odd_count_median_and_no_values() -> None:
    steps = {"rank": [0, 0, 0, 0], "step": [1, 2, 3, 4], "tokens_per_s": [5.0, 30.0, 10.0, 20.0],
             "step_time_s": [None, None, None, None]}
    summary = summarize(_tables(steps))
    assert summary.tokens_per_s == 20.0  # 30, 10, 20 after the cut of one: the middle of 10, 20, 30
    assert summary.step_time_s is None
    assert summary.nonfinite_steps == 0
    empty = summarize(_tables({"step": []}))
    assert empty.steps == 0 and empty.tokens_per_s is None and empty.final_loss is None


def test_peak_memory_is_the_runs_own_never_the_machines() -> None:
    """The steps' figure first (the run's device memory), else its processes' GPU memory, else its process tree's;
    the machine's memory in use (host, a GPU's whole memory) is never the run's peak. Nulls are left out."""
    tables = _tables({"step": [1, 2, 3], "rank": [0, 0, 0], "memory_bytes": [None, 7_000_000_001, None]})
    telemetry = {f.name: [None] * 5 for f in TABLES["telemetry"]}
    telemetry["device"] = ["host", "gpu0", "process", "gpu0:process", "process"]
    telemetry["memory_bytes"] = [20_000_000_000, 9_000_000_000, 3_000_000_000, 5_000_000_000, None]
    tables["telemetry"] = pa.table(telemetry, schema=TABLES["telemetry"])
    s = summarize(tables)
    assert (s.peak_memory_bytes, s.peak_memory_source, s.peak_host_memory_bytes) == (7_000_000_001, "steps",
                                                                                     3_000_000_000)
    no_steps = _tables({"step": [1], "rank": [0], "memory_bytes": [None]})
    no_steps["telemetry"] = tables["telemetry"]
    s = summarize(no_steps)
    assert (s.peak_memory_bytes, s.peak_memory_source) == (5_000_000_000, "gpu processes")
    no_steps["telemetry"] = pa.table({**telemetry, "device": ["host", "gpu0", "process", "gpu1", "process"]},
                                     schema=TABLES["telemetry"])
    s = summarize(no_steps)
    assert (s.peak_memory_bytes, s.peak_memory_source, s.peak_host_memory_bytes) == (3_000_000_000, "process tree",
                                                                                     3_000_000_000)
    no_steps["telemetry"] = pa.table({**telemetry, "device": ["host", "gpu0", "cpu", "gpu1", "host"]},
                                     schema=TABLES["telemetry"])
    s = summarize(no_steps)
    assert (s.peak_memory_bytes, s.peak_memory_source, s.peak_host_memory_bytes) == (None, None, None)
    only_nulls = _tables({"step": [1], "rank": [0], "memory_bytes": [None]})
    assert summarize(only_nulls).peak_memory_bytes is None
    assert summarize(_tables({"step": []})).peak_memory_bytes is None


def test_steps_out_of_order_after_the_first_are_sorted_and_two_steps_cut_one() -> None:
    # steps 1, 3, 2: each later step is past the first, yet the log is out of order; the last step is 3
    s = summarize(_tables({"rank": [0, 0, 0], "step": [1, 3, 2], "tokens": [10, 30, 20], "loss": [3.0, 1.0, 2.0]}))
    assert (s.steps, s.last_step, s.tokens, s.final_loss) == (3, 3, 30, 1.0)
    # two steps: the first is warm-up, the median is the second's alone
    s = summarize(_tables({"rank": [0, 0], "step": [1, 2], "tokens_per_s": [100.0, 300.0],
                           "step_time_s": [9.0, 0.5]}))
    assert (s.tokens_per_s, s.step_time_s) == (300.0, 0.5)
    assert [warmup_cut(n) for n in (0, 1, 2, 3, 19, 20, 31)] == [0, 0, 1, 1, 1, 2, 3]


def test_final_evals_are_the_last_finite_value_of_each_split_source_and_metric() -> None:
    tables = _tables({"step": []})
    rows = [  # (step, split, source, metric, value), given out of step order
        (2, "val", None, "loss", 1.5),
        (1, "val", None, "loss", 2.5),
        (3, None, None, "accuracy", 0.5),
        (1, "val", "wiki", "loss", 4.0),
        (2, "val", "wiki", "loss", math.nan),  # not finite: the earlier value stays the final one
        (1, "test", "code", "loss", math.inf),  # no finite value at all: no final figure
    ]
    columns: dict[str, list[object]] = {f.name: [None] * len(rows) for f in TABLES["evals"]}
    columns["rank"] = [0] * len(rows)
    for i, name in enumerate(("step", "split", "source", "metric", "value")):
        columns[name] = [r[i] for r in rows]
    tables["evals"] = pa.table(columns, schema=TABLES["evals"])
    s = summarize(tables)
    assert s.final_eval == {"val/all/loss": 1.5, "all/all/accuracy": 0.5, "val/wiki/loss": 4.0}
    assert s.evals == 6 and s.routing_rows == 0


def test_energy_is_reported_with_its_method_only_when_finite() -> None:
    tables = _tables({"step": []})
    s = summarize(tables, energy_j=3600.0, energy_method="counter")
    assert (s.energy_j, s.energy_method) == (3600.0, "counter")
    for bad in (None, math.nan, math.inf):
        s = summarize(tables, energy_j=bad, energy_method="power-integral")
        assert (s.energy_j, s.energy_method) == (None, "not measured")
    assert summarize(tables).energy_method == "not measured"
