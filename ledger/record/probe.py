"""`ledger probe`: one node's stack, probed on that node, for a launch that one wrapper starts on many nodes.

``ledger record -- srun ...`` runs one wrapper, on the launching node: from outside it sees only that
node. Each node runs ``ledger probe`` inside the launch (``srun ... ledger probe -- python train.py``, or
a step of its own) and contributes its node's facts: the same probes the wrapper runs (code, container,
packages, drivers and GPUs through NVML, clocks, ECC, topology, CPU), written into the run's staging
directory (``$LEDGER_RUN_DIR``, which srun exports to every task) under ``probes/<node>/``. On publish,
:func:`ledger.record.nodes.merge_runtime_nodes` describes each probed node from its probe rather than from
its ranks' runtime facts alone.

A node is named as the SDK names it (Slurm's ``SLURMD_NODENAME``, else the host name) and numbered as the
job key names it (``--node-rank``, else ``SLURM_NODEID``, else torchrun's ``GROUP_RANK``). The first task
of a node probes it; the node's other tasks find its directory taken and go on at once.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ledger.errors import BadInput
from ledger.store.layout import ENV_RUN_DIR, PROBES_DIR, STACK_FILE
from ledger.store.merge import read_json
from ledger.store.publish import write_json_atomic
from schemas import Stack

PROBE_FILE = "probe.json"
"""In ``probes/<node>/``: who probed the node and when (node name, node rank, pid, time)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ProbedNode:
    """One node's stack as `ledger probe` captured it there."""

    node_name: str
    node_rank: int | None
    stack: Stack


def node_identity(env: Mapping[str, str], node_rank: int | None = None) -> tuple[str, int | None]:
    """(node name, node rank) of this process: the names the SDK's runtime facts use, the rank the job key
    mechanism uses (:func:`ledger.record.job.resolve_job`)."""
    name = env.get("SLURMD_NODENAME") or socket.gethostname()
    if node_rank is None:
        for var in ("SLURM_NODEID", "GROUP_RANK"):
            text = env.get(var, "").strip()
            if text.isdigit():
                node_rank = int(text)
                break
    return name, node_rank


def probe_dir(run_dir: Path, node_name: str) -> Path:
    """Where one node's probe lives (the name made safe for a path; a digest keeps distinct names apart)."""
    safe = _UNSAFE.sub("_", node_name)[:64] or "node"
    if safe != node_name:
        import hashlib

        safe += "-" + hashlib.sha256(node_name.encode()).hexdigest()[:8]
    return run_dir / PROBES_DIR / safe


def probe(run_dir: Path | None, env: Mapping[str, str], *, node_rank: int | None = None,
          cwd: Path | None = None, staging: Path | None = None) -> Path | None:
    """Probe this node into ``run_dir`` (default ``$LEDGER_RUN_DIR``); returns its probe directory, or
    None when another task of this node already probes it. BadInput outside a recorded launch, or when
    ``staging`` (a ledger's staging directory) is given and the run is not in it."""
    from ledger.record.capture import capture_stack
    from ledger.redact import Redactor

    if run_dir is None:
        value = env.get(ENV_RUN_DIR)
        if not value:
            raise BadInput(f"ledger probe runs inside a recorded launch (`ledger record -- srun ... ledger probe -- "
                           f"CMD`): {ENV_RUN_DIR} is not set; or give --run-dir DIR")
        run_dir = Path(value)
    if not run_dir.is_dir():
        raise BadInput(f"ledger probe: the run's staging directory {run_dir} does not exist (is the ledger on a "
                       "filesystem this node sees?)")
    if staging is not None and not run_dir.resolve().is_relative_to(staging.resolve()):
        raise BadInput(f"ledger probe: the run {run_dir} is not staged in the ledger's {staging}; probe with the "
                       "ledger the launch is recorded in (or without --ledger)")
    name, rank = node_identity(env, node_rank)
    target = probe_dir(run_dir, name)
    target.parent.mkdir(exist_ok=True)
    try:
        target.mkdir()
    except FileExistsError:
        return None  # this node's first task probes it
    redactor = Redactor(env)
    stack = capture_stack(cwd or Path.cwd(), env, [], redactor)
    write_json_atomic(target / STACK_FILE, stack.model_dump(mode="json"))
    write_json_atomic(target / PROBE_FILE, {"node_name": name, "node_rank": rank, "pid": os.getpid(),
                                            "probed_at": datetime.now(UTC).isoformat()})
    return target


def read_probes(run_dir: Path) -> dict[str, ProbedNode]:
    """Every node probe of a staging directory, by node name; a probe that is incomplete or unreadable
    (its node died while probing) is left out."""
    out: dict[str, ProbedNode] = {}
    root = run_dir / PROBES_DIR
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        facts, _ = read_json(d / PROBE_FILE)
        data, _ = read_json(d / STACK_FILE)
        if not isinstance(facts, dict) or not isinstance(data, dict) or not facts.get("node_name"):
            continue
        try:
            stack = Stack.model_validate(data)
        except ValueError:
            continue
        rank = facts.get("node_rank")
        out[str(facts["node_name"])] = ProbedNode(str(facts["node_name"]), rank if isinstance(rank, int) else None,
                                                  stack)
    return out


def describe(path: Path | None) -> str:
    """The line `ledger probe` prints."""
    if path is None:
        return "ledger probe: this node is already probed by another of its tasks"
    facts = json.loads((path / PROBE_FILE).read_text())
    return f"ledger probe: node {facts['node_name']} (node rank {facts['node_rank']}) probed into {path}"


__all__ = ["ProbedNode", "describe", "node_identity", "probe", "probe_dir", "read_probes"]
