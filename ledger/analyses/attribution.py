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

**Uncertainty.** A node's value is the mean of its runs' values; how much it could move is decided by the
run-to-run variance of one configuration (the unit of evidence is the run), pooled from the nodes that hold
several runs (replicates) and the ledger's noise floor for the headline on that hardware
(:mod:`ledger.analyses.evidence`). Draws put a Student t deviate of SD ``s / sqrt(runs)`` on every node; the
shares are recomputed per draw, and their percentile intervals are the CIs. **Coherence**: when the total's
interval contains zero, no share is credited (every share is "indistinguishable from noise"); a share whose
interval contains zero is "indistinguishable from noise" too; without any between-run evidence the shares
are point estimates marked "inconclusive". Headline metrics are a registry: :data:`BUILTIN_HEADLINES` plus
the ``HEADLINES`` of any other module of :mod:`ledger.analyses` (time to a quality gate plugs in there).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ledger.analyses import matched, stats
from ledger.analyses.builtin_metrics import steps_per_s, tokens_per_s_per_device
from ledger.analyses.evidence import Floor
from ledger.analyses.groups import SEED, Catalog, Side
from ledger.analyses.metrics import Direction
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
    """Factors not compared: the seed (a seed change is run-to-run noise, never a cause)."""

    def edges(self) -> list[tuple[Subset, Subset]]:
        """Pairs of existing nodes one factor apart (the ablation graph between A and B)."""
        return [(s, t) for s in self.nodes for t in self.nodes if s < t and len(t - s) == 1]


def build_lattice(catalog: Catalog, a: Side, b: Side) -> Lattice:
    """The lattice between two sides over every receipt of the catalog."""
    free = frozenset({SEED})  # a seed change is run-to-run noise, never a cause
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
    """A headline's value at each node, on a log scale: per run, and their mean."""

    point: NDArray[np.float64]
    """(nodes,) mean of the runs' log values; NaN where the node has none."""
    runs: list[list[float]]
    """Per node, each run's log value (empty where the node has none)."""
    missing: dict[int, str] = field(default_factory=dict)
    """Node index -> why it has no value."""
    note: str = ""


def node_values(per_run: Sequence[Sequence[float | str]], note: str) -> NodeValues:
    """NodeValues from each node's per-run log values (a string: why that run has none)."""
    point = np.full(len(per_run), math.nan)
    runs: list[list[float]] = []
    missing: dict[int, str] = {}
    for i, values in enumerate(per_run):
        why = next((v for v in values if isinstance(v, str)), None)
        if why is not None or not values:
            missing[i] = why or "no runs"
            runs.append([])
            continue
        logs = [float(v) for v in values]
        runs.append(logs)
        point[i] = float(np.mean(logs))
    return NodeValues(point, runs, missing, note)


@runtime_checkable
class Headline(Protocol):
    """A headline metric attribution splits over factors. ``values`` gets the runs of each node and returns
    each run's log value."""

    @property
    def name(self) -> str:
        """e.g. throughput."""

    @property
    def metric(self) -> str:
        """The row of the metrics table it corresponds to (e.g. 'tokens/s per device'); its noise floor is
        the row's."""

    @property
    def direction(self) -> Direction:
        """Which way is better."""

    def values(self, nodes: Sequence[Sequence[RunData]]) -> NodeValues:
        """Per-run log values per node."""


@dataclass(frozen=True)
class Throughput:
    """Median tokens/s per device over the steady steps (see :mod:`ledger.analyses.metrics`); where some run has
    no tokens (a wrapped launch that printed none), the median steps/s of every run, one unit for all."""

    name: str = "throughput"
    metric: str = "tokens/s per device"
    direction: Direction = "higher"

    def values(self, nodes: Sequence[Sequence[RunData]]) -> NodeValues:
        every = [run for runs in nodes for run in runs if run.n_steps]
        tokens = all(not isinstance(tokens_per_s_per_device(run), str) for run in every)
        rate = tokens_per_s_per_device if tokens else steps_per_s
        per_run: list[list[float | str]] = []
        for runs in nodes:
            got: list[float | str] = []
            for run in runs:
                x = rate(run)
                got.append(f"{run.label}: {x}" if isinstance(x, str) else math.log(stats.median(x)))
            per_run.append(got)
        return node_values(per_run, "log of the median " + ("tokens/s per device" if tokens else
                                                            "steps/s (tokens unknown on some run)"))


