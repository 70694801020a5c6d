"""The missing ablation runs, as ready-to-run commands where the receipts say how.

A missing run takes an existing node of the lattice (A, or an ablation already recorded) and changes one
more factor to B's value. For runner receipts (``workload.launch`` names a runner, a config and its
``key=value`` overrides) the command is the base run's launch with B's overrides of that factor:

    ledger record --name baseline+precision --baseline 3a126fba6ed9 -- \
        python -m runners.moe --config tiny --set precision=bf16

An override belongs to a factor when it names a changed field (``moe.z_loss_coeff`` ->
``workload.router.z_loss_coeff``) or, failing that, sets the value a changed field took in B
(``precision=bf16`` -> ``workload.precision.compute``). The code factor becomes a ``git checkout`` of B's
commit; factors no launch option controls (software, drivers, container, hardware) are described
instead of commanded.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.analyses.diff import Change, causal_value, diff_leaves
from ledger.analyses.groups import Catalog, Entry
from ledger.kv import recorded
from schemas import Factor, leaves

_FACTORS = {path: factor.value for path, factor in leaves()}


@dataclass(frozen=True)
class MissingRun:
    """One run that would split a confounded step."""

    factors: tuple[str, ...]
    """The factors this run takes from B (the lattice node it would fill)."""
    adds: str
    """The factor it changes relative to its base."""
    base: str
    """Id of the existing receipt it starts from."""
    description: str
    """e.g. 'baseline (3a126fba) with precision as in B'."""
    command: str | None
    """A ready-to-run command, when the receipts say how to launch it."""
    how: str
    """What to change, in words (always given; the only guide when there is no command)."""

    def to_json(self) -> dict[str, Any]:
        """Stable keys."""
        return {"factors": list(self.factors), "adds": self.adds, "base": self.base,
                "description": self.description, "command": self.command, "how": self.how}


def _overrides(entry: Entry) -> dict[str, str]:
    launch = entry.data.get("workload", {}).get("launch", {}) or {}
    return recorded(str(item) for item in launch.get("overrides") or ())


def _launch(entry: Entry) -> tuple[str | None, str | None]:
    launch = entry.data.get("workload", {}).get("launch", {}) or {}
    return launch.get("runner"), launch.get("config")


def causal_changes(a: Entry, b: Entry) -> list[Change]:
    """The changed causal leaves of two catalog entries."""
    flat_a, flat_b = _flat(a.data), _flat(b.data)
    return [c for c in diff_leaves(flat_a, flat_b) if _FACTORS.get(c.path, "record") != Factor.RECORD.value]


def _flat(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in _FACTORS:
        node: Any = data
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[path] = causal_value(path, node)
    return out


def override_factor(key: str, value_a: str | None, value_b: str | None, changes: Sequence[Change]) -> str | None:
    """The factor an override changes, judged from the fields that changed between the two runs."""
    last = key.rsplit(".", 1)[-1].lower()
    named = {_FACTORS[c.path] for c in changes if c.path.rsplit(".", 1)[-1].lower() == last}
    if len(named) == 1:
        return named.pop()
    valued = {_FACTORS[c.path] for c in changes
              if (value_b is not None and str(c.b).lower() == value_b.lower())
              or (value_a is not None and str(c.a).lower() == value_a.lower())}
    return valued.pop() if len(valued) == 1 else None


def _record_prefix(name: str, base: Entry) -> list[str]:
    return ["ledger", "record", "--name", name, "--baseline", base.id[:12], "--"]


def _runner_argv(entry: Entry, runner: str, config: str, overrides: Mapping[str, str]) -> list[str]:
    world = entry.data.get("workload", {}).get("parallelism", {}).get("world_size") or 1
    head = ["python", "-m", runner] if world <= 1 else ["torchrun", "--nproc_per_node", str(world), "-m", runner]
    sets = [arg for k, v in overrides.items() for arg in ("--set", f"{k}={v}")]
    return [*head, "--config", config, *sets]


def missing_run(catalog: Catalog, base: Entry, b: Entry, factors: tuple[str, ...], adds: str) -> MissingRun:
    """How to record ``base`` with factor ``adds`` set as in ``b``."""
    changes = [c for c in causal_changes(base, b) if _FACTORS[c.path] == adds]
    listed = "; ".join(c.describe() for c in changes[:4]) + ("; ..." if len(changes) > 4 else "")
    description = f"{base.label} with {adds} as in B ({b.label})"
    how = f"rerun {base.label} with {adds} changed: {listed}" if listed else f"rerun {base.label} with {adds} as in B"
    name = f"{base.name or base.id[:8]}+{adds}"
    runner, config = _launch(base)
    b_runner, b_config = _launch(b)
    if adds == Factor.CODE.value:
        code = b.data.get("stack", {}).get("code", {}) or {}
        commit = code.get("commit")
        base_cmd = _base_command(base)
        if commit and base_cmd is not None:
            command = " && ".join([shlex.join(["git", "checkout", commit]),
                                   shlex.join([*_record_prefix(name, base), *base_cmd])])
            if code.get("dirty"):
                digest = str(code.get("diff_digest"))[:12]
                how += f"; B's tree was dirty (diff digest {digest}): apply those changes too"
            return MissingRun(factors, adds, base.id, description, command, how)
        return MissingRun(factors, adds, base.id, description, None,
                          how + "; run it from B's source tree (no commit recorded to check out)")
    if not runner or not config:
        return MissingRun(factors, adds, base.id, description, None, how + " (the receipt has no runner launch)")
    ov_base, ov_b = _overrides(base), _overrides(b)
    all_changes = causal_changes(base, b)
    new = dict(ov_base)
    moved = []
    for key in dict.fromkeys([*ov_base, *ov_b]):
        if ov_base.get(key) == ov_b.get(key):
            continue
        if override_factor(key, ov_base.get(key), ov_b.get(key), all_changes) != adds:
            continue
        moved.append(key)
        if key in ov_b:
            new[key] = ov_b[key]
        else:
            new.pop(key, None)
    if not moved:
        extra = f"; B ran config {b_config!r}" if b_config != config or b_runner != runner else ""
        return MissingRun(factors, adds, base.id, description, None,
                          how + f"; no override of {base.label}'s launch sets {adds}{extra}: set it by hand")
    argv = _runner_argv(base, runner, config, new)
    return MissingRun(factors, adds, base.id, description, shlex.join([*_record_prefix(name, base), *argv]), how)


def _base_command(entry: Entry) -> list[str] | None:
    runner, config = _launch(entry)
    if runner and config:
        return _runner_argv(entry, runner, config, _overrides(entry))
    command = entry.data.get("command") or []
    return [str(c) for c in command] if command else None
