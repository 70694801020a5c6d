"""Precision policies: fp32, bf16 autocast (CPU and CUDA), fp8 through Transformer Engine (CUDA only).

Parameters and optimizer state stay fp32 under every policy. The router, the loss and the combine weights run
in fp32. Under fp8 the attention projections and dense FFNs are ``te.Linear`` inside ``te.fp8_autocast``
(hybrid format: e4m3 forward, e5m2 backward; delayed scaling), inside bf16 autocast; the routed experts
(grouped GEMM), router, embeddings and LM head stay in bf16.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runners.moe.configs import ConfigError
from runners.moe.moe import LinearFactory, torch_linear


def transformer_engine() -> tuple[Any | None, str]:
    """(transformer_engine.pytorch, "") when importable, else (None, why). TE raises more than ImportError
    without CUDA, hence the broad except."""
    try:
        import transformer_engine.pytorch as te
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return te, ""


def _te() -> Any:
    te, why = transformer_engine()
    if te is None:
        raise ConfigError(f"precision=fp8 needs Transformer Engine: {why}")
    return te


def check_precision(precision: str, device: torch.device) -> None:
    """Raise ConfigError before training when the policy cannot run here."""
    if precision != "fp8":
        return
    if device.type != "cuda":
        raise ConfigError(
            "precision=fp8 needs a CUDA device and Transformer Engine; this run is on "
            f"{device.type} (use precision=bf16 or fp32)"
        )
    te, why = transformer_engine()
    if te is None:
        raise ConfigError(
            f"precision=fp8 needs Transformer Engine (pip install 'transformer-engine[pytorch]'); "
            f"import failed: {why}"
        )


@dataclass(frozen=True)
class PrecisionPolicy:
    name: str
    device: torch.device

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.name in ("bf16", "fp8") else None

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context the forward pass runs in."""
        stack = contextlib.ExitStack()
        if self.autocast_dtype is not None:
            stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast_dtype))
        if self.name == "fp8":
            stack.enter_context(_te().fp8_autocast(enabled=True, fp8_recipe=self._fp8_recipe))
        return stack

    @functools.cached_property
    def _fp8_recipe(self) -> Any:
        from transformer_engine.common.recipe import DelayedScaling, Format

        return DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")

    def linear_factory(self) -> LinearFactory:
        """nn.Linear, or te.Linear under fp8."""
        if self.name != "fp8":
            return torch_linear
        te = _te()
        device = self.device

        def te_linear(n_in: int, n_out: int) -> nn.Module:
            layer: nn.Module = te.Linear(n_in, n_out, bias=False, params_dtype=torch.float32, device=device)
            return layer

        return te_linear

    def describe(self) -> dict[str, Any]:
        """Fields of schemas.Precision."""
        out: dict[str, Any] = {
            "params": "fp32",
            "compute": self.name,
            "autocast": "bf16" if self.autocast_dtype is not None else None,
        }
        if self.name == "fp8":
            out |= {
                "fp8_format": "hybrid",
                "fp8_recipe": "delayed",
                "fp8_backend": "transformer_engine",
                "bf16_layers": ("embedding", "router", "experts", "lm_head"),
            }
        return out
