"""Cost to a quality gate, the parts the other gate tests leave loose, each value by hand: every key of the JSON
results, the text figures at their unit boundaries, energy integrated from power, interpolation between evals
at the same step, the notes of censored and lost-state results, and the index-backed reports (`ledger gate`
and `ledger gate --group`) on a real ledger of imported receipts (found by mutation testing, issue 23)."""

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

from ledger.analyses.gates import (
    Cost,
    GateResult,
    RunCost,
    gate_report,
    gate_result,
    group_report,
    human,
    summarise,
)
from ledger.analyses.goodput import compute
from ledger.analyses.pricing import Pricing, load_pricing
from ledger.errors import BadInput
from ledger.store.receipts import Ledger
from schemas import Receipt
from schemas.receipt import Task, Workload
from schemas.tables import EVALS, EVENTS, STEPS, TELEMETRY


def steps(rows: list[tuple[str, int, float]], dt: float, rid: bool = True) -> pa.Table:
    return table(STEPS, [{"receipt_id": r, "rank": 0, "step": s, "time": T0 + t, "step_time_s": dt,
                          "tokens": s * 10} for r, s, t in rows], rid)


def evals(rows: list[tuple[str, int, float | None, float | None]], rid: bool = True) -> pa.Table:
    return table(EVALS, [{"receipt_id": r, "rank": 0, "step": s, "time": None if t is None else T0 + t,
                          "tokens": s * 10, "split": "val", "metric": "loss", "value": v} for r, s, t, v in rows], rid)


# ----------------------------------------------------------------------------------------------- text
@pytest.mark.parametrize(("what", "value", "currency", "text"), [
    ("wall_s", 119.0, None, "119 s"),
    ("wall_s", 120.0, None, "2.0 min"),
    ("wall_s", 7199.0, None, "120.0 min"),
    ("wall_s", 7200.0, None, "2.00 h"),
    ("device_hours", 0.25, None, "0.25 device-h"),
    ("energy_j", 3_599_999.0, None, "3.6e+06 J"),
    ("energy_j", 3_600_000.0, None, "1 kWh"),
    ("energy_j", None, None, "not measured"),
    ("money", 1.0, None, "1.00"),
    ("money", 1234.5, "EUR", "1,234.50 EUR"),
    ("money", 0.999, "EUR", "0.999 EUR"),
    ("money", None, "EUR", "-"),
    ("steps", 1.23456, None, "1.235"),
])
def test_human_figures_at_their_unit_boundaries(what: str, value: float | None, currency: str | None,
                                                text: str) -> None:
    assert human(what, value, currency) == text


# --------------------------------------------------------------------------------------- one run, by hand
def one_attempt(end: float = 10.0) -> tuple[list[Receipt], Any]:
    r = receipt(A1, 1, 0, end)
    return [r], compute([r], steps([(A1, s, 2.0 * s) for s in range(1, 5)], 2.0), table(EVENTS, []))


def test_energy_from_power_samples_is_the_power_integral() -> None:
    attempts, good = one_attempt()
    power = table(TELEMETRY, [{"receipt_id": A1, "rank": -1, "time": T0 + t, "node": "n1", "device": "gpu0",
                               "power_w": 100.0} for t in (0.0, 4.0, 10.0)])
    r = gate_result(attempts, good, evals([(A1, 2, 4.5, 3.8), (A1, 4, 8.5, 3.4)]), power, GATE)
    # samples to the gate's 8.5 s: 0 and 4 s at 100 W -> 400 J by trapezoids
    assert r.cost.energy_j == pytest.approx(400.0) and r.cost.energy_method == "power-integral"


