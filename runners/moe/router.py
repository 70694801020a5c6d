"""Top-k router: scores, expert choice, load-balancing and z-losses, aux-loss-free expert bias.

Legend: T tokens on this rank, D model width, E routed experts (all of them, not just this rank's), K top-k.

The router runs in fp32 whatever the precision policy (the logits' softmax and the z-loss are sensitive).
Load balancing (Switch / GShard form): aux = E * sum_e f_e * P_e with f_e the fraction of the T*K
token-assignments routed to e and P_e the mean router probability of e. Under data parallelism f_e is taken
over the global batch (counts all-reduced, no gradient), so that the mean of the ranks' losses equals the loss
of one rank holding the whole batch. z-loss = mean over tokens of logsumexp(logits)^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

ScoreFunction = Literal["softmax", "sigmoid"]


@dataclass(frozen=True)
class RouterConfig:
    """How tokens choose experts."""

    num_experts: int
    """E, routed experts per MoE layer (1: the dense baseline; the router is then the identity)."""
    top_k: int
    """Experts per token."""
    score_function: ScoreFunction = "softmax"
    """softmax or sigmoid (DeepSeek-V3); sigmoid scores are normalised over the chosen k."""
    norm_topk: bool = True
    """Renormalise the chosen k softmax probabilities to sum to 1 (Mixtral); always on for sigmoid."""
    expert_bias: bool = False
    """Aux-loss-free balancing: a per-expert bias added to the scores for the choice only (DeepSeek-V3)."""
    bias_update_rate: float = 1e-3
    """Step of the bias update: bias_e += rate * sign(mean load - load_e) after each optimizer step."""

    def __post_init__(self) -> None:
        if self.num_experts < 1:
            raise ValueError(f"num_experts must be >= 1, got {self.num_experts}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(
                f"top_k must be between 1 and num_experts ({self.num_experts}), got {self.top_k}"
            )
        if self.score_function not in ("softmax", "sigmoid"):
            raise ValueError(f"score_function must be softmax or sigmoid, got {self.score_function!r}")
        if self.bias_update_rate < 0:
            raise ValueError(f"bias_update_rate must be >= 0, got {self.bias_update_rate}")


@dataclass
class Routing:
    """What the router decided for T tokens."""

    experts_TK: torch.Tensor
    """Chosen expert ids (int64)."""
    weights_TK: torch.Tensor
    """Combine weights of the chosen experts (fp32, differentiable)."""
    counts_E: torch.Tensor
    """n_e: token-assignments per expert on this rank (int64, sums to T*K)."""
    aux_loss: torch.Tensor
    """Load-balancing loss (unweighted), 0 for one expert or in eval."""
    z_loss: torch.Tensor
    """Router z-loss (unweighted), 0 for one expert or in eval."""
    entropy: torch.Tensor | None
    """Mean over tokens of the router's entropy / log E (detached), when asked for."""


class Router(nn.Module):
    """Linear gate D -> E; chooses top-k experts per token and computes the balancing losses."""

    def __init__(self, hidden: int, config: RouterConfig, dp_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.config = config
        self.dp_group = dp_group
        E = config.num_experts
        self.weight_ED = nn.Parameter(torch.empty(E, hidden)) if E > 1 else None
        self.expert_bias_E: torch.Tensor
        self.register_buffer("expert_bias_E", torch.zeros(E), persistent=True)
        if self.weight_ED is not None:
            nn.init.normal_(self.weight_ED, std=0.02)

    def forward(self, x_TD: torch.Tensor, *, with_entropy: bool = False) -> Routing:
        cfg = self.config
        T, E, K = x_TD.shape[0], cfg.num_experts, cfg.top_k
        zero = x_TD.new_zeros((), dtype=torch.float32)
        if self.weight_ED is None:  # one expert: every token goes to it with weight 1
            experts_TK = torch.zeros(T, 1, dtype=torch.long, device=x_TD.device)
            weights_TK = torch.ones(T, 1, dtype=torch.float32, device=x_TD.device)
            counts_E = torch.full((1,), T, dtype=torch.long, device=x_TD.device)
            return Routing(experts_TK, weights_TK, counts_E, zero, zero, None)

        with torch.autocast(x_TD.device.type, enabled=False):
            logits_TE = F.linear(x_TD.float(), self.weight_ED.float())
            if cfg.score_function == "softmax":
                scores_TE = probs_TE = torch.softmax(logits_TE, dim=-1)
            else:  # P_e and the entropy use the sigmoid scores normalised per token
                scores_TE = torch.sigmoid(logits_TE)
                probs_TE = scores_TE / scores_TE.sum(-1, keepdim=True).clamp_min(1e-9)
            choice_TE = scores_TE.detach()
            if cfg.expert_bias:
                choice_TE = choice_TE + self.expert_bias_E
            experts_TK = torch.topk(choice_TE, K, dim=-1, sorted=True).indices
            if cfg.score_function == "softmax":
                weights_TK = probs_TE.gather(1, experts_TK)
                if cfg.norm_topk and K > 1:
                    weights_TK = weights_TK / weights_TK.sum(-1, keepdim=True)
            else:
                chosen_TK = scores_TE.gather(1, experts_TK)
                weights_TK = chosen_TK / chosen_TK.sum(-1, keepdim=True).clamp_min(1e-9)

            counts_E = torch.bincount(experts_TK.reshape(-1), minlength=E)
            aux, z = zero, zero
            if self.training:
                global_counts_E = counts_E
                if self.dp_group is not None and dist.get_world_size(self.dp_group) > 1:
                    global_counts_E = counts_E.clone()
                    dist.all_reduce(global_counts_E, group=self.dp_group)
                aux = load_balancing_loss(probs_TE, global_counts_E)
                z = torch.logsumexp(logits_TE, dim=-1).square().mean()
            entropy = None
            if with_entropy:
                p = probs_TE.detach()
                entropy = -(p * torch.log(p.clamp_min(1e-20))).sum(-1).mean() / math.log(E)
        return Routing(experts_TK, weights_TK, counts_E, aux, z, entropy)

    @torch.no_grad()
    def update_bias(self, global_counts_E: torch.Tensor) -> None:
        """Aux-loss-free balancing: nudge under-loaded experts up and over-loaded ones down."""
        if not self.config.expert_bias or self.weight_ED is None:
            return
        load_E = global_counts_E.to(self.expert_bias_E)
        self.expert_bias_E += self.config.bias_update_rate * torch.sign(load_E.mean() - load_E)


def load_balancing_loss(probs_TE: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
    """E * sum_e f_e * P_e: f_e = counts_e / sum(counts) (assignments, no gradient), P_e = mean prob of e.

    ``counts_E`` may come from a larger (global) batch than ``probs_TE``; f is then the global fraction."""
    E = probs_TE.shape[-1]
    f_E = counts_E.to(torch.float32) / counts_E.sum().clamp_min(1).to(torch.float32)
    P_E = probs_TE.mean(0)
    return E * (f_E * P_E).sum()