@dataclass(frozen=True)
class LossAtTokens:
    """Mean training loss over the last 20% of the token range every node covers (matched tokens)."""

    name: str = "loss at matched tokens"
    metric: str = "loss @ matched tokens"
    direction: Direction = "lower"

    def values(self, nodes: Sequence[Sequence[RunData]]) -> NodeValues:
        curves: list[matched.Curve] = []
        owner: list[int] = []
        broken: dict[int, str] = {}
        for i, runs in enumerate(nodes):
            for run in runs:
                c = matched.curve(run, "tokens")
                if isinstance(c, str):
                    broken[i] = f"{run.label}: {c}"
                else:
                    curves.append(c)
                    owner.append(i)
        keep = [k for k, i in enumerate(owner) if i not in broken]
        curves, owner = [curves[k] for k in keep], [owner[k] for k in keep]
        grid = matched.common_grid(curves)
        if isinstance(grid, str):
            return node_values([[grid] for _ in nodes], "")
        values = matched.matched_values(curves, grid).mean(axis=0)
        per_run: list[list[float | str]] = [[broken[i]] if i in broken else [] for i in range(len(nodes))]
        for k, i in enumerate(owner):
            per_run[i].append(math.log(values[k]) if values[k] > 0 else "non-positive loss: no log scale")
        return node_values(per_run, "log of the " + matched.describe("tokens", grid))


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
    ci: tuple[float, float] | None
    """Percentile interval of the share under the run-to-run noise (None without between-run evidence)."""
    spread: tuple[float, float]
    """Smallest and largest contribution over the paths averaged (their difference: interaction)."""
    fraction: float | None
    """share / total (None when the total is 0)."""
    verdict: str = "inconclusive"
    """credited (its interval excludes zero and so does the total's), indistinguishable from noise, or
    inconclusive (no between-run evidence: no interval)."""


@dataclass(frozen=True)
class Noise:
    """The run-to-run variance the intervals rest on."""

    sd: float
    """SD of one run's log value."""
    df: int
    source: str
    """e.g. 'replicates at 3 nodes (5 df) + noise floor 4.8% (...)'."""


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
    noise: Noise | None = None
    """The between-run variance behind the intervals; None: no evidence (point estimates only)."""
    total_verdict: str = "inconclusive"
    """significant (the total's interval excludes zero), indistinguishable from noise, or inconclusive."""

    @property
    def shapley(self) -> bool:
        """True when every order was available (the shares are exact Shapley values)."""
        return self.orders == self.orders_possible and self.orders > 0


def _noise(vals: NodeValues, floor: Floor | None) -> Noise | None:
    """Pooled run-to-run SD from nodes with several runs, plus the noise floor."""
    ss, df, nodes = 0.0, 0, 0
    for runs in vals.runs:
        if len(runs) >= 2:
            x = np.asarray(runs)
            ss += float(((x - x.mean()) ** 2).sum())
            df += x.size - 1
            nodes += 1
    parts = [f"replicates at {nodes} node{'s' * (nodes != 1)} ({df} df)"] if df else []
    if floor is not None and floor.log_scale:
        ss += floor.df * floor.sd**2
        df += floor.df
        parts.append(floor.describe())
    if df == 0:
        return None
    return Noise(math.sqrt(ss / df), df, " + ".join(parts))