def test_interpolation_starts_from_an_earlier_step_not_an_earlier_eval_at_the_same_step() -> None:
    attempts, good = one_attempt()
    # evals: step 2 at 4.5 s (3.9), step 4 at 5.1 s (3.85), step 4 again at 8.1 s (3.7) meeting 3.8
    got = gate_result(attempts, good, evals([(A1, 2, 4.5, 3.9), (A1, 4, 5.1, 3.85), (A1, 4, 8.1, 3.7)]), None,
                      GATE.model_copy(update={"threshold": 3.8}))
    assert got.reached and got.step == 4 and got.cost.wall_s == pytest.approx(8.1)
    # from step 2 (3.9) to step 4 (3.7): (3.8 - 3.9) / (3.7 - 3.9) = 0.5 -> step 3, which ended at 6 s
    assert got.interpolated is not None and got.interpolated.between_steps == (2, 4)
    assert got.interpolated.step == pytest.approx(3.0) and got.interpolated.wall_s == pytest.approx(6.0)


def test_censored_results_keep_their_notes_and_have_no_best_value_without_finite_evals() -> None:
    attempts, good = one_attempt()
    nan = gate_result(attempts, good, evals([(A1, 2, 4.5, None), (A1, 4, None, None)]), None, GATE)
    assert nan.reached is False and nan.value is None and nan.evals == 2
    assert nan.notes == ("1 evals carry no time and were left out",)
    # the best value logged, timed or not
    best = gate_result(attempts, good, evals([(A1, 2, 4.5, 3.9), (A1, 4, None, 3.6)]), None, GATE)
    assert best.reached is False and best.value == 3.6
    none = gate_result(attempts, good, table(EVALS, []), None, GATE)
    assert none.reached is False and none.evals == 0 and none.notes == ("no evals logged",)
    assert none.cost.wall_s == pytest.approx(10.0)


def restarted() -> tuple[list[Receipt], Any]:
    """Attempt 1 [0, 0.5]: steps 1-3 end at 0.1, 0.2, 0.3; attempt 2 [0.6, 1.0] computes steps 2-3 again,
    ending at 0.7 and 0.8."""
    attempts = [receipt(A1, 1, 0.0, 0.5), receipt(A2, 2, 0.6, 1.0)]
    rows = [(A1, 1, 0.1), (A1, 2, 0.2), (A1, 3, 0.3), (A2, 2, 0.7), (A2, 3, 0.8)]
    return attempts, compute(attempts, steps(rows, 0.1), table(EVENTS, []))


def test_a_gate_met_on_lost_progress_says_when_it_was_met_on_surviving_progress() -> None:
    attempts, good = restarted()
    ev = evals([(A1, 3, 0.31, 3.4), (A2, 3, 0.81, 3.45)])
    got = gate_result(attempts, good, ev, None, GATE)
    assert got.reached and got.attempt == 1 and got.cost.wall_s == pytest.approx(0.31)
    # the eval at 0.81 s saw step 3's surviving computation (0.8 s): less than a second, not rounded up
    assert got.surviving_wall_s == pytest.approx(0.81)
    assert got.notes == ("the first eval meeting it (step 3) lies in a stretch computed again after a restart: "
                         "that model state was lost; on surviving progress the gate was first met after 0.81 s "
                         "(step 3)",)
    lost_only = gate_result(attempts, good, evals([(A1, 3, 0.31, 3.4), (A2, 3, 0.81, 3.6)]), None, GATE)
    assert lost_only.surviving_wall_s is None
    assert lost_only.notes == ("the first eval meeting it (step 3) lies in a stretch computed again after a "
                               "restart: that model state was lost; no eval on surviving progress met it",)


