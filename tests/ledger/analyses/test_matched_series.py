"""The columns every analysis reads (ledger.analyses.series) and the matched checkpoints of the loss rows
(ledger.analyses.matched), against values written by hand: a run published through the real SDK by two ranks
(steps out of order, a restart's repeated steps, evals and timing of both ranks, routing, telemetry, events) and
read back from the index; its warm-up, steady steps, devices, FLOPs per token and training clock; the routing
heatmap's bins; and curves, grids and interpolations on small series whose every point is known."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ledger.analyses import matched, series
from ledger.analyses.matched import MAX_POINTS, MIN_POINTS, WINDOW, Curve, Grid, common_grid, curve, describe
from ledger.analyses.series import RunData
from schemas.receipt import Receipt, Workload

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def publish(root: Path, ranks: dict[int, list[tuple[str, tuple[Any, ...], dict[str, Any]]]],
            workload: dict[str, Any] | None = None) -> str:
    """Stage what each rank logged (calls on the SDK's Run, in order) and publish it; the receipt id."""
    from ledger.sdk import Run
    from ledger.store.layout import WRAPPER_FILE
    from ledger.store.publish import publish as publish_run
    from ledger.store.receipts import Ledger
    from ledger.store.staging import Outcome

    ledger = Ledger(root)
    root.mkdir(parents=True, exist_ok=True)
    run_dir = ledger.staging / uuid.uuid4().hex
    run_dir.mkdir(parents=True)
    (run_dir / WRAPPER_FILE).write_text(json.dumps({"name": "r", "run_uuid": run_dir.name,
                                                    "started_at": T0.isoformat(), "attempt": 1}))
    for rank, calls in ranks.items():
        sdk = Run(run_dir, rank=rank, background=False)
        if workload:
            sdk.set_workload(workload)
        for method, args, kwargs in calls:
            getattr(sdk, method)(*args, **kwargs)
        sdk.close()
    return publish_run(ledger, run_dir, Outcome("succeeded", 0, None, T0 + timedelta(seconds=60))).id


def step(n: int, **metrics: Any) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    return ("log_step", (n,), metrics)


def test_a_published_run_read_back_as_columns(tmp_path: Path) -> None:
    from ledger.store import index
    from ledger.store.receipts import Ledger

    rank1 = [step(1, loss=9.0, time_s=1.0), step(2, loss=9.0, time_s=2.0), step(3, loss=9.0, time_s=3.0),
             ("log_eval", (2, 7.0), {"metric": "loss"}), ("log_timing", (1, "forward", 0.3), {})]
    rank0 = [step(3, loss=2.5, tokens=300, samples_per_s=12.0, step_time_s=1.0),
             step(1, loss=3.0, tokens=100, step_time_s=1.0), step(2, loss=math.nan, tokens=200, step_time_s=1.0),
             step(4, loss=math.inf, tokens=400, step_time_s=1.0, skipped=True),
             ("log_eval", (4, 2.0), {"metric": "loss", "split": "val"}),
             ("log_eval", (2, 2.6), {"metric": "loss", "split": "val"}),
             ("log_timing", (1, "forward", 0.1), {}), ("log_timing", (2, "forward", 0.2), {}),
             ("log_timing", (1, "backward", 0.5), {}),
             ("log_routing", (1, 0, [5, 3, 2, 6]), {"dropped": [0, 1, 0, 0]}),
             ("log_routing", (1, 1, [1, 7]), {}), ("log_routing", (2, 0, [4, 4, 4, 4]), {}),
             ("log_telemetry", ("gpu0",), {"power_w": 300.0, "memory_bytes": 1 << 30, "time_s": 100.0}),
             ("log_telemetry", ("gpu0",), {"power_w": 310.0, "time_s": 101.0}),
             ("event", ("checkpoint_save_start",), {"step": 2, "path": "ckpt/2"})]
    rid = publish(tmp_path, {1: rank1, 0: rank0})
    with index.reader(Ledger(tmp_path)) as con:
        run = series.load_run(con, rid)
        assert series.load_run_cached(con, rid) is series.load_run_cached(con, rid)  # read once
        assert series.layer_count(con, rid) == 2 and series.imbalanced_layers(con, rid) == [0, 1]
        assert series.imbalanced_layers(con, rid, limit=1) == [1]  # layer 1: loads 1 and 7, CV 0.75 > layer 0's
    # steps: the lowest rank's, in step order; a null becomes NaN, integers and booleans floats
    s = run.steps
    assert s["step"].dtype == np.int64 and s["step"].tolist() == [1, 2, 3, 4]
    assert s["tokens"].dtype == np.float64 and s["tokens"].tolist() == [100.0, 200.0, 300.0, 400.0]
    assert s["loss"][0] == 3.0 and math.isnan(s["loss"][1]) and s["loss"][2] == 2.5 and math.isinf(s["loss"][3])
    assert s["loss_nonfinite"].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert s["skipped"][3] == 1.0 and np.isnan(s["skipped"][:3]).all()
    assert s["samples_per_s"][2] == 12.0 and np.isnan(s["samples_per_s"][[0, 1, 3]]).all()
    assert set(series.STEP_COLUMNS) <= set(s)
    # evals of the lowest rank, by step; timing averaged over ranks per phase and step
    assert run.evals == [{"step": 2, "tokens": None, "split": "val", "source": None, "metric": "loss", "value": 2.6},
                         {"step": 4, "tokens": None, "split": "val", "source": None, "metric": "loss", "value": 2.0}]
    assert sorted(run.timing) == ["backward", "forward"]
    assert run.timing["forward"]["step"].tolist() == [1, 2]
    assert run.timing["forward"]["seconds"] == pytest.approx([0.2, 0.2])  # (0.1 + 0.3) / 2 and 0.2
    assert run.timing["backward"]["seconds"].tolist() == [0.5]
    # routing per (step, layer): E, sum, population SD, max, dropped, dominant expert (the lowest on a tie)
    r = run.routing
    assert r["step"].tolist() == [1, 1, 2] and r["layer"].tolist() == [0, 1, 0]
    assert r["experts"].tolist() == [4, 2, 4] and r["n_sum"].tolist() == [16.0, 8.0, 16.0]
    assert r["n_std"] == pytest.approx([math.sqrt(((5 - 4) ** 2 + 1 + 4 + 4) / 4), 3.0, 0.0])
    assert r["n_max"].tolist() == [6, 7, 4] and r["d_sum"].tolist() == [1.0, 0.0, 0.0]
    assert r["dominant"].tolist() == [3, 1, 0] and series.layers_of(run) == [0, 1]
    assert r["n_log_n"] == pytest.approx([5 * math.log(5) + 3 * math.log(3) + 2 * math.log(2) + 6 * math.log(6),
                                          7 * math.log(7), 16 * math.log(4)])
    # telemetry in time order, events
    assert run.telemetry["device"].tolist() == ["gpu0", "gpu0"] and run.telemetry["power_w"].tolist() == [300.0, 310.0]
    assert run.telemetry["memory_bytes"][0] == float(1 << 30) and math.isnan(run.telemetry["memory_bytes"][1])
    (event,) = run.events
    assert sorted(event) == ["attempt", "detail", "kind", "rank", "step", "time"]
    assert (event["kind"], event["step"], event["rank"], event["detail"]) == ("checkpoint_save_start", 2, 0,
                                                                            '{"path": "ckpt/2"}')
    assert isinstance(event["time"], float) and event["time"] > 0
    assert run.id == rid and run.receipt.id == rid and run.receipt.name == "r" and run.receipt.status == "succeeded"
    with pytest.raises(KeyError) as missing:
        with index.reader(Ledger(tmp_path)) as con:
            series.load_receipt(con, "f" * 64)
    assert missing.value.args == ("f" * 64,)


def test_the_routing_heatmap_bins_steps_and_divides_by_the_mean_load(tmp_path: Path) -> None:
    """Layer 0 at steps 1..4 with 2 bins: steps 1-2 and 3-4 summed per expert, then each expert's share of the
    bin's mean load."""
    from ledger.store import index
    from ledger.store.receipts import Ledger

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("log_routing", (1, 0, [1, 3]), {}), ("log_routing", (2, 0, [3, 1]), {}),
        ("log_routing", (3, 0, [6, 2]), {}), ("log_routing", (4, 0, [2, 2]), {}),
        ("log_routing", (1, 5, [2, 2, 4]), {})]
    rid = publish(tmp_path, {0: [step(k, loss=1.0) for k in range(1, 5)] + calls})
    with index.reader(Ledger(tmp_path)) as con:
        got = series.routing_matrices(con, rid, max_bins=2)
        one = series.routing_matrix(con, rid, 0, max_bins=2)
        none = series.routing_matrix(con, rid, 9)
        assert series.routing_matrices(con, rid, layers=[]) == {}
        every = series.routing_matrices(con, rid, max_bins=120)
    assert sorted(got) == [0, 5]
    # bin 0: expert 0 has 1 + 3 = 4, expert 1 has 3 + 1 = 4 (mean 4); bin 1: 8 and 4 (mean 6)
    assert got[0]["step"].tolist() == [1, 3]
    assert got[0]["load"] == pytest.approx(np.array([[1.0, 8 / 6], [1.0, 4 / 6]]))
    assert got[5]["step"].tolist() == [1] and got[5]["load"] == pytest.approx(np.array([[0.75], [0.75], [1.5]]))
    assert one["load"] == pytest.approx(got[0]["load"]) and none["load"].shape == (0, 0) and none["step"].size == 0
    assert every[0]["step"].tolist() == [1, 2, 3, 4]  # fewer steps than bins: a bin a step
    assert every[0]["load"][:, 0] == pytest.approx([0.5, 1.5])
    with index.reader(Ledger(tmp_path)) as con:
        both = series.routing_matrices(con, rid, max_bins=2, layers=[5, 0])
    assert sorted(both) == [0, 5] and both[0]["load"] == pytest.approx(got[0]["load"])


