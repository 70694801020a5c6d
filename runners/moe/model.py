"""Decoder-only transformer whose FFN layers are MoE (every layer, or every ``moe.layer_freq``-th).

Legend: B batch, S sequence positions, D model width, H heads, J head width, V vocabulary, E routed experts,
L experts local to this rank, F expert width.

Pre-norm blocks (RMSNorm), causal SDPA attention, learned positions, untied LM head. Expert weights of
all E experts are drawn from the seeded generator in the same order whatever the EP size, and each rank keeps
its slice, so EP=1 and EP=2 start from the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ledger.sdk import model_flops_per_token
from runners.moe.configs import RunConfig, dispatcher_config, experts_config, router_config
from runners.moe.moe import LinearFactory, MoELayer, SwiGLU, torch_linear
from runners.moe.timing import PhaseTimer


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, linear: LinearFactory) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = linear(hidden, 3 * hidden)
        self.proj = linear(hidden, hidden)

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        B, S, D = x_BSD.shape
        H = self.heads
        q_BHSJ, k_BHSJ, v_BHSJ = self.qkv(x_BSD).view(B, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
        o_BHSJ = F.scaled_dot_product_attention(q_BHSJ, k_BHSJ, v_BHSJ, is_causal=True)
        out: torch.Tensor = self.proj(o_BHSJ.transpose(1, 2).reshape(B, S, D))
        return out


class Block(nn.Module):
    def __init__(
        self, hidden: int, heads: int, ffn: nn.Module, timer: PhaseTimer, linear: LinearFactory
    ) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(hidden)
        self.attn = Attention(hidden, heads, linear)
        self.norm2 = nn.RMSNorm(hidden)
        self.ffn = ffn
        self.timer = timer

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        with self.timer.phase("attention"):
            x_BSD = x_BSD + self.attn(self.norm1(x_BSD))
        if isinstance(self.ffn, MoELayer):
            return x_BSD + self.ffn(self.norm2(x_BSD))
        with self.timer.phase("expert"):  # a dense FFN layer (layer_freq > 1) counts as expert compute
            out: torch.Tensor = x_BSD + self.ffn(self.norm2(x_BSD))
        return out


class Transformer(nn.Module):
    def __init__(
        self,
        cfg: RunConfig,
        vocab_size: int,
        *,
        timer: PhaseTimer,
        ep_rank: int = 0,
        ep_group: dist.ProcessGroup | None = None,
        dp_group: dist.ProcessGroup | None = None,
        expert_backend: str = "loop",
        linear: LinearFactory = torch_linear,
    ) -> None:
        super().__init__()
        m = cfg.model
        self.tok_emb = nn.Embedding(vocab_size, m.hidden)
        self.pos_emb = nn.Embedding(m.seq_len, m.hidden)
        moe_ids = set(cfg.moe_layer_ids)
        blocks = []
        for i in range(m.layers):
            ffn: nn.Module
            if i in moe_ids:
                ecfg = experts_config(cfg, expert_backend)
                weights = _expert_init(cfg, ep_rank)
                ffn = MoELayer(
                    m.hidden,
                    router_config(cfg),
                    ecfg,
                    dispatcher_config(cfg),
                    weights,
                    shared_hidden=cfg.moe.shared_experts * cfg.expert_hidden,
                    timer=timer,
                    ep_group=ep_group,
                    dp_group=dp_group,
                    linear=linear,
                )
            else:
                ffn = SwiGLU(m.hidden, m.ffn_hidden, linear)
            blocks.append(Block(m.hidden, m.heads, ffn, timer, linear))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.RMSNorm(m.hidden)
        self.lm_head = nn.Linear(m.hidden, vocab_size, bias=False)
        self._init_dense(m.layers)

    def _init_dense(self, layers: int) -> None:
        for name, p in self.named_parameters():
            if ".experts." in name or ".router." in name or p.ndim < 2:
                continue
            std = 0.02 / (2 * layers) ** 0.5 if name.endswith(("proj.weight", "down.weight")) else 0.02
            with torch.no_grad():
                p.normal_(0.0, std)

    @property
    def moe_layers(self) -> list[MoELayer]:
        return [b.ffn for b in self.blocks if isinstance(b.ffn, MoELayer)]

    def forward(self, idx_BS: torch.Tensor) -> torch.Tensor:
        S = idx_BS.shape[1]
        x_BSD = self.tok_emb(idx_BS) + self.pos_emb(torch.arange(S, device=idx_BS.device))
        for block in self.blocks:
            x_BSD = block(x_BSD)
        logits_BSV: torch.Tensor = self.lm_head(self.norm(x_BSD))
        return logits_BSV

    def expert_parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.moe_layers for p in layer.experts.parameters()]

    def dense_parameters(self) -> list[nn.Parameter]:
        expert_ids = {id(p) for p in self.expert_parameters()}
        return [p for p in self.parameters() if id(p) not in expert_ids]


def _expert_init(cfg: RunConfig, ep_rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All E experts' weights from the global generator (same draws for any EP size); this rank's slice."""
    E, D, Fe = cfg.moe.num_experts, cfg.model.hidden, cfg.expert_hidden
    L = E // cfg.parallel.ep
    gate = torch.randn(E, D, Fe) * 0.02
    up = torch.randn(E, D, Fe) * 0.02
    down = torch.randn(E, Fe, D) * (0.02 / (2 * cfg.model.layers) ** 0.5)
    sl = slice(ep_rank * L, (ep_rank + 1) * L)
    return gate[sl], up[sl], down[sl]


@dataclass(frozen=True)
class ParamCounts:
    total: int
    """All parameters (all E experts, embeddings included)."""
    active: int
    """Weights one token passes through: attention, norms, router, k routed + shared experts, dense FFNs,
    LM head. Embedding and position tables are lookups, not matmuls, and are excluded."""
    embedding: int


def param_counts(cfg: RunConfig, vocab_size: int) -> ParamCounts:
    """Analytic parameter counts of the whole model (independent of how experts are sharded)."""
    m, moe = cfg.model, cfg.moe
    D = m.hidden
    attn = 4 * D * D
    norms = 2 * D
    expert = 3 * D * cfg.expert_hidden
    shared = 3 * D * moe.shared_experts * cfg.expert_hidden
    router = D * moe.num_experts if moe.num_experts > 1 else 0
    dense_ffn = 3 * D * m.ffn_hidden
    n_moe = len(cfg.moe_layer_ids)
    n_dense = m.layers - n_moe
    embedding = vocab_size * D + m.seq_len * D
    common = m.layers * (attn + norms) + n_dense * dense_ffn + n_moe * (router + shared) + D + vocab_size * D
    total = embedding + common + n_moe * moe.num_experts * expert
    active = common + n_moe * moe.top_k * expert
    return ParamCounts(total=total, active=active, embedding=embedding)


def flops_per_token(cfg: RunConfig, vocab_size: int) -> float:
    """Model FLOPs per token of this model (the formula is the ledger's: :func:`ledger.sdk.model_flops_per_token`)."""
    return float(model_flops_per_token(param_counts(cfg, vocab_size).active, cfg.model.layers, cfg.model.hidden,
                                       cfg.model.seq_len))