# ------------------------------------------------------------------------------------------- JSON keys
def test_every_key_of_a_result_and_of_a_run_cost() -> None:
    attempts, good = one_attempt()
    r = gate_result(attempts, good, evals([(A1, 2, 4.5, 3.8), (A1, 4, 8.5, 3.4)]), None, GATE,
                    load_pricing(per_device_hour=3.6))
    d = r.to_dict()
    assert d["cost"] == {"wall_s": pytest.approx(8.5), "device_hours": pytest.approx(8.5 / 3600),
                         "energy_j": None, "energy_method": "not measured", "money": pytest.approx(0.0085),
                         "currency": "USD"}
    # 0.75 of the way from step 2 to step 4: step 3.5, between the ends of steps 3 (6 s) and 4 (8 s)
    assert d["interpolated"] == {"step": pytest.approx(3.5), "wall_s": pytest.approx(7.0),
                                 "device_hours": pytest.approx(7.0 / 3600), "money": pytest.approx(0.007),
                                 "between_steps": [2, 4], "method": r.interpolated.method}  # type: ignore[union-attr]
    assert {k: v for k, v in d.items() if k not in ("cost", "interpolated")} == {
        "run_id": A1, "name": "hand", "gate": "val-loss", "gate_definition": "val/all/loss <= 3.5",
        "reached": True, "censored": False, "step": 4, "tokens": 40, "value": 3.4, "attempt": 1, "evals": 2,
        "time_to_train_s": None, "surviving_wall_s": None, "notes": []}
    cost = RunCost("run", Cost(10.0, 0.02, 100.0, "counter", 4.0, "EUR"), 3, 2)
    per = {"wall_s": 5.0, "device_hours": 0.01, "energy_j": 50.0, "energy_method": "counter", "money": 2.0,
           "currency": "EUR"}
    assert cost.to_dict() == {"run_id": "run", "total": {**per, "wall_s": 10.0, "device_hours": 0.02,
                                                         "energy_j": 100.0, "money": 4.0},
                              "checkpoints_saved": 3, "checkpoints_useful": 2, "per_useful_checkpoint": per}
    assert RunCost("run", Cost(10.0, 0.02, None, "not measured", None, None), 1, 0).to_dict()[
        "per_useful_checkpoint"] is None


def _result(cost: float, reached: bool) -> GateResult:
    return GateResult(run_id="r", name=None, gate=GATE, reached=reached,
                      cost=Cost(wall_s=cost, device_hours=cost / 3600, energy_j=None, energy_method="not measured",
                                money=cost / 1000, currency="EUR"))


def test_every_key_of_a_group_summary() -> None:
    s = summarise(GATE, [_result(3.0, True), _result(12.0, False), _result(8.5, True)])
    # Kaplan-Meier by hand: 3 s: 3 at risk, 1 event -> 2/3; 8.5 s: 2 at risk, 1 event -> 1/3 (the median)
    assert s.median_display("money") == "0.0085 EUR" and s.median_display("energy_j") == "not measured"
    d = s.to_dict()
    assert d["median"] == {"wall_s": 8.5, "device_hours": pytest.approx(8.5 / 3600), "energy_j": None,
                           "money": pytest.approx(0.0085)}
    assert d["median_method"] == ("Kaplan-Meier; runs that never reached the gate are right-censored at their "
                                  "total cost; median = smallest cost with S <= 0.5 (null when S stays above 0.5)")
    assert d["kaplan_meier"]["energy_j"] is None
    assert d["kaplan_meier"]["wall_s"] == [
        {"cost": 3.0, "at_risk": 3, "events": 1, "survival": pytest.approx(2 / 3)},
        {"cost": 8.5, "at_risk": 2, "events": 1, "survival": pytest.approx(1 / 3)}]
    assert (d["gate"], d["gate_definition"], d["runs"], d["reached"]) == ("val-loss", "val/all/loss <= 3.5", 3, 2)
    assert d["fraction_reached"] == pytest.approx(2 / 3) and len(d["results"]) == 3