def test_the_heatmap_has_at_most_120_bins(tmp_path: Path) -> None:
    """240 steps of one layer: 120 bins of two steps each, by default."""
    from ledger.store import index
    from ledger.store.receipts import Ledger

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("log_routing", (k, 0, [k % 3, 1]), {}) for k in range(1, 241)]
    rid = publish(tmp_path, {0: [step(1, loss=1.0)] + calls})
    with index.reader(Ledger(tmp_path)) as con:
        got = series.routing_matrices(con, rid)[0]
        one = series.routing_matrix(con, rid, 0)
    assert got["step"].tolist() == list(range(1, 241, 2)) and got["load"].shape == (2, 120)
    # bin 0: steps 1 and 2, expert 0 has 1 + 2 = 3, expert 1 has 2: mean 2.5
    assert got["load"][:, 0] == pytest.approx([3 / 2.5, 2 / 2.5])
    assert one["step"].tolist() == got["step"].tolist()


def run_of(steps: dict[str, list[Any]], **workload: Any) -> RunData:
    columns = {k: np.asarray(v, dtype=np.int64 if k == "step" else np.float64) for k, v in steps.items()}
    receipt = Receipt(run_uuid="u", status="succeeded", name="bf16", workload=Workload.model_validate(workload))
    return RunData("6635a6b9" + "0" * 56, receipt, columns, [], {}, {})


