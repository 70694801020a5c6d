"""Precision policies: fp32, bf16 autocast (CPU and CUDA), and fp8 through one of two backends.

Parameters and optimizer state stay fp32 under every policy. The router, the loss and the combine weights run
in fp32. Under fp8 the attention projections and dense FFNs are float8 linear layers inside bf16 autocast; the
routed experts (grouped GEMM), router, embeddings and LM head stay in bf16. The two fp8 backends, recorded as
``precision.fp8_backend`` (an independent variable of the precision factor):

- ``torch``: PyTorch's own ``torch._scaled_mm`` (:mod:`runners.moe.float8`): per-tensor scales from the
  current amax (``tensorwise``), e4m3 forward, e5m2 gradients. CUDA with fp8 tensor cores, or CPU (a reference
  kernel in torch 2.13: it runs, for tests, with no speed-up).
- ``te``: ``te.Linear`` inside ``te.fp8_autocast`` (hybrid format, delayed scaling); CUDA and Transformer
  Engine only.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from runners.moe.configs import ConfigError
from runners.moe.float8 import Float8Linear, scaled_mm_works
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


def check_precision(precision: str, device: torch.device, fp8_backend: str = "te") -> None:
    """Raise ConfigError before training when the policy cannot run here."""
    if precision != "fp8":
        return
    if fp8_backend == "torch":
        why = scaled_mm_works(device)
        if why:
            raise ConfigError(f"precision=fp8 with fp8_backend=torch cannot run on {device.type}: {why}")
        return
    if device.type != "cuda":
        raise ConfigError(
            "precision=fp8 needs a CUDA device and Transformer Engine; this run is on "
            f"{device.type} (use fp8_backend=torch, or precision=bf16 or fp32)"
        )
    te, why = transformer_engine()
    if te is None:
        raise ConfigError(
            f"precision=fp8 needs Transformer Engine (pip install 'transformer-engine[pytorch]', or use "
            f"fp8_backend=torch); import failed: {why}"
        )


@dataclass(frozen=True)
class PrecisionPolicy:
    name: str
    device: torch.device
    fp8_backend: str = "te"
    """te (Transformer Engine) or torch (torch._scaled_mm); used only when name is fp8."""

    @property
    def uses_te(self) -> bool:
        return self.name == "fp8" and self.fp8_backend == "te"

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return torch.bfloat16 if self.name in ("bf16", "fp8") else None

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context the forward pass runs in."""
        stack = contextlib.ExitStack()
        if self.autocast_dtype is not None:
            stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast_dtype))
        if self.uses_te:
            stack.enter_context(_te().fp8_autocast(enabled=True, fp8_recipe=self._fp8_recipe))
        return stack

    @functools.cached_property
    def _fp8_recipe(self) -> Any:
        from transformer_engine.common.recipe import DelayedScaling, Format

        return DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo="max")

    def linear_factory(self) -> LinearFactory:
        """nn.Linear, or a float8 linear layer under fp8 (te.Linear, or Float8Linear of torch._scaled_mm)."""
        if self.name != "fp8":
            return torch_linear
        device = self.device
        if self.fp8_backend == "torch":

            def torch_fp8_linear(n_in: int, n_out: int) -> nn.Module:
                try:
                    return Float8Linear(n_in, n_out, device)
                except ValueError as exc:
                    raise ConfigError(str(exc)) from None

            return torch_fp8_linear
        te = _te()

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
                "fp8_recipe": "delayed" if self.uses_te else "tensorwise",
                "fp8_backend": "transformer_engine" if self.uses_te else "torch",
                "bf16_layers": ("embedding", "router", "experts", "lm_head"),
            }
        return out
