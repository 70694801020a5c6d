"""Attribution on hand-computed lattices: Shapley values, partial orders, confounded steps, missing runs."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
from hand_runs import Fixed, Run

from ledger.analyses.attribution import (
    Lattice,
    attribute,
    longest_paths,
    missing_nodes,
    shapley,
)
from ledger.analyses.evidence import Floor
from ledger.analyses.series import RunData

E: frozenset[str] = frozenset()
X, Y, Z = frozenset({"code"}), frozenset({"precision"}), frozenset({"router"})
XY = X | Y


def lattice(nodes: Mapping[frozenset[str], str | tuple[str, ...]],
            factors: tuple[str, ...] = ("code", "precision")) -> tuple[Lattice, dict[frozenset[str], list[Run]]]:
    ids = {s: (rid,) if isinstance(rid, str) else rid for s, rid in nodes.items()}
    lat = Lattice(factors, ids, frozenset())
    return lat, {s: [Run(r) for r in rids] for s, rids in ids.items()}


def replicated(means: Mapping[frozenset[str], float], sd: float, runs: int, seed: int) -> tuple[
        Lattice, dict[frozenset[str], list[Run]], Fixed]:
    """A lattice whose every node holds ``runs`` runs drawn around its mean with SD ``sd`` (log scale)."""
    rng = np.random.default_rng(seed)
    values: dict[str, float] = {}
    nodes: dict[frozenset[str], tuple[str, ...]] = {}
    for s, mean in means.items():
        name = "".join(sorted(s)) or "a"
        nodes[s] = tuple(f"{name}{i}" for i in range(runs))
        values.update({f"{name}{i}": float(mean + sd * rng.standard_normal()) for i in range(runs)})
    lat, node_runs = lattice(nodes)
    return lat, node_runs, Fixed(values)


def test_shapley_of_a_hand_computed_example() -> None:
    # v(0) = 0, v(x) = 1, v(y) = 2, v(xy) = 4: interaction 1, split evenly between the two orders
    values = {E: 0.0, X: 1.0, Y: 2.0, XY: 4.0}
    assert shapley(values, ["code", "precision"]) == {"code": 1.5, "precision": 2.5}


def test_shapley_of_three_factors_sums_to_the_total() -> None:
    rng = np.random.default_rng(0)
    subsets = [frozenset(c) for k in range(4) for c in __import__("itertools").combinations(["a", "b", "c"], k)]
    values = {s: float(rng.normal()) for s in subsets}
    phi = shapley(values, ["a", "b", "c"])
    assert sum(phi.values()) == pytest.approx(values[frozenset("abc")] - values[E])


def test_complete_lattice_gives_shapley_shares_with_their_spread() -> None:
    lat, runs = lattice({E: "a", X: "x", Y: "y", XY: "b"})
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "y": 2.0, "b": 4.0}), runs, np.random.default_rng(0), 200)
    by = {s.factors[0]: s for s in att.shares}
    assert by["code"].share == pytest.approx(1.5) and by["precision"].share == pytest.approx(2.5)
    assert by["code"].spread == (1.0, 2.0) and by["precision"].spread == (2.0, 3.0)
    assert att.total == 4.0 and att.unexplained == pytest.approx(0.0)
    assert att.orders == 2 and att.shapley and att.confounded == []
    assert sum(s.share for s in att.shares) == pytest.approx(att.total)


def test_one_order_only() -> None:
    lat, runs = lattice({E: "a", X: "x", XY: "b"})
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "b": 4.0}), runs, np.random.default_rng(0), 200)
    assert {s.factors[0]: s.share for s in att.shares} == {"code": 1.0, "precision": 3.0}
    assert att.orders == 1 and att.orders_possible == 2 and not att.shapley
    assert att.paths == [[["code"], ["precision"]]]


def test_no_ablation_means_confounded_and_unexplained() -> None:
    lat, runs = lattice({E: "a", XY: "b"})
    att = attribute(lat, Fixed({"a": 0.0, "b": 4.0}), runs, np.random.default_rng(0), 200)
    assert att.shares == []
    assert [(c.factors, c.share) for c in att.confounded] == [(("code", "precision"), 4.0)]
    assert att.unexplained == 4.0
    assert missing_nodes(lat) == [(E, X), (E, Y)]


def test_three_factors_with_a_partial_path() -> None:
    factors = ("code", "precision", "router")
    full = X | Y | Z
    lat, runs = lattice({E: "a", X: "x", full: "b"}, factors)
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "b": 3.0}), runs, np.random.default_rng(0), 100)
    assert [(s.factors, s.share) for s in att.shares] == [(("code",), 1.0)]
    assert [(c.factors, c.share) for c in att.confounded] == [(("precision", "router"), 2.0)]
    assert att.unexplained == pytest.approx(2.0)
    assert missing_nodes(lat) == [(X, XY), (X, X | Z)]


def test_no_changed_factor_leaves_everything_unexplained() -> None:
    lat = Lattice((), {E: ("a", "b")}, frozenset())
    # A and B at the same node: the headline sees the sides' runs (A's first, as compare passes them)
    att = attribute(lat, Fixed({"a": 0.0, "b": 0.0}), {E: [Run("a")]}, np.random.default_rng(0), 50)
    assert att.total == 0.0 and att.unexplained == 0.0 and att.shares == []


def test_one_run_per_node_gives_point_shares_and_says_inconclusive() -> None:
    lat, runs = lattice({E: "a", X: "x", Y: "y", XY: "b"})
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "y": 2.0, "b": 4.0}), runs, np.random.default_rng(0), 200)
    assert att.noise is None and att.total_ci is None and att.total_verdict == "inconclusive"
    assert all(s.ci is None and s.verdict == "inconclusive" for s in att.shares)


def test_intervals_come_from_the_replicates_and_have_the_t_width() -> None:
    # every node: 3 runs at mean +- 0.1 (SD 0.1 exactly), so the pooled SD is 0.1 with 4 x 2 = 8 df
    means = {E: 0.0, X: 1.0, Y: 2.0, XY: 4.0}
    values, nodes = {}, {}
    for s, m in means.items():
        name = "".join(sorted(s)) or "a"
        nodes[s] = (f"{name}0", f"{name}1", f"{name}2")
        values.update({f"{name}0": m - 0.1, f"{name}1": m, f"{name}2": m + 0.1})
    lat, runs = lattice(nodes)
    one = attribute(lat, Fixed(values), runs, np.random.default_rng(7), 4000)
    assert one == attribute(lat, Fixed(values), runs, np.random.default_rng(7), 4000)
    assert one.noise is not None and one.noise.df == 8 and one.noise.sd == pytest.approx(0.1)
    # total = mean(B) - mean(A): SD 0.1 x sqrt(2/3); its 95% interval is +- t(8) x that (scipy, not our code)
    from scipy import stats as sps
    half = sps.t.ppf(0.975, 8) * 0.1 * math.sqrt(2 / 3)
    assert one.total_ci is not None
    assert one.total_ci[1] - one.total_ci[0] == pytest.approx(2 * half, rel=0.06)
    assert one.total_verdict == "significant"
    for s in one.shares:
        assert s.ci is not None and s.ci[0] < s.share < s.ci[1] and s.verdict == "credited"


def test_no_share_is_credited_when_the_total_is_noise() -> None:
    # X helps and Y hurts by the same amount: the total is zero, each step is large
    lat, runs, head = replicated({E: 0.0, X: 0.5, Y: -0.5, XY: 0.0}, sd=0.05, runs=3, seed=3)
    att = attribute(lat, head, runs, np.random.default_rng(0), 2000)
    assert att.total_verdict == "indistinguishable from noise"
    assert att.shares and all(s.verdict == "indistinguishable from noise" for s in att.shares)
    assert any(s.ci is not None and (s.ci[0] > 0 or s.ci[1] < 0) for s in att.shares)  # would be credited alone


def test_a_noise_floor_gives_intervals_to_single_runs() -> None:
    lat, runs = lattice({E: "a", X: "x", Y: "y", XY: "b"})
    floor = Floor(sd=0.05, df=20, groups=5, runs=25, log_scale=True)
    att = attribute(lat, Fixed({"a": 0.0, "x": 1.0, "y": 2.0, "b": 4.0}), runs, np.random.default_rng(0), 2000,
                    floor=floor)
    assert att.noise is not None and att.noise.df == 20 and "noise floor 5%" in att.noise.source
    assert att.total_verdict == "significant" and all(s.verdict == "credited" for s in att.shares)


@pytest.mark.slow
def test_planted_shares_are_recovered_within_ten_percent_of_the_total() -> None:
    # 2x2 lattice, X = +20% and Y = +10% (log scale), 3 runs per node, between-run SD 5%; over 40 lattices the
    # mean recovered share lies within 10% of the total of the truth, and the 95% intervals cover it
    truth = {"code": math.log(1.2), "precision": math.log(1.1)}
    total = sum(truth.values())
    got: dict[str, list[float]] = {"code": [], "precision": []}
    covered = 0
    for seed in range(40):
        means = {E: 0.0, X: truth["code"], Y: truth["precision"], XY: total}
        lat, runs, head = replicated(means, sd=0.05, runs=3, seed=seed)
        att = attribute(lat, head, runs, np.random.default_rng(seed), 1000)
        for s in att.shares:
            got[s.factors[0]].append(s.share)
            assert s.ci is not None
            covered += s.ci[0] <= truth[s.factors[0]] <= s.ci[1]
    for factor, shares in got.items():
        assert abs(np.mean(shares) - truth[factor]) <= 0.10 * total
    assert covered / 80 >= 0.88


def test_longest_paths_prefer_single_factor_steps() -> None:
    full = X | Y | Z
    paths = longest_paths({X, XY, Y | Z}, full)
    assert paths == [[E, X, XY, full]]
    assert longest_paths(set(), full) == [[E, full]]
    all_orders = longest_paths({X, Y, Z, XY, X | Z, Y | Z}, full)
    assert len(all_orders) == math.factorial(3)


def _gated_run(rid: str, log_time: float) -> RunData:
    """A run whose first eval meeting the gate comes at step 30: its time to the gate is 30 step times,
    exp(log_time) seconds."""
    from datetime import UTC, datetime, timedelta

    from schemas.receipt import QualityGate, Receipt, Task, Workload

    start, step_s, n = datetime(2026, 11, 1, tzinfo=UTC), math.exp(log_time) / 30, 40
    time = start.timestamp() + step_s * np.arange(1, n + 1)
    gate = QualityGate(name="val-2.5", metric="loss", threshold=2.5, split="val")
    receipt = Receipt(id=rid, run_uuid=rid, status="succeeded", started_at=start,
                      ended_at=start + timedelta(seconds=n * step_s),
                      workload=Workload(task=Task(dataset="d", quality_gates=(gate,))))
    steps = {"step": np.arange(1, n + 1), "time": time, "step_time_s": np.full(n, step_s),
             "tokens": 100.0 * np.arange(1, n + 1)}
    evals = [{"step": s, "tokens": None, "split": "val", "source": None, "metric": "loss",
              "value": 3.0 if s < 30 else 2.4} for s in (10, 20, 30, 40)]
    return RunData(rid, receipt, steps, evals, {}, {})


def test_time_to_gate_shares_take_their_intervals_from_the_replicates() -> None:
    from scipy import stats as sps

    from ledger.analyses.goodput_compare import TimeToGate

    # log time to the gate: code -0.4, precision -0.3; every node 3 runs at mean -0.1, +0, +0.1 (SD 0.1)
    means = {E: 0.0, X: -0.4, Y: -0.3, XY: -0.7}
    nodes = {s: [_gated_run(f"{''.join(sorted(s)) or 'a'}{i}", 1.0 + m + d) for i, d in enumerate((-0.1, 0, 0.1))]
             for s, m in means.items()}
    lat = Lattice(("code", "precision"), {s: tuple(r.id for r in runs) for s, runs in nodes.items()}, frozenset())
    att = attribute(lat, TimeToGate(), nodes, np.random.default_rng(5), 4000)
    # (times are unix seconds, so the logs hold to about 1e-7)
    assert att.total == pytest.approx(-0.7, abs=1e-6) and att.noise is not None and att.noise.df == 8
    assert att.noise.sd == pytest.approx(0.1, rel=1e-5)
    half = sps.t.ppf(0.975, 8) * 0.1 * math.sqrt(2 / 3)  # the total's interval: t(8) x SD x sqrt(1/3 + 1/3)
    assert att.total_ci is not None and att.total_ci[1] - att.total_ci[0] == pytest.approx(2 * half, rel=0.06)
    assert {s.factors[0]: round(s.share, 6) for s in att.shares} == {"code": -0.4, "precision": -0.3}
    for s in att.shares:  # never a zero-width interval
        assert s.ci is not None and s.ci[1] - s.ci[0] > 0.1 and s.verdict == "credited"
    # one run per node and no floor: the shares are points, inconclusive, with no interval at all
    single = {s: runs[1:2] for s, runs in nodes.items()}
    lat1 = Lattice(("code", "precision"), {s: (r[0].id,) for s, r in single.items()}, frozenset())
    one = attribute(lat1, TimeToGate(), single, np.random.default_rng(5), 500)
    assert one.total_verdict == "inconclusive" and one.total_ci is None
    assert all(s.ci is None and s.verdict == "inconclusive" for s in one.shares)
