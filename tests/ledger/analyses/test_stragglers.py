"""Straggler scores and waiting time on timing tables whose answers are computed by hand."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from ledger.analyses.goodput import Goodput
from ledger.analyses.stragglers import BUCKET, straggler_bucket, stragglers
from schemas import NodeStack
from schemas.tables import TIMING


def _timing(work: dict[int, list[float]], wait: float = 0.15) -> pa.Table:
    """Each rank's own work per step ("expert"), plus an all-to-all that is excluded from it."""
    rows = []
    for rank, values in work.items():
        for step, seconds in enumerate(values, start=1):
            rows.append({"rank": rank, "step": step, "phase": "expert", "seconds": seconds})
            rows.append({"rank": rank, "step": step, "phase": "all_to_all", "seconds": wait})
    return pa.Table.from_pylist(rows, schema=TIMING)


def test_slow_rank_scores_names_node_and_waiting_time() -> None:
    e = [0.001 * s for s in range(1, 11)]
    work = {0: [0.10 + x for x in e], 1: [0.10 + x for x in e], 2: [0.25 + x for x in e], 3: [0.10 + x for x in e]}
    nodes = (NodeStack(node_rank=0, hostname="a", ranks=(0, 1)), NodeStack(node_rank=1, hostname="b", ranks=(2, 3)))
    s = stragglers(_timing(work), nodes)
    # medians: 0.1055 for ranks 0, 1, 3 and 0.2555 for rank 2
    assert [r.rank for r in s.stragglers] == [2]
    assert s.stragglers[0].relative == pytest.approx(0.1055 / 0.2555)
    # windows of 5 steps: medians 0.253 (steps 1-5) and 0.258 (6-10, the latest)
    assert s.stragglers[0].individual == pytest.approx(0.253 / 0.258)
    assert {r.rank: r.relative for r in s.ranks}[0] == pytest.approx(1.0)
    assert (s.nodes[0].node_rank, s.nodes[0].slowest_rank, s.nodes[0].hostname) == (1, 2, "b")
    assert s.nodes[1].relative == pytest.approx(1.0)
    # per step: slowest 0.25 + e, median of the four 0.10 + e -> 0.15 s lost per step, 10 steps
    assert s.wait_s == pytest.approx(1.5)
    assert s.paced_s == pytest.approx(2.5 + 0.055)
    assert s.steps_compared == 10 and s.excluded_phases == ["all_to_all"]


def test_a_rank_that_slows_down_is_named_by_its_individual_score() -> None:
    work = {0: [0.1] * 10, 1: [0.1] * 5 + [0.2] * 5, 2: [0.2] * 10}
    s = stragglers(_timing(work, wait=0.0))
    by_rank = {r.rank: r for r in s.ranks}
    # rank 1: best window median 0.1, latest 0.2; rank 2 is slow from the start (individual 1.0)
    assert by_rank[1].individual == pytest.approx(0.5)
    assert by_rank[2].individual == pytest.approx(1.0)
    assert by_rank[1].relative == pytest.approx(0.1 / 0.15)  # its median over all ten steps is 0.15
    assert by_rank[2].relative == pytest.approx(0.5)
    assert {r.rank for r in s.stragglers} == {1, 2}


def test_steps_missing_a_rank_are_not_compared_and_one_rank_gives_no_wait() -> None:
    s = stragglers(_timing({0: [0.1, 0.1, 0.1], 1: [0.3, 0.3]}, wait=0.0))
    # median of two ranks is their mean: (0.3 - 0.2) per step, two steps
    assert s.steps_compared == 2 and s.wait_s == pytest.approx(0.2)
    alone = stragglers(_timing({0: [0.1, 0.5]}))
    assert alone.wait_s == 0.0 and alone.stragglers == []
    empty = stragglers(TIMING.empty_table())
    assert empty.ranks == [] and empty.wait_s == 0.0


def test_straggler_bucket_takes_the_wait_from_other_then_productive_time() -> None:
    g = Goodput(run_id="r", name=None, start=0.0, wall_s=10.0, productive_s=6.0, buckets={"startup": 3.0, "other": 1.0},
                attempts=[], steps_computed=1, steps_useful=1, steps_recomputed=0, tokens_processed=None,
                tokens_useful=None, step_time_median_s=None, step_time_mad_s=None, steady_step_time_s=None,
                steady_steps=0, checkpoints_saved=0, checkpoints_useful=0)
    moved = straggler_bucket(g, 1.5)
    assert (moved.productive_s, moved.buckets["other"], moved.buckets[BUCKET]) == (5.5, 0.0, 1.5)
    assert moved.productive_s + moved.badput_s == pytest.approx(g.wall_s)
    small = straggler_bucket(g, 0.25)
    assert (small.productive_s, small.buckets["other"], small.buckets[BUCKET]) == (6.0, 0.75, 0.25)
    capped = straggler_bucket(g, 99.0)  # never more than other + productive
    assert (capped.productive_s, capped.buckets[BUCKET], capped.buckets["startup"]) == (0.0, 7.0, 3.0)
    assert dataclasses.replace(g) == g and g.productive_s == 6.0  # the original is untouched


def test_the_waiting_of_a_job_is_summed_over_its_attempts_that_timed_several_ranks() -> None:
    """Goodput across restarts: each attempt's wait from its own ranks (a real DuckDB table, as the index
    holds it); an attempt timed on one rank adds nothing, and the all-to-all never counts as work."""
    import duckdb

    from ledger.analyses.goodput_index import with_straggler_wait

    rows = []
    for rid, steps, work in (("a1", (1, 2, 3), {0: 0.01, 1: 0.03}), ("a2", (3, 4), {0: 0.01, 1: 0.01, 2: 0.05}),
                             ("a3", (6, 7), {0: 0.9})):
        for step in steps:
            for rank, seconds in work.items():
                rows.append({"receipt_id": rid, "rank": rank, "step": step, "phase": "expert", "seconds": seconds})
                rows.append({"receipt_id": rid, "rank": rank, "step": step, "phase": "all_to_all",
                             "seconds": 0.5 if rank == 0 else 0.0})
    con = duckdb.connect()
    con.register("rows", pa.Table.from_pylist(rows))
    con.execute("CREATE TABLE timing AS SELECT * FROM rows")
    g = Goodput(run_id="a1", name=None, start=0.0, wall_s=10.0, productive_s=6.0, buckets={"other": 1.0},
                attempts=[], steps_computed=7, steps_useful=7, steps_recomputed=0, tokens_processed=None,
                tokens_useful=None, step_time_median_s=None, step_time_mad_s=None, steady_step_time_s=None,
                steady_steps=0, checkpoints_saved=0, checkpoints_useful=0)
    # by hand, each attempt apart (a2 recomputes step 3): a1, 3 steps x (0.03 - median(0.01, 0.03));
    # a2, 2 steps x (0.05 - median(0.01, 0.01, 0.05)); a3 timed one rank
    expected = 3 * 0.01 + 2 * 0.04
    out = with_straggler_wait(con, g, ["a1", "a2", "a3"])
    assert out.buckets[BUCKET] == pytest.approx(expected)
    assert out.buckets["other"] == pytest.approx(1.0 - expected) and out.productive_s == 6.0
    assert with_straggler_wait(con, g, ["a3"]) is g  # one rank timed: nothing to compare
