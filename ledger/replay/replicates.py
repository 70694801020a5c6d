"""Getting the evidence a verdict needs: replicates of one receipt (``ledger rerun REF --times N``) and
interleaved A/B rounds (``ledger ab A B --rounds N``).

A verdict between two configurations rests on how much each configuration's runs vary (the run is the unit
of evidence). Replicates of a runner receipt change only the seed (the original's seed + 1, + 2, ...), so
they also measure the loss's seed-to-seed spread; ``same_seed`` keeps the seed (bit-identical losses on a
CPU: only machine noise is measured). A wrapped command is replayed as it was recorded.

Interleaving runs A, B, A, B, ... so that the drift of a shared machine (other jobs, thermal state) falls on
both sides instead of on whichever ran last: the protocol of rigorous benchmarking (Kalibera and Jones,
"Rigorous benchmarking in reasonable time", ISMM 2013; hyperfine and asv interleave for the same reason).
Every run of one experiment carries the tag ``ab=<id>`` (or ``replicates=<id>``), and ``links.replicates``
points at the receipt it repeats; ``ledger compare A B`` then finds them as replicates by their
configuration.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger.errors import BadInput
from ledger.replay.rerun import RUNNER, rebuild_command
from schemas import Receipt

MAX_TIMES = 50
"""More replicates than this in one command are refused (a typo guard)."""


@dataclass(frozen=True)
class Planned:
    """One run to record."""

    side: str
    """A or B (``ab``), or A (``rerun --times``)."""
    original: Receipt
    command: list[str]
    name: str
    tags: dict[str, str] = field(default_factory=dict)


def _check_count(what: str, n: int) -> None:
    if not 1 <= n <= MAX_TIMES:
        raise BadInput(f"{what} must be between 1 and {MAX_TIMES}, got {n}")


def _seed_sets(receipt: Receipt, k: int, same_seed: bool) -> list[str]:
    """The --set that gives replicate k (1-based) its seed (runner receipts only)."""
    if same_seed or receipt.workload.launch.runner != RUNNER:
        return []
    return [f"seed={(receipt.workload.seed or 0) + k}"]


def experiment_id() -> str:
    """A short random id that tags the runs of one experiment."""
    return uuid.uuid4().hex[:8]


def plan_replicates(receipt: Receipt, times: int, *, same_seed: bool = False,
                    experiment: str | None = None) -> list[Planned]:
    """``times`` replicates of one receipt."""
    _check_count("--times", times)
    exp = experiment or experiment_id()
    base = receipt.name or receipt.id[:12]
    return [Planned("A", receipt, rebuild_command(receipt, _seed_sets(receipt, k, same_seed)),
                    f"{base}-rep{exp}-{k}", dict(receipt.tags) | {"replicates": exp})
            for k in range(1, times + 1)]


def plan_ab(a: Receipt, b: Receipt, rounds: int, *, same_seed: bool = False,
            experiment: str | None = None) -> list[Planned]:
    """``rounds`` rounds of A then B (each round one more seed on both sides)."""
    _check_count("--rounds", rounds)
    exp = experiment or experiment_id()
    return [p for k in range(1, rounds + 1) for p in plan_round(a, b, k, same_seed=same_seed, experiment=exp)]


def plan_round(a: Receipt, b: Receipt, k: int, *, same_seed: bool = False, experiment: str) -> list[Planned]:
    """Round ``k`` (1-based) of an A/B experiment: A then B, each with the original's seed + k."""
    out: list[Planned] = []
    for side, receipt in (("A", a), ("B", b)):
        base = receipt.name or receipt.id[:12]
        out.append(Planned(side, receipt, rebuild_command(receipt, _seed_sets(receipt, k, same_seed)),
                           f"{base}-ab{experiment}-{k}", dict(receipt.tags) | {"ab": experiment, "ab_side": side}))
    return out


def describe(plan: Sequence[Planned]) -> str:
    """One line: what will be recorded."""
    sides = sorted({p.side for p in plan})
    return f"recording {len(plan)} run(s): " + ", ".join(
        f"{sum(p.side == s for p in plan)} of {next(p.original for p in plan if p.side == s).name or s}"
        for s in sides)


__all__ = ["MAX_TIMES", "Planned", "describe", "experiment_id", "plan_ab", "plan_replicates", "plan_round"]