# ------------------------------------------------------------------------------ reports from a real ledger
def publish(ledger: Ledger, name: str, start: float, end: float, step_ends: list[float],
            ev: list[tuple[int, float, float]], energy: list[tuple[float, float]], tags: dict[str, str],
            task: Task = TASK) -> str:
    from ledger.ingest.common import Evidence, publish_evidence

    tables = {
        "steps": steps([("", i + 1, t) for i, t in enumerate(step_ends)], 2.0, rid=False),
        "evals": evals([("", s, t, v) for s, t, v in ev], rid=False),
        "telemetry": table(TELEMETRY, [{"rank": -1, "time": T0 + t, "node": "n1", "device": "gpu0", "energy_j": e}
                                       for t, e in energy], rid=False),
    }
    evidence = Evidence(kind="hand", path=Path(f"{name}.json"), sha256="0" * 64, tables=tables,
                        workload=Workload(task=task), started_at=datetime.fromtimestamp(T0 + start, UTC),
                        ended_at=datetime.fromtimestamp(T0 + end, UTC))
    return publish_evidence(ledger, evidence, name, tags).id


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    """Three runs tagged sweep=g (steps of 2 s; evals of val loss; energy counters of 100 J/s):

    - r1 [0, 10]: evals 3.8 at 4.5 s, 3.4 at 8.5 s -> reached at 8.5 s (500 J by then: the counter at 5 s)
    - r2 [100, 112]: evals 3.9, 3.7 -> censored at its total, 12 s (1200 J)
    - r3 [200, 206]: eval 3.2 at 3 s -> reached at 3 s (200 J by then)

    and r4, tagged like r1 with mixed=m, training another task; r3 alone is also tagged solo=s."""
    led = Ledger(tmp_path_factory.mktemp("gates") / "receipts")
    publish(led, "r1", 0, 10, [2, 4, 6, 8], [(2, 4.5, 3.8), (4, 8.5, 3.4)], [(0, 0), (5, 500), (10, 1000)],
            {"sweep": "g", "mixed": "m"})
    publish(led, "r2", 100, 112, [102, 104, 106, 108, 110], [(2, 104.5, 3.9), (4, 108.5, 3.7)],
            [(100, 0), (112, 1200)], {"sweep": "g"})
    publish(led, "r3", 200, 206, [202, 204], [(1, 203, 3.2)], [(200, 0), (202, 200), (206, 600)],
            {"sweep": "g", "solo": "s"})
    publish(led, "r4", 300, 306, [302, 304], [(1, 303, 3.2)], [(300, 0), (306, 600)], {"mixed": "m"},
            task=Task(dataset="other", quality_gates=(GATE,)))
    return led


def test_gate_report_of_one_run_from_the_index(ledger: Ledger) -> None:
    run = gate_report(ledger, "r1", pricing=load_pricing(per_device_hour=3.6))
    (r,) = run.results
    assert r.reached and r.step == 4 and r.cost.wall_s == pytest.approx(8.5)
    assert r.cost.energy_j == pytest.approx(500.0) and r.cost.money == pytest.approx(0.0085)
    assert run.cost.total.wall_s == pytest.approx(10.0) and run.cost.total.energy_j == pytest.approx(1000.0)
    assert run.notes == []
    assert len(run.good.bin_edges_s) == 2  # gates never draw the timeline: the run's goodput has one bin
    d = run.to_dict()
    assert (d["run_id"], d["name"], d["attempts"], d["notes"]) == (run.good.run_id, "r1", 1, [])
    assert d["gates"] == [r.to_dict()] and d["run_cost"] == run.cost.to_dict() and run.to_json() == d
    assert gate_report(ledger, "r1").notes == [
        "no price per device-hour (--price-per-device-hour or ledger.toml): no money figures"]
    other = Pricing({"NVIDIA H200": 2.0}, source="prices.toml")
    assert gate_report(ledger, "r1", pricing=other).notes == ["no price for cpu in prices.toml: no money figures"]
    by_model = gate_report(ledger, "r1", pricing=Pricing({"cpu": 3.6, "NVIDIA H200": 2.0}, source="prices.toml"))
    assert by_model.results[0].cost.money == pytest.approx(0.0085) and by_model.notes == []
    with pytest.raises(BadInput, match="no quality gate named 'nope'"):
        gate_report(ledger, "r1", spec="nope")


