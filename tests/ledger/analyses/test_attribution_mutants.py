"""Attribution's remaining behaviour, each expected value by hand: the built-in headlines' per-run values,
which partition of a lattice is chosen, the no-factor and unavailable results, the unexplained interval, the
confounded sets and the missing runs in DESIGN.md's factor order (found by mutation testing, issue 23)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest
from hand_runs import Fixed, Run

from ledger.analyses.attribution import (
    Lattice,
    LossAtTokens,
    Throughput,
    _noise,
    attribute,
    confounded_sets,
    missing_nodes,
    node_values,
)
from ledger.analyses.series import RunData
from schemas.receipt import Parallelism, Receipt, Workload

E: frozenset[str] = frozenset()
CODE, PREC, ROUTER = frozenset({"code"}), frozenset({"precision"}), frozenset({"router"})


def data(tokens_per_s: float, loss: Sequence[float] | None = None, world: int | None = None, n: int = 10,
         name: str = "r", rid: str = "a" * 64) -> RunData:
    """A run of ``n`` steps of 100 tokens with a constant logged throughput (and the given losses)."""
    wl = Workload(parallelism=Parallelism(world_size=world)) if world else Workload()
    steps = {
        "step": np.arange(1, n + 1), "tokens": 100.0 * np.arange(1, n + 1), "time": np.arange(1, n + 1) * 1.0,
        "loss": np.asarray(loss if loss is not None else np.linspace(4, 3, n), dtype=np.float64),
        "step_time_s": np.ones(n), "tokens_per_s": np.full(n, tokens_per_s),
    }
    return RunData(rid, Receipt(run_uuid="u", status="succeeded", name=name, workload=wl), steps, [], {}, {})


def empty(name: str = "broken", rid: str = "e" * 64) -> RunData:
    return RunData(rid, Receipt(run_uuid="u", status="succeeded", name=name), {}, [], {}, {})


# ------------------------------------------------------------------------------------------- headlines
def test_throughput_is_the_log_of_the_median_per_device() -> None:
    vals = Throughput().values([[data(200.0), data(400.0, world=2)], [data(800.0)], [empty()], []])
    # 200 tokens/s on 1 device; 400 on 2 -> 200 per device; 800
    assert vals.runs[0] == [pytest.approx(math.log(200.0)), pytest.approx(math.log(200.0))]
    assert vals.point[:2] == pytest.approx([math.log(200.0), math.log(800.0)])
    assert vals.runs[2] == [] and vals.runs[3] == []
    assert vals.missing == {2: "broken (eeeeeeee): no step rows", 3: "no runs"}
    assert math.isnan(vals.point[2]) and math.isnan(vals.point[3])
    assert vals.note == "log of the median tokens/s per device"


def test_loss_at_tokens_is_the_log_of_the_mean_over_the_last_fifth() -> None:
    tokens = 100.0 * np.arange(1, 11)
    # A: 5 - tokens/500, B: 4 - tokens/500 over 100..1000 tokens. The last 20% of the range (>= 820) holds 2
    # points, fewer than 5: the grid is the last 5 points, 600..1000, whose mean token count is 800
    a, b = data(1.0, 5 - tokens / 500), data(1.0, 4 - tokens / 500)
    zero = data(1.0, np.zeros(10), name="zero", rid="z" * 64)
    vals = LossAtTokens().values([[a], [b], [empty()], [zero]])
    assert vals.runs[0] == [pytest.approx(math.log(5 - 800 / 500))]
    assert vals.runs[1] == [pytest.approx(math.log(4 - 800 / 500))]
    assert vals.missing == {2: "broken (eeeeeeee): no step rows", 3: "non-positive loss: no log scale"}
    assert vals.note == "log of the mean over 600..1,000 tokens"


def test_loss_at_tokens_without_a_shared_range_says_so_at_every_node() -> None:
    tokens = 100.0 * np.arange(1, 11)
    late = RunData("l" * 64, Receipt(run_uuid="u", status="succeeded", name="late"),
                   {"step": np.arange(1, 11), "tokens": tokens + 5000, "loss": np.linspace(4, 3, 10)}, [], {}, {})
    vals = LossAtTokens().values([[data(1.0)], [late]])
    assert vals.missing == {0: "the runs share no range", 1: "the runs share no range"}
    assert vals.note == ""


# ----------------------------------------------------------------------------------------------- noise
def test_noise_source_counts_the_nodes_with_replicates() -> None:
    two = _noise(node_values([[0.0, 0.2], [1.0, 1.2, 1.4], [5.0]], ""), None)
    assert two is not None and two.df == 3 and two.source == "replicates at 2 nodes (3 df)"
    # SS 0.02 + 0.08 over 3 df
    assert two.sd == pytest.approx(math.sqrt(0.1 / 3))
    one = _noise(node_values([[0.0, 0.2], [5.0]], ""), None)
    assert one is not None and one.source == "replicates at 1 node (1 df)"
    assert _noise(node_values([[0.0], [5.0]], ""), None) is None
    assert node_values([[0.0], []], "").runs == [[0.0], []]


# --------------------------------------------------------------------------------------------- results
def test_unavailable_sides_name_the_side_and_the_reason() -> None:
    lat = Lattice(("code",), {E: ("a",), CODE: ("b",)}, frozenset())
    head = Fixed({"a": 0.0, "b": 1.0})
    no_b = attribute(lat, head, {E: [Run("a")], CODE: []}, np.random.default_rng(0), 10)
    assert no_b.reason == "B: no runs" and no_b.total is None and no_b.shares == []
    assert (no_b.headline, no_b.metric, no_b.note, no_b.orders_possible) == ("fixed", "fixed metric", "fixed note", 1)
    no_a = attribute(lat, head, {CODE: [Run("b")]}, np.random.default_rng(0), 10)
    assert no_a.reason == "A: no value"


def test_no_changed_factor_keeps_the_noise_and_the_total_interval() -> None:
    lat = Lattice((), {E: ("a0", "a1", "a2")}, frozenset())
    head = Fixed({"a0": 0.0, "a1": 0.2, "a2": 0.4})
    att = attribute(lat, head, {E: [Run("a0"), Run("a1"), Run("a2")]}, np.random.default_rng(0), 200)
    # A and B are the same node: the total is 0 and its interval is exactly 0 (the same draw minus itself)
    assert att.total == 0.0 and att.total_ci == (0.0, 0.0) and att.unexplained_ci == (0.0, 0.0)
    assert att.noise is not None and att.noise.df == 2 and att.noise.sd == pytest.approx(0.2)
    assert att.total_verdict == "indistinguishable from noise"
    assert (att.orders, att.orders_possible, att.metric, att.note) == (0, 1, "fixed metric", "fixed note")


def replicated(means: Mapping[frozenset[str], float]) -> tuple[dict[str, float], dict[frozenset[str], list[Run]]]:
    """Each node: 3 runs at mean - 0.1, mean, mean + 0.1 (SD 0.1)."""
    values: dict[str, float] = {}
    runs: dict[frozenset[str], list[Run]] = {}
    for s, m in means.items():
        name = "".join(sorted(s)) or "a"
        runs[s] = [Run(f"{name}{i}") for i in range(3)]
        values.update({f"{name}0": m - 0.1, f"{name}1": m, f"{name}2": m + 0.1})
    return values, runs


def test_a_confounded_step_carries_the_whole_unexplained_interval() -> None:
    full = CODE | PREC
    values, runs = replicated({E: 0.0, full: 1.0})
    lat = Lattice(("code", "precision"), {s: tuple(r.id for r in rs) for s, rs in runs.items()}, frozenset())
    att = attribute(lat, Fixed(values), runs, np.random.default_rng(3), 500)
    (conf,) = att.confounded
    assert conf.factors == ("code", "precision") and conf.share == pytest.approx(1.0)
    # no single-factor step: the unexplained part is the whole total, draw by draw
    assert att.unexplained == pytest.approx(1.0) and att.unexplained_ci == att.total_ci == conf.ci
    assert att.orders == 0 and not att.shapley
    assert att.paths == [[["code", "precision"]]]


def test_the_level_sets_the_interval_width() -> None:
    full = CODE
    values, runs = replicated({E: 0.0, full: 1.0})
    lat = Lattice(("code",), {s: tuple(r.id for r in rs) for s, rs in runs.items()}, frozenset())
    att = attribute(lat, Fixed(values), runs, np.random.default_rng(5), 20_000, level=0.5)
    # each node's mean moves by t(4) x 0.1 / sqrt(3): the 50% interval of the difference, simulated here
    rng = np.random.default_rng(6)
    diff = 1.0 + 0.1 / math.sqrt(3) * (rng.standard_t(4, 200_000) - rng.standard_t(4, 200_000))
    lo, hi = np.quantile(diff, [0.25, 0.75])
    assert att.total_ci == pytest.approx((lo, hi), abs=0.01)
    assert att.unexplained_ci is not None and att.unexplained_ci[1] - att.unexplained_ci[0] == pytest.approx(0.0)


def test_the_most_common_partition_of_the_longest_paths_is_kept() -> None:
    # four factors and three two-factor nodes, none inside another: the longest paths have two steps,
    # E-{code, hardware}-F, E-{code, precision}-F and E-{hardware, router}-F. Two of them split F the same
    # way ({code, precision} + {hardware, router}): that partition is kept, though the first path found
    # (nodes in sorted order) is the other one
    factors = ("code", "hardware", "precision", "router")
    ch, cp, hr = frozenset({"code", "hardware"}), CODE | PREC, frozenset({"hardware", "router"})
    full = ch | cp | hr
    nodes = {E: "a", ch: "ch", cp: "cp", hr: "hr", full: "b"}
    lat = Lattice(factors, {s: (r,) for s, r in nodes.items()}, frozenset())
    head = Fixed({"a": 0.0, "ch": 1.0, "cp": 2.0, "hr": 3.0, "b": 4.0})
    att = attribute(lat, head, {s: [Run(r)] for s, r in nodes.items()}, np.random.default_rng(0), 10)
    assert att.shares == [] and (att.headline, att.metric, att.direction, att.note) == (
        "fixed", "fixed metric", "higher", "fixed note")
    # {code, precision}: 2 (first) and 4 - 3 = 1; {hardware, router}: 4 - 2 = 2 and 3
    assert [(c.factors, c.share) for c in att.confounded] == [
        (("code", "precision"), pytest.approx(1.5)), (("hardware", "router"), pytest.approx(2.5))]
    assert att.paths == [[["code", "precision"], ["hardware", "router"]],
                         [["hardware", "router"], ["code", "precision"]]]
    # tied counts (three single-factor nodes of three factors, each path its own partition): the partition
    # whose sorted steps sort last wins, {precision} + {code, router}
    tied = {E: "a", CODE: "x", PREC: "y", ROUTER: "z", CODE | PREC | ROUTER: "b"}
    lat2 = Lattice(("code", "precision", "router"), {s: (r,) for s, r in tied.items()}, frozenset())
    att2 = attribute(lat2, Fixed({"a": 0.0, "x": 1.0, "y": 2.0, "z": 3.0, "b": 4.0}),
                     {s: [Run(r)] for s, r in tied.items()}, np.random.default_rng(0), 10)
    assert [(s.factors, s.share) for s in att2.shares] == [(("precision",), 2.0)]
    assert [(c.factors, c.share) for c in att2.confounded] == [(("code", "router"), 2.0)]


# ------------------------------------------------------------------------------------ confounded, missing
def test_confounded_sets_are_the_multi_factor_steps() -> None:
    factors = ("code", "precision", "router")
    full = CODE | PREC | ROUTER
    lat = Lattice(factors, {E: ("a",), CODE: ("x",), full: ("b",)}, frozenset())
    assert confounded_sets(lat) == [("precision", "router")]
    assert confounded_sets(Lattice(factors, {E: ("a",), CODE: ("x",), CODE | PREC: ("y",), full: ("b",)},
                                   frozenset())) == []
    assert confounded_sets(Lattice((), {E: ("a",)}, frozenset())) == []
    assert missing_nodes(Lattice((), {E: ("a",)}, frozenset())) == []


def test_missing_runs_follow_the_design_order_of_factors() -> None:
    # software comes before hardware in DESIGN.md's order (alphabetically it would not)
    sw, hw = frozenset({"software"}), frozenset({"hardware"})
    lat = Lattice(("software", "hardware"), {E: ("a",), sw | hw: ("b",)}, frozenset())
    assert missing_nodes(lat) == [(E, sw), (E, hw)]
    assert confounded_sets(lat) == [("software", "hardware")]


def test_the_noise_floor_adds_its_variance_and_df() -> None:
    from ledger.analyses.evidence import Floor

    floor = Floor(0.05, 20, 5, 25, True)
    alone = _noise(node_values([[0.0], [1.0]], ""), floor)
    assert alone is not None and (alone.sd, alone.df) == (pytest.approx(0.05), 20)
    assert alone.source == floor.describe()
    both = _noise(node_values([[0.0, 0.2], [1.0]], ""), floor)
    # SS 0.02 (1 df) + 20 x 0.05^2 (20 df)
    assert both is not None and both.df == 21 and both.sd == pytest.approx(math.sqrt((0.02 + 20 * 0.0025) / 21))
    assert both.source == "replicates at 1 node (1 df) + " + floor.describe()
    assert _noise(node_values([[0.0], [1.0]], ""), Floor(0.05, 20, 5, 25, False)) is None  # not on the log scale


def test_beyond_eight_factors_everything_is_confounded() -> None:
    eight = ("code", "software", "kernels", "drivers", "container", "hardware", "parallelism", "precision")
    for factors, single in ((eight, True), ((*eight, "router"), False)):
        full = frozenset(factors)
        nodes = {E: "a", CODE: "x", full: "b"}
        lat = Lattice(factors, {s: (r,) for s, r in nodes.items()}, frozenset())
        att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "b": 3.0}), {s: [Run(r)] for s, r in nodes.items()},
                        np.random.default_rng(0), 10)
        if single:  # 8 factors: the path through {code} is used
            assert [(s.factors, s.share) for s in att.shares] == [(("code",), 1.0)]
            assert [c.factors for c in att.confounded] == [factors[1:]] == confounded_sets(lat)
        else:  # 9: one step from A to B, whatever nodes exist
            assert att.shares == [] and [(c.factors, c.share) for c in att.confounded] == [(factors, 3.0)]
            assert confounded_sets(lat) == [factors]
            assert missing_nodes(lat) == [(E, frozenset({f})) for f in factors[1:]]


def test_shares_and_paths_follow_the_design_order_of_factors() -> None:
    # one path adding router, precision, hardware, software, code (the reverse of DESIGN.md's order)
    factors = ("code", "software", "hardware", "precision", "router")
    chain = [E]
    for f in reversed(factors):
        chain.append(chain[-1] | {f})
    nodes = {s: f"n{i}" for i, s in enumerate(chain)}
    lat = Lattice(factors, {s: (r,) for s, r in nodes.items()}, frozenset())
    att = attribute(lat, Fixed({f"n{i}": float(i * i) for i in range(6)}), {s: [Run(r)] for s, r in nodes.items()},
                    np.random.default_rng(0), 10)
    # n_i = i^2: router 1, precision 3, hardware 5, software 7, code 9
    assert [(s.factors, s.share) for s in att.shares] == [
        (("code",), 9.0), (("software",), 7.0), (("hardware",), 5.0), (("precision",), 3.0), (("router",), 1.0)]
    assert att.paths == [[["router"], ["precision"], ["hardware"], ["software"], ["code"]]]
    sw_hw = frozenset({"software", "hardware"})
    lat2 = Lattice(("software", "hardware"), {E: ("a",), sw_hw: ("b",)}, frozenset())
    both = attribute(lat2, Fixed({"a": 0.0, "b": 1.0}), {E: [Run("a")], sw_hw: [Run("b")]},
                     np.random.default_rng(0), 10)
    assert both.paths == [[["software", "hardware"]]] and both.confounded[0].factors == ("software", "hardware")


def test_a_zero_total_gives_no_fractions() -> None:
    nodes = {E: "a", CODE: "x", PREC: "y", CODE | PREC: "b"}
    lat = Lattice(("code", "precision"), {s: (r,) for s, r in nodes.items()}, frozenset())
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "y": -1.0, "b": 0.0}), {s: [Run(r)] for s, r in nodes.items()},
                    np.random.default_rng(0), 10)
    assert att.total == 0.0 and [s.fraction for s in att.shares] == [None, None]
    half = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "y": 1.0, "b": 2.0}), {s: [Run(r)] for s, r in nodes.items()},
                     np.random.default_rng(0), 10)
    assert [s.fraction for s in half.shares] == [0.5, 0.5]


def test_longest_paths_stop_at_the_limit() -> None:
    from ledger.analyses.attribution import longest_paths

    full = CODE | PREC | ROUTER
    every = {CODE, PREC, ROUTER, CODE | PREC, CODE | ROUTER, PREC | ROUTER}
    assert len(longest_paths(every, full)) == 6
    assert longest_paths(every, full, limit=2) == longest_paths(every, full)[:2]
    assert len(longest_paths(every, full, limit=2)) == 2
