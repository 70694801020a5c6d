"""Checkpoints: one file per rank (experts are sharded), published atomically, and the latest found again.

    DIR/step-00000010/rank-00000.pt     model, optimizer, scheduler, RNG, data position, meta
    DIR/step-00000010/complete          written by rank 0 after every rank has saved
    DIR/latest                          "step-00000010", replaced atomically after `complete`

Only the two newest complete checkpoints are kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

LATEST = "latest"
COMPLETE = "complete"
KEEP = 2


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def save(root: Path, step: int, state: dict[str, Any], rank: int, distributed: bool) -> Path:
    """Every rank writes its own file; rank 0 marks the checkpoint complete and points ``latest`` at it."""
    d = step_dir(root, step)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"rank-{rank:05d}.pt"
    tmp = path.with_suffix(".pt.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    if distributed:
        dist.barrier()
    if rank == 0:
        (d / COMPLETE).write_text(str(step))
        tmp_latest = root / (LATEST + ".tmp")
        tmp_latest.write_text(d.name)
        os.replace(tmp_latest, root / LATEST)
        complete = sorted(p for p in root.glob("step-*") if (p / COMPLETE).exists())
        for old in complete[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
    if distributed:
        dist.barrier()
    return d


def latest(root: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    pointer = root / LATEST
    if pointer.exists():
        d = root / pointer.read_text().strip()
        if (d / COMPLETE).exists():
            return d
    complete = sorted(p for p in root.glob("step-*") if (p / COMPLETE).exists())
    return complete[-1] if complete else None


def load(d: Path, rank: int) -> dict[str, Any]:
    """This rank's state, on CPU (load_state_dict moves tensors to the parameters' device)."""
    state: dict[str, Any] = torch.load(d / f"rank-{rank:05d}.pt", map_location="cpu", weights_only=True)
    return state
