"""Attribution: which changed factor explains which part of a headline metric's change from A to B.

**The ablation lattice.** Let F be the causal factors in which A and B differ. A receipt of the ledger is
a node of the lattice when every factor of it equals A's or B's value (and every factor outside F equals
both); it sits at the subset S of F it takes from B. A is the empty set, B is F. Edges join receipts one
factor apart: the ablation graph restricted to what lies between A and B.

**Shares.** A headline metric (:class:`Headline`) gives every node a value on a log scale, so the total
``log(B / A)`` telescopes along any monotone path from A to B into one contribution per step. A path of
single-factor steps is an *order* of F; the share of a factor is its contribution averaged over the
available orders — the Shapley value when all ``|F|!`` orders exist — and the spread of its contributions
over orders shows interaction. Shares sum to the total by construction.

**Confounded factors.** Where no single-factor path exists, the longest paths through the nodes that do
exist are used: a step that changes several factors at once is reported as *confounded* ("{factors}
changed together") with its share, and the runs that would split it are listed
(:mod:`ledger.analyses.ablations`). The **unexplained** remainder is the part of the total not credited to
any single factor (the confounded steps; all of it when no causal factor differs).

**Uncertainty.** Each node's value has bootstrap draws (resampling steps within runs, and runs within a
node of several replicates). Attribution compares *different runs*, so the draws also get run-to-run noise:
a normal term with the headline's ``run_noise`` SD (on the log scale; divided by the square root of the
node's runs), half the metric's noise threshold by default (throughput 2.5%, loss 0.5%) — machine noise a
within-run bootstrap cannot see. The shares are recomputed per draw, and their percentile intervals are
the CIs. Headline metrics are a registry: :data:`BUILTIN_HEADLINES` plus the ``HEADLINES`` of any other
module of :mod:`ledger.analyses` (time to a quality gate plugs in there).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ledger.analyses import matched, stats
from ledger.analyses.groups import SEED, Catalog, Side
from ledger.analyses.metrics import Direction, tokens_per_s_per_device
from ledger.analyses.series import RunData
from schemas.factors import CAUSAL_FACTORS

MAX_FACTORS = 8
"""Beyond this many changed factors, paths are not enumerated (everything is reported confounded)."""
MAX_PATHS = 5040
"""At most this many paths are averaged."""

Subset = frozenset[str]


# --------------------------------------------------------------------------------------------- lattice
@dataclass(frozen=True)
class Lattice:
    """The nodes between A and B."""

    factors: tuple[str, ...]
    """F: the changed causal factors, in DESIGN.md order."""
    nodes: dict[Subset, tuple[str, ...]]
    """Subset of F taken from B -> receipt ids at that node (A's at the empty set, B's at F)."""
    free: frozenset[str]
    """Factors not compared (the seed, when a side is a replicate group)."""

    def edges(self) -> list[tuple[Subset, Subset]]:
        """Pairs of existing nodes one factor apart (the ablation graph between A and B)."""
        return [(s, t) for s in self.nodes for t in self.nodes if s < t and len(t - s) == 1]


def build_lattice(catalog: Catalog, a: Side, b: Side) -> Lattice:
    """The lattice between two sides over every receipt of the catalog."""
    free = frozenset({SEED}) if a.is_group or b.is_group else frozenset()
    ref_a, ref_b = catalog[a.ids[0]].factors, catalog[b.ids[0]].factors
    order = [f.value for f in CAUSAL_FACTORS if f.value not in free]
    changed = tuple(f for f in order if ref_a[f] != ref_b[f])
    full = frozenset(changed)
    nodes: dict[Subset, list[str]] = {frozenset(): list(a.ids), full: list(b.ids)}
    taken = set(a.ids) | set(b.ids)
    for entry in catalog.entries.values():
        if entry.id in taken:
            continue
        subset: set[str] = set()
        for f in order:
            v = entry.factors[f]
            if f not in full:
                if v != ref_a[f]:
                    break
            elif v == ref_b[f]:
                subset.add(f)
            elif v != ref_a[f]:
                break
        else:
            s = frozenset(subset)
            if s and s != full:
                nodes.setdefault(s, []).append(entry.id)
    return Lattice(changed, {s: tuple(ids) for s, ids in nodes.items()}, free)


# ------------------------------------------------------------------------------------------- headlines
@dataclass(frozen=True)
class NodeValues:
    """A headline's value at each node, on a log scale, with bootstrap draws."""

    point: NDArray[np.float64]
    """(nodes,) log values; NaN where the node has none."""
    draws: NDArray[np.float64]
    """(n_boot, nodes) draws of the log values."""
    missing: dict[int, str] = field(default_factory=dict)
    """Node index -> why it has no value."""
    note: str = ""