def test_warm_up_steady_steps_and_what_a_run_says_of_itself() -> None:
    """20 steps: the first 2 are warm-up (10%); of the step times after it, the one at 10 s is an outlier."""
    times = [5.0, 4.0] + [1.0, 1.1, 0.9, 1.0, 1.05, 0.95] * 3
    times[10] = 10.0
    run = run_of({"step": list(range(1, 21)), "step_time_s": times, "time": list(np.cumsum(times)),
                  "tokens": [100.0 * k for k in range(1, 21)]},
                 model={"active_params": 1000, "layers": 2, "hidden": 8}, data={"sequence_length": 16},
                 parallelism={"world_size": 4}, precision={"compute": "bf16"}, device="cuda")
    assert run.label == "bf16 (6635a6b9)" and run.n_steps == 20 and run.warmup == 2
    assert run.steady.tolist() == [False, False] + [k != 10 for k in range(2, 20)]
    assert run.after_warmup("tokens").tolist() == [100.0 * k for k in range(3, 21)]
    assert run.devices == 4 and run.precision == "bf16"
    assert run.flops_per_token == 6 * 1000 + 12 * 2 * 8 * 16
    assert run.train_time.tolist() == pytest.approx(list(np.cumsum(times)))  # the first step started at 0
    bare = run_of({"step": [1]})
    assert bare.warmup == 0 and bare.steady.tolist() == [True] and bare.devices == 1 and bare.flops_per_token is None
    assert bare.train_time.size == 0 and bare.gpu_model is None
    assert run_of({"step": []}).n_steps == 0 and RunData("a" * 64, bare.receipt, {}, [], {}, {}).n_steps == 0
    unnamed = RunData("abcdef0123456789" * 4, Receipt(run_uuid="u", status="succeeded"), {}, [], {}, {})
    assert unnamed.label == "abcdef012345"
    late = run_of({"step": [1, 2], "time": [10.0, 12.0], "step_time_s": [math.nan, 2.0]})
    assert late.train_time.tolist() == [0.0, 2.0]  # the first step's time unknown: the clock starts at its end
    unclocked = run_of({"step": [1, 2], "time": [math.nan, 3.0]})
    assert np.isnan(unclocked.train_time).all()
    cpu = run_of({"step": [1]}, device="cpu")
    assert cpu.gpu_model is None


