"""Goodput's remaining behaviour, each value by hand: every key of the JSON result, the timeline's segments and
bins, every note and problem word for word, data-loading phases (lowest rank, capped at the step), data_wait
details, the run_start event, dictionary-encoded tables with other receipts' rows, and step numbers far apart
(the sparse path of the step bookkeeping) (found by mutation testing, issue 23).

The scenario is test_goodput.py's (seconds from the first attempt's start; every step takes 0.8 s):

    attempt 1 [0, 10]  failed:    init 0.5..3; steps 1-6 end at 4..9; eval 6.0..6.2; save 7.0..7.2
    downtime  [10, 12]
    attempt 2 [12, 25] succeeded: init 12.5..15 with restore 14..15 (from step 4); steps 5-8 end at
                                  16..19; save 19.0..19.5
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hand_runs import A1, A2, T0, ev, receipt, scenario_events, table

from ledger.analyses.goodput import BUCKETS, Segment, compute
from ledger.errors import BadInput
from schemas import Receipt
from schemas.tables import EVENTS, STEPS, TIMING

OTHER = "f" * 64
def step(rid: str, s: int, t: float | None, dt: float | None = 0.8, rank: int = 0, **extra: Any) -> dict[str, Any]:
    return {"receipt_id": rid, "rank": rank, "step": s, "time": None if t is None else T0 + t, "step_time_s": dt,
            "tokens": s * 100, **extra}


def scenario_steps() -> list[dict[str, Any]]:
    return [step(A1, s, 3.0 + s) for s in range(1, 7)] + [step(A2, s, 11.0 + s) for s in range(5, 9)]


def attempts() -> list[Receipt]:
    return [receipt(A1, 1, 0, 10, "failed"), receipt(A2, 2, 12, 25)]


EXPECTED_BUCKETS = {"startup": 5.0, "data_loading": 0.0, "checkpoint_save": 0.7, "checkpoint_restore": 1.0,
                    "progress_lost": 1.6, "downtime": 2.0, "eval": 0.2, "other": 8.1}


# ---------------------------------------------------------------------------------------------- JSON
def test_every_key_of_the_json_result() -> None:
    g = compute(attempts(), table(STEPS, scenario_steps()), table(EVENTS, scenario_events()), bins=5)
    d = g.to_dict()
    assert d["badput_s"] == pytest.approx(EXPECTED_BUCKETS)
    assert d["badput_share"] == pytest.approx({k: v / 25 for k, v in EXPECTED_BUCKETS.items()})
    assert list(d["badput_s"]) == list(BUCKETS)
    rest = {k: v for k, v in d.items() if k not in ("badput_s", "badput_share", "attempts")}
    assert rest == {
        "run_id": A1, "name": "hand", "wall_s": pytest.approx(25.0), "productive_s": pytest.approx(6.4),
        "goodput": pytest.approx(0.256), "token_goodput": pytest.approx(0.8), "tokens_processed": 1000,
        "tokens_useful": 800, "steps_computed": 10, "steps_useful": 8, "steps_recomputed": 2,
        "step_time_median_s": pytest.approx(0.8), "step_time_mad_s": pytest.approx(0.0),
        "steady_step_time_s": pytest.approx(0.8), "steady_steps": 10, "checkpoints_saved": 2,
        "checkpoints_useful": 2, "run_start_s": None, "notes": [], "problems": []}
    assert d["attempts"] == [
        {"id": A1, "attempt": 1, "status": "failed", "start_s": 0.0, "end_s": pytest.approx(10.0),
         "duration_s": pytest.approx(10.0), "steps_computed": 6, "steps_lost": 2, "first_step": 1, "last_step": 6,
         "restored_step": None},
        {"id": A2, "attempt": 2, "status": "succeeded", "start_s": pytest.approx(12.0), "end_s": pytest.approx(25.0),
         "duration_s": pytest.approx(13.0), "steps_computed": 4, "steps_lost": 0, "first_step": 5, "last_step": 8,
         "restored_step": 4}]
    assert g.to_json() == d


def test_timeline_segments_and_bins() -> None:
    g = compute(attempts(), table(STEPS, scenario_steps()), table(EVENTS, scenario_events()), bins=5)
    # every stretch in a bucket but "other" (the background), adjacent ones of one bucket merged
    assert [(pytest.approx(s.start_s), pytest.approx(s.end_s), s.bucket) for s in g.segments] == [
        (0.0, 3.0, "startup"), (6.0, 6.2, "eval"), (7.0, 7.2, "checkpoint_save"), (10.0, 12.0, "downtime"),
        (12.0, 14.0, "startup"), (14.0, 15.0, "checkpoint_restore"), (19.0, 19.5, "checkpoint_save")]
    # bins of 5 s by each step's centre: steps 1, 2 (3.6, 4.6) | 3, 4 (5.6, 6.6) and lost 5, 6 (7.6, 8.6) |
    # none | attempt 2's four steps (15.6 .. 18.6) | none
    assert g.bin_edges_s == pytest.approx([0, 5, 10, 15, 20, 25])
    assert g.bin_productive_s == pytest.approx([1.6, 1.6, 0, 3.2, 0])
    assert g.bin_lost_s == pytest.approx([0, 1.6, 0, 0, 0])
    one = compute(attempts(), table(STEPS, scenario_steps()), table(EVENTS, scenario_events()), bins=1)
    assert one.bin_productive_s == pytest.approx([6.4]) and one.bin_lost_s == pytest.approx([1.6])
    # adjacent intervals of one bucket become one segment
    joined = compute([receipt(A1, 1, 0, 10)], table(STEPS, []), table(EVENTS, [
        ev(A1, 1.0, "eval_start"), ev(A1, 2.0, "eval_end"), ev(A1, 2.0, "eval_start"), ev(A1, 3.0, "eval_end")]))
    assert [s for s in joined.segments if s.bucket == "eval"] == [Segment(1.0, 3.0, "eval")]


def test_a_run_of_no_duration() -> None:
    g = compute([receipt(A1, 1, 5, 5)], table(STEPS, []), table(EVENTS, []), bins=4)
    assert g.wall_s == 0.0 and g.goodput is None and g.token_goodput is None
    assert g.shares() == {b: 0.0 for b in BUCKETS}
    assert g.bin_edges_s == pytest.approx([0, 0.25, 0.5, 0.75, 1.0]) and g.bin_productive_s == [0.0] * 4


# ----------------------------------------------------------------------------------------------- notes
def test_attempt_times_taken_from_the_rows_when_missing() -> None:
    rows = table(STEPS, [step(A1, 1, 2.0), step(A1, 2, 4.0)])
    events = table(EVENTS, [ev(A1, 1.0, "init_start")])
    g = compute([receipt(A1, 1, None, None)], rows, events)
    assert g.notes == ["attempt 1 has no start time: taken from its first/last timed row"]
    assert g.start == pytest.approx(T0 + 1.0) and g.wall_s == pytest.approx(3.0)
    late = compute([receipt(A1, 1, 0.0, None)], rows, events)
    assert late.notes == ["attempt 1 has no end time: taken from its first/last timed row"]
    assert late.wall_s == pytest.approx(4.0)
    with pytest.raises(BadInput, match=r"^attempt 1 \(aaaaaaaaaaaa\) has no start or end time and no timed rows$"):
        compute([receipt(A1, 1, None, 3.0)], table(STEPS, []), table(EVENTS, []))


def test_rows_left_out_or_reordered_are_each_noted() -> None:
    rows = [step(A1, 1, 1.0), step(A1, 3, 3.0), step(A1, 2, 2.0), step(A1, 4, None),
            step(A1, 1, 1.0, rank=1), step(A1, 2, 2.0, rank=1), step(OTHER, 9, 1.0)]
    g = compute([receipt(A1, 1, 0, 5)], table(STEPS, rows), table(EVENTS, []))
    assert g.notes == [
        "2 step rows of higher ranks ignored (the lowest rank's steps are read)",
        "1 step rows carry no time and are left out of the timeline",
        "step rows of attempt(s) 1 were not in time order; they are taken in time order",
    ]
    assert g.steps_computed == 3 and g.surviving_steps.tolist() == [1, 2, 3]
    assert (g.surviving_times - T0).tolist() == pytest.approx([1.0, 2.0, 3.0])


def test_missing_step_times_come_from_the_gaps() -> None:
    rows = [step(A1, 1, 2.0, None), step(A1, 2, 3.0, None), step(A1, 3, 5.0, None)]
    g = compute([receipt(A1, 1, 0, 6)], table(STEPS, rows), table(EVENTS, []))
    assert g.notes == ["3 step rows have no step_time_s: taken from the time since the previous row (1 with no "
                       "previous row count as 0 s)"]
    assert g.productive_s == pytest.approx(0 + 1 + 2)
    assert (g.step_time_median_s, g.step_time_mad_s, g.steady_step_time_s, g.steady_steps) == (None, None, None, 0)


def test_sparse_logging_note_says_the_typical_interval() -> None:
    rows = [step(A1, s, s / 10, 0.05) for s in (10, 20, 30, 40)]
    g = compute([receipt(A1, 1, 0, 5)], table(STEPS, rows), table(EVENTS, []))
    assert g.notes == ["steps are logged every 10 steps or so: a logged row stands for the steps since the "
                       "previous one, each taking the logged step's time"]
    # step 10 is the first row: it stands for the typical 10 steps; each row 10 x 0.05 = 0.5 s
    assert g.productive_s == pytest.approx(4 * 0.5)


def test_skipped_steps_and_missing_tokens() -> None:
    rows = [step(A1, 1, 1.0, skipped=False), step(A1, 2, 2.0, skipped=True), step(A1, 3, 3.0, skipped=None)]
    g = compute([receipt(A1, 1, 0, 4)], table(STEPS, rows), table(EVENTS, []))
    assert g.notes == ["1 skipped steps (non-finite gradients) count as processed, not useful tokens"]
    assert (g.tokens_processed, g.tokens_useful) == (300, 200)
    rows[1]["tokens"] = None
    g = compute([receipt(A1, 1, 0, 4)], table(STEPS, rows), table(EVENTS, []))
    assert g.tokens_processed is None and g.tokens_useful is None and g.token_goodput is None
    assert g.notes == ["some step rows have no token count: token goodput not computed"]


def test_event_problems_word_for_word() -> None:
    events = table(EVENTS, scenario_events() + [
        ev(A1, 9.6, "eval_start", 7), ev(A1, 9.7, "eval_start", 7),     # a second start while the first is open
        ev(A2, 21.0, "eval_start", 8), ev(A2, 20.0, "eval_end", 8),     # end recorded after, but earlier
        ev(A2, 22.0, "checkpoint_save_end", 9),                         # an end without a start
        ev(A2, 23.0, "checkpoint_save_start", 9),                       # never ends
        ev(OTHER, 1.0, "eval_start"),                                   # another receipt: ignored
    ])
    g = compute(attempts(), table(STEPS, scenario_steps()), events)
    assert g.problems == [
        "attempt 1 rank 0: eval_start at 9.700 s while the previous one is still open (its end is missing); "
        "the earlier one is dropped",
        "attempt 2 rank 0: eval_end at 20.000 s is recorded after eval_start at 21.000 s (events out of time "
        "order; kept in recorded order)",
        "attempt 2 rank 0: eval_end at 20.000 s precedes its start at 21.000 s (events out of order); left out",
        "attempt 2 rank 0: checkpoint_save_end at 22.000 s has no matching start; left out",
    ]
    assert g.notes == [
        "attempt 1 rank 0: eval_start at 9.700 s never ended; counted to the attempt's end",
        "attempt 2 rank 0: checkpoint_save_start at 23.000 s never ended; counted to the attempt's end",
    ]
    # the open eval 9.7..10 (0.3 s, after step 6) and the open save 23..25 (2 s) count
    assert g.buckets["eval"] == pytest.approx(0.2 + 0.3)
    assert g.buckets["checkpoint_save"] == pytest.approx(0.7 + 2.0)
    assert g.checkpoints_saved == 3


def test_data_wait_details_and_init_end_of_any_rank() -> None:
    events = table(EVENTS, [
        ev(A1, 1.0, "init_end", rank=1), ev(A1, 2.0, "init_end", rank=0),   # start-up to the last: 2 s
        ev(A1, 4.0, "data_wait", detail={"seconds": 0.5}),
        ev(A1, 5.5, "data_wait", detail={"seconds": 1}),                     # an int counts
        *[ev(A1, 6.0 + i, "data_wait", detail=d) for i, d in enumerate(
            ["not json", json.dumps([1]), {"seconds": True}, {"seconds": "1"}, {"seconds": -1.0}, {"other": 1.0}])],
        ev(A1, 12.0, "data_wait"),
    ])
    g = compute([receipt(A1, 1, 0, 13)], table(STEPS, []), events)
    assert g.buckets["startup"] == pytest.approx(2.0)
    assert g.buckets["data_loading"] == pytest.approx(0.5 + 1.0)
    assert g.problems == [] and g.notes == []


def test_data_phases_of_the_lowest_rank_capped_at_the_step() -> None:
    timing = table(TIMING, [
        {"receipt_id": A2, "rank": 0, "step": 6, "phase": "dataloader", "seconds": 2.0},    # capped at 0.8
        {"receipt_id": A2, "rank": 1, "step": 7, "phase": "data", "seconds": 0.3},         # not the lowest rank
        {"receipt_id": A2, "rank": 0, "step": 8, "phase": "data_loading", "seconds": 0.1},
        {"receipt_id": A2, "rank": 0, "step": 8, "phase": "data_wait", "seconds": 0.05},   # summed: 0.15
        {"receipt_id": A2, "rank": 0, "step": 8, "phase": "attention", "seconds": 0.5},    # not data
        {"receipt_id": A1, "rank": 2, "step": 2, "phase": "data", "seconds": 0.2},         # A1's lowest rank
        {"receipt_id": OTHER, "rank": 0, "step": 2, "phase": "data", "seconds": 0.4},      # another receipt
    ])
    g = compute(attempts(), table(STEPS, scenario_steps()), table(EVENTS, scenario_events()), timing)
    assert g.productive_s == pytest.approx(6.4 - (0.8 + 0.15 + 0.2))
    assert g.buckets["data_loading"] == pytest.approx(0.8 + 0.15 + 0.2)
    assert g.productive_s + g.badput_s == pytest.approx(25.0)
    only_other = table(TIMING, [{"receipt_id": A1, "rank": 0, "step": 2, "phase": "attention", "seconds": 0.4}])
    assert compute(attempts(), table(STEPS, scenario_steps()), table(EVENTS, scenario_events()),
                   only_other).productive_s == pytest.approx(6.4)


def test_run_start_is_the_first_attempts_first() -> None:
    events = table(EVENTS, scenario_events() + [ev(A1, 2.0, "run_start"), ev(A1, 2.5, "run_start"),
                                                 ev(A2, 13.0, "run_start")])
    g = compute(attempts(), table(STEPS, scenario_steps()), events)
    assert g.run_start == pytest.approx(T0 + 2.0) and g.to_dict()["run_start_s"] == pytest.approx(2.0)
    later = table(EVENTS, scenario_events() + [ev(A2, 13.0, "run_start")])
    assert compute(attempts(), table(STEPS, scenario_steps()), later).run_start is None


def test_dictionary_encoded_tables_with_other_receipts() -> None:
    steps = table(STEPS, scenario_steps() + [step(OTHER, 3, 5.5)])
    encoded = steps.set_column(0, "receipt_id", steps.column("receipt_id").dictionary_encode())
    events = table(EVENTS, scenario_events() + [ev(OTHER, 4.0, "eval_start"), ev(OTHER, 4.5, "eval_end")])
    events = events.set_column(0, "receipt_id", events.column("receipt_id").dictionary_encode())
    g = compute(attempts(), encoded, events)
    assert g.productive_s == pytest.approx(6.4) and g.buckets == pytest.approx(EXPECTED_BUCKETS)
    assert g.steps_computed == 10


@pytest.mark.parametrize("far", [20, 10_000])
def test_recomputed_steps_far_apart(far: int) -> None:
    # attempt 1 [0, 5]: steps 1, 2, F end at 1, 2, 3; attempt 2 [6, 10]: steps 2, F, F + 1 end at 7, 8, 9; 0.5 s
    # each. F's row stands for F - 2 steps, so it starts at the previous row's end: [2, 3] and [7, 8]. Surviving:
    # 1 [0.5, 1], 2 [6.5, 7], F [7, 8], F + 1 [8.5, 9] = 2.5 s; lost: 2 [1.5, 2], F [2, 3] = 1.5 s.
    # (F = 10,000 takes the sparse path of the step bookkeeping, F = 20 the dense one.)
    rows = [step(A1, 1, 1.0, 0.5), step(A1, 2, 2.0, 0.5), step(A1, far, 3.0, 0.5),
            step(A2, 2, 7.0, 0.5), step(A2, far, 8.0, 0.5), step(A2, far + 1, 9.0, 0.5)]
    g = compute([receipt(A1, 1, 0, 5, "failed"), receipt(A2, 2, 6, 10)], table(STEPS, rows), table(EVENTS, []))
    assert g.productive_s == pytest.approx(2.5) and g.buckets["progress_lost"] == pytest.approx(1.5)
    assert (g.steps_useful, g.steps_recomputed) == (4, 2)
    assert [a.steps_lost for a in g.attempts] == [2, 0]
    assert g.surviving_steps.tolist() == [1, 2, far, far + 1]
    assert (g.surviving_times - T0).tolist() == pytest.approx([1.0, 7.0, 8.0, 9.0])
    # tokens (100 per step number): each row processed its count minus the surviving count of the step before
    per_row = [100, 100, 100 * (far - 2), 100, 100 * (far - 2), 100]
    assert g.tokens_processed == sum(per_row) and g.tokens_useful == 100 + 100 + 100 * (far - 2) + 100


def test_steps_logged_out_of_step_order_and_tokens_that_go_back() -> None:
    # steps 1, 3, 2 logged in time order at 1, 2, 3 s (0.5 s each): the surviving computations are listed by step
    rows = [step(A1, 1, 1.0, 0.5), step(A1, 3, 2.0, 0.5), step(A1, 2, 3.0, 0.5)]
    g = compute([receipt(A1, 1, 0, 10)], table(STEPS, rows), table(EVENTS, []))
    assert g.surviving_steps.tolist() == [1, 2, 3] and (g.surviving_times - T0).tolist() == pytest.approx([1, 3, 2])
    assert g.productive_s == pytest.approx(1.5) and g.notes == []
    # each row processed its count minus that of the step before it: 100, 300 - 200, 200 - 100
    assert (g.tokens_processed, g.tokens_useful) == (300, 300)
    # a count that goes back (a reset) processed nothing, not a negative number: 100 + 0 + 100
    back = [step(A1, 1, 1.0, tokens=100), step(A1, 2, 2.0, tokens=50), step(A1, 3, 3.0, tokens=150)]
    g = compute([receipt(A1, 1, 0, 10)], table(STEPS, back), table(EVENTS, []))
    assert (g.tokens_processed, g.tokens_useful) == (200, 200)


def test_start_up_is_cut_to_the_attempt_and_early_saves_are_useful() -> None:
    late = compute([receipt(A1, 1, 0, 5)], table(STEPS, []), table(EVENTS, [ev(A1, 7.0, "init_end")]))
    assert late.buckets["startup"] == pytest.approx(5.0)
    early = compute([receipt(A1, 1, 0, 5)], table(STEPS, []), table(EVENTS, [ev(A1, -1.0, "init_end")]))
    assert early.buckets["startup"] == pytest.approx(0.0) and early.buckets["other"] == pytest.approx(5.0)
    # a save of step 0 (before any logged step) and one of step 1 of attempt 1, which attempt 2 computed again
    rows = [step(A1, 1, 1.0, 0.5), step(A2, 1, 7.0, 0.5)]
    saves = [ev(A1, 0.2, "checkpoint_save_end", 0), ev(A1, 1.2, "checkpoint_save_end", 1)]
    g = compute([receipt(A1, 1, 0, 5, "failed"), receipt(A2, 2, 6, 10)], table(STEPS, rows), table(EVENTS, saves))
    assert (g.checkpoints_saved, g.checkpoints_useful) == (2, 1)


def test_attempts_given_out_of_time_order_with_other_receipts_events() -> None:
    events = table(EVENTS, [ev(OTHER, 1.0, "eval_start"), *scenario_events(), ev(OTHER, 2.0, "eval_end")])
    g = compute(list(reversed(attempts())), table(STEPS, scenario_steps()), events)
    assert g.buckets == pytest.approx(EXPECTED_BUCKETS) and g.productive_s == pytest.approx(6.4)
    assert [a.restored_step for a in g.attempts] == [None, 4] and g.checkpoints_useful == 2 and g.problems == []


def test_a_start_without_an_end_and_an_end_without_a_start() -> None:
    rows = table(STEPS, [step(A1, 1, 2.0), step(A1, 2, 4.0)])
    g = compute([receipt(A1, 1, None, 10.0)], rows, table(EVENTS, [ev(A1, 1.0, "init_start")]))
    assert g.wall_s == pytest.approx(9.0)  # from the first timed row (1 s) to the recorded end (10 s)
    assert g.notes == ["attempt 1 has no start time: taken from its first/last timed row"]


def test_every_other_step_logged_is_noted() -> None:
    rows = [step(A1, s, s / 2, 0.1) for s in (2, 4, 6)]
    g = compute([receipt(A1, 1, 0, 5)], table(STEPS, rows), table(EVENTS, []))
    assert g.notes == ["steps are logged every 2 steps or so: a logged row stands for the steps since the "
                       "previous one, each taking the logged step's time"]
    assert g.productive_s == pytest.approx(3 * 2 * 0.1)


def test_one_step_computed_twice_processed_its_tokens_twice() -> None:
    rows = [step(A1, 1, 1.0, 0.5), step(A2, 1, 7.0, 0.5)]
    g = compute([receipt(A1, 1, 0, 5, "failed"), receipt(A2, 2, 6, 10)], table(STEPS, rows), table(EVENTS, []))
    assert (g.tokens_processed, g.tokens_useful, g.token_goodput) == (200, 100, 0.5)


def test_surviving_steps_by_step_after_a_restart() -> None:
    # attempt 1: steps 1 and 4 at 1 and 2 s; attempt 2: steps 5 then 4 again at 7 and 8 s (4 of attempt 1 lost)
    rows = [step(A1, 1, 1.0, 0.5), step(A1, 4, 2.0, 0.5), step(A2, 5, 7.0, 0.5), step(A2, 4, 8.0, 0.5)]
    g = compute([receipt(A1, 1, 0, 5, "failed"), receipt(A2, 2, 6, 10)], table(STEPS, rows), table(EVENTS, []))
    assert g.surviving_steps.tolist() == [1, 4, 5]
    assert (g.surviving_times - T0).tolist() == pytest.approx([1.0, 8.0, 7.0])
    assert g.steps_recomputed == 1
