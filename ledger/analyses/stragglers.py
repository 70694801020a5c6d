"""Stragglers: which ranks and nodes set the pace of a synchronous job, and the time lost waiting on them.

The approach of NVIDIA's resiliency extension (nvidia-resiliency-ext, straggler detection): performance
scores from 0 (worst) to 1 (best), the ratio of a reference time to the rank's time —

- **relative score** of a rank: the best rank's median work time per step / this rank's median (the
  fastest rank scores 1.0; 0.5 is twice as slow as the fastest);
- **individual score**: the rank's best median over a window of steps / its median over its latest window
  (1.0: as fast now as it ever was; it falls when a rank slows down during the run);
- a rank is a **straggler** when either score is below the threshold (0.7, the extension's default
  ``gpu_relative_perf_threshold`` / ``gpu_individual_perf_threshold``);
- a **node**'s score is its slowest rank's (one slow GPU sets the pace of the node's all-to-all).

A rank's **work time** in a step is the sum of its timing phases (``timing`` table) minus the collectives
(:data:`WAIT_PHASES`): in a synchronous collective a fast rank mostly waits for the slowest, so counting it
would hide the straggler. Runners that time no phases give no scores (steps alone carry one rank's time).

**Time lost waiting** (the ``straggler_wait`` badput bucket): in every step for which all ranks report, the
step is paced by the slowest rank's work; had it worked at the median rank's pace the step would have been
shorter by ``max_r w[r, s] - median_r w[r, s]``. The sum over steps estimates the time the job spent
waiting on slower ranks (:func:`straggler_bucket` says where it is taken from on the goodput clock). It
assumes the ranks synchronise every step (data, expert or pipeline parallel collectives do) and it is an
estimate from timers, not a measurement of idle GPU time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas import NodeStack, Receipt

if TYPE_CHECKING:
    from ledger.analyses.goodput import Goodput

THRESHOLD = 0.7
"""Scores below this name a straggler (nvidia-resiliency-ext's default thresholds)."""
WINDOW = 5
"""Steps per window of the individual score."""
WAIT_PHASES = frozenset({"all_to_all", "alltoall", "grad_sync", "all_reduce", "allreduce", "all_gather",
                         "reduce_scatter", "barrier", "p2p", "pp_wait"})
"""Timing phases that are collectives: time a rank spends waiting for its peers, not its own work."""
BUCKET = "straggler_wait"


@dataclass(frozen=True)
class RankScore:
    """One rank's performance scores."""

    rank: int
    node_rank: int | None
    hostname: str | None
    steps: int
    median_s: float
    """Median work time per step."""
    relative: float
    individual: float

    @property
    def score(self) -> float:
        """The lower of the two scores."""
        return min(self.relative, self.individual)


@dataclass(frozen=True)
class NodeScore:
    """One node's score: its slowest rank's."""

    node_rank: int | None
    hostname: str | None
    ranks: tuple[int, ...]
    relative: float
    slowest_rank: int


@dataclass(frozen=True)
class Stragglers:
    """Scores of every rank and node, the stragglers, and the time lost waiting on slower ranks."""

    ranks: list[RankScore]
    """Every rank with timed phases, slowest first."""
    nodes: list[NodeScore]
    """Every node with scored ranks, slowest first (empty when the receipt lists no nodes)."""
    stragglers: list[RankScore]
    """Ranks with a score below the threshold, slowest first."""
    wait_s: float
    """Estimated step time spent waiting on slower ranks (see the module's docstring)."""
    paced_s: float
    """Sum over the compared steps of the slowest rank's work time."""
    steps_compared: int
    threshold: float = THRESHOLD
    excluded_phases: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def work_times(timing: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ranks, steps, work) with work[i, j] the work time of ranks[i] in steps[j] (NaN: not reported)."""
    if not timing.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0))
    own = timing.filter(pc.invert(pc.is_in(timing.column("phase"), pa.array(sorted(WAIT_PHASES)))))
    own = own.filter(pc.is_valid(own.column("seconds")))
    sums = own.group_by(["rank", "step"]).aggregate([("seconds", "sum")])
    rank = sums.column("rank").to_numpy().astype(np.int64)
    step = sums.column("step").to_numpy().astype(np.int64)
    secs = sums.column("seconds_sum").to_numpy().astype(np.float64)
    ranks, ri = np.unique(rank, return_inverse=True)
    steps, si = np.unique(step, return_inverse=True)
    work = np.full((len(ranks), len(steps)), np.nan)
    work[ri, si] = secs
    return ranks, steps, work


def _individual(row: np.ndarray, window: int) -> float:
    values = row[~np.isnan(row)]
    if len(values) < 2 * window:
        return 1.0  # fewer than two windows: nothing to compare against
    medians = [float(np.median(values[i:i + window])) for i in range(0, len(values) - window + 1, window)]
    latest = float(np.median(values[-window:]))
    return min(medians) / latest if latest > 0 else 1.0


def stragglers(timing: pa.Table, nodes: Sequence[NodeStack] = (), *, threshold: float = THRESHOLD,
               window: int = WINDOW) -> Stragglers:
    """Scores, stragglers and waiting time from a receipt's ``timing`` table (and its nodes, to name them)."""
    ranks, _, work = work_times(timing)
    where = {r: n for n in nodes for r in n.ranks}
    scores = []
    medians = np.array([np.nanmedian(row) for row in work]) if len(ranks) else np.zeros(0)
    best = float(np.min(medians)) if len(medians) else 0.0
    for i, rank in enumerate(ranks):
        node = where.get(int(rank))
        m = float(medians[i])
        scores.append(RankScore(
            rank=int(rank), node_rank=node.node_rank if node else None, hostname=node.hostname if node else None,
            steps=int(np.count_nonzero(~np.isnan(work[i]))), median_s=m,
            relative=best / m if m > 0 else 1.0, individual=_individual(work[i], window),
        ))
    scores.sort(key=lambda s: (s.relative, s.rank))
    node_scores = []
    for n in nodes:
        mine = [s for s in scores if s.rank in n.ranks]
        if mine:
            worst = min(mine, key=lambda s: s.relative)
            node_scores.append(NodeScore(n.node_rank, n.hostname, tuple(sorted(n.ranks)), worst.relative, worst.rank))
    node_scores.sort(key=lambda s: s.relative)
    full = work[:, ~np.isnan(work).any(axis=0)] if len(ranks) > 1 else np.zeros((0, 0))
    wait = float(np.sum(full.max(axis=0) - np.median(full, axis=0))) if full.size else 0.0
    paced = float(np.sum(full.max(axis=0))) if full.size else 0.0
    return Stragglers(
        ranks=scores, nodes=node_scores,
        stragglers=[s for s in scores if s.score < threshold],
        wait_s=wait, paced_s=paced, steps_compared=int(full.shape[1]) if full.size else 0,
        threshold=threshold, excluded_phases=sorted(WAIT_PHASES & set(timing.column("phase").to_pylist())),
    )


def load_timing(receipt_dir: Path) -> pa.Table:
    """A published receipt's timing table (its Parquet file; empty when it has none)."""
    import pyarrow.parquet as pq

    from ledger.store.merge import empty
    from schemas.tables import TIMING

    path = receipt_dir / "timing.parquet"
    return pq.read_table(path) if path.exists() else empty(TIMING)


def of_receipt(receipt_dir: Path, receipt: Receipt) -> Stragglers:
    """Stragglers of one published receipt."""
    return stragglers(load_timing(receipt_dir), receipt.stack.nodes)


def straggler_bucket(goodput: Goodput, wait_s: float) -> Goodput:
    """A copy of a :class:`ledger.analyses.goodput.Goodput` with the time lost waiting on stragglers as a
    ``straggler_wait`` badput bucket; buckets + productive still add up to the wall time. ``wait_s``: the
    sum of :attr:`Stragglers.wait_s` over the run's attempts.

    Where the waiting lies on the goodput clock depends on the runner: a rank that finished its step
    blocks at the next collective, which is either inside the logged step (its step time includes it:
    productive) or between logged steps (the reference runner logs its step time before the step's last
    all-reduce: ``other``). The bucket takes its seconds from ``other`` first, then from productive time,
    never more than both. Kept apart from the goodput module; its timeline does not draw this bucket."""
    other = goodput.buckets.get("other", 0.0)
    from_other = max(0.0, min(wait_s, other))
    from_productive = max(0.0, min(wait_s - from_other, goodput.productive_s))
    buckets = {**goodput.buckets, "other": other - from_other, BUCKET: from_other + from_productive}
    return dataclasses.replace(goodput, productive_s=goodput.productive_s - from_productive, buckets=buckets)
