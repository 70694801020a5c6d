"""Goodput and badput buckets on hand-built tables, with hand-computed answers.

The scenario (seconds from the first attempt's start; every step takes 0.8 s and ends on the second):

    attempt 1 [0, 10]  failed:    init 0.5..3; steps 1-6 end at 4..9; eval 6.0..6.2 (after step 3);
                                  save at step 4 7.0..7.2; failure at 9.5
    downtime  [10, 12]
    attempt 2 [12, 25] succeeded: init 12.5..15 with restore 14..15 (from step 4); steps 5-8 end at
                                  16..19; save at step 8 19.0..19.5

    productive  4 x 0.8 (steps 1-4, attempt 1) + 4 x 0.8 (steps 5-8, attempt 2)   = 6.4
    lost        steps 5 and 6 of attempt 1                                       = 1.6
    downtime                                                                     = 2.0
    start-up    3.0 (attempt 1) + 3.0 - 1.0 restore (attempt 2)                  = 5.0
    restore 1.0, save 0.2 + 0.5 = 0.7, eval 0.2, other: the rest                 = 8.1
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hand_runs import A1, A2, T0, TASK, ev, receipt, scenario_events, table

from ledger.analyses.goodput import BUCKETS, compute
from ledger.errors import BadInput
from ledger.report.goodput import timeline_svg
from schemas import Receipt
from schemas.receipt import Task
from schemas.tables import EVENTS, STEPS, TIMING

A3 = "c" * 64
def step_rows(rid: str, steps: range, first_end: float, dt: float = 0.8, tokens: int = 100,
              **extra: Any) -> list[dict[str, Any]]:
    return [
        {"receipt_id": rid, "rank": 0, "step": s, "time": T0 + first_end + i, "step_time_s": dt,
         "tokens": s * tokens, **extra}
        for i, s in enumerate(steps)
    ]


def scenario() -> tuple[list[Receipt], pa.Table, pa.Table]:
    attempts = [receipt(A1, 1, 0, 10, "failed"), receipt(A2, 2, 12, 25)]
    # attempt 1: step 3 ends at 6.0 (before the eval), step 4 at 7.0 (before the save), the others on the
    # second: 4, 5, 6, 7, 8, 9 -> steps 1..6; attempt 2: steps 5..8 end at 16..19
    steps = table(STEPS, step_rows(A1, range(1, 7), 4.0) + step_rows(A2, range(5, 9), 16.0))
    # step 4 ends at 7.0 and starts at 6.2 (after the eval); step 5 starts at 7.2 (after the save)
    return attempts, steps, table(EVENTS, scenario_events())


def test_buckets_hand_computed() -> None:
    attempts, steps, events = scenario()
    g = compute(attempts, steps, events)
    assert g.wall_s == pytest.approx(25.0)
    assert g.productive_s == pytest.approx(6.4)
    assert g.goodput == pytest.approx(6.4 / 25)
    expected = {"startup": 5.0, "data_loading": 0.0, "checkpoint_save": 0.7, "checkpoint_restore": 1.0,
                "progress_lost": 1.6, "downtime": 2.0, "eval": 0.2, "other": 8.1}
    assert list(g.buckets) == list(BUCKETS)
    assert g.buckets == pytest.approx(expected)
    assert g.productive_s + g.badput_s == pytest.approx(g.wall_s)
    assert g.steps_computed == 10 and g.steps_useful == 8 and g.steps_recomputed == 2
    assert (g.tokens_processed, g.tokens_useful, g.token_goodput) == (1000, 800, pytest.approx(0.8))
    assert g.checkpoints_saved == 2 and g.checkpoints_useful == 2
    assert [(a.attempt, a.steps_lost, a.first_step, a.last_step, a.restored_step) for a in g.attempts] == [
        (1, 2, 1, 6, None), (2, 0, 5, 8, 4)]
    assert g.run_id == A1 and g.problems == [] and g.notes == []
    # the surviving computations, by step, for interpolation
    assert g.surviving_steps.tolist() == list(range(1, 9))
    assert (g.surviving_times - T0).tolist() == pytest.approx([4, 5, 6, 7, 16, 17, 18, 19])


def test_attempt_order_in_the_tables_does_not_matter() -> None:
    attempts, steps, events = scenario()
    shuffled = steps.take(list(range(steps.num_rows))[::-1])
    g = compute(list(reversed(attempts)), shuffled, events)
    assert g.productive_s == pytest.approx(6.4) and g.buckets["progress_lost"] == pytest.approx(1.6)
    assert any("not in time order" in n for n in g.notes)  # rows were reversed within attempts: said so


def test_overlapping_work_goes_to_the_first_bucket_in_priority() -> None:
    attempts, steps, _ = scenario()
    # an asynchronous save from 15.5 to 16.5 overlaps step 5 [15.2, 16] and step 6 [16.2, 17]: only the
    # 0.2 s gap between them is save time; an eval inside the save counts as save
    events = table(EVENTS, [
        ev(A2, 12.5, "init_start"), ev(A2, 15.0, "init_end", 4),
        ev(A2, 15.5, "checkpoint_save_start", 5), ev(A2, 15.9, "eval_start", 5), ev(A2, 16.1, "eval_end", 5),
        ev(A2, 16.5, "checkpoint_save_end", 5),
    ])
    g = compute(attempts, steps, events)
    assert g.buckets["checkpoint_save"] == pytest.approx(0.2)
    assert g.buckets["eval"] == pytest.approx(0.0)
    assert g.productive_s + g.badput_s == pytest.approx(g.wall_s)


def test_data_loading_from_events_and_timing_phases() -> None:
    attempts, steps, events = scenario()
    extra = table(EVENTS, scenario_events() + [
        ev(A2, 19.8, "data_wait_start"), ev(A2, 20.3, "data_wait_end"),   # 0.5 s
        ev(A2, 21.0, "data_wait", detail={"seconds": 0.25}),                # 0.25 s
    ])
    timing = table(TIMING, [
        {"receipt_id": A2, "rank": 0, "step": 7, "phase": "data", "seconds": 0.1},
        {"receipt_id": A2, "rank": 0, "step": 7, "phase": "attention", "seconds": 0.3},
        {"receipt_id": A1, "rank": 0, "step": 5, "phase": "data", "seconds": 0.1},  # lost step: stays lost
    ])
    g = compute(attempts, steps, extra, timing)
    assert g.buckets["data_loading"] == pytest.approx(0.5 + 0.25 + 0.1)
    assert g.productive_s == pytest.approx(6.4 - 0.1)
    assert g.buckets["progress_lost"] == pytest.approx(1.6)
    assert g.productive_s + g.badput_s == pytest.approx(g.wall_s)


def test_steady_state_step_time_median_within_three_mad() -> None:
    # times 1.0 1.0 1.0 1.2 1.3 3.0 9.0: median 1.2; |x - 1.2| = .2 .2 .2 0 .1 1.8 7.8 -> MAD 0.2;
    # kept: x <= 1.2 + 0.6 = 1.8 -> 1.0 1.0 1.0 1.2 1.3 -> median 1.0
    times = [1.0, 1.0, 1.0, 1.2, 1.3, 3.0, 9.0]
    rows = [{"receipt_id": A1, "rank": 0, "step": i + 1, "time": T0 + 10.0 * (i + 1), "step_time_s": dt,
             "tokens": None} for i, dt in enumerate(times)]
    g = compute([receipt(A1, 1, 0, 100)], table(STEPS, rows), table(EVENTS, []))
    assert g.step_time_median_s == pytest.approx(1.2)
    assert g.step_time_mad_s == pytest.approx(0.2)
    assert g.steady_step_time_s == pytest.approx(1.0) and g.steady_steps == 5
    assert g.token_goodput is None and any("token" in n for n in g.notes)


def test_events_out_of_order_are_reported_not_reordered() -> None:
    attempts, steps, _ = scenario()
    events = table(EVENTS, scenario_events() + [
        ev(A2, 21.0, "eval_start", 8), ev(A2, 20.0, "eval_end", 8),   # end recorded after, but earlier
        ev(A2, 22.0, "checkpoint_save_end", 9),                       # an end without a start
    ])
    g = compute(attempts, steps, events)
    assert any("out of time order" in p and "eval_end" in p for p in g.problems)
    assert any("precedes its start" in p for p in g.problems)
    assert any("no matching start" in p for p in g.problems)
    assert g.buckets["eval"] == pytest.approx(0.2)  # the bad pair is left out, not swapped
    assert g.checkpoints_saved == 3  # the save end still says a checkpoint was written


def test_a_save_cut_short_by_the_crash_lasts_to_the_attempts_end() -> None:
    attempts, steps, _ = scenario()
    events = table(EVENTS, [ev(A1, 9.2, "checkpoint_save_start", 6), ev(A1, 9.3, "failure", 7)])
    g = compute(attempts, steps, events)
    assert g.buckets["checkpoint_save"] == pytest.approx(0.8)
    assert any("never ended" in n for n in g.notes)
    assert g.checkpoints_saved == 0


def test_a_checkpoint_whose_step_was_computed_again_is_not_useful() -> None:
    attempts, steps, _ = scenario()
    # attempt 1 also saved at step 6, but attempt 2 restored from step 4 and computed 5 and 6 again
    events = table(EVENTS, scenario_events() + [ev(A1, 9.1, "checkpoint_save_start", 6),
                                                 ev(A1, 9.2, "checkpoint_save_end", 6)])
    g = compute(attempts, steps, events)
    assert g.checkpoints_saved == 3 and g.checkpoints_useful == 2


def test_no_init_events_start_up_runs_to_the_first_step() -> None:
    g = compute([receipt(A1, 1, 0, 10)], table(STEPS, step_rows(A1, range(1, 4), 4.0)), table(EVENTS, []))
    assert g.buckets["startup"] == pytest.approx(3.2)  # to the start of step 1 (4.0 - 0.8)
    empty = compute([receipt(A1, 1, 0, 10)], table(STEPS, []), table(EVENTS, []))
    assert empty.buckets["startup"] == pytest.approx(10.0) and empty.goodput == 0.0


def test_higher_ranks_are_not_mistaken_for_recomputation() -> None:
    rows = step_rows(A1, range(1, 4), 4.0) + [dict(r, rank=1) for r in step_rows(A1, range(1, 4), 4.0)]
    g = compute([receipt(A1, 1, 0, 10)], table(STEPS, rows), table(EVENTS, []))
    assert g.steps_recomputed == 0 and g.productive_s == pytest.approx(2.4)
    assert any("higher ranks" in n for n in g.notes)


def test_sparse_logging_covers_the_unlogged_steps() -> None:
    rows = [{"receipt_id": A1, "rank": 0, "step": s, "time": T0 + s, "step_time_s": 0.9, "tokens": s * 10}
            for s in (10, 20, 30)]
    g = compute([receipt(A1, 1, 0, 40)], table(STEPS, rows), table(EVENTS, []))
    assert g.productive_s == pytest.approx(27.0)
    assert any("logged every 10 steps" in n for n in g.notes)
    assert g.steady_step_time_s == pytest.approx(0.9)


def test_bad_input_overlap_and_different_tasks() -> None:
    _, steps, events = scenario()
    with pytest.raises(BadInput, match="overlap in time"):
        compute([receipt(A1, 1, 0, 10), receipt(A2, 2, 9, 20)], steps, events)
    other = Task(dataset="another", quality_gates=TASK.quality_gates)
    with pytest.raises(BadInput, match="different task.*dataset"):
        compute([receipt(A1, 1, 0, 10), receipt(A2, 2, 12, 20, task=other)], steps, events)
    # an attempt that crashed before reporting its workload has no task: compatible
    g = compute([receipt(A1, 1, 0, 10, task=Task()), receipt(A2, 2, 12, 25)], steps, events)
    assert g.goodput == pytest.approx(6.4 / 25)


def test_timeline_svg_is_self_contained_and_well_formed() -> None:
    attempts, steps, events = scenario()
    g = compute(attempts, steps, events, bins=50)
    svg = timeline_svg(g, width=600)
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert "<script" not in svg and "href" not in svg and "<style" not in svg
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any("attempt 1" in t and "failed" in t for t in titles)
    assert any(t.startswith("checkpoint restore") for t in titles)
    assert any(t.startswith("downtime") for t in titles)
    assert any("lost (recomputed later)" in t for t in titles)
    assert "goodput 25.6%" in titles[0]
    # bins add up to the step time
    assert sum(g.bin_productive_s) == pytest.approx(6.4) and sum(g.bin_lost_s) == pytest.approx(1.6)
    # the legend wraps inside the picture: every entry starts within the width, and the height holds it
    texts = [t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and "%" in t.text]
    assert len(texts) == 1 + len(BUCKETS)
    assert all(float(t.get("x", 0)) + 6.5 * len(t.text or "") <= 600 for t in texts)
    assert max(float(t.get("y", 0)) for t in texts) < float(root.get("height", 0))


def test_a_run_resumed_from_outside_the_ledger_does_not_claim_the_start_up() -> None:
    # the only attempt starts at step 5001 (restored from a checkpoint the ledger never saw)
    rows = [{"receipt_id": A1, "rank": 0, "step": s, "time": T0 + 20.0 + (s - 5001), "step_time_s": 0.8,
             "tokens": s * 100} for s in range(5001, 5006)]
    g = compute([receipt(A1, 1, 0, 30)], table(STEPS, rows), table(EVENTS, []))
    assert g.productive_s == pytest.approx(4.0)
    assert g.buckets["startup"] == pytest.approx(19.2)


def test_mlperf_spellings_stop_closes_like_end() -> None:
    attempts, steps, _ = scenario()
    events = table(EVENTS, [ev(A1, 0.5, "init_start"), ev(A1, 3.0, "init_stop"),
                            ev(A1, 6.0, "eval_start", 3), ev(A1, 6.2, "eval_stop", 3)])
    g = compute(attempts[:1], steps.filter(pc.equal(steps.column("receipt_id"), A1)), events)
    assert g.buckets["startup"] == pytest.approx(3.0) and g.buckets["eval"] == pytest.approx(0.2)