def test_arrow_columns_keep_whole_numbers_of_steps_layers_and_experts() -> None:
    import pyarrow as pa

    table = pa.table({"step": pa.array([1, 2], pa.int64()), "expert": pa.array([0, 3], pa.int32()),
                      "layer": pa.array([5, None], pa.int32()), "n": pa.array([7, 8], pa.int64()),
                      "device": pa.array(["gpu0", None])})
    got = series._arrow_numpy(table)
    assert got["step"].dtype == np.int64 and got["expert"].dtype == np.int32 and got["expert"].tolist() == [0, 3]
    assert got["layer"].dtype == np.float64 and math.isnan(got["layer"][1])  # a null among them: NaN
    assert got["n"].dtype == np.float64 and got["device"].tolist() == ["gpu0", None]
    for empty_table in (table.slice(0, 0), pa.Table.from_batches([], schema=table.schema)):  # one empty chunk, none
        empty = series._arrow_numpy(empty_table)
        assert empty["device"].size == 0 and empty["expert"].dtype == np.int32 and empty["n"].dtype == np.float64


def test_fetched_columns_without_nulls_become_floats_too() -> None:
    """DuckDB hands a column without nulls over as a plain array (with nulls, a masked one): integers other than
    step, layer and expert, and booleans, become float64 either way."""
    got = series._numpy({"flag": np.array([True, False]), "n": np.array([3, 4]), "expert": np.array([0, 1]),
                         "x": np.array([0.5, 1.5])})
    assert got["flag"].dtype == np.float64 and got["flag"].tolist() == [1.0, 0.0]
    assert got["n"].dtype == np.float64 and got["n"].tolist() == [3.0, 4.0]
    assert got["expert"].dtype.kind == "i" and got["x"].tolist() == [0.5, 1.5]


def test_out_of_order_rows_are_sorted_by_step_then_time_in_place() -> None:
    steps = {"step": np.array([3, 1, 2, 1]), "time": np.array([3.0, 9.0, 2.0, 1.0]),
             "loss": np.array([0.3, 0.19, 0.2, 0.11]), "name": np.array(["c", "b2", "b", "a"], dtype=object)}
    loss = steps["loss"]
    out = series._sorted(steps)
    assert out["step"].tolist() == [1, 1, 2, 3] and out["time"].tolist() == [1.0, 9.0, 2.0, 3.0]
    assert out["loss"].tolist() == [0.11, 0.19, 0.2, 0.3] and out["name"].tolist() == ["a", "b2", "b", "c"]
    assert out["loss"] is loss  # reordered in place
    nan_time = series._sorted({"step": np.array([2, 1, 1]), "time": np.array([1.0, math.nan, 0.5])})
    assert nan_time["time"][:2].tolist()[0] == 0.5 and math.isnan(nan_time["time"][1])  # an unknown time last
    ordered = {"step": np.array([1, 2]), "time": np.array([2.0, 1.0])}
    assert series._sorted(ordered) is ordered


def test_the_cache_keeps_small_runs_and_forgets_the_oldest(tmp_path: Path) -> None:
    from ledger.store import index
    from ledger.store.receipts import Ledger

    small = publish(tmp_path, {0: [step(k, loss=1.0) for k in range(1, 4)]})
    other = publish(tmp_path, {0: [step(k, loss=2.0) for k in range(1, 3)]})
    series._CACHE.clear()
    assert series.CACHE_RUNS == 256 and series.CACHE_MAX_STEPS == 20_000
    with index.reader(Ledger(tmp_path)) as con:
        first = series.load_run_cached(con, small)
        assert series.load_run_cached(con, small) is first
        for k in range(series.CACHE_RUNS - 1):  # full: the small run the oldest
            series._CACHE[f"x{k}"] = first
        series.load_run_cached(con, other)  # one more: the oldest goes
        assert len(series._CACHE) == series.CACHE_RUNS and small not in series._CACHE
        again = series.load_run_cached(con, small)
        assert again is not first and again.id == small and len(series._CACHE) == series.CACHE_RUNS
        assert "x0" not in series._CACHE and next(reversed(series._CACHE)) == small
        series.load_run_cached(con, other)  # read again: the most recent, at the end, nothing dropped
        assert next(reversed(series._CACHE)) == other and "x1" in series._CACHE
    series._CACHE.clear()


