"""Peak FLOP/s per device and precision, for MFU (DESIGN.md: "MFU = tokens/s x model FLOPs per token /
(peak FLOP/s of the precision used x devices). Say which peak.").

Dense figures (no 2:4 sparsity) per GPU from NVIDIA's datasheets, SXM parts at their default power:

=========  ========  ========  =================  =================
device     fp8       bf16/fp16 tf32 (tensor)      fp32 (no tensor)
=========  ========  ========  =================  =================
B200       4500 T    2250 T    1100 T             80 T   (HGX B200, 1000 W)
H200       1979 T     989 T     495 T             67 T   (same GH100 compute as H100 SXM)
H100 SXM   1979 T     989 T     495 T             67 T
H100 PCIe  1513 T     756 T     378 T             51 T
A100       --         312 T     156 T             19.5 T (no fp8 tensor cores)
=========  ========  ========  =================  =================

The ``fp32`` policy uses the plain fp32 peak: PyTorch does not use TF32 tensor cores for fp32 matmuls
unless told to (``torch.backends.cuda.matmul.allow_tf32``). ``mxfp8`` uses the fp8 figure, ``fp16`` the
bf16 one. Devices and precisions not in the table have no known peak: MFU is then unavailable, with the
reason, never guessed (a CPU has none here).
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12

_PEAKS: dict[str, dict[str, float]] = {
    "B200": {"fp8": 4500, "bf16": 2250, "tf32": 1100, "fp32": 80},
    "H200": {"fp8": 1979, "bf16": 989, "tf32": 495, "fp32": 67},
    "H100 PCIe": {"fp8": 1513, "bf16": 756, "tf32": 378, "fp32": 51},
    "H100": {"fp8": 1979, "bf16": 989, "tf32": 495, "fp32": 67},
    "A100": {"bf16": 312, "tf32": 156, "fp32": 19.5},
}
"""Dense TFLOP/s per GPU: device key -> precision -> TFLOP/s. Keys are matched in this order."""

_PRECISION_KEY = {"fp8": "fp8", "mxfp8": "fp8", "bf16": "bf16", "fp16": "bf16", "tf32": "tf32", "fp32": "fp32"}


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
    for key in _PEAKS:
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
        return f"no peak FLOP/s known for {gpu_model!r} (known: {', '.join(_PEAKS)})"
    prec = _PRECISION_KEY.get((precision or "").lower())
    if prec is None:
        return f"no peak FLOP/s known for precision {precision!r}"
    tflops = _PEAKS[key].get(prec)
    if tflops is None:
        return f"{key} has no {prec} tensor-core peak"
    kind = "fp32 (no tensor cores)" if prec == "fp32" else f"{prec} tensor"
    return Peak(tflops * TERA, f"{key} dense {kind} peak, {tflops:g} TFLOP/s per GPU")
