"""Which multi-node job a `ledger record` belongs to, and its place in it (:mod:`ledger.record.job` assembles and
publishes the job).

The job key comes from ``--job KEY`` (with ``--node-rank`` and ``--nnodes``), else Slurm's ``SLURM_JOB_ID`` +
``SLURM_STEP_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``. This module imports the standard library and the
staging layout only: the wrapper resolves its job before it starts the launch, and the launch starts before
pyarrow and the receipt models are loaded.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.errors import BadInput
from ledger.store.jobs import job_dir, node_dir
from ledger.store.staging import StagingBusy, acquire_staging_lock

DEFAULT_TIMEOUT_S = 600.0
"""Seconds node 0 waits for the other nodes after its own launch ended (``--job-timeout``)."""


@dataclass(frozen=True)
class JobOptions:
    """What `ledger record` was told about the job (all optional: the environment may say it)."""

    key: str | None = None
    node_rank: int | None = None
    nnodes: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class Job:
    """This wrapper's place in a multi-node job."""

    key: str
    source: str
    node_rank: int
    nnodes: int
    node_name: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    dir: Path | None = None
    lock_fd: int | None = field(default=None, repr=False)

    def facts(self) -> dict[str, Any]:
        """What the node's wrapper.json says about the job."""
        return {"job": {"key": self.key, "source": self.source, "node_rank": self.node_rank,
                        "nnodes": self.nnodes, "node_name": self.node_name, "timeout_s": self.timeout_s}}

    def claim(self, staging: Path) -> Path:
        """Create this node's staging directory inside the job's (node 0 also takes the job's lock)."""
        self.dir = job_dir(staging, self.key)
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.node_rank == 0:
            try:
                self.lock_fd = acquire_staging_lock(self.dir)
            except StagingBusy as exc:
                raise BadInput(f"job {self.key!r}: another wrapper already runs as node 0 (staging {self.dir}); "
                               "give each node its own node rank") from exc
        node = node_dir(self.dir, self.node_rank)
        try:
            node.mkdir()
        except FileExistsError as exc:
            self.release()
            raise BadInput(f"job {self.key!r}: node {self.node_rank} is already staged in {node}; run one "
                           "`ledger record` per node (srun --ntasks-per-node 1) or give another --job key") from exc
        return node

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def _int(value: Any) -> int | None:
    text = str(value or "").strip()
    return int(text) if text.isdigit() else None


def resolve_job(opts: JobOptions | None, env: Mapping[str, str]) -> Job | None:
    """The job this wrapper belongs to, or None for a single-node launch (the single-run path)."""
    opts = opts or JobOptions()
    key, source, node_rank, nnodes = opts.key, "--job", opts.node_rank, opts.nnodes
    if key is None:
        step = env.get("SLURM_STEP_ID", "")
        run_id = env.get("TORCHELASTIC_RUN_ID", "")
        if env.get("SLURM_JOB_ID") and step.isdigit() and int(step) < 0xFFFFFFF0:  # not the batch/extern step
            key, source = f"slurm:{env['SLURM_JOB_ID']}.{step}", "slurm"
            node_rank = node_rank if node_rank is not None else _int(env.get("SLURM_NODEID"))
            nnodes = nnodes or _int(env.get("SLURM_STEP_NUM_NODES")) or _int(env.get("SLURM_NNODES"))
        elif run_id and run_id != "none":  # torchrun's default run id is "none": not a key
            key, source = f"torchelastic:{run_id}", "torchelastic"
            node_rank = node_rank if node_rank is not None else _int(env.get("GROUP_RANK"))
            nnodes = nnodes or _int(env.get("GROUP_WORLD_SIZE"))
        if key is None and (opts.node_rank is not None or (opts.nnodes or 0) > 1):
            raise BadInput("--node-rank and --nnodes need a job key: add --job KEY (or run under srun)")
        if key is None or not nnodes or nnodes < 2:
            return None
    if not nnodes or nnodes < 1:
        raise BadInput("--job needs the number of nodes: add --nnodes N")
    if node_rank is None:
        raise BadInput(f"job {key!r}: this node's rank is unknown; add --node-rank K (0 publishes the receipt)")
    if not 0 <= node_rank < nnodes:
        raise BadInput(f"job {key!r}: node rank {node_rank} is outside 0..{nnodes - 1} (--nnodes {nnodes})")
    if opts.timeout_s <= 0:
        raise BadInput(f"--job-timeout must be > 0 seconds, got {opts.timeout_s}")
    name = env.get("SLURMD_NODENAME") or socket.gethostname()
    return Job(key, source, node_rank, nnodes, name, opts.timeout_s)
