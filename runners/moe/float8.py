"""fp8 linear layers through PyTorch's own float8 matmul (``torch._scaled_mm``), without Transformer Engine.

Legend: M rows (tokens), K input width, N output width.

Recipe (recorded as ``fp8_backend=torch``, ``fp8_recipe=tensorwise``, ``fp8_format=hybrid``): one scale per
tensor from its current absolute maximum (dynamic, no amax history), e4m3 for activations and weights in the
forward pass, e5m2 for the output gradient in the backward pass; both backward products (input and weight
gradients) are float8 matmuls as well. Quantisation is treated as the identity in the backward pass
(straight-through). Parameters stay fp32; the output is in the autocast dtype (bf16 under the fp8 policy).

On CUDA ``torch._scaled_mm`` needs fp8 tensor cores (compute capability 8.9 or later: Ada, Hopper,
Blackwell) and every matrix dimension a multiple of 16: rows are zero-padded to a multiple of 16 (padding
changes no amax), the widths are checked when the layer is built. On CPU, torch 2.13 computes it with a
reference kernel (measured here: correct to float8 rounding, no speed-up): the policy runs there, for tests,
never for speed.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
ALIGN = 16
"""torch._scaled_mm on CUDA wants every dimension a multiple of this."""


def quantize(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / s as ``dtype``, s) with s = amax(|x|) / max(dtype): the per-tensor dequantisation scale (fp32)."""
    fmax = torch.finfo(dtype).max
    amax = x.detach().abs().amax().float().clamp(min=1e-12)
    scale = amax / fmax
    return (x.float() / scale).clamp(-fmax, fmax).to(dtype), scale


def _column_major(x: torch.Tensor) -> torch.Tensor:
    """The same matrix stored column by column (what _scaled_mm wants for its second operand)."""
    return x.t().contiguous().t()


def scaled_mm(a: torch.Tensor, sa: torch.Tensor, b: torch.Tensor, sb: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    """(a * sa) @ (b * sb) in ``out``; a row-major, b any layout (made column-major here)."""
    y: torch.Tensor = torch._scaled_mm(a.contiguous(), _column_major(b), scale_a=sa, scale_b=sb, out_dtype=out)
    return y


class _Float8Matmul(torch.autograd.Function):
    """y_MN = x_MK @ w_NK^T with both operands in e4m3; backward with the gradient in e5m2."""

    @staticmethod
    def forward(ctx: Any, x_MK: torch.Tensor, w_NK: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        x8, sx = quantize(x_MK, E4M3)
        w8, sw = quantize(w_NK, E4M3)
        ctx.save_for_backward(x8, sx, w8, sw)
        ctx.dtypes = (x_MK.dtype, w_NK.dtype)
        return scaled_mm(x8, sx, w8.t(), sw, out_dtype)

    @staticmethod
    def backward(ctx: Any, g_MN: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x8, sx, w8, sw = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        g8, sg = quantize(g_MN, E5M2)
        grad_x = scaled_mm(g8, sg, w8, sw, g_MN.dtype).to(x_dtype)  # [M,N] @ [N,K]
        grad_w = scaled_mm(g8.t(), sg, x8, sx, torch.float32).to(w_dtype)  # [N,M] @ [M,K]
        return grad_x, grad_w, None


class Float8Linear(nn.Module):
    """A bias-free linear layer whose three matmuls (forward, input and weight gradients) run in float8."""

    def __init__(self, n_in: int, n_out: int, device: torch.device | None = None) -> None:
        super().__init__()
        if device is not None and device.type == "cuda" and (n_in % ALIGN or n_out % ALIGN):
            raise ValueError(
                f"fp8 (torch._scaled_mm) on CUDA needs layer widths divisible by {ALIGN}; got {n_in} -> {n_out}"
            )
        self.weight = nn.Parameter(torch.empty(n_out, n_in, device=device))
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)  # nn.Linear's initialisation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dev = x.device.type
        out_dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
        shape = x.shape
        x_MK = x.reshape(-1, shape[-1])
        rows = x_MK.shape[0]
        pad = -rows % ALIGN
        if pad:
            x_MK = F.pad(x_MK, (0, 0, 0, pad))
        y_MN: torch.Tensor = _Float8Matmul.apply(x_MK, self.weight, out_dtype)
        return y_MN[:rows].reshape(*shape[:-1], self.weight.shape[0])


def scaled_mm_works(device: torch.device) -> str:
    """"" when a float8 linear layer runs forward and backward on ``device`` and matches the dequantised
    product, else why not (a one-line reason)."""
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    try:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(32, 64, generator=gen).to(device).requires_grad_(True)
        layer = Float8Linear(64, 32, device)
        y = layer(x)
        y.sum().backward()
        x8, sx = quantize(x.detach(), E4M3)
        w8, sw = quantize(layer.weight.detach(), E4M3)
        ref = (x8.float() * sx) @ (w8.float() * sw).t()
        if not torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2):
            return "torch._scaled_mm gave a product that does not match the dequantised reference"
        if x.grad is None or not bool(torch.isfinite(x.grad).all()):
            return "torch._scaled_mm's backward gave no finite gradient"
    except Exception as exc:  # unsupported device, architecture or dtype
        return f"torch._scaled_mm failed on {device.type}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return ""
