"""The two facts behind MFU, kept once: devices' peak FLOP/s, and model FLOPs per token (DESIGN.md: "MFU =
tokens/s x model FLOPs per token / (peak FLOP/s of the precision used x devices). Say which peak.").

Peaks are dense figures (no 2:4 structured sparsity) per GPU, SXM parts at their default power, in TFLOP/s,
from NVIDIA's own specifications; where a datasheet gives only the figure with sparsity, half of it:

=========  ======  ======  =========  =========  ====================
device     fp4     fp8     bf16/fp16  tf32       fp32 (no tensor core)
=========  ======  ======  =========  =========  ====================
B200       9000    4500    2250       1100       75
H200       --      1979     989        494.5     67
H100 SXM   --      1979     989        494.5     67
H100 PCIe  --      1513     756        378       51
A100       --      --       312        156       19.5
=========  ======  ======  =========  =========  ====================

Sources: B200 — NVIDIA's GB200 NVL72 / HGX B200 specifications, per GPU of an HGX B200 (1,000 W): FP4 18,
FP8 9, FP16/BF16 4.5, TF32 2.2 PFLOP/s with sparsity, FP32 75 TFLOP/s. (The analyses' table said 80 TFLOP/s
FP32 from the Blackwell technical brief's earlier figure; the planning profile said 75 and 1,125 TF32, a
division of the 8-GPU total: the per-GPU figures of the current specification are used.) H100 SXM5 and PCIe
— NVIDIA H100 datasheet: FP8 3,958 / 3,026, BF16 1,979 / 1,513, TF32 989 / 756 TFLOP/s with sparsity, FP32
67 / 51. H200 SXM — NVIDIA H200 datasheet: the same GH100 compute as the H100 SXM. A100 SXM — NVIDIA A100
datasheet: BF16 312, TF32 156, FP32 19.5 TFLOP/s dense (no fp8 tensor cores).

The ``fp32`` policy uses the plain fp32 peak: PyTorch does not use TF32 tensor cores for fp32 matmuls unless
told to (``torch.backends.cuda.matmul.allow_tf32``). ``mxfp8`` uses the fp8 figure, ``nvfp4`` the fp4 one.
Devices and precisions not in the table have no known peak: MFU is then unavailable, with the reason, never
guessed (a CPU has none here; :mod:`ledger.planning.hardware` describes this machine's CPU separately).

Part of the core: imports nothing of ours. The runners reach :func:`model_flops_per_token` through
:mod:`ledger.sdk`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

TERA = 1e12

PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "B200": {"fp4": 9000, "fp8": 4500, "bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 75},
    "H200": {"fp8": 1979, "bf16": 989, "fp16": 989, "tf32": 494.5, "fp32": 67},
    "H100 PCIe": {"fp8": 1513, "bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51},
    "H100": {"fp8": 1979, "bf16": 989, "fp16": 989, "tf32": 494.5, "fp32": 67},
    "A100": {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5},
}
"""Dense TFLOP/s per GPU: device key -> precision -> TFLOP/s. Keys are matched in this order (so an
'H100 PCIe' is not taken for an SXM H100)."""


def peak_flops_of(device: str) -> dict[str, float]:
    """A device's dense peaks in FLOP/s per precision (for hardware profiles); KeyError when unknown."""
    return {precision: tflops * TERA for precision, tflops in PEAK_TFLOPS[device].items()}


_PRECISION_KEY = {"fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "fp8": "fp8", "mxfp8": "fp8", "bf16": "bf16",
                  "fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}


@dataclass(frozen=True)
class Peak:
    """The peak used for MFU, and what it is."""

    flops: float
    """Peak FLOP/s of one device."""
    label: str
    """What the figure is, e.g. 'H100 dense bf16 peak, 989 TFLOP/s per GPU'."""


def device_key(gpu_model: str | None) -> str | None:
    """The table's key for a device name such as 'NVIDIA H100 80GB HBM3', or None when unknown."""
    if not gpu_model:
        return None
    name = gpu_model.upper()
    for key in PEAK_TFLOPS:
        words = key.upper().split()
        if all(w in name for w in words):
            return key
    return None


def peak_flops(gpu_model: str | None, precision: str | None) -> Peak | str:
    """The dense peak FLOP/s of one device at a precision policy, or the reason there is none."""
    if not gpu_model:
        return "no GPU model recorded (peak FLOP/s unknown, e.g. a CPU run)"
    key = device_key(gpu_model)
    if key is None:
        return f"no peak FLOP/s known for {gpu_model!r} (known: {', '.join(PEAK_TFLOPS)})"
    prec = _PRECISION_KEY.get((precision or "").lower())
    if prec is None:
        return f"no peak FLOP/s known for precision {precision!r}"
    tflops = PEAK_TFLOPS[key].get(prec)
    if tflops is None:
        return f"{key} has no {prec} tensor-core peak"
    kind = "fp32 (no tensor cores)" if prec == "fp32" else f"{prec} tensor"
    return Peak(tflops * TERA, f"{key} dense {kind} peak, {tflops:g} TFLOP/s per GPU")


N = TypeVar("N", float, "NDArray[np.float64]")


def model_flops_per_token(active_params: N, layers: N | float, hidden: N | float, seq_len: N | float) -> N:
    """Model FLOPs per token (DESIGN.md, Definitions): 6 x active parameters (the weights a token passes
    through) + 12 x layers x hidden x sequence length (attention). Works on numbers and numpy arrays alike.

    >>> model_flops_per_token(1_000_000, 2, 64, 128)
    6196608.0
    """
    return 6.0 * active_params + 12.0 * layers * hidden * seq_len


__all__ = ["PEAK_TFLOPS", "TERA", "Peak", "device_key", "model_flops_per_token", "peak_flops", "peak_flops_of"]