def test_a_run_over_the_cache_limit_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger.store import index
    from ledger.store.receipts import Ledger

    rid = publish(tmp_path, {0: [step(k, loss=1.0) for k in range(1, 4)]})
    series._CACHE.clear()
    monkeypatch.setattr(series, "CACHE_MAX_STEPS", 2)  # three steps: over a limit of two
    with index.reader(Ledger(tmp_path)) as con:
        assert series.load_run_cached(con, rid) is not series.load_run_cached(con, rid)
    assert rid not in series._CACHE
    monkeypatch.setattr(series, "CACHE_MAX_STEPS", 3)  # exactly at the limit: kept
    with index.reader(Ledger(tmp_path)) as con:
        assert series.load_run_cached(con, rid) is series.load_run_cached(con, rid)
    series._CACHE.clear()


# ------------------------------------------------------------------------------------------ matched checkpoints
def test_curves_on_each_axis_and_why_there_is_none() -> None:
    run = run_of({"step": [1, 2, 3, 4], "tokens": [10.0, 20.0, math.nan, 40.0], "loss": [4.0, 3.0, 2.0, math.nan],
                  "time": [1.0, 2.0, 3.0, 4.0], "step_time_s": [1.0, 1.0, 1.0, 1.0]})
    tokens = curve(run, "tokens")
    assert isinstance(tokens, Curve) and tokens.x.tolist() == [10.0, 20.0] and tokens.y.tolist() == [4.0, 3.0]
    steps = curve(run, "steps")
    assert isinstance(steps, Curve) and steps.x.tolist() == [1.0, 2.0, 3.0] and steps.x.dtype == np.float64
    time = curve(run, "time")
    assert isinstance(time, Curve) and time.x.tolist() == [1.0, 2.0, 3.0]  # the clock from the first step's start
    slow = run_of({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0], "time": [100.0, 110.0, 120.0],
                   "step_time_s": [10.0, 10.0, 10.0]})
    by_step, by_time = curve(slow, "steps"), curve(slow, "time")
    assert isinstance(by_step, Curve) and by_step.x.tolist() == [1.0, 2.0, 3.0]
    assert isinstance(by_time, Curve) and by_time.x.tolist() == [10.0, 20.0, 30.0]
    assert curve(run_of({"step": []}), "tokens") == "no step rows"
    assert curve(run_of({"step": [1, 2], "tokens": [math.nan] * 2, "loss": [1.0, 2.0]}), "tokens") == \
        "tokens not logged"
    assert curve(run_of({"step": [1, 2], "time": [math.nan] * 2, "loss": [1.0, 2.0]}), "time") == \
        "step times not logged"
    assert curve(run_of({"step": [1, 2], "tokens": [1.0, 2.0], "loss": [1.0, math.nan]}), "tokens") == \
        "fewer than 2 finite loss values"
    assert curve(run_of({"step": [1, 2], "tokens": [1.0, 2.0], "grad_norm": [math.nan, 2.0]}), "tokens",
                 "grad_norm") == "fewer than 2 finite grad_norm values"


