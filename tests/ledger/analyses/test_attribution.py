"""Attribution on hand-computed lattices: Shapley values, partial orders, confounded steps, missing runs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ledger.analyses.attribution import Lattice, NodeValues, attribute, longest_paths, missing_nodes, shapley

E: frozenset[str] = frozenset()
X, Y, Z = frozenset({"code"}), frozenset({"precision"}), frozenset({"router"})
XY = X | Y


@dataclass(frozen=True)
class Run:
    id: str


@dataclass(frozen=True)
class Fixed:
    """A headline whose node values are given by run id (draws: the value plus seeded noise)."""

    values_by_id: Mapping[str, float]
    spread: float = 0.0
    name: str = "fixed"
    metric: str = "fixed"
    direction: Any = "higher"

    def values(self, nodes: Sequence[Sequence[Any]], rng: np.random.Generator, n_boot: int) -> NodeValues:
        point = np.array([np.mean([self.values_by_id[r.id] for r in runs]) for runs in nodes])
        draws = point + self.spread * rng.standard_normal((n_boot, len(nodes)))
        return NodeValues(point, draws)


def lattice(nodes: Mapping[frozenset[str], str], factors: tuple[str, ...] = ("code", "precision")) -> tuple[
        Lattice, dict[frozenset[str], list[Run]]]:
    lat = Lattice(factors, {s: (rid,) for s, rid in nodes.items()}, frozenset())
    return lat, {s: [Run(rid)] for s, rid in nodes.items()}


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


def test_cis_cover_the_shares_and_are_reproducible() -> None:
    lat, runs = lattice({E: "a", X: "x", Y: "y", XY: "b"})
    head = Fixed({"a": 0.0, "x": 1.0, "y": 2.0, "b": 4.0}, spread=0.05)
    one = attribute(lat, head, runs, np.random.default_rng(7), 500)
    two = attribute(lat, head, runs, np.random.default_rng(7), 500)
    assert one == two
    for s in one.shares:
        assert s.ci[0] < s.share < s.ci[1]
        assert s.ci[1] - s.ci[0] < 0.3
    assert one.total_ci is not None and one.total_ci[0] < 4.0 < one.total_ci[1]


def test_longest_paths_prefer_single_factor_steps() -> None:
    full = X | Y | Z
    paths = longest_paths({X, XY, Y | Z}, full)
    assert paths == [[E, X, XY, full]]
    assert longest_paths(set(), full) == [[E, full]]
    all_orders = longest_paths({X, Y, Z, XY, X | Z, Y | Z}, full)
    assert len(all_orders) == math.factorial(3)
