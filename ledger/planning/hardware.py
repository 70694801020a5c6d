"""Hardware profiles: what one device can do, and how devices are linked.

Built in: B200, H200, H100 (one GPU of an 8-GPU HGX/DGX node, dense Tensor Core peaks, no structured
sparsity) and CPU (this 2-core machine, treated as one device). A user adds a profile from a JSON or
TOML file with the same keys (``--hardware my_gpu.toml``)::

    name = "MI300X"
    peak_flops = { bf16 = 1.307e15, fp8 = 2.615e15, fp32 = 1.634e14 }
    hbm_bytes = 192e9
    hbm_bw = 5.3e12
    nvlink_bw = 64e9          # per device, per direction, inside a node
    network_bw = 50e9         # per device, per direction, between nodes
    devices_per_node = 8

Figures are per device. Bandwidths are per direction. The ``*_efficiency`` fields are the nominal
fractions of the peaks that real kernels reach; `ledger fit perf` calibrates them on receipts.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ledger.mfu import peak_flops_of
from ledger.planning.errors import UnknownHardware

if TYPE_CHECKING:
    from schemas import Receipt

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""Keys of ``peak_flops``. A receipt's precision policy maps to one of them (see :func:`peak_key`)."""


class Hardware(BaseModel):
    """One device type and its links."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str
    """Profile name, e.g. B200."""
    peak_flops: dict[str, float]
    """Dense peak FLOP/s of one device per precision (keys from PRECISIONS; at least bf16 or fp32)."""
    hbm_bytes: float = Field(gt=0)
    """Device memory (HBM on GPUs, RAM on a CPU)."""
    hbm_bw: float = Field(gt=0)
    """Device memory bandwidth, bytes/s."""
    cache_bytes: float = Field(default=0.0, ge=0)
    """Cache one device's kernels can keep a working set in (0: not modelled, all traffic at hbm_bw). Used for
    the buffers whose size varies most across geometries: a loop over experts' full-size gradients."""
    cache_bw: float = Field(default=0.0, ge=0)
    """Bandwidth of a working set that fits in ``cache_bytes``, bytes/s (0 or below hbm_bw: hbm_bw)."""
    nvlink_bw: float = Field(gt=0)
    """Bandwidth between devices of one node, bytes/s per device per direction."""
    network_bw: float = Field(gt=0)
    """Bandwidth between nodes, bytes/s per device per direction."""
    devices_per_node: int = Field(default=8, ge=1)
    """Devices in one node."""
    launch_s: float = Field(default=8e-6, ge=0)
    """CPU time to dispatch and launch one kernel (framework overhead included)."""
    launch_overlaps: bool = True
    """True when kernel launches overlap device execution (GPUs); False when they add to it (CPU)."""
    gemm_efficiency: float = Field(default=0.6, gt=0, le=1)
    """Nominal fraction of the peak a large GEMM reaches."""
    attention_efficiency: float = Field(default=0.5, gt=0, le=1)
    """Nominal fraction of the peak fused attention reaches."""
    memory_efficiency: float = Field(default=0.8, gt=0, le=1)
    """Nominal fraction of hbm_bw that memory-bound kernels reach."""
    comm_efficiency: float = Field(default=0.75, gt=0, le=1)
    """Nominal fraction of link bandwidth that collectives reach."""
    collective_latency_s: float = Field(default=2e-5, ge=0)
    """Fixed latency of one collective."""
    dp_overlap: float = Field(default=0.7, ge=0, le=1)
    """Share of the data-parallel gradient traffic hidden behind the backward pass."""
    grouped_gemm: bool = True
    """Experts run as one grouped GEMM (False: a loop of GEMMs, as the reference runner does on a CPU)."""
    expert_load_cv: float = Field(default=0.3, ge=0)
    """Coefficient of variation of one expert's token count per micro-batch beyond multinomial noise (an
    assumption for routers trained with a load-balancing loss); sets the straggler of expert parallelism."""
    gemm_tile: int = Field(default=128, ge=1)
    """Rows of one GEMM tile: a GEMM with fewer rows (a small expert's slice) still costs a whole tile."""
    reserved_bytes: float = Field(default=4e9, ge=0)
    """Per-device memory the framework keeps (context, communication buffers, allocator slack)."""
    source: str = ""
    """Where the figures come from."""

    @field_validator("peak_flops")
    @classmethod
    def _peaks(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(PRECISIONS))
        if unknown:
            raise ValueError(f"unknown precision(s) {', '.join(unknown)}; use {', '.join(PRECISIONS)}")
        if not any(k in value for k in ("bf16", "fp32")):
            raise ValueError("give at least a bf16 or an fp32 peak")
        if any(not v > 0 for v in value.values()):
            raise ValueError("every peak must be > 0")
        return value

    def peak(self, precision: str) -> float:
        """Peak FLOP/s for a receipt's precision policy (fp8 falls back to bf16, bf16 to fp32...)."""
        key = peak_key(precision)
        for k in (key, *_FALLBACK[key]):
            if k in self.peak_flops:
                return self.peak_flops[k]
        raise AssertionError("validated: bf16 or fp32 exists")

    def peak_name(self, precision: str) -> str:
        """Which peak :meth:`peak` uses, e.g. 'bf16 dense'."""
        key = peak_key(precision)
        used = next(k for k in (key, *_FALLBACK[key]) if k in self.peak_flops)
        return f"{used} dense" + ("" if used == key else f" (no {key} peak in the profile)")