@runtime_checkable
class Headline(Protocol):
    """A headline metric attribution splits over factors. ``values`` gets the runs of each node. An optional
    ``run_noise`` attribute (see the module docstring) adds run-to-run noise to the draws."""

    @property
    def name(self) -> str:
        """e.g. throughput."""

    @property
    def metric(self) -> str:
        """The row of the metrics table it corresponds to (e.g. 'tokens/s per device'), or a description."""

    @property
    def direction(self) -> Direction:
        """Which way is better."""

    # Optional attribute ``run_noise: float``: SD of one run's log value between runs of one configuration
    # (machine noise), added to the draws; absent or 0 adds none.

    def values(self, nodes: Sequence[Sequence[RunData]], rng: np.random.Generator, n_boot: int) -> NodeValues:
        """Log values and bootstrap draws per node."""


def _combine_runs(points: list[float], draws: list[NDArray[np.float64]], rng: np.random.Generator,
                  n_boot: int) -> tuple[float, NDArray[np.float64]]:
    """A node's value from its runs: the mean of their log values; draws resample runs, then within runs."""
    if len(points) == 1:
        return points[0], draws[0]
    stacked = np.stack(draws, axis=1)  # (n_boot, runs)
    pick = rng.integers(0, len(points), size=(n_boot, len(points)))
    return float(np.mean(points)), stacked[np.arange(n_boot)[:, None], pick].mean(axis=1)


@dataclass(frozen=True)
class Throughput:
    """Median tokens/s per device over the steady steps (see :mod:`ledger.analyses.metrics`)."""

    name: str = "throughput"
    metric: str = "tokens/s per device"
    direction: Direction = "higher"
    run_noise: float = 0.025

    def values(self, nodes: Sequence[Sequence[RunData]], rng: np.random.Generator, n_boot: int) -> NodeValues:
        point = np.full(len(nodes), math.nan)
        draws = np.full((n_boot, len(nodes)), math.nan)
        missing: dict[int, str] = {}
        for i, runs in enumerate(nodes):
            points, run_draws = [], []
            for run in runs:
                x = tokens_per_s_per_device(run)
                if isinstance(x, str):
                    missing[i] = f"{run.label}: {x}"
                    break
                points.append(math.log(float(np.median(x))))
                run_draws.append(np.log(stats.bootstrap_quantile(x, 0.5, rng, n_boot)))
            else:
                point[i], draws[:, i] = _combine_runs(points, run_draws, rng, n_boot)
        return NodeValues(point, draws, missing, "log of the median tokens/s per device")


@dataclass(frozen=True)
class LossAtTokens:
    """Mean training loss over the last 20% of the token range every node covers (matched tokens)."""

    name: str = "loss at matched tokens"
    metric: str = "loss @ matched tokens"
    direction: Direction = "lower"
    run_noise: float = 0.005

    def values(self, nodes: Sequence[Sequence[RunData]], rng: np.random.Generator, n_boot: int) -> NodeValues:
        point = np.full(len(nodes), math.nan)
        draws = np.full((n_boot, len(nodes)), math.nan)
        missing: dict[int, str] = {}
        curves: list[matched.Curve] = []
        owner: list[int] = []
        for i, runs in enumerate(nodes):
            for run in runs:
                c = matched.curve(run, "tokens")
                if isinstance(c, str):
                    missing[i] = f"{run.label}: {c}"
                else:
                    curves.append(c)
                    owner.append(i)
        keep = [k for k, i in enumerate(owner) if i not in missing]
        curves, owner = [curves[k] for k in keep], [owner[k] for k in keep]
        grid = matched.common_grid(curves)
        if isinstance(grid, str):
            return NodeValues(point, draws, {i: grid for i in range(len(nodes))})
        values = matched.matched_values(curves, grid)
        if (values <= 0).any():
            return NodeValues(point, draws, {i: "non-positive loss: no log scale" for i in range(len(nodes))})
        run_point = np.log(values.mean(axis=0))
        run_draws = np.log(stats.paired_bootstrap_means(values, rng, n_boot))
        for i in sorted(set(owner)):
            cols = [k for k, o in enumerate(owner) if o == i]
            point[i], draws[:, i] = _combine_runs([float(run_point[k]) for k in cols],
                                                  [run_draws[:, k] for k in cols], rng, n_boot)
        return NodeValues(point, draws, missing, "log of the " + matched.describe("tokens", grid))


