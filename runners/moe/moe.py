"""The MoE feed-forward layer: router -> dispatcher -> experts -> combine, plus an optional shared expert.

Legend: B batch, S sequence positions, T = B*S tokens on this rank, D model width, E routed experts, K top-k,
L local experts, N rows received by this rank's experts, F expert width.

With one expert and top-1 this is the dense baseline, through the same code path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from runners.moe.dispatcher import Dispatcher, DispatcherConfig
from runners.moe.experts import Experts, ExpertsConfig
from runners.moe.router import Router, RouterConfig
from runners.moe.timing import PhaseTimer

LinearFactory = Callable[[int, int], nn.Module]


def torch_linear(n_in: int, n_out: int) -> nn.Module:
    return nn.Linear(n_in, n_out, bias=False)


class SwiGLU(nn.Module):
    """Dense SwiGLU FFN (non-MoE layers and the shared expert)."""

    def __init__(self, hidden: int, ffn_hidden: int, linear: LinearFactory = torch_linear) -> None:
        super().__init__()
        self.gate = linear(hidden, ffn_hidden)
        self.up = linear(hidden, ffn_hidden)
        self.down = linear(ffn_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(F.silu(self.gate(x)) * self.up(x))
        return out


@dataclass
class LayerStats:
    """Routing of the last training forward (detached; reduced over ranks by the training loop)."""

    counts_E: torch.Tensor
    dropped_E: torch.Tensor
    capacity: int | None
    entropy: torch.Tensor | None
    aux_loss: torch.Tensor
    z_loss: torch.Tensor


class MoELayer(nn.Module):
    """Routed experts (sharded over EP ranks) + optional shared expert."""

    def __init__(
        self,
        hidden: int,
        router: RouterConfig,
        experts: ExpertsConfig,
        dispatcher: DispatcherConfig,
        expert_weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        *,
        shared_hidden: int = 0,
        timer: PhaseTimer,
        ep_group: dist.ProcessGroup | None = None,
        dp_group: dist.ProcessGroup | None = None,
        linear: LinearFactory = torch_linear,
    ) -> None:
        super().__init__()
        self.router = Router(hidden, router, dp_group)
        self.experts = Experts(experts, expert_weights)
        self.dispatcher = Dispatcher(dispatcher, ep_group, timer)
        self.shared = SwiGLU(hidden, shared_hidden, linear) if shared_hidden else None
        self.timer = timer
        self.record_entropy = False
        self.stats: LayerStats | None = None

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        B, S, D = x_BSD.shape
        x_TD = x_BSD.reshape(B * S, D)
        with self.timer.phase("router"):
            routing = self.router(x_TD, with_entropy=self.record_entropy and self.training)
        rows_ND, plan = self.dispatcher.dispatch(x_TD, routing.experts_TK, routing.weights_TK)
        with self.timer.phase("expert"):
            out_ND = self.experts(rows_ND, plan.rows_per_local_expert)
        y_TD = self.dispatcher.combine(out_ND, plan, routing.weights_TK)
        if self.shared is not None:
            with self.timer.phase("expert"):
                y_TD = y_TD + self.shared(x_TD).float()
        if self.training:
            self.stats = LayerStats(
                plan.counts_E.detach(),
                plan.dropped_E.detach(),
                plan.capacity,
                routing.entropy,
                routing.aux_loss,
                routing.z_loss,
            )
        return y_TD.to(x_BSD.dtype).view(B, S, D)