_FALLBACK = {
    "fp4": ("fp8", "bf16", "fp32"),
    "fp8": ("bf16", "fp32"),
    "bf16": ("fp16", "fp32"),
    "fp16": ("bf16", "fp32"),
    "tf32": ("fp32", "bf16"),
    "fp32": ("tf32", "bf16"),
}


def peak_key(precision: str | None) -> str:
    """A precision policy name (fp32, bf16, fp16, fp8, mxfp8, nvfp4...) -> a key of ``peak_flops``."""
    p = (precision or "bf16").lower()
    if "fp4" in p:
        return "fp4"
    if "fp8" in p:
        return "fp8"
    for key in ("bf16", "fp16", "tf32", "fp32"):
        if key in p:
            return key
    return "bf16"


_GB = 1e9
_T = 1e12
BUILTIN: dict[str, Hardware] = {
    "B200": Hardware(
        name="B200",
        peak_flops=peak_flops_of("B200"),
        hbm_bytes=180 * _GB,
        hbm_bw=7.7 * _T,
        nvlink_bw=900 * _GB,
        network_bw=50 * _GB,
        devices_per_node=8,
        source="peaks: ledger.mfu (NVIDIA HGX B200 specification, per GPU: 2.25 PFLOP/s dense BF16, 4.5 FP8, "
        "9 FP4, 1.1 TF32, FP32 75 TFLOP/s); "
        "180 GB HBM3e at 7.7 TB/s, NVLink 5 1.8 TB/s bidirectional; "
        "one 400 Gb/s ConnectX-7 NIC per GPU (DGX B200)",
    ),
    "H200": Hardware(
        name="H200",
        peak_flops=peak_flops_of("H200"),
        hbm_bytes=141 * _GB,
        hbm_bw=4.8 * _T,
        nvlink_bw=450 * _GB,
        network_bw=50 * _GB,
        devices_per_node=8,
        source="NVIDIA H200 SXM datasheet: 989 TFLOP/s dense BF16 (1,979 FP8), 141 GB HBM3e at 4.8 TB/s, "
        "NVLink 4 900 GB/s bidirectional; one 400 Gb/s NDR NIC per GPU (HGX H200 reference design)",
    ),
    "H100": Hardware(
        name="H100",
        peak_flops=peak_flops_of("H100"),
        hbm_bytes=80 * _GB,
        hbm_bw=3.35 * _T,
        nvlink_bw=450 * _GB,
        network_bw=50 * _GB,
        devices_per_node=8,
        source="NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16 (1,979 FP8), 80 GB HBM3 at 3.35 TB/s, "
        "NVLink 4 900 GB/s bidirectional; one 400 Gb/s NDR NIC per GPU (DGX H100)",
    ),
    "CPU": Hardware(
        name="CPU",
        peak_flops={"fp32": 332.8e9, "bf16": 665.6e9},
        hbm_bytes=23 * 2**30,
        hbm_bw=34 * _GB,
        nvlink_bw=5 * _GB,
        network_bw=1.25 * _GB,
        devices_per_node=1,
        cache_bytes=4.4e6,
        cache_bw=2.9 * 34 * _GB,
        launch_s=8e-6,
        launch_overlaps=False,
        grouped_gemm=False,
        gemm_efficiency=0.35,
        attention_efficiency=0.2,
        memory_efficiency=0.5,
        comm_efficiency=0.5,
        collective_latency_s=5e-5,
        dp_overlap=0.0,
        gemm_tile=16,
        reserved_bytes=0.5e9,
        source="this machine (lscpu): AMD EPYC, family 26 (Zen 5), 2 cores at 2.6 GHz, AVX-512 with two "
        "512-bit FMA pipes = 64 FP32 FLOP/cycle/core -> 332.8 GFLOP/s FP32 for the two cores (665.6 BF16 "
        "with AVX512_BF16); 23 GiB RAM; 34 GB/s measured with a numpy copy; one device, no accelerator; "
        "8 us per eager PyTorch op (dispatch + autograd) as the nominal launch cost; cache: autograd's "
        "accumulation pattern (zeros, then add_ into a buffer of the same size; one thread; 2026-12-01, load "
        "average 8) streamed 50-56 GB/s up to a 2 MiB buffer (4 MiB working set), 28 GB/s at 4 MiB and 22 GB/s "
        "at 8 MiB: with the working-set model of ledger.planning.perf, a 4.4 MB cache share 2.9x faster than "
        "memory (bench/bench_perf_cpu.py prints the same probe beside its figure)",
    ),
}
"""The built-in profiles by name."""