def test_a_point_logged_twice_counts_once_at_its_last_computation() -> None:
    """Steps 1-4, then a restart recomputing 3 and 4 with other losses, then 5: tokens 300 and 400 keep the later
    values; rows given out of order are sorted."""
    run = run_of({"step": [1, 2, 3, 4, 3, 4, 5], "tokens": [100.0, 200.0, 300.0, 400.0, 300.0, 400.0, 500.0],
                  "loss": [5.0, 4.0, 3.0, 2.0, 3.5, 2.5, 1.5]})
    c = curve(run, "tokens")
    assert isinstance(c, Curve) and c.x.tolist() == [100.0, 200.0, 300.0, 400.0, 500.0]
    assert c.y.tolist() == [5.0, 4.0, 3.5, 2.5, 1.5]
    # forty steps, then a restart from step 20 recomputing twenty of them: the second computation of each
    long = run_of({"step": list(range(1, 41)) + list(range(21, 61)),
                   "tokens": [100.0 * k for k in range(1, 41)] + [100.0 * k for k in range(21, 61)],
                   "loss": [1.0] * 40 + [2.0] * 40})
    e = curve(long, "tokens")
    assert isinstance(e, Curve) and e.x.tolist() == [100.0 * k for k in range(1, 61)]
    assert e.y.tolist() == [1.0] * 20 + [2.0] * 40
    twice = curve(run_of({"step": [1, 2, 2, 3], "tokens": [100.0, 200.0, 200.0, 300.0],
                          "loss": [3.0, 2.0, 1.9, 1.0]}), "tokens")  # the last step logged again at once
    assert isinstance(twice, Curve) and twice.x.tolist() == [100.0, 200.0, 300.0] and twice.y.tolist() == [3.0, 1.9,
                                                                                                           1.0]
    shuffled = run_of({"step": [3, 1, 2], "tokens": [30.0, 10.0, 20.0], "loss": [1.0, 3.0, 2.0]})
    d = curve(shuffled, "tokens")
    assert isinstance(d, Curve) and d.x.tolist() == [10.0, 20.0, 30.0] and d.y.tolist() == [3.0, 2.0, 1.0]


def _c(xs: list[float], ys: list[float] | None = None) -> Curve:
    return Curve(np.asarray(xs, dtype=np.float64), np.asarray(ys if ys is not None else xs, dtype=np.float64))


def test_the_grid_is_the_end_of_the_common_range() -> None:
    assert (WINDOW, MAX_POINTS, MIN_POINTS) == (0.2, 2000, 5)
    a = _c([float(x) for x in range(0, 101, 10)])  # 0..100
    b = _c([5.0, 30.0, 80.0])
    # common range [5, 80]; its last 20% starts at 65: a's points 70 and 80, fewer than 5: a's last 5 inside
    g = common_grid([a, b])
    assert isinstance(g, Grid) and g.x.tolist() == [40.0, 50.0, 60.0, 70.0, 80.0] and (g.lo, g.hi) == (40.0, 80.0)
    # from b's points: 5, 30, 80 inside, all of them (fewer than 5)
    gb = common_grid([a, b], reference=b)
    assert isinstance(gb, Grid) and gb.x.tolist() == [5.0, 30.0, 80.0] and gb.lo == 5.0
    # a range that starts far from 0: the window is the last 20% of [1000, 1100], from 1080
    late = common_grid([_c([1000.0 + x for x in range(0, 101, 2)]), _c([990.0, 1100.0])])
    assert isinstance(late, Grid) and late.x.tolist() == [1080.0 + x for x in range(0, 21, 2)] and late.lo == 1080.0
    # a dense reference: the window's own points
    dense = _c([float(x) for x in range(0, 1001)])
    gd = common_grid([dense, _c([0.0, 1000.0])])
    assert isinstance(gd, Grid) and gd.x.tolist() == [float(x) for x in range(800, 1001)] and gd.lo == 800.0
    gw = common_grid([dense, _c([0.0, 1000.0])], window=0.5)
    assert isinstance(gw, Grid) and gw.x[0] == 500.0 and gw.x.size == 501
    # a reference with exactly 2 points in the range: those two
    two = common_grid([_c([0.0, 10.0, 90.0, 100.0]), _c([5.0, 20.0, 95.0])])
    assert isinstance(two, Grid) and two.x.tolist() == [10.0, 90.0] and (two.lo, two.hi) == (10.0, 95.0)
    # a reference with fewer than 2 points in the range: 5 points spread over it
    sparse = common_grid([_c([0.0, 100.0]), _c([10.0, 20.0, 90.0])])
    assert isinstance(sparse, Grid) and sparse.x.tolist() == [10.0, 30.0, 50.0, 70.0, 90.0] and sparse.hi == 90.0
    assert common_grid([]) == "no curves"
    assert common_grid([_c([0.0, 10.0]), _c([10.0, 20.0])]) == "the runs share no range"
    assert common_grid([_c([0.0, 10.0]), _c([20.0, 30.0])]) == "the runs share no range"