BUILTIN_HEADLINES: tuple[Headline, ...] = (Throughput(), LossAtTokens())
"""Headline metrics attribution always splits (time to a gate arrives through a module's HEADLINES)."""


def headlines(extra: Sequence[Any] = ()) -> list[Headline]:
    """The built-in headlines and any others given (see :func:`ledger.analyses.metrics.plugins`)."""
    return [*BUILTIN_HEADLINES, *(h for h in extra if isinstance(h, Headline))]


# ----------------------------------------------------------------------------------------------- paths
def longest_paths(available: set[Subset], full: Subset, limit: int = MAX_PATHS) -> list[list[Subset]]:
    """Monotone paths from the empty set to ``full`` through ``available`` nodes with the most steps
    (single-factor steps wherever the nodes allow), at most ``limit`` of them, in a stable order."""
    start: Subset = frozenset()
    nodes = sorted(available | {start, full}, key=lambda s: (len(s), sorted(s)))
    depth: dict[Subset, int] = {full: 0}
    for s in reversed(nodes):
        if s == full:
            continue
        nexts = [depth[t] for t in nodes if s < t and t in depth]
        if nexts:
            depth[s] = 1 + max(nexts)
    if start not in depth:
        return []
    paths: list[list[Subset]] = []

    def walk(path: list[Subset]) -> None:
        if len(paths) >= limit:
            return
        s = path[-1]
        if s == full:
            paths.append(list(path))
            return
        for t in nodes:
            if s < t and t in depth and depth[t] == depth[s] - 1:
                walk([*path, t])

    walk([start])
    return paths


def shapley(values: Mapping[Subset, float], factors: Sequence[str]) -> dict[str, float]:
    """Shapley values of a complete lattice of values: the average over all orders of each factor's
    marginal contribution, ``sum over S of |S|! (n - |S| - 1)! / n! (v(S + f) - v(S))``."""
    n = len(factors)
    out: dict[str, float] = {}
    for f in factors:
        others = [g for g in factors if g != f]
        total = 0.0
        for k in range(n):
            weight = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for subset in itertools.combinations(others, k):
                s = frozenset(subset)
                total += weight * (values[s | {f}] - values[s])
        out[f] = total
    return out


# ---------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Share:
    """The part of the total credited to one factor, or to a set of factors that changed together."""

    factors: tuple[str, ...]
    share: float
    """Contribution to log(B / A) (natural log)."""
    ci: tuple[float, float]
    """Percentile bootstrap interval of the share."""
    spread: tuple[float, float]
    """Smallest and largest contribution over the paths averaged (their difference: interaction)."""
    fraction: float | None
    """share / total (None when the total is 0)."""


@dataclass(frozen=True)
class HeadlineAttribution:
    """How one headline's change splits over factors."""

    headline: str
    metric: str
    direction: Direction
    total: float | None
    """log(B / A) of the headline (None when unavailable)."""
    total_ci: tuple[float, float] | None
    shares: list[Share]
    """Single factors."""
    confounded: list[Share]
    """Sets of factors that changed together on every available path."""
    unexplained: float | None
    """total - sum of single-factor shares."""
    unexplained_ci: tuple[float, float] | None
    paths: list[list[list[str]]]
    """The paths averaged: each a list of steps, each step the factors it changes."""
    orders: int
    """Single-factor paths (orders) available."""
    orders_possible: int
    """|F|!."""
    reason: str | None = None
    """Why the headline could not be attributed."""
    note: str = ""
    run_noise: float = 0.0
    """The run-to-run noise SD added to the draws."""

    @property
    def shapley(self) -> bool:
        """True when every order was available (the shares are exact Shapley values)."""
        return self.orders == self.orders_possible and self.orders > 0


def _share(factors: tuple[str, ...], contrib: NDArray[np.float64], draws: NDArray[np.float64], total: float,
           level: float) -> Share:
    return Share(factors, float(contrib.mean()), stats.percentile_interval(draws, level),
                 (float(contrib.min()), float(contrib.max())), float(contrib.mean()) / total if total else None)