def known() -> list[str]:
    """Names of the built-in profiles."""
    return sorted(BUILTIN)


def load_file(path: Path) -> Hardware:
    """A profile from a JSON or TOML file (keys: the fields of :class:`Hardware`)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UnknownHardware(f"cannot read the hardware profile {path}: {exc.strerror or exc}") from exc
    try:
        data: Any = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise UnknownHardware(f"hardware profile {path} does not parse: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("hardware"), dict):
        data = data["hardware"]
    if not isinstance(data, dict):
        raise UnknownHardware(f"hardware profile {path} must hold one table (object) of fields")
    data.setdefault("name", path.stem)
    try:
        return Hardware.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "profile"
        raise UnknownHardware(f"hardware profile {path}: {where}: {first['msg']}") from exc


def resolve(spec: str, extra: dict[str, Hardware] | None = None) -> Hardware:
    """A profile by name (case-insensitive), or from a JSON/TOML file path."""
    table = {**BUILTIN, **(extra or {})}
    for name, hw in table.items():
        if name.lower() == spec.lower():
            return hw
    path = Path(spec)
    if path.suffix.lower() in (".json", ".toml") or path.exists():
        return load_file(path)
    raise UnknownHardware(
        f"unknown hardware profile {spec!r}; known: {', '.join(sorted(table))}; or give a JSON or TOML "
        "profile file (keys: name, peak_flops, hbm_bytes, hbm_bw, nvlink_bw, network_bw, devices_per_node)"
    )


def for_receipt(receipt: Receipt, extra: dict[str, Hardware] | None = None) -> Hardware | None:
    """The profile a receipt ran on: its GPU model matched by name (H100, H200, B200...), or CPU when it
    ran without a GPU. None when no profile matches."""
    table = {**BUILTIN, **(extra or {})}
    device = receipt.workload.device
    gpu = receipt.stack.hardware.gpu_model
    if device == "cpu" or (device is None and not gpu):
        return table.get("CPU")
    if not gpu:
        return None
    words = str(gpu).upper().replace("-", " ").split()
    for name in sorted(table, key=len, reverse=True):
        if name != "CPU" and name.upper() in words:
            return table[name]
    return None