def test_a_window_of_more_than_the_most_points_is_thinned_evenly() -> None:
    ref = _c([float(x) for x in range(10001)])  # 0..10000: the window 8000..10000 holds 2001 points
    g = common_grid([ref])
    assert isinstance(g, Grid) and g.x.size == MAX_POINTS and g.x[0] == 8000.0 and g.x[-1] == 10000.0
    want = 8000.0 + np.round(np.linspace(0, 2000, 2000))
    assert g.x.tolist() == want.tolist() and g.x.dtype == np.float64


def test_values_at_the_grid_points_by_linear_interpolation() -> None:
    a, b = _c([0.0, 10.0, 20.0], [4.0, 2.0, 1.0]), _c([0.0, 20.0], [3.0, 1.0])
    grid = Grid(np.array([5.0, 10.0, 15.0]), 5.0, 15.0)
    got = matched.matched_values([a, b], grid)
    assert got.shape == (3, 2) and got[:, 0].tolist() == [3.0, 2.0, 1.5] and got[:, 1].tolist() == [2.5, 2.0, 1.5]
    assert matched.at(a, np.array([20.0])).tolist() == [1.0]
    assert matched.matched_values([], grid).shape == (3, 0)


def test_where_the_values_were_matched_in_words() -> None:
    assert describe("tokens", Grid(np.array([0.0]), 49152.0, 61440.0)) == "mean over 49,152..61,440 tokens"
    assert describe("steps", Grid(np.array([0.0]), 1200.0, 1500.0)) == (
        "mean over steps 1,200..1,500 (tokens unknown: equal work only where the batches are equal)")
    assert describe("time", Grid(np.array([0.0]), 12.25, 599.94)) == "mean over 12.2 s..599.9 s of training"
    assert describe("time", Grid(np.array([0.0]), 600.0, 7200.0)) == "mean over 0.17 h..2.00 h of training"
    assert describe("time", Grid(np.array([0.0]), math.nan, math.inf)) == "mean over ?..? of training"


def test_runs_that_logged_little(tmp_path: Path) -> None:
    """A run of evals only (rank 1's, none from rank 0), telemetry logged out of order, one routing step of one
    layer, a layer of zero loads: read without a step, in time order, a one-column heatmap, the zero layer last."""
    from ledger.store import index
    from ledger.store.receipts import Ledger

    rank0: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("log_telemetry", ("gpu0",), {"power_w": 2.0, "time_s": 20.0}),
        ("log_telemetry", ("gpu0",), {"power_w": 1.0, "time_s": 10.0}),
        ("log_routing", (7, 3, [2, 6]), {}), ("log_routing", (7, 4, [0, 0]), {}),
        ("log_routing", (7, 1, [3, 3]), {})]
    rank1: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("log_eval", (5, 1.5), {"metric": "acc", "split": "test", "source": "mmlu"}),
        ("log_eval", (3, 1.25), {"metric": "acc", "split": "test", "source": "mmlu"})]
    rid = publish(tmp_path, {0: rank0, 1: rank1})
    with index.reader(Ledger(tmp_path)) as con:
        run = series.load_run(con, rid)
        heat = series.routing_matrices(con, rid)
        order = series.imbalanced_layers(con, rid)
        worst = series.imbalanced_layers(con, rid, limit=2)
    assert run.n_steps == 0 and run.steps["step"].size == 0 and run.warmup == 0
    assert [(e["step"], e["source"], e["value"]) for e in run.evals] == [(3, "mmlu", 1.25), (5, "mmlu", 1.5)]
    assert run.telemetry["time"].tolist() == [10.0, 20.0] and run.telemetry["power_w"].tolist() == [1.0, 2.0]
    assert run.timing == {} and series.layers_of(run) == [1, 3, 4]
    assert heat[3]["step"].tolist() == [7] and heat[3]["load"] == pytest.approx(np.array([[0.5], [1.5]]))
    assert np.isnan(heat[4]["load"]).all()  # no load at all: no share of it
    assert order == [1, 3, 4] and worst == [1, 3]  # layer 3 the most uneven, layer 1 even, layer 4 unknown: last
    assert series.layers_of(run_of({"step": [1]})) == []  # a run in memory with no routing table at all
    single = publish(tmp_path, {0: [("log_routing", (1, 0, [1, 3]), {})]})  # one layer, one step: one column
    with index.reader(Ledger(tmp_path)) as con:
        one = series.routing_matrices(con, single)
    assert one[0]["step"].tolist() == [1] and one[0]["load"] == pytest.approx(np.array([[0.5], [1.5]]))