def _excludes_zero(ci: tuple[float, float] | None) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def attribute(lattice: Lattice, headline: Headline, node_runs: Mapping[Subset, Sequence[RunData]],
              rng: np.random.Generator, n_boot: int, level: float = 0.95,
              floor: Floor | None = None) -> HeadlineAttribution:
    """Split ``headline``'s log-ratio from A to B over the lattice's factors (the module docstring)."""
    keys = list(node_runs)
    index = {s: i for i, s in enumerate(keys)}
    full = frozenset(lattice.factors)
    vals = headline.values([node_runs[s] for s in keys])
    possible = math.factorial(len(lattice.factors))

    def unavailable(reason: str) -> HeadlineAttribution:
        return HeadlineAttribution(headline.name, headline.metric, headline.direction, None, None, [], [], None,
                                   None, [], 0, possible, reason, vals.note)

    for end, side in ((frozenset(), "A"), (full, "B")):
        if end not in index or index[end] in vals.missing or not math.isfinite(vals.point[index[end]]):
            why = vals.missing.get(index.get(end, -1), "no value")
            return unavailable(f"{side}: {why}")
    noise = _noise(vals, floor)
    draws = None
    if noise is not None:
        from scipy import stats as sps

        sizes = np.array([max(1, len(r)) for r in vals.runs], dtype=np.float64)
        deviates = sps.t.rvs(noise.df, size=(n_boot, len(keys)), random_state=rng)
        draws = vals.point[None, :] + deviates * (noise.sd / np.sqrt(sizes))[None, :]
    a, b = index[frozenset()], index[full]
    total = float(vals.point[b] - vals.point[a])
    total_ci = stats.percentile_interval(draws[:, b] - draws[:, a], level) if draws is not None else None
    total_verdict = ("inconclusive" if total_ci is None else
                     "significant" if _excludes_zero(total_ci) else "indistinguishable from noise")
    if not lattice.factors:
        return HeadlineAttribution(headline.name, headline.metric, headline.direction, total, total_ci, [], [],
                                   total, total_ci, [], 0, 1, None, vals.note, noise, total_verdict)
    available = {s for s in keys if math.isfinite(vals.point[index[s]])}
    paths = [[frozenset(), full]] if len(lattice.factors) > MAX_FACTORS else longest_paths(available, full)
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
            if draws is not None:
                contrib_draws[t - s] += draws[:, index[t]] - draws[:, index[s]]
    shares: list[Share] = []
    confounded: list[Share] = []
    for st in steps:
        factors = tuple(f for f in order if f in st)
        c = contrib[st]
        ci = stats.percentile_interval(contrib_draws[st] / len(paths), level) if draws is not None else None
        verdict = ("inconclusive" if ci is None else
                   "credited" if _excludes_zero(ci) and total_verdict == "significant" else
                   "indistinguishable from noise")
        share = Share(factors, float(c.mean()), ci, (float(c.min()), float(c.max())),
                      float(c.mean()) / total if total else None, verdict)
        (shares if len(st) == 1 else confounded).append(share)
    unexplained = total - sum(s.share for s in shares)
    unexplained_ci = None
    if draws is not None:
        single = sum((contrib_draws[st] / len(paths) for st in steps if len(st) == 1), np.zeros(n_boot))
        unexplained_ci = stats.percentile_interval(draws[:, b] - draws[:, a] - single, level)
    orders = len(paths) if all(len(st) == 1 for st in steps) else 0
    shown = [[sorted(t - s, key=order.index) for s, t in itertools.pairwise(p)] for p in paths[:24]]
    return HeadlineAttribution(headline.name, headline.metric, headline.direction, total, total_ci, shares,
                               confounded, unexplained, unexplained_ci, shown, orders, possible, None, vals.note,
                               noise, total_verdict)


def confounded_sets(lattice: Lattice) -> list[tuple[str, ...]]:
    """Factor sets that changed together on the longest paths through the receipts that exist: decided by the
    factor diff and the lattice alone, whatever metrics the runs have."""
    if not lattice.factors:
        return []
    full = frozenset(lattice.factors)
    paths = [[frozenset(), full]] if len(lattice.factors) > MAX_FACTORS else longest_paths(set(lattice.nodes), full)
    order = [f.value for f in CAUSAL_FACTORS]
    found: dict[tuple[str, ...], None] = {}
    for p in paths:
        for s, t in itertools.pairwise(p):
            if len(t - s) > 1:
                found.setdefault(tuple(f for f in order if f in t - s))
    return list(found)


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
