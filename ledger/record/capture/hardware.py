"""The hardware and driver probe of the launching node: CPU, memory, and GPUs through NVML.

NVML (``pynvml``, from the ``nvidia-ml-py`` distribution of the ``gpu`` extra) is imported lazily. Without
it, or without a driver, the record is a clean "no GPU" one: ``gpu_count=0`` and ``Hardware.nvml`` saying
why, never an error. Facts of other nodes come from the SDK (see :func:`ledger.record.capture.merge_runtime`).
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from ledger.record.capture._util import error_text, read_text
from schemas.receipt import Drivers, Gpu, Hardware, Link

_ARM_PARTS = {
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",  # NVIDIA Grace
}
"""ARM cores by (CPU implementer, CPU part): /proc/cpuinfo on ARM has no model name."""

_GPU_FIELDS: dict[str, Callable[[Any, Any], Any]] = {
    "name": lambda nv, h: _str(nv.nvmlDeviceGetName(h)),
    "uuid": lambda nv, h: _str(nv.nvmlDeviceGetUUID(h)),
    "memory_bytes": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).total),
    "compute_capability": lambda nv, h: "{}.{}".format(*nv.nvmlDeviceGetCudaComputeCapability(h)),
    "power_limit_w": lambda nv, h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
}
"""Gpu fields and how NVML gives each; a field NVML refuses (NVMLError) stays None."""


def capture_hardware() -> tuple[Hardware, Drivers]:
    """The launching node's hardware and GPU driver versions. Never raises."""
    host: dict[str, Any] = {}
    try:
        host = _host()
        try:
            import pynvml
        except Exception:
            return Hardware(**host, nvml="nvidia-ml-py not installed"), Drivers()
        return read_nvml(pynvml, host)
    except Exception as exc:
        return Hardware(**host, error=error_text(exc)), Drivers()


def read_nvml(nvml: Any, host: dict[str, Any] | None = None) -> tuple[Hardware, Drivers]:
    """Hardware and Drivers from an NVML binding (the ``pynvml`` module or anything with its API), with
    ``host`` facts merged in. NVML that fails to initialise gives the clean no-GPU record."""
    host = dict(host or {})
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Hardware(**host, nvml=f"nvml unavailable: {exc}"), Drivers()
    try:
        drivers = Drivers(gpu_driver=_try(nvml, lambda: _str(nvml.nvmlSystemGetDriverVersion())),
                          cuda_driver=_cuda_driver(nvml))
        gpus: list[Gpu] = []
        links: list[Link] = []
        errors: list[str] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:  # e.g. a GPU that fell off the bus: counted, not described
                gpus.append(Gpu(index=index))
                errors.append(f"gpu {index}: {exc}")
                continue
            fields = {field: _try(nvml, partial(get, nvml, handle)) for field, get in _GPU_FIELDS.items()}
            gpus.append(Gpu(index=index, **fields))
            links.extend(_nvlinks(nvml, index, handle))
        hardware = Hardware(**host, gpu_model=gpu_model(g.name for g in gpus), gpu_count=len(gpus),
                            gpus=tuple(gpus), nvlinks=tuple(links), nvml="ok",
                            error="; ".join(errors) or None)
        return hardware, drivers
    finally:
        _try(nvml, nvml.nvmlShutdown)


def gpu_model(names: Iterable[str | None]) -> str | None:
    """One model name for a set of GPUs: None without any, 'mixed: A, B' when they differ."""
    distinct = sorted({n for n in names if n})
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    return "mixed: " + ", ".join(distinct)


def _nvlinks(nvml: Any, index: int, handle: Any) -> list[Link]:
    """Active NVLinks of one GPU; a link NVML refuses to describe is skipped."""
    links = []
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != enabled:
                continue
        except nvml.NVMLError:
            continue
        links.append(Link(gpu=index, link=link, peer=_try(nvml, partial(_peer, nvml, handle, link))))
    return links


def _peer(nvml: Any, handle: Any, link: int) -> str:
    """PCI bus id of the remote end of an NVLink."""
    return _str(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)


def _cuda_driver(nvml: Any) -> str | None:
    """The highest CUDA version the driver supports, e.g. 12080 -> '12.8'."""
    for fn in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        if hasattr(nvml, fn):
            version = _try(nvml, getattr(nvml, fn))
            if isinstance(version, int) and version > 0:
                return f"{version // 1000}.{version % 1000 // 10}"
    return None


def _try(nvml: Any, fn: Callable[[], Any]) -> Any:
    """fn(), or None when NVML refuses (not supported, no permission, ...)."""
    try:
        return fn()
    except nvml.NVMLError:
        return None


def _str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------------- host
def _host() -> dict[str, Any]:
    """Hostname, CPU model, usable cores and memory of this machine."""
    try:
        cores: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"hostname": socket.gethostname(), "cpu_model": _cpu_model(), "cpu_cores": cores,
            "memory_bytes": _memory_bytes()}


def _cpu_model() -> str | None:
    """The CPU model from /proc/cpuinfo (x86 'model name', ARM implementer/part), else platform."""
    info: dict[str, str] = {}
    for line in (read_text(Path("/proc/cpuinfo"), 1 << 18) or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in info:
            info[key.strip()] = value.strip()
    if info.get("model name"):
        return info["model name"]
    arm = (info.get("CPU implementer", "").lower(), info.get("CPU part", "").lower())
    if arm in _ARM_PARTS:
        return _ARM_PARTS[arm]
    return platform.processor() or platform.machine() or None


def _memory_bytes() -> int | None:
    """Total host memory from /proc/meminfo, else sysconf."""
    for line in (read_text(Path("/proc/meminfo"), 1 << 16) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


__all__ = ["capture_hardware", "gpu_model", "read_nvml"]