def attribute(lattice: Lattice, headline: Headline, node_runs: Mapping[Subset, Sequence[RunData]],
              rng: np.random.Generator, n_boot: int, level: float = 0.95) -> HeadlineAttribution:
    """Split ``headline``'s log-ratio from A to B over the lattice's factors."""
    keys = list(node_runs)
    index = {s: i for i, s in enumerate(keys)}
    full = frozenset(lattice.factors)
    vals = headline.values([node_runs[s] for s in keys], rng, n_boot)
    possible = math.factorial(len(lattice.factors))

    def unavailable(reason: str) -> HeadlineAttribution:
        return HeadlineAttribution(headline.name, headline.metric, headline.direction, None, None, [], [], None,
                                   None, [], 0, possible, reason, vals.note)

    for end, side in ((frozenset(), "A"), (full, "B")):
        if end not in index or end in {keys[i] for i in vals.missing} or not math.isfinite(vals.point[index[end]]):
            why = vals.missing.get(index.get(end, -1), "no value")
            return unavailable(f"{side}: {why}")
    noise = float(getattr(headline, "run_noise", 0.0) or 0.0)
    if noise > 0:
        sizes = np.array([max(1, len(node_runs[s])) for s in keys], dtype=np.float64)
        vals = replace(vals, draws=vals.draws + rng.standard_normal(vals.draws.shape) * (noise / np.sqrt(sizes)))
    total = float(vals.point[index[full]] - vals.point[index[frozenset()]])
    total_draws = vals.draws[:, index[full]] - vals.draws[:, index[frozenset()]]
    total_ci = stats.percentile_interval(total_draws, level)
    if not lattice.factors:
        return HeadlineAttribution(headline.name, headline.metric, headline.direction, total, total_ci, [], [],
                                   total, total_ci, [], 0, 1, None, vals.note, noise)
    available = {s for s in keys if math.isfinite(vals.point[index[s]])}
    if len(lattice.factors) > MAX_FACTORS:
        paths = [[frozenset(), full]]
    else:
        paths = longest_paths(available, full)
    # keep the paths of the most common partition into steps (stable tie-break)
    partitions = Counter(frozenset(t - s for s, t in itertools.pairwise(p)) for p in paths)
    best = max(partitions.items(), key=lambda kv: (kv[1], -len(kv[0]), sorted(sorted(x) for x in kv[0])))[0]
    paths = [p for p in paths if frozenset(t - s for s, t in itertools.pairwise(p)) == best]
    order = [f.value for f in CAUSAL_FACTORS]
    steps = sorted(best, key=lambda st: (len(st), min(order.index(f) for f in st)))
    contrib = {st: np.empty(len(paths)) for st in steps}
    contrib_draws = {st: np.zeros(n_boot) for st in steps}
    for k, p in enumerate(paths):
        for s, t in itertools.pairwise(p):
            contrib[t - s][k] = vals.point[index[t]] - vals.point[index[s]]
            contrib_draws[t - s] += vals.draws[:, index[t]] - vals.draws[:, index[s]]
    shares: list[Share] = []
    confounded: list[Share] = []
    for st in steps:
        factors = tuple(f for f in order if f in st)
        share = _share(factors, contrib[st], contrib_draws[st] / len(paths), total, level)
        (shares if len(st) == 1 else confounded).append(share)
    single = sum((contrib_draws[st] / len(paths) for st in steps if len(st) == 1), np.zeros(n_boot))
    unexplained = total - sum(s.share for s in shares)
    orders = len(paths) if all(len(st) == 1 for st in steps) else 0
    shown = [[sorted(t - s, key=order.index) for s, t in itertools.pairwise(p)] for p in paths[:24]]
    return HeadlineAttribution(headline.name, headline.metric, headline.direction, total, total_ci, shares,
                               confounded, unexplained, stats.percentile_interval(total_draws - single, level),
                               shown, orders, possible, None, vals.note, noise)


def missing_nodes(lattice: Lattice) -> list[tuple[Subset, Subset]]:
    """The runs that would split the confounded steps of the lattice as it exists: for each multi-factor
    step S -> T of the longest paths through existing nodes, (S, S + {f}) for every f of T - S without a
    receipt. Each is one factor away from a node that exists."""
    full = frozenset(lattice.factors)
    if not lattice.factors:
        return []
    if len(lattice.factors) > MAX_FACTORS:
        paths = [[frozenset(), full]]
    else:
        paths = longest_paths(set(lattice.nodes), full)
    out: list[tuple[Subset, Subset]] = []
    seen: set[Subset] = set()
    order = [f.value for f in CAUSAL_FACTORS]
    for p in paths:
        for s, t in itertools.pairwise(p):
            if len(t - s) < 2:
                continue
            for f in sorted(t - s, key=order.index):
                target = s | {f}
                if target not in lattice.nodes and target not in seen:
                    seen.add(target)
                    out.append((s, target))
    return out
