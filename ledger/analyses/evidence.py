"""Between-run evidence: the run is the unit of evidence.

Whether configuration B differs from configuration A is decided by how much one configuration's runs vary
among themselves (between-run variance), never by the samples inside one run (they are autocorrelated and
blind to run-to-run noise: two runs of one configuration differ far more than their step times suggest).
Sources of that variance, in order:

1. **replicates**: receipts identical to a side in every causal factor but the seed (other seeds, or the
   same seed run again), found in the ledger (:func:`replicates_of`); each side then holds several runs;
2. **a noise floor**: the pooled variance of the replicate groups the ledger holds *on the same hardware and
   driver stack* (:data:`STACK_CLASS`)
   (:func:`floor_groups`, :func:`learn_floor`), stated with where it came from and how many runs it rests on;
3. otherwise **inconclusive**: one run per side, and the commands that get the replicates
   (:func:`commands_for_replicates`).

A metric's per-run values are compared with a t test whose variance pools both (:func:`ledger.analyses.stats.
t_test`): with 3 vs 3 runs alone it has 4 degrees of freedom, and at a between-run SD of 5% it detects a 15%
throughput change 73% of the time (noncentral t); with a floor of 10 or more degrees of freedom, 89%.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ledger.analyses.groups import SEED, Catalog, Entry

HARDWARE = "hardware"
DRIVERS = "drivers"
STACK_CLASS = (HARDWARE, DRIVERS)
"""The factors that make a run's stack class for the noise floor: the machine (GPU or CPU model and count,
memory) and the driver stack below the framework (GPU driver, CUDA, NCCL, cuDNN). Run-to-run noise is a
property of these; a floor learned on another machine or driver stack is not used."""
MAX_FLOOR_GROUPS = 8
"""The floor uses at most this many replicate groups (the most recent)."""
MAX_GROUP_RUNS = 4
"""...and at most this many runs of each."""
MIN_FLOOR_DF = 3
"""A floor resting on fewer degrees of freedom is not used."""


@dataclass(frozen=True)
class Floor:
    """A metric's run-to-run standard deviation learned from the ledger's replicate groups."""

    sd: float
    """SD of one run's value (on the log scale for ratio metrics: about a relative SD)."""
    df: int
    """Degrees of freedom: sum over groups of (runs - 1)."""
    groups: int
    runs: int
    log_scale: bool

    def describe(self) -> str:
        """e.g. 'noise floor 4.8% (SD between runs; 5 replicate groups, 14 runs, same hardware and drivers)'."""
        size = f"{100 * self.sd:.2g}%" if self.log_scale else f"{self.sd:.3g}"
        return (f"noise floor {size} (SD between runs; {self.groups} replicate group{'s' * (self.groups != 1)}, "
                f"{self.runs} runs, same hardware and drivers)")

    def to_json(self) -> dict[str, object]:
        return {"sd": self.sd, "df": self.df, "groups": self.groups, "runs": self.runs, "log_scale": self.log_scale}


def is_first_attempt(entry: Entry) -> bool:
    """A completed run that can stand for its configuration: succeeded or imported, and not a later attempt
    (a restart belongs to its first attempt's logical run, never a replicate of it)."""
    links = entry.data.get("links") or {}
    return not links.get("attempt_of") and entry.data.get("status") in ("succeeded", "imported")


def replicates_of(catalog: Catalog, receipt_id: str, exclude: Iterable[str] = ()) -> list[str]:
    """Other receipts identical to this one in every causal factor but the seed, first attempts only, oldest
    first. Changed hyperparameters, arguments, data or anything else causal make a run a different
    configuration, never a replicate."""
    skip = set(exclude) | {receipt_id}
    key = catalog[receipt_id].config_key()
    return [e.id for e in catalog.entries.values()
            if e.id not in skip and is_first_attempt(e) and e.config_key() == key]


def stack_class(entry: Entry) -> tuple[str, ...]:
    """The entry's values of the :data:`STACK_CLASS` factors."""
    return tuple(entry.factors[f] for f in STACK_CLASS)


def floor_groups(catalog: Catalog, stacks: Iterable[tuple[str, ...]], exclude: Iterable[str] = ()) -> list[list[str]]:
    """Replicate groups (2 or more runs of one configuration) of the given stack classes (:func:`stack_class`),
    excluding ``exclude`` (the runs being compared: their own variance enters the test directly); the most
    recent :data:`MAX_FLOOR_GROUPS`, each cut to its :data:`MAX_GROUP_RUNS` most recent runs."""
    classes, skip = set(stacks), set(exclude)
    by_config: dict[tuple[str, ...], list[Entry]] = defaultdict(list)
    for e in catalog.entries.values():  # oldest first (Catalog order)
        if e.id in skip or not is_first_attempt(e) or stack_class(e) not in classes:
            continue
        by_config[e.config_key((SEED,))].append(e)
    groups = [members[-MAX_GROUP_RUNS:] for members in by_config.values() if len(members) >= 2]
    groups.sort(key=lambda g: max((e.started_at.timestamp() if e.started_at else 0.0) for e in g), reverse=True)
    return [[e.id for e in g] for g in groups[:MAX_FLOOR_GROUPS]]


def learn_floor(values: Sequence[Sequence[float]], log_scale: bool) -> Floor | None:
    """The pooled within-group SD of per-run values (one inner list per replicate group; non-finite values and
    groups with fewer than 2 values left out); None below :data:`MIN_FLOOR_DF` degrees of freedom.

    A group whose values repeat another group's exactly is the same evidence twice, and counts once: a metric
    that is a function of the seed alone (routing, evals and loss counts of a deterministic CPU run) gives
    every configuration replicated with seeds 1, 2, 3 the same spread, which is one measurement of the seeds'
    effect however many groups show it (real A/A pairs of such a metric were called different 24 times in
    36 when each repeat counted as new degrees of freedom)."""
    ss, df, groups, runs = 0.0, 0, 0, 0
    seen: set[tuple[float, ...]] = set()
    for group in values:
        x = np.asarray([v for v in group if v is not None and math.isfinite(v) and (v > 0 or not log_scale)],
                       dtype=np.float64)
        if x.size < 2 or (key := tuple(sorted(x.tolist()))) in seen:
            continue
        seen.add(key)
        if log_scale:
            x = np.log(x)
        ss += float(((x - x.mean()) ** 2).sum())
        df += x.size - 1
        groups += 1
        runs += x.size
    if df < MIN_FLOOR_DF:
        return None
    return Floor(math.sqrt(ss / df), df, groups, runs, log_scale)


def commands_for_replicates(a: str, b: str, rounds: int = 3) -> list[str]:
    """The commands that give both sides replicates: interleaved A/B rounds (drift of a shared machine falls
    on both sides), or replicates of each side; and the sequential A/B that records rounds until a verdict."""
    return [f"ledger ab {a} {b} --rounds {rounds}",
            f"ledger rerun {a} --times {rounds - 1} && ledger rerun {b} --times {rounds - 1}",
            f"ledger ab {a} {b} --until-verdict"]


__all__ = [
    "Floor", "commands_for_replicates", "floor_groups", "is_first_attempt", "learn_floor", "replicates_of",
    "stack_class",
]
