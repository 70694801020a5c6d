"""SwiGLU experts computed on contiguous per-expert slices of permuted rows.

Legend: N rows (grouped by expert), D model width, F expert width, L experts held by this module.

Backends: "grouped" (torch._grouped_mm, one kernel for all experts; CUDA, bf16, checked by a probe),
"padded" (every expert's slice is exactly C rows: one batched matmul over [L, C, D]), "loop" (one matmul
per expert over its slice; the portable fallback and the fastest on CPU, where _grouped_mm is a reference
implementation). All three compute the same function.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Backend = Literal["loop", "grouped", "padded"]


@dataclass(frozen=True)
class ExpertsConfig:
    """Shape and kernel of one layer's (local) experts."""

    num_experts: int
    """L, experts held here."""
    hidden: int
    """D, model width."""
    expert_hidden: int
    """F, SwiGLU width of one expert (the dense FFN width / granularity)."""
    backend: Backend = "loop"
    """loop, grouped or padded (see module)."""

    def __post_init__(self) -> None:
        for name in ("num_experts", "hidden", "expert_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.backend not in ("loop", "grouped", "padded"):
            raise ValueError(f"backend must be loop, grouped or padded, got {self.backend!r}")


class Experts(nn.Module):
    """L SwiGLU experts: out = (silu(x W_gate) * (x W_up)) W_down, each on its own slice of rows."""

    def __init__(
        self, config: ExpertsConfig, weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> None:
        """``weights``: (gate_LDF, up_LDF, down_LFD) initial values, sliced by the caller from the full set of
        E experts so that the model is the same whatever the expert-parallel size."""
        super().__init__()
        self.config = config
        gate, up, down = weights
        L, D, Fe = config.num_experts, config.hidden, config.expert_hidden
        if gate.shape != (L, D, Fe) or up.shape != (L, D, Fe) or down.shape != (L, Fe, D):
            raise ValueError("expert weight shapes do not match the config")
        self.w_gate_LDF = nn.Parameter(gate.clone())
        self.w_up_LDF = nn.Parameter(up.clone())
        self.w_down_LFD = nn.Parameter(down.clone())

    def forward(self, x_ND: torch.Tensor, rows_per_expert: list[int]) -> torch.Tensor:
        dtype = _compute_dtype(x_ND)
        x_ND = x_ND.to(dtype)
        w_gate, w_up, w_down = (w.to(dtype) for w in (self.w_gate_LDF, self.w_up_LDF, self.w_down_LFD))
        backend = self.config.backend
        if backend == "padded":
            L = self.config.num_experts
            x_LCD = x_ND.view(L, -1, x_ND.shape[-1])
            h_LCF = F.silu(torch.bmm(x_LCD, w_gate)) * torch.bmm(x_LCD, w_up)
            return torch.bmm(h_LCF, w_down).view(x_ND.shape[0], -1)
        if backend == "grouped":
            offs_L = torch.tensor(rows_per_expert, device=x_ND.device).cumsum(0).to(torch.int32)
            h_NF = F.silu(torch._grouped_mm(x_ND, w_gate, offs=offs_L)) * torch._grouped_mm(
                x_ND, w_up, offs=offs_L
            )
            out: torch.Tensor = torch._grouped_mm(h_NF, w_down, offs=offs_L)
            return out
        outs = []
        start = 0
        for e, n in enumerate(rows_per_expert):
            x = x_ND[start : start + n]
            outs.append((F.silu(x @ w_gate[e]) * (x @ w_up[e])) @ w_down[e])
            start += n
        return torch.cat(outs) if outs else x_ND.new_zeros((0, x_ND.shape[1]))


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return x.dtype


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    """Probe torch._grouped_mm (forward and backward) on a tiny problem; False on CPU or any failure."""
    if device.type != "cuda" or not hasattr(torch, "_grouped_mm"):
        return False
    try:
        x = torch.randn(32, 32, device=device, dtype=dtype, requires_grad=True)
        w = torch.randn(2, 32, 32, device=device, dtype=dtype, requires_grad=True)
        offs = torch.tensor([16, 32], device=device, dtype=torch.int32)
        y = torch._grouped_mm(x, w, offs=offs)
        y.backward(torch.ones_like(y))
        ref = torch.cat([x[:16] @ w[0], x[16:] @ w[1]])
        return bool(torch.allclose(y.float(), ref.float(), atol=1e-1, rtol=1e-2))
    except Exception as exc:  # unsupported dtype or architecture
        warnings.warn(
            f"torch._grouped_mm unusable here ({type(exc).__name__}: {exc}); looping over experts",
            stacklevel=2,
        )
        return False
