"""Token dispatcher: capacity and dropping, permutation by expert, all-to-all over EP ranks, combine.

Legend: T tokens on this rank, D model width, K top-k, A = T*K token-assignments, E routed experts (global),
L experts local to this rank (E / ep), R ranks in the EP group, C capacity per expert, M rows sent,
N rows received (grouped by local expert after the exchange).

dispatch():  assignments sorted by expert id (one stable argsort) -> optional capacity drop -> rows gathered
             in that order (optionally padded to C per expert) -> [EP] counts and rows exchanged with
             all_to_all of variable splits -> received rows regrouped from source-major to expert-major,
             so that every local expert reads one contiguous slice.
combine():   the exact reverse, then y_T = sum_k weight_TK * out_TK (dropped assignments contribute 0).
No per-token Python loops; the only host syncs are the split sizes of the all-to-all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist

from runners.moe import comm
from runners.moe.timing import PhaseTimer

DropPolicy = Literal["probs", "position"]


@dataclass(frozen=True)
class DispatcherConfig:
    """How assignments reach the experts."""

    num_experts: int
    """E, routed experts (global)."""
    top_k: int
    """K, experts per token."""
    capacity_factor: float | None = None
    """None: dropless. Else each expert takes at most C = ceil(cf * T * K / E) assignments per rank."""
    drop_policy: DropPolicy = "probs"
    """Over capacity, keep the highest router weights (probs) or the earliest tokens (position)."""
    pad_to_capacity: bool = False
    """Pad every expert's slice to exactly C rows (static shapes; needs a capacity factor)."""
    ep_size: int = 1
    """Ranks the experts are sharded over."""

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts must be >= 1, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(
                f"top_k must be between 1 and num_experts ({self.num_experts}), got {self.top_k}"
            )
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(
                f"capacity_factor must be > 0 (or None for dropless), got {self.capacity_factor}"
            )
        if self.drop_policy not in ("probs", "position"):
            raise ValueError(f"drop_policy must be probs or position, got {self.drop_policy!r}")
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError(
                "pad_to_capacity needs a capacity_factor (padding a dropless dispatch is undefined)"
            )
        if self.ep_size < 1 or self.num_experts % self.ep_size:
            raise ValueError(
                f"num_experts ({self.num_experts}) must be divisible by the EP size ({self.ep_size})"
            )

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep_size


def capacity(capacity_factor: float, tokens: int, top_k: int, num_experts: int) -> int:
    """C = ceil(capacity_factor * T * K / E) (DESIGN.md, Definitions)."""
    return math.ceil(capacity_factor * tokens * top_k / num_experts)


@dataclass
class DispatchPlan:
    """Everything combine() needs to undo dispatch(), plus the routing counts."""

    T: int
    kept_A: torch.Tensor
    """Assignment index (t * K + k) of every kept assignment, grouped by expert: the rows sent, in order
    (without padding), or the assignments whose rows are ``slot_of_kept`` (with padding)."""
    slot_of_kept: torch.Tensor | None
    """Padded only: the row (e * C + rank) each kept assignment occupies."""
    rows_per_local_expert: list[int]
    """Rows each local expert receives (contiguous, in order) after the exchange."""
    counts_E: torch.Tensor
    """n_e, assignments routed to each expert on this rank."""
    dropped_E: torch.Tensor
    """d_e, of those dropped by capacity."""
    capacity: int | None
    in_splits: list[int] | None = None
    out_splits: list[int] | None = None
    regroup_N: torch.Tensor | None = None
    """Permutation from source-major to expert-major order of the received rows."""


