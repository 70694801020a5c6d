"""`ledger rerun`: rebuild a receipt's launch, warn about stack drift, run it again under the ledger with
``replicates: REF``, and say whether it reproduced.

The launch is rebuilt from the workload for runner receipts (``workload.launch``: runner, config and
overrides, plus ``--set`` and ``--scale``), and is the recorded command for other wrapped launches.
Imported receipts have no launch to rebuild.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ledger.errors import BadInput
from ledger.kv import pairs, recorded
from ledger.replay.scale import ScaleChange
from ledger.store.receipts import Ledger
from schemas import Factor, Receipt, Stack, factor_of, flatten

RUNNER = "runners.moe"
REDACTED = "<redacted>"


def _current_values(receipt: Receipt) -> dict[str, float]:
    """The runner config values of the scale dimensions, read from the receipt's workload."""
    w = receipt.workload
    values = {
        "model.layers": w.model.layers,
        "model.hidden": w.model.hidden,
        "model.ffn_hidden": w.model.ffn_hidden,
        "moe.num_experts": w.model.num_experts,
        "parallel.ep": w.parallelism.ep or 1,
        "batch_size": w.batch.global_batch,
        "steps": w.batch.steps,
    }
    return {k: float(v) for k, v in values.items() if v is not None}


def rebuild_command(receipt: Receipt, sets: Sequence[str] = (), scale: Sequence[ScaleChange] = ()) -> list[str]:
    """The command that replays a receipt, with overrides and scale changes applied."""
    if receipt.status == "imported":
        kind = receipt.source.kind if receipt.source else "a file"
        raise BadInput(f"receipt {receipt.id[:12]} was imported from evidence ({kind}); there is no launch to rebuild")
    launch = receipt.workload.launch
    if launch.runner == RUNNER and launch.config:
        overrides = recorded(launch.overrides)
        overrides.update(pairs(sets, "--set"))
        current = _current_values(receipt) | {k: float(v) for k, v in overrides.items() if _is_number(v)}
        for change in scale:
            if any(k not in current for k in _keys(change)):
                raise BadInput(f"--scale {change}: the receipt does not record {', '.join(_keys(change))}")
            overrides |= {k: str(v) for k, v in change.apply(current).items()}
        args = ["--config", launch.config]
        for key, value in overrides.items():
            args += ["--set", f"{key}={value}"]
        ranks = int(float(overrides.get("parallel.ep", current.get("parallel.ep", 1))))
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
        return [sys.executable, *launcher, "-m", RUNNER, *args]
    if sets or scale:
        raise BadInput(f"--set and --scale need a runner receipt ({RUNNER}); {receipt.id[:12]} wrapped a command")
    if not receipt.command:
        raise BadInput(f"receipt {receipt.id[:12]} has no recorded command to rerun")
    if any(REDACTED in part for part in receipt.command):
        raise BadInput(f"the command of {receipt.id[:12]} had secrets redacted; rerun it by hand")
    return list(receipt.command)


def _keys(change: ScaleChange) -> tuple[str, ...]:
    from ledger.replay.scale import DIMENSIONS

    return DIMENSIONS[change.dimension]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass
class Drift:
    """Stack differences between a receipt and the machine about to replay it, by factor."""

    changes: dict[Factor, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return [f"{factor.value}: {'; '.join(items)}" for factor, items in self.changes.items()]


DRIFT_FACTORS = (Factor.CODE, Factor.SOFTWARE, Factor.DRIVERS, Factor.HARDWARE, Factor.CONTAINER)


def stack_drift(recorded: Stack, current: Stack) -> Drift:
    """What differs between two stacks, for the factors that can break a replay."""
    drift = Drift()
    old, new = flatten(recorded, "stack."), flatten(current, "stack.")
    for path in sorted(old):
        if path in ("stack.software.packages", "stack.environment") or old[path] == new.get(path):
            continue
        factor = factor_of(path)
        if factor not in DRIFT_FACTORS:
            continue
        drift.changes.setdefault(factor, []).append(f"{path.removeprefix('stack.')}: {old[path]} -> {new.get(path)}")
    before = {p.name: p.version for p in recorded.software.packages}
    after = {p.name: p.version for p in current.software.packages}
    if before and after and before != after:
        changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        listed = [f"{n} {before.get(n, '-')} -> {after.get(n, '-')}" for n in changed[:10]]
        drift.changes.setdefault(Factor.SOFTWARE, []).insert(
            0, f"{len(changed)} package(s) differ: " + ", ".join(listed) + (" ..." if len(changed) > 10 else ""))
    return drift


def current_stack(command: Sequence[str]) -> Stack:
    """The stack of this machine, captured as `ledger record` would."""
    from ledger.process import launch_environment
    from ledger.record.capture import capture_stack
    from ledger.redact import Redactor

    env = launch_environment()  # what a launch would see, without the `ledger` process's own settings
    return capture_stack(Path.cwd(), env, list(command), Redactor(env))


@dataclass
class Verdict:
    """Did the rerun reproduce the original?"""

    reproduced: bool
    how: str


def loss_verdict(original: pa.Table, rerun: pa.Table, deterministic: bool) -> Verdict:
    """Bit-identical loss at every common step when the run is deterministic (CPU, same stack); otherwise
    the final losses must agree within the spread of the original's last 10% of steps."""
    a = {r["step"]: r["loss"] for r in original.select(["step", "loss"]).to_pylist()}
    b = {r["step"]: r["loss"] for r in rerun.select(["step", "loss"]).to_pylist()}
    common = sorted(set(a) & set(b))
    if not common:
        return Verdict(False, "no common steps with a loss to compare")
    diffs = [s for s in common if not (a[s] == b[s] or (math.isnan(a[s]) and math.isnan(b[s])))]
    if deterministic:
        if not diffs:
            return Verdict(True, f"identical loss at all {len(common)} common steps")
        s = diffs[0]
        return Verdict(False, f"loss differs from step {s} on ({a[s]!r} vs {b[s]!r}); {len(diffs)} steps differ")
    tail = [a[s] for s in common[-max(1, len(common) // 10):]]
    spread = (max(tail) - min(tail)) or abs(tail[-1]) * 1e-3
    gap = abs(a[common[-1]] - b[common[-1]])
    ok = gap <= spread
    return Verdict(ok, f"final loss {b[common[-1]]:.4f} vs {a[common[-1]]:.4f}: difference {gap:.4f} "
                       f"{'within' if ok else 'outside'} the original's late-training spread {spread:.4f}")


def is_deterministic(receipt: Receipt, drift: Drift) -> bool:
    """A CPU runner receipt replayed on an unchanged stack is expected to be bit-identical."""
    return receipt.workload.device == "cpu" and receipt.workload.launch.runner == RUNNER and not drift.changes


def load_steps(ledger: Ledger, receipt: Receipt) -> pa.Table:
    import pyarrow.parquet as pq

    table = pq.read_table(ledger.path(receipt.id) / "steps.parquet")
    lowest = min(table.column("rank").to_pylist(), default=0)
    return table.filter(pa.compute.equal(table["rank"], lowest))
