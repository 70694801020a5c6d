"""Attribution against independent computations: the share intervals carry the run-to-run noise (their
width against a simulation of the same model, drawn here with numpy), and the lattice admits only receipts
whose every factor is A's or B's value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from ledger.analyses.attribution import Lattice, NodeValues, _noise, attribute, build_lattice, node_values
from ledger.analyses.groups import Catalog, Entry, Side
from schemas.factors import CAUSAL_FACTORS

E: frozenset[str] = frozenset()
CODE = frozenset({"code"})


@dataclass(frozen=True)
class Run:
    value: float


@dataclass(frozen=True)
class Given:
    """A headline whose per-run log values are the runs' own."""

    name: str = "given"
    metric: str = "given"
    direction: Any = "higher"

    def values(self, nodes: Sequence[Sequence[Any]]) -> NodeValues:
        return node_values([[r.value for r in runs] for runs in nodes], "given")


A_RUNS = (0.0, 0.2, 0.4)  # mean 0.2, SS 0.08
B_RUNS = (0.3, 0.5, 0.7)  # mean 0.5, SS 0.08: pooled SD sqrt(0.16 / 4) = 0.2 on 4 df


def test_the_noise_is_the_pooled_between_run_sd() -> None:
    vals = node_values([list(A_RUNS), list(B_RUNS), [9.0]], "x")
    noise = _noise(vals, None)
    assert noise is not None
    assert (noise.sd, noise.df) == (pytest.approx(0.2, rel=1e-12), 4)


def test_the_total_interval_is_as_wide_as_the_run_to_run_noise_makes_it() -> None:
    lat = Lattice(("code",), {E: ("a",), CODE: ("b",)}, frozenset())
    runs = {E: [Run(v) for v in A_RUNS], CODE: [Run(v) for v in B_RUNS]}
    got = attribute(lat, Given(), runs, np.random.default_rng(1), n_boot=20_000)
    assert got.total == pytest.approx(0.3, rel=1e-12)
    assert got.total_ci is not None
    # the same model simulated independently: each node's mean moves by t(4) x 0.2 / sqrt(3)
    rng = np.random.default_rng(2)
    diff = 0.3 + 0.2 / math.sqrt(3) * (rng.standard_t(4, 200_000) - rng.standard_t(4, 200_000))
    lo, hi = np.quantile(diff, [0.025, 0.975])
    assert got.total_ci == pytest.approx((lo, hi), abs=0.02)
    assert got.total_verdict == "indistinguishable from noise"  # the interval, about +-0.45, holds zero
    share = got.shares[0]
    assert share.factors == ("code",) and share.verdict == "indistinguishable from noise"
    assert share.ci == pytest.approx((lo, hi), abs=0.02)


def entry(rid: str, **changed: str) -> Entry:
    factors = {f.value: "base" for f in CAUSAL_FACTORS}
    factors.update(changed)
    return Entry(rid, rid, {}, None, {}, factors)


def test_the_lattice_takes_only_receipts_whose_factors_are_as_or_bs() -> None:
    entries = [
        entry("a", code="a", precision="a"),
        entry("b", code="b", precision="b"),
        entry("code-only", code="b", precision="a"),
        entry("precision-only", code="a", precision="b"),
        entry("third-code", code="c", precision="a"),  # a third value of a changed factor: not a node
        entry("third-precision", code="b", precision="c"),
        entry("router-differs", code="b", precision="a", router="other"),  # an unchanged factor differs
        entry("a-again", code="a", precision="a", seed="7"),  # a replicate of A: not a node between them
    ]
    lat = build_lattice(Catalog(entries), Side("A", "a", ("a",), False), Side("B", "b", ("b",), False))
    assert lat.factors == ("code", "precision")
    assert lat.nodes == {E: ("a",), frozenset({"code", "precision"}): ("b",), CODE: ("code-only",),
                         frozenset({"precision"}): ("precision-only",)}