def test_group_report_keeps_the_censored_run(ledger: Ledger) -> None:
    group = group_report(ledger, "sweep=g", pricing=load_pricing(per_device_hour=3.6))
    assert [r.good.name for r in group.runs] == ["r1", "r2", "r3"]
    assert [(r.results[0].reached, r.results[0].cost.wall_s) for r in group.runs] == [
        (True, pytest.approx(8.5)), (False, pytest.approx(12.0)), (True, pytest.approx(3.0))]
    assert [r.results[0].cost.energy_j for r in group.runs] == [pytest.approx(500.0), pytest.approx(1200.0),
                                                                pytest.approx(200.0)]
    (s,) = group.summaries
    # wall: 3 s (3 at risk) -> 2/3, 8.5 s (2 at risk) -> 1/3: median 8.5 s; energy the same order: 500 J
    assert s.n == 3 and s.reached == 2
    assert s.median("wall_s") == pytest.approx(8.5) and s.median("energy_j") == pytest.approx(500.0)
    assert s.median("money") == pytest.approx(0.0085)
    d = group.to_dict()
    assert d["group"] == "sweep=g" and [r["name"] for r in d["runs"]] == ["r1", "r2", "r3"]
    assert d["summaries"] == [s.to_dict()] and group.to_json() == d
    spec = group_report(ledger, "sweep=g", spec="val/loss<=3.75")
    assert [r.results[0].reached for r in spec.runs] == [True, True, True]
    assert spec.runs[1].results[0].cost.wall_s == pytest.approx(8.5)  # r2's 3.7 at 108.5 s
    solo = group_report(ledger, "solo=s")
    assert [r.good.name for r in solo.runs] == ["r3"] and solo.summaries[0].median("wall_s") == pytest.approx(3.0)
    with pytest.raises(BadInput, match=r"runs of group mixed=m train different tasks \(r1 and r4\): their gates "
                                       r"are not comparable; tag them apart"):
        group_report(ledger, "mixed=m")


# ------------------------------------------------------------------------- boundaries left by the second round
def test_an_eval_within_the_tolerance_of_its_steps_end_saw_the_surviving_state() -> None:
    from ledger.analyses.gates import _recomputed_later

    _, good = restarted()  # step 3's surviving computation ended at 0.8 s (attempt 2)
    # 0.5 ms before that end: within the 1 ms tolerance, so not a lost state; 2 ms before: lost
    assert _recomputed_later(good, 3.0, T0 + 0.7995) is False
    assert _recomputed_later(good, 3.0, T0 + 0.798) is True


def test_an_eval_exactly_at_its_steps_end_or_at_the_next_steps_end_follows_the_step() -> None:
    from ledger.analyses.gates import _eval_follows_step

    _, good = one_attempt()  # steps 1-4 end at 2, 4, 6, 8 s
    ends = [float(t) for t in good.surviving_times]
    assert [e - T0 for e in ends] == pytest.approx([2.0, 4.0, 6.0, 8.0])
    # with no tolerance, both limits are inclusive: at step 2's own end, and at step 3's end
    assert _eval_follows_step(good, 2.0, ends[1], tolerance=0.0) is True
    assert _eval_follows_step(good, 2.0, ends[2], tolerance=0.0) is True
    assert _eval_follows_step(good, 2.0, ends[2] + 0.01, tolerance=0.0) is False


def test_an_unnamed_run_that_never_logged_the_gates_series_is_named_by_twelve_characters_of_its_id() -> None:
    r = receipt(A1, 1, 0, 10.0).model_copy(update={"name": None})
    good = compute([r], steps([(A1, s, 2.0 * s) for s in range(1, 5)], 2.0), table(EVENTS, []))
    other = table(EVALS, [{"receipt_id": A1, "rank": 0, "step": 2, "time": T0 + 4.5, "tokens": 20,
                           "split": "val", "metric": "accuracy", "value": 0.5}])
    with pytest.raises(BadInput) as exc:
        gate_result([r], good, other, None, GATE)
    assert str(exc.value).startswith(f"run {'a' * 12} never logged the eval series of gate 'val-loss' ")
