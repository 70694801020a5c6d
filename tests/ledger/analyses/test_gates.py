"""Cost to a quality gate on hand-built tables: first eval in time, interpolation, censoring, energy,
money, Kaplan-Meier group summaries, MLPerf time to train, bad input.

The run is the one of test_goodput.py: attempt 1 [0, 10] (steps 1-6 end at 4..9), downtime [10, 12],
attempt 2 [12, 25] (restored from step 4; steps 5-8 end at 16..19). Evals of val loss:

    attempt 1: step 3 at 6.1 -> 4.0     step 6 at 9.1 -> 3.8
    attempt 2: step 6 at 17.1 -> 3.8    step 8 at 19.1 -> 3.4
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hand_runs import A1, A2, T0, table
from hand_runs import VAL_GATE as GATE
from hand_runs import VAL_TASK as TASK
from hand_runs import val_receipt as receipt

from ledger.analyses.gate_spec import parse_gate, select_gates
from ledger.analyses.gates import Cost, GateResult, gate_result, run_cost, summarise
from ledger.analyses.goodput import compute
from ledger.analyses.pricing import devices_of, load_pricing
from ledger.errors import BadInput
from schemas import Receipt
from schemas.receipt import (
    Hardware,
    Launcher,
    Parallelism,
    QualityGate,
    Stack,
    Summary,
    Task,
    Workload,
)
from schemas.tables import EVALS, EVENTS, STEPS, TELEMETRY


def steps() -> pa.Table:
    rows = [{"receipt_id": A1, "rank": 0, "step": s, "time": T0 + 3 + s, "step_time_s": 0.8, "tokens": s * 100}
            for s in range(1, 7)]
    rows += [{"receipt_id": A2, "rank": 0, "step": s, "time": T0 + 11 + s, "step_time_s": 0.8, "tokens": s * 100}
             for s in range(5, 9)]
    return table(STEPS, rows)


def evals(extra: list[dict[str, Any]] | None = None) -> pa.Table:
    rows = [(A1, 3, 6.1, 4.0), (A1, 6, 9.1, 3.8), (A2, 6, 17.1, 3.8), (A2, 8, 19.1, 3.4)]
    out = [{"receipt_id": r, "rank": 0, "step": s, "time": T0 + t, "tokens": s * 100, "split": "val",
            "source": None, "metric": "loss", "value": v} for r, s, t, v in rows]
    out += [{"receipt_id": A2, "rank": 0, "step": 8, "time": T0 + 19.1, "tokens": 800, "split": "val",
             "source": "rare", "metric": "loss", "value": 5.0}]
    return table(EVALS, out + (extra or []))


def telemetry(a2: bool = True) -> pa.Table:
    rows = [(A1, 0, 100.0), (A1, 5, 600.0), (A1, 10, 1100.0)]
    if a2:
        rows += [(A2, 12, 2000.0), (A2, 19, 2700.0), (A2, 25, 3300.0)]
    return table(TELEMETRY, [{"receipt_id": r, "rank": -1, "time": T0 + t, "node": "n1", "device": "gpu0",
                              "energy_j": e, "power_w": None} for r, t, e in rows])


def run(**extra: Any) -> tuple[list[Receipt], Any]:
    attempts = [receipt(A1, 1, 0, 10, "failed", **extra), receipt(A2, 2, 12, 25, **extra)]
    return attempts, compute(attempts, steps(), table(EVENTS, []))


def test_first_eval_meeting_the_gate_and_the_interpolated_crossing() -> None:
    attempts, good = run()
    r = gate_result(attempts, good, evals(), telemetry(), GATE, load_pricing(per_device_hour=3.6))
    assert r.reached and r.step == 8 and r.attempt == 2 and r.value == 3.4 and r.tokens == 800
    assert r.cost.wall_s == pytest.approx(19.1)  # run start to the eval, downtime included
    # devices held: attempt 1 for 10 s, attempt 2 from 12 to 19.1 s; downtime holds none
    assert r.cost.device_hours == pytest.approx((10 + 7.1) / 3600)
    assert r.cost.money == pytest.approx((10 + 7.1) / 3600 * 3.6) and r.cost.currency == "USD"
    # interpolation between the evals at steps 6 (3.8) and 8 (3.4): (3.5 - 3.8) / (3.4 - 3.8) = 0.75
    # -> step 7.5; steps 7 and 8 ended at 18 and 19 -> 18.5 s
    i = r.interpolated
    assert i is not None and i.between_steps == (6, 8)
    assert i.step == pytest.approx(7.5) and i.wall_s == pytest.approx(18.5)
    assert i.device_hours == pytest.approx((10 + 6.5) / 3600)
    assert "linear in step" in i.method
    # energy from the counters, cut at the gate: 1000 J (attempt 1) + 700 J (attempt 2 to 19 s)
    assert r.cost.energy_j == pytest.approx(1700.0) and r.cost.energy_method == "counter"
    assert r.display("wall_s") == "19.1 s"


def test_the_first_eval_in_time_counts_even_in_a_lost_stretch() -> None:
    # attempt 1's eval at step 6 met 3.85, though attempt 2 computed step 6 again (MLPerf: first eval)
    attempts, good = run()
    gate = GATE.model_copy(update={"threshold": 3.85})
    r = gate_result(attempts, good, evals(), telemetry(), gate)
    assert r.reached and r.attempt == 1 and r.step == 6 and r.cost.wall_s == pytest.approx(9.1)
    assert r.cost.money is None  # no price given
    # ... and says that model state was lost: on surviving progress it was met at 17.1 s (step 6 again)
    assert r.surviving_wall_s == pytest.approx(17.1)
    assert any("computed again after a restart" in n for n in r.notes)
    assert gate_result(attempts, good, evals(), telemetry(), GATE).surviving_wall_s is None


def test_never_reached_is_censored_at_the_total_cost() -> None:
    attempts, good = run()
    gate = GATE.model_copy(update={"threshold": 3.0})
    r = gate_result(attempts, good, evals(), telemetry(), gate, load_pricing(per_device_hour=3.6))
    assert not r.reached and r.censored and r.value == 3.4 and r.evals == 4
    assert r.cost.wall_s == pytest.approx(25.0)
    assert r.cost.device_hours == pytest.approx(23 / 3600)
    assert r.cost.energy_j == pytest.approx(1000 + 1300)
    assert r.display("wall_s") == "not reached (>= 25 s)"
    assert r.display("money").startswith("not reached (>= 0.023")


def test_energy_is_not_measured_when_an_attempt_has_no_counters() -> None:
    attempts, good = run()
    r = gate_result(attempts, good, evals(), telemetry(a2=False), GATE)
    assert r.cost.energy_j is None and r.cost.energy_method == "not measured"
    assert r.display("energy_j") == "not measured"
    none = gate_result(attempts, good, evals(), None, GATE)
    assert none.cost.energy_j is None and none.cost.energy_method == "not measured"


def test_a_gate_on_a_series_the_run_never_logged_names_what_exists() -> None:
    attempts, good = run()
    with pytest.raises(BadInput, match=r"never logged .*val/all/accuracy.*it logged: val/all/loss, val/rare/loss"):
        gate_result(attempts, good, evals(), None, parse_gate("val/accuracy>=0.5"))
    # no evals at all (a crash before the first): censored, not an error
    r = gate_result(attempts, good, table(EVALS, []), None, GATE)
    assert not r.reached and "no evals logged" in r.notes


def test_per_source_gate() -> None:
    attempts, good = run()
    rare = parse_gate("val/rare/loss<=5.5")
    assert (rare.split, rare.source, rare.metric, rare.direction) == ("val", "rare", "loss", "min")
    r = gate_result(attempts, good, evals(), None, rare)
    assert r.reached and r.cost.wall_s == pytest.approx(19.1) and r.interpolated is None


def test_mlperf_style_import_is_measured_from_run_start() -> None:
    # an imported result: init_start at 0 (the receipt's start), run_start at 10, evals of eval_accuracy
    # whose "step" counts samples (1536, 3072) while the training steps count iterations (1..100), and its
    # own time to train (run_stop - run_start) of 90.5 s
    gate = QualityGate(name="target", metric="eval_accuracy", threshold=0.925, direction="min", split="eval")
    r1 = Receipt(id=A1, run_uuid="x", status="imported", started_at=datetime.fromtimestamp(T0, UTC),
                 ended_at=datetime.fromtimestamp(T0 + 100.5, UTC),
                 workload=Workload(task=Task(quality_gates=(gate,))), summary=Summary(time_to_train_s=90.5))
    events = table(EVENTS, [{"receipt_id": A1, "rank": 0, "time": T0 + t, "kind": k}
                            for t, k in ((0.0, "init_start"), (9.0, "init_stop"), (10.0, "run_start"),
                                         (100.5, "run_stop"))])
    iterations = table(STEPS, [{"receipt_id": A1, "rank": 0, "step": i, "time": T0 + 10 + 0.9 * i,
                                "step_time_s": 0.85} for i in range(1, 101)])
    good = compute([r1], iterations, events)
    assert good.run_start == pytest.approx(T0 + 10.0)
    points = ((1536, 80.0, 0.93), (3072, 100.0, 0.92))
    ev = table(EVALS, [{"receipt_id": A1, "rank": 0, "step": s, "time": T0 + t, "split": "eval",
                        "metric": "eval_accuracy", "value": v} for s, t, v in points])
    r = gate_result([r1], good, ev, None, gate)
    assert r.reached and r.step == 3072 and r.time_to_train_s == 90.5
    assert r.cost.wall_s == pytest.approx(90.0)  # from run_start to the eval, as MLPerf times it
    assert any("run_start" in n for n in r.notes)
    # eval steps are samples, not iterations: interpolated in time between the evals (80 s and 100 s)
    assert r.interpolated is not None and r.interpolated.wall_s == pytest.approx(80.0)
    assert "and time" in r.interpolated.method
    # the run's own total cost still spans the whole launch (init included)
    assert run_cost([r1], good, None, None).total.wall_s == pytest.approx(100.5)


def test_run_cost_per_useful_checkpoint() -> None:
    attempts, _ = run()
    events = table(EVENTS, [
        {"receipt_id": A1, "rank": 0, "time": T0 + 7.2, "kind": "checkpoint_save_end", "step": 4},
        {"receipt_id": A1, "rank": 0, "time": T0 + 9.2, "kind": "checkpoint_save_end", "step": 6},  # redone
        {"receipt_id": A2, "rank": 0, "time": T0 + 19.5, "kind": "checkpoint_save_end", "step": 8},
    ])
    good = compute(attempts, steps(), events)
    cost = run_cost(attempts, good, telemetry(), load_pricing(per_device_hour=3.6))
    assert (cost.checkpoints_saved, cost.checkpoints_useful) == (3, 2)
    per = cost.per_useful_checkpoint()
    assert per is not None and per.wall_s == pytest.approx(12.5) and per.energy_j == pytest.approx(1150.0)
    assert per.money == pytest.approx(23 / 3600 * 3.6 / 2)


def test_devices_and_models() -> None:
    gpu = receipt(A1, 1, 0, 1, stack=Stack(hardware=Hardware(gpu_model="NVIDIA H200", gpu_count=8),
                                           launcher=Launcher(nodes=2)),
                  workload=Workload(task=TASK, device="cuda"))
    assert devices_of(gpu) == (16, "NVIDIA H200")
    ranks = receipt(A1, 1, 0, 1, workload=Workload(task=TASK, device="cuda", parallelism=Parallelism(world_size=4)),
                    stack=Stack(hardware=Hardware(gpu_model="NVIDIA H200", gpu_count=8)))
    assert devices_of(ranks) == (4, "NVIDIA H200")
    cpu = receipt(A1, 1, 0, 1, workload=Workload(task=TASK, device="cpu"),
                  stack=Stack(hardware=Hardware(gpu_model="NVIDIA H200", gpu_count=8)))
    assert devices_of(cpu) == (1, "cpu")


def test_pricing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "ledger.toml"
    f.write_text('currency = "EUR"\n[prices]\n"NVIDIA H200" = 3.5\ncpu = 0.05\n')
    p = load_pricing(f)
    assert p is not None and p.currency == "EUR"
    assert (p.price("NVIDIA H200"), p.price("cpu"), p.price("NVIDIA A100")) == (3.5, 0.05, None)
    f.write_text('[prices]\ndefault = 2\n')
    assert load_pricing(f).price("anything") == 2.0  # type: ignore[union-attr]
    assert load_pricing(f, per_device_hour=1.5).price("x") == 1.5  # type: ignore[union-attr]
    for text, message in (("[prices]\nx = -1\n", "must be a number >= 0"), ("x = 1\n", "expected a \\[prices\\]"),
                          ("[prices\n", "not valid TOML")):
        f.write_text(text)
        with pytest.raises(BadInput, match=message):
            load_pricing(f)
    with pytest.raises(BadInput, match="no such file"):
        load_pricing(tmp_path / "missing.toml")
    with pytest.raises(BadInput, match=">= 0"):
        load_pricing(per_device_hour=-1.0)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ledger.toml").write_text('[prices]\ncpu = 0.1\n')
    assert load_pricing().price("cpu") == 0.1  # type: ignore[union-attr]
    (tmp_path / "ledger.toml").unlink()
    assert load_pricing() is None


def test_gate_selection_and_specs() -> None:
    assert select_gates(TASK, None) == [GATE]
    assert select_gates(TASK, "val-loss") == [GATE]
    g = select_gates(TASK, "eval_accuracy >= 0.9")[0]
    assert (g.metric, g.split, g.source, g.direction, g.threshold) == ("eval_accuracy", None, None, "max", 0.9)
    assert parse_gate("val/all/loss<=2").source is None
    with pytest.raises(BadInput, match="no quality gate named 'nope'; the task declares: val-loss"):
        select_gates(TASK, "nope")
    with pytest.raises(BadInput, match="declares no quality gates"):
        select_gates(Task(), None)
    with pytest.raises(BadInput, match="split/"):
        parse_gate("a/b/c/d<=1")


def _result(cost: float, reached: bool, energy: float | None = 1.0) -> GateResult:
    return GateResult(run_id="r", name=None, gate=GATE, reached=reached,
                      cost=Cost(wall_s=cost, device_hours=cost / 3600, energy_j=energy,
                                energy_method="counter" if energy is not None else "not measured",
                                money=None, currency=None))


def test_group_summary_keeps_censored_runs() -> None:
    results = [_result(3, True), _result(1, True), _result(5, False), _result(2, False), _result(4, True)]
    s = summarise(GATE, results)
    assert s.n == 5 and s.reached == 3 and s.fraction_reached == pytest.approx(0.6)
    assert s.median("wall_s") == 4.0  # the Kaplan-Meier example of test_km.py
    assert s.median("device_hours") == pytest.approx(4 / 3600)
    assert s.median("money") is None and s.median_display("money") == "-"
    assert s.median_display("wall_s") == "4 s"
    d = s.to_dict()
    assert d["fraction_reached"] == pytest.approx(0.6) and len(d["results"]) == 5
    assert sum(1 for r in d["results"] if r["censored"]) == 2
    mostly = summarise(GATE, [_result(1, True), _result(5, False), _result(6, False, energy=None)])
    assert mostly.median("wall_s") is None
    assert mostly.median_display("wall_s") == "not reached by half the runs (> 6 s)"
    assert mostly.median_display("energy_j") == "not measured"
