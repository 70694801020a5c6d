"""Process groups and collectives for data + expert parallelism over torch.distributed.

Legend: M rows (token-assignments) sent by this rank, N rows received, D model width.

World of W ranks, every rank a data-parallel rank (its own slice of the global batch). Experts are sharded
over EP groups of ``ep`` consecutive ranks (expert e lives on rank e // (E / ep) of its group) and replicated
over the W / ep groups; dense parameters are replicated everywhere. Gradients: dense ones are all-reduced
over the world, expert ones over the ranks that hold the same shard (the "expert data-parallel" group); both
are divided by W, since every rank's loss is the mean over its own tokens.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from runners.moe.timing import PhaseTimer


@dataclass
class Topology:
    """This process's place in the world."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    ep: int = 1
    ep_group: dist.ProcessGroup | None = None
    """Ranks that share the experts of one layer between them (size ep)."""
    edp_group: dist.ProcessGroup | None = None
    """Ranks that hold the same expert shard (size world / ep)."""
    dp_group: dist.ProcessGroup | None = None
    """All ranks (None when not distributed)."""

    @property
    def ep_rank(self) -> int:
        return self.rank % self.ep

    @property
    def distributed(self) -> bool:
        return self.world > 1


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun exports them; (0, 1, 0) when launched plainly."""
    return (
        int(os.environ.get("RANK", "0")),
        int(os.environ.get("WORLD_SIZE", "1")),
        int(os.environ.get("LOCAL_RANK", "0")),
    )


def init_topology(ep: int, device: torch.device) -> Topology:
    """Initialise torch.distributed when launched by torchrun (gloo on CPU, NCCL on CUDA), and the groups."""
    rank, world, local_rank = world_from_env()
    if world == 1:
        return Topology(ep=ep)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    ep_group = edp_group = None
    for g in range(world // ep):  # every rank must create every group, in the same order
        group = dist.new_group(list(range(g * ep, (g + 1) * ep)))
        if rank // ep == g:
            ep_group = group
    for i in range(ep):
        group = dist.new_group(list(range(i, world, ep)))
        if rank % ep == i:
            edp_group = group
    return Topology(rank, world, local_rank, ep, ep_group, edp_group, dist.group.WORLD)


def shutdown(topo: Topology) -> None:
    if topo.distributed and dist.is_initialized():
        dist.destroy_process_group()


class _AllToAll(torch.autograd.Function):
    """all_to_all_single with variable splits; its backward sends the gradients back the same way."""

    @staticmethod
    def forward(
        ctx: Any,
        x_MD: torch.Tensor,
        out_splits: list[int],
        in_splits: list[int],
        group: dist.ProcessGroup,
        timer: PhaseTimer,
    ) -> torch.Tensor:
        ctx.out_splits, ctx.in_splits, ctx.group, ctx.timer = out_splits, in_splits, group, timer
        return _exchange(x_MD, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad_ND: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        with ctx.timer.phase("all_to_all", in_backward=True):
            grad_MD = _exchange(grad_ND, ctx.in_splits, ctx.out_splits, ctx.group)
        return grad_MD, None, None, None, None


def _exchange(
    x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: dist.ProcessGroup
) -> torch.Tensor:
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


def all_to_all(
    x_MD: torch.Tensor,
    out_splits: list[int],
    in_splits: list[int],
    group: dist.ProcessGroup,
    timer: PhaseTimer,
) -> torch.Tensor:
    """Send rows x_MD[sum(in_splits[:r]) : ...] to rank r of ``group``; receive out_splits[r] rows from it."""
    out: torch.Tensor = _AllToAll.apply(x_MD, out_splits, in_splits, group, timer)
    return out


def exchange_counts(counts_E: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """Each rank sends, to every rank of the EP group, how many rows it sends to each of that rank's experts.
    Returns counts_RL: rows this rank receives from source rank r for its local expert l."""
    R = dist.get_world_size(group)
    out = torch.empty_like(counts_E)
    dist.all_to_all_single(out, counts_E.contiguous(), group=group)
    return out.view(R, -1)


def sync_gradients(dense: Sequence[torch.Tensor], experts: Sequence[torch.Tensor], topo: Topology) -> None:
    """Average gradients: dense over the world, experts over their expert-data-parallel group (see module)."""
    if not topo.distributed:
        return
    for params, group in ((dense, topo.dp_group), (experts, topo.edp_group)):
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            continue
        flat = torch.cat([g.reshape(-1) for g in grads])
        if dist.get_world_size(group) > 1:
            dist.all_reduce(flat, group=group)
        flat /= topo.world
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


def clip_grad_norm(
    dense: Sequence[torch.Tensor], experts: Sequence[torch.Tensor], max_norm: float, topo: Topology
) -> torch.Tensor:
    """Global gradient norm (expert shards summed over the EP group) before clipping; clips in place."""

    def sq(params: Sequence[torch.Tensor]) -> torch.Tensor:
        grads = [p.grad.detach().float().reshape(-1) for p in params if p.grad is not None]
        return torch.cat(grads).square().sum() if grads else torch.zeros(())

    dense_sq = sq(dense)
    expert_sq = sq(experts).to(dense_sq.device)
    if topo.ep_group is not None and topo.ep > 1:
        dist.all_reduce(expert_sq, group=topo.ep_group)
    norm = torch.sqrt(dense_sq + expert_sq)
    if max_norm > 0:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for p in (*dense, *experts):
            if p.grad is not None:
                p.grad.mul_(coef.to(p.grad.dtype))
    return norm


def all_reduce_sum(t: torch.Tensor, topo: Topology) -> torch.Tensor:
    """Sum over all ranks (in place; a no-op on one rank)."""
    if topo.distributed:
        dist.all_reduce(t, group=topo.dp_group)
    return t
