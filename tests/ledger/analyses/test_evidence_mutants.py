"""Between-run evidence on a hand-built catalog: which receipts are replicates, which replicate groups make the
noise floor (hardware, exclusions, the most recent groups and runs), the floor's pooled SD at its df boundary,
and how it is described (found by mutation testing, issue 23)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from ledger.analyses.evidence import (
    MAX_FLOOR_GROUPS,
    MAX_GROUP_RUNS,
    Floor,
    commands_for_replicates,
    floor_groups,
    is_first_attempt,
    learn_floor,
    replicates_of,
    stack_class,
)
from ledger.analyses.groups import Catalog, Entry
from schemas.factors import CAUSAL_FACTORS

T = datetime(2026, 11, 1, tzinfo=UTC)


def entry(rid: str, minute: int = 0, status: str = "succeeded", attempt_of: str | None = None,
          **changed: str) -> Entry:
    factors = {f.value: "base" for f in CAUSAL_FACTORS}
    factors.update(changed)
    data: dict[str, Any] = {"status": status, "links": {"attempt_of": attempt_of}}
    return Entry(rid, rid, {}, T + timedelta(minutes=minute), data, factors)


def test_only_completed_first_attempts_stand_for_a_configuration() -> None:
    assert is_first_attempt(entry("a")) and is_first_attempt(entry("a", status="imported"))
    assert not is_first_attempt(entry("a", status="failed"))
    assert not is_first_attempt(entry("a", attempt_of="x"))
    assert is_first_attempt(Entry("a", None, {}, None, {"status": "succeeded"}, {}))  # no links at all


def test_replicates_differ_in_the_seed_only() -> None:
    cat = Catalog([entry("a"), entry("other-seed", seed="7"), entry("again"), entry("lr", hyperparameters="x"),
                   entry("failed", status="failed"), entry("restart", attempt_of="a"), entry("excluded")])
    assert replicates_of(cat, "a") == ["other-seed", "again", "excluded"]
    assert replicates_of(cat, "a", exclude=["excluded"]) == ["other-seed", "again"]
    assert replicates_of(cat, "lr") == []


def test_floor_groups_on_the_stack_class_most_recent_first_and_cut() -> None:
    entries = [
        # config x on h1: 6 runs (the 4 most recent kept), latest at minute 50
        *[entry(f"x{i}", 10 * i, hardware="h1", code="x", seed=str(i)) for i in range(6)],
        # config y on h1: 2 runs, latest at minute 70 (the most recent group)
        entry("y0", 60, hardware="h1", code="y"), entry("y1", 70, hardware="h1", code="y", seed="1"),
        # config z on h1: 1 run (no group); config w on h2 (other hardware); a failed run of y
        entry("z0", 5, hardware="h1", code="z"),
        entry("w0", 1, hardware="h2", code="w"), entry("w1", 2, hardware="h2", code="w"),
        entry("y-failed", 80, hardware="h1", code="y", status="failed"),
        # config v on h1 but another driver stack (NCCL, CUDA...): not this stack class
        entry("v0", 90, hardware="h1", drivers="d2", code="v"), entry("v1", 91, hardware="h1", drivers="d2", code="v"),
    ]
    cat = Catalog(entries)
    h1, h2 = ("h1", "base"), ("h2", "base")  # (hardware, drivers)
    assert stack_class(entries[0]) == h1
    assert floor_groups(cat, [h1]) == [["y0", "y1"], ["x2", "x3", "x4", "x5"]]
    assert floor_groups(cat, [h1], exclude=["y1", "x5"]) == [["x1", "x2", "x3", "x4"]]
    assert floor_groups(cat, [h1, h2])[-1] == ["w0", "w1"]
    assert floor_groups(cat, [("h1", "d2")]) == [["v0", "v1"]]
    assert floor_groups(cat, [("h3", "base")]) == []
    assert MAX_GROUP_RUNS == 4
    # at most MAX_FLOOR_GROUPS groups, the most recent
    many = Catalog([entry(f"g{g}r{r}", g * 10 + r, hardware="h1", code=f"c{g}")
                    for g in range(MAX_FLOOR_GROUPS + 2) for r in range(2)])
    got = floor_groups(many, [h1])
    assert len(got) == MAX_FLOOR_GROUPS == 8
    assert got[0] == [f"g{MAX_FLOOR_GROUPS + 1}r0", f"g{MAX_FLOOR_GROUPS + 1}r1"] and got[-1] == ["g2r0", "g2r1"]


def test_the_floor_pools_within_group_variance_at_its_df_boundary() -> None:
    # log scale: non-finite, None and non-positive values are left out; a group of 1 adds nothing
    groups: list[list[Any]] = [[100.0, 110.0, math.nan, None, 0.0, -5.0], [50.0, 55.0, 60.0], [7.0]]
    got = learn_floor(groups, log_scale=True)
    logs = [np.log([100.0, 110.0]), np.log([50.0, 55.0, 60.0])]
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
    assert got == Floor(pytest.approx(math.sqrt(ss / 3)), 3, 2, 5, True)  # type: ignore[arg-type]
    # delta scale: values as they are (a negative one too); 3 df is enough, 2 is not
    flat = learn_floor([[1.0, 2.0, -3.0], [4.0, 6.0]], log_scale=False)
    # SS: (1, 2, -3) around 0 -> 1 + 4 + 9 = 14; (4, 6) -> 2; 16 over 3 df
    assert flat == Floor(pytest.approx(math.sqrt(16 / 3)), 3, 2, 5, False)  # type: ignore[arg-type]
    assert learn_floor([[1.0, 2.0, 3.0]], log_scale=False) is None
    assert learn_floor([[1.0, 2.0, -3.0, 0.5]], log_scale=True) is None  # 3 positive values: 2 df


def test_a_group_that_repeats_another_groups_values_counts_once() -> None:
    # a seed-determined metric: every configuration replicated with the same seeds shows the same spread
    same = [[1.777, 1.753], [1.753, 1.777], [1.777, 1.753], [1.777, 1.753]]
    assert learn_floor(same, log_scale=True) is None  # one group's evidence: 1 df, below the minimum
    got = learn_floor([*same, [1.7, 1.9], [2.0, 2.1]], log_scale=True)
    assert got is not None and (got.df, got.groups, got.runs) == (3, 3, 6)
    # what the floor is then: the pooled SD of the three distinct groups (computed here by hand)
    by_hand = [np.log([1.777, 1.753]), np.log([1.7, 1.9]), np.log([2.0, 2.1])]
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in by_hand)
    assert got.sd == pytest.approx((ss / 3) ** 0.5, rel=1e-12)


def test_floor_descriptions() -> None:
    two = Floor(0.048, 5, 2, 14, True)
    assert two.describe() == ("noise floor 4.8% (SD between runs; 2 replicate groups, 14 runs, same hardware and "
                              "drivers)")
    one = Floor(0.1234, 3, 1, 4, False)
    assert one.describe() == "noise floor 0.123 (SD between runs; 1 replicate group, 4 runs, same hardware and drivers)"
    assert one.to_json() == {"sd": 0.1234, "df": 3, "groups": 1, "runs": 4, "log_scale": False}


def test_commands_for_replicates() -> None:
    assert commands_for_replicates("A", "B") == ["ledger ab A B --rounds 3",
                                                 "ledger rerun A --times 2 && ledger rerun B --times 2",
                                                 "ledger ab A B --until-verdict"]
    assert commands_for_replicates("A", "B", rounds=5)[0] == "ledger ab A B --rounds 5"
