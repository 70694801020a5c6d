"""The factor diff of two receipts: every changed leaf field, grouped by the factor it belongs to.

Fields of the ``record`` pseudo-factor (ids, times, names, summaries, launch overrides...) are bookkeeping
and outcomes: they are shown, never counted as causes. A different **task** (dataset, tokenizer, objective,
number of experts, top-k, quality gates: every field tagged ``task``) makes two runs incomparable unless
the caller allows it (:func:`check_task`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import BadInput
from schemas import Factor, Receipt, flatten, leaves
from schemas.factors import CAUSAL_FACTORS

_SKIP_RECORD = ("artifacts", "summary.", "problems", "id", "run_uuid", "started_at", "ended_at", "duration_s")
"""Record fields that differ between any two runs and say nothing about why (not shown in the diff)."""


ENVIRONMENT = "stack.environment"
"""The leaf of the allow-listed environment variables (the software factor)."""
LAUNCH_INSTANCE = re.compile(
    r"SLURM_(JOB_?ID|STEP_?ID|ARRAY_JOB_ID|ARRAY_TASK_ID|HET_JOB_ID|JOB_NAME|(JOB_|STEP_)?NODELIST|NODEID|"
    r"NODENAME|PROCID|LOCALID|TASK_PID|TOPOLOGY_ADDR|SUBMIT_DIR|SUBMIT_HOST|LAUNCH_NODE_IPADDR|SRUN_COMM_HOST|"
    r"SRUN_COMM_PORT|STEP_LAUNCHER_PORT|JOB_START_TIME|JOB_END_TIME|JOB_UID|JOB_USER|JOB_GID|PRIO_PROCESS)"
    r"|SLURMD_NODENAME|TORCHELASTIC_(RUN_ID|RESTART_COUNT|ERROR_FILE)|MASTER_ADDR|MASTER_PORT"
    r"|RANK|LOCAL_RANK|GROUP_RANK|NODE_RANK|ROLE_RANK"
)
"""Environment variables that name one launch (a Slurm job or step id, its node list, the rendezvous address
and port, a process's rank) rather than set how it runs: two replicates under Slurm always differ in them, so
they are bookkeeping, never a software change. Sizes and settings (``SLURM_NNODES``, ``WORLD_SIZE``,
``NCCL_*``...) stay causal."""


def causal_value(path: str, value: Any) -> Any:
    """A causal leaf's value as configurations are told apart: the environment without its
    :data:`LAUNCH_INSTANCE` variables, any other leaf as it is."""
    if path != ENVIRONMENT or not isinstance(value, Mapping):
        return value
    return {k: v for k, v in value.items() if not LAUNCH_INSTANCE.fullmatch(k)}


def launch_instance(env: Any) -> dict[str, Any]:
    """The :data:`LAUNCH_INSTANCE` variables of the environment leaf."""
    if not isinstance(env, Mapping):
        return {}
    return {k: v for k, v in env.items() if LAUNCH_INSTANCE.fullmatch(k)}


class TaskMismatch(BadInput):
    """The two sides ran different tasks; the message names the fields (``--allow-task-change`` overrides)."""


@dataclass(frozen=True)
class Change:
    """One changed leaf field."""

    path: str
    """Dotted path, e.g. ``workload.precision.compute``."""
    a: Any
    """Value in A (JSON-able)."""
    b: Any
    """Value in B."""

    def describe(self) -> str:
        """``path: a -> b`` with long values summarised."""
        return f"{self.path}: {summarize_change(self.path, self.a, self.b)}"


@dataclass(frozen=True)
class FactorDiff:
    """Changed fields by factor."""

    changed: dict[str, list[Change]]
    """Causal factor -> its changed fields (factors in :data:`schemas.factors.CAUSAL_FACTORS` order)."""
    unchanged: list[str]
    """Causal factors with no changed field."""
    record: list[Change] = field(default_factory=list)
    """Changed bookkeeping fields (shown, never causes)."""

    @property
    def factors(self) -> list[str]:
        """The changed causal factors."""
        return list(self.changed)

    @property
    def task_changes(self) -> list[Change]:
        """The changed fields of the task."""
        return self.changed.get(Factor.TASK.value, [])


_FACTORS = dict(leaves())


def diff_leaves(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[Change]:
    """The leaves whose values differ (a missing leaf counts as None)."""
    return [Change(p, a.get(p), b.get(p)) for p in sorted(set(a) | set(b), key=_order(a, b)) if a.get(p) != b.get(p)]


def _order(a: Mapping[str, Any], b: Mapping[str, Any]) -> Any:
    keys = list(a) + [k for k in b if k not in a]
    index = {k: i for i, k in enumerate(keys)}
    return lambda k: index[k]


def factor_diff(a: Receipt, b: Receipt, ignore: Iterable[str] = ()) -> FactorDiff:
    """The changed leaves of two receipts grouped by factor; ``ignore``: causal factors left out (e.g. the
    seed, when both sides are replicate groups)."""
    skip = set(ignore)
    flat_a, flat_b = flatten(a), flatten(b)
    by_factor: dict[str, list[Change]] = {}
    record: list[Change] = []
    instance_a, instance_b = launch_instance(flat_a.get(ENVIRONMENT)), launch_instance(flat_b.get(ENVIRONMENT))
    if instance_a != instance_b:  # shown with the bookkeeping, never a cause
        record.append(Change(f"{ENVIRONMENT} (launch instance)", instance_a, instance_b))
    for flat in (flat_a, flat_b):
        flat[ENVIRONMENT] = causal_value(ENVIRONMENT, flat.get(ENVIRONMENT))
    for change in diff_leaves(flat_a, flat_b):
        factor = _FACTORS[change.path]
        if factor is Factor.RECORD:
            if not change.path.startswith(_SKIP_RECORD) and change.path not in _SKIP_RECORD:
                record.append(change)
        elif factor.value not in skip:
            by_factor.setdefault(factor.value, []).append(change)
    changed: dict[str, list[Change]] = {f.value: by_factor[f.value] for f in CAUSAL_FACTORS if f.value in by_factor}
    unchanged = [f.value for f in CAUSAL_FACTORS if f.value not in changed and f.value not in skip]
    return FactorDiff(changed, unchanged, record)


def check_task(diff: FactorDiff, allow: bool) -> bool:
    """True when the tasks match. Raises :class:`TaskMismatch` naming what differs unless ``allow``."""
    changes = diff.task_changes
    if not changes:
        return True
    if allow:
        return False
    shown = "; ".join(c.describe() for c in changes[:6]) + (f" and {len(changes) - 6} more" if len(changes) > 6 else "")
    raise TaskMismatch(
        f"the runs have different tasks ({shown}): they are not comparable; "
        "pass --allow-task-change to compare them anyway"
    )


def summarize_change(path: str, a: Any, b: Any, limit: int = 80) -> str:
    """``a -> b``, with package lists reduced to what changed and long values shortened."""
    if path == "stack.software.packages" and isinstance(a, list) and isinstance(b, list):
        return _packages(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        parts = [f"{k}: {_short(a.get(k), 24)} -> {_short(b.get(k), 24)}" for k in keys if a.get(k) != b.get(k)]
        return "{" + ", ".join(parts[:4]) + (f", +{len(parts) - 4} more" if len(parts) > 4 else "") + "}"
    return f"{_short(a, limit)} -> {_short(b, limit)}"


def _packages(a: list[Any], b: list[Any]) -> str:
    va = {str(p.get("name")): p.get("version") for p in a if isinstance(p, dict)}
    vb = {str(p.get("name")): p.get("version") for p in b if isinstance(p, dict)}
    names = sorted(set(va) | set(vb))
    parts = [f"{n} {va.get(n) or '-'} -> {vb.get(n) or '-'}" for n in names if va.get(n) != vb.get(n)]
    head = ", ".join(parts[:5]) + (f", +{len(parts) - 5} more" if len(parts) > 5 else "")
    return f"{len(parts)} package(s) differ: {head}"


def _short(value: Any, limit: int) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