class Dispatcher:
    """Permutes token-assignments into per-expert contiguous rows and back (no parameters)."""

    def __init__(
        self, config: DispatcherConfig, ep_group: dist.ProcessGroup | None, timer: PhaseTimer
    ) -> None:
        self.config = config
        self.ep_group = ep_group if config.ep_size > 1 else None
        self.timer = timer

    def dispatch(
        self, x_TD: torch.Tensor, experts_TK: torch.Tensor, weights_TK: torch.Tensor
    ) -> tuple[torch.Tensor, DispatchPlan]:
        """Rows for this rank's experts, grouped by local expert, and the plan to undo it."""
        cfg = self.config
        E = cfg.num_experts
        T, K = experts_TK.shape
        with self.timer.phase("dispatch"):
            expert_A = experts_TK.reshape(-1)
            counts_E = torch.bincount(expert_A, minlength=E)
            if cfg.capacity_factor is not None and cfg.drop_policy == "probs":
                by_weight_A = torch.argsort(weights_TK.detach().reshape(-1), descending=True, stable=True)
                order_A = by_weight_A[torch.argsort(expert_A[by_weight_A], stable=True)]
            else:  # stable sort keeps token order within an expert (position priority)
                order_A = torch.argsort(expert_A, stable=True)

            C = None
            slot_of_kept = None
            if cfg.capacity_factor is None:
                kept_A = order_A
                kept_E = counts_E
            else:
                C = capacity(cfg.capacity_factor, T, K, E)
                sorted_expert_A = expert_A[order_A]
                start_E = torch.cumsum(counts_E, 0) - counts_E
                rank_A = torch.arange(order_A.numel(), device=order_A.device) - start_E[sorted_expert_A]
                keep_A = rank_A < C
                kept_A = order_A[keep_A]
                kept_E = counts_E.clamp(max=C)
                if cfg.pad_to_capacity:
                    slot_of_kept = sorted_expert_A[keep_A] * C + rank_A[keep_A]
            dropped_E = counts_E - kept_E

            token_of_kept = torch.div(kept_A, K, rounding_mode="floor")
            rows_MD = x_TD[token_of_kept]
            if slot_of_kept is not None:
                assert C is not None
                padded = rows_MD.new_zeros((E * C, x_TD.shape[1]))
                rows_MD = padded.index_copy(0, slot_of_kept, rows_MD)
                send_E = torch.full_like(counts_E, C)
            else:
                send_E = kept_E
            if self.ep_group is not None and x_TD.device.type == "cuda" and torch.is_autocast_enabled("cuda"):
                rows_MD = rows_MD.to(torch.get_autocast_dtype("cuda"))  # half the bytes on the wire
        plan = DispatchPlan(T, kept_A, slot_of_kept, [], counts_E, dropped_E, C)
        if self.ep_group is None:
            plan.rows_per_local_expert = send_E.tolist()
            return rows_MD, plan
        return self._exchange(rows_MD, send_E, plan), plan

    def _exchange(self, rows_MD: torch.Tensor, send_E: torch.Tensor, plan: DispatchPlan) -> torch.Tensor:
        R, L = self.config.ep_size, self.config.local_experts
        assert self.ep_group is not None
        with self.timer.phase("all_to_all"):
            recv_RL = comm.exchange_counts(send_E, self.ep_group)
        with self.timer.phase("dispatch"):
            plan.in_splits = send_E.view(R, L).sum(1).tolist()
            plan.out_splits = recv_RL.sum(1).tolist()
        with self.timer.phase("all_to_all"):
            rows_ND = comm.all_to_all(rows_MD, plan.out_splits, plan.in_splits, self.ep_group, self.timer)
        with self.timer.phase("dispatch"):
            plan.regroup_N = _regroup(recv_RL)
            plan.rows_per_local_expert = recv_RL.sum(0).tolist()
            rows_ND = rows_ND[plan.regroup_N]
        return rows_ND

    def combine(self, out_ND: torch.Tensor, plan: DispatchPlan, weights_TK: torch.Tensor) -> torch.Tensor:
        """y_TD = sum over k of weight * expert output (zero for dropped assignments)."""
        K = weights_TK.shape[1]
        if self.ep_group is not None:
            assert plan.regroup_N is not None and plan.in_splits is not None and plan.out_splits is not None
            with self.timer.phase("combine"):
                inverse_N = torch.empty_like(plan.regroup_N)
                inverse_N[plan.regroup_N] = torch.arange(plan.regroup_N.numel(), device=inverse_N.device)
                out_ND = out_ND[inverse_N]
            with self.timer.phase("all_to_all"):
                out_ND = comm.all_to_all(out_ND, plan.in_splits, plan.out_splits, self.ep_group, self.timer)
        with self.timer.phase("combine"):
            out_MD = out_ND if plan.slot_of_kept is None else out_ND[plan.slot_of_kept]
            out_AD = out_MD.new_zeros((plan.T * K, out_MD.shape[1]))
            out_AD = out_AD.index_copy(0, plan.kept_A, out_MD)  # unique indices: deterministic
            y_TD = (out_AD.view(plan.T, K, -1).float() * weights_TK.unsqueeze(-1)).sum(1)
        return y_TD


def _regroup(counts_RL: torch.Tensor) -> torch.Tensor:
    """Index that reorders rows received source-major ([r][l] chunks) into expert-major ([l][r]) order."""
    R, L = counts_RL.shape
    sizes_RL = counts_RL.reshape(-1)
    start_RL = (torch.cumsum(sizes_RL, 0) - sizes_RL).view(R, L)
    sizes_LR = counts_RL.t().reshape(-1)
    start_LR = start_RL.t().reshape(-1)
    n = int(sizes_LR.sum())
    chunk_first = torch.repeat_interleave(torch.cumsum(sizes_LR, 0) - sizes_LR, sizes_LR, output_size=n)
    offset = torch.arange(n, device=counts_RL.device) - chunk_first
    return torch.repeat_interleave(start_LR, sizes_LR, output_size=n) + offset
