"""The hardware and driver probe of the launching node: CPU, memory, and GPUs through NVML.

NVML (``pynvml``, from the ``nvidia-ml-py`` distribution of the ``gpu`` extra) is imported lazily. Without
it, or without a driver, the record is a clean "no GPU" one: ``gpu_count=0`` and ``Hardware.nvml`` saying
why, never an error. Facts of other nodes come from the SDK (see :func:`ledger.record.capture.merge_runtime`).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
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
    "sm_clock_max_mhz": lambda nv, h: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
    "sm_clock_app_mhz": lambda nv, h: int(nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
    "mem_clock_app_mhz": lambda nv, h: int(nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM)),
    "ecc_enabled": lambda nv, h: bool(nv.nvmlDeviceGetEccMode(h)[0]),
    "ecc_uncorrected": lambda nv, h: int(nv.nvmlDeviceGetTotalEccErrors(
        h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
    "pci_bus_id": lambda nv, h: _str(nv.nvmlDeviceGetPciInfo(h).busId),
}
"""Gpu fields and how NVML gives each; a field NVML refuses (NVMLError), or that this binding of NVML
does not offer, stays None (not available)."""
_ANCESTORS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""NVML's nvmlGpuTopologyLevel_t values and the names ``nvidia-smi topo -m`` gives them."""


def capture_hardware() -> tuple[Hardware, Drivers]:
    """The launching node's hardware and GPU driver versions. Never raises."""
    host: dict[str, Any] = {}
    try:
        host = _host()
        nvml, why = load_nvml()
        if nvml is None:
            return Hardware(**host, nvml=why), Drivers()
        return read_nvml(nvml, host)
    except Exception as exc:
        return Hardware(**host, error=error_text(exc)), Drivers()


NVML_LIBRARY = "libnvidia-ml.so.1"
"""The library pynvml loads on Linux (NVIDIA's driver installs it)."""
NO_LIBRARY = "nvml unavailable: NVML Shared Library Not Found"
""":attr:`Hardware.nvml` without that library: pynvml's own words for it (``NVML_ERROR_LIBRARY_NOT_FOUND``)."""


def load_nvml() -> tuple[Any | None, str]:
    """``(pynvml, "")``, or ``(None, why)`` where it cannot work: ``nvidia-ml-py not installed``, or, on Linux,
    :data:`NO_LIBRARY` when NVML's library does not load. That is looked at before pynvml is imported: the
    import defines ctypes structures for NVML's whole API (30-50 ms of CPU here, beside the launch), for nothing
    on a host without NVIDIA's driver (a CPU node, a laptop, CI), where ``nvmlInit`` would fail for that reason."""
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        return None, "nvidia-ml-py not installed"
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(NVML_LIBRARY)
        except OSError:
            return None, NO_LIBRARY
    try:
        import pynvml
    except Exception:
        return None, "nvidia-ml-py not installed"
    return pynvml, ""


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
        handles: dict[int, Any] = {}
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
            handles[index] = handle
        hardware = Hardware(**host, gpu_model=gpu_model(g.name for g in gpus), gpu_count=len(gpus),
                            gpus=tuple(gpus), nvlinks=tuple(links), nvml="ok",
                            gpu_topology=gpu_topology(nvml, handles, gpus, links),
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


def _bus(bus_id: str | None) -> str | None:
    """A PCI bus id without its domain, lower case: NVML writes the domain with 4 or 8 digits."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else parts[0]


def gpu_topology(nvml: Any, handles: dict[int, Any], gpus: Iterable[Gpu], links: Iterable[Link]) -> tuple[str, ...]:
    """How each pair of GPUs is connected, named as ``nvidia-smi topo -m`` names it: ``"i-j NV<n>"`` with
    n NVLinks between them (direct links, or, through NVSwitch, the fewer of the two GPUs' links to
    peers that are no GPU), else the nearest common PCIe ancestor NVML reports (PIX, PXB, PHB, NODE,
    SYS); a pair NVML refuses to place is left out."""
    bus = {g.index: _bus(g.pci_bus_id) for g in gpus}
    gpu_of = {b: i for i, b in bus.items() if b}
    direct: dict[tuple[int, int], int] = {}
    switch: dict[int, int] = {}
    every_bus_known = all(bus.get(i) for i in handles)  # only then is a peer known to be no GPU
    for link in links:
        peer = gpu_of.get(_bus(link.peer) or "")
        if peer is None:
            if link.peer is not None and every_bus_known:  # a peer that is no GPU of this node: NVSwitch
                switch[link.gpu] = switch.get(link.gpu, 0) + 1
        elif peer != link.gpu:
            direct[(link.gpu, peer)] = direct.get((link.gpu, peer), 0) + 1
    out = []
    indices = sorted(handles)
    for a, i in enumerate(indices):
        for j in indices[a + 1:]:
            n = max(direct.get((i, j), 0), direct.get((j, i), 0))  # each end sees the links (if readable)
            if not n and switch.get(i) and switch.get(j):
                n = min(switch[i], switch[j])
            if n:
                out.append(f"{i}-{j} NV{n}")
                continue
            level = _try(nvml, partial(_common_ancestor, nvml, handles[i], handles[j]))
            if isinstance(level, int) and level in _ANCESTORS:
                out.append(f"{i}-{j} {_ANCESTORS[level]}")
    return tuple(out)


def _common_ancestor(nvml: Any, a: Any, b: Any) -> Any:
    return nvml.nvmlDeviceGetTopologyCommonAncestor(a, b)


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
    """fn(), or None when NVML refuses (not supported, no permission, ...) or this binding of NVML does not
    offer the call (an older nvidia-ml-py)."""
    try:
        return fn()
    except (nvml.NVMLError, AttributeError):
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
            "memory_bytes": _memory_bytes(), **cpu_facts()}


def _cpu_count(text: str | None) -> int | None:
    """CPUs in a kernel CPU list such as ``0-3,8-11`` (None when unreadable)."""
    if not text or not text.strip():
        return None
    total = 0
    try:
        for part in text.strip().split(","):
            lo, _, hi = part.partition("-")
            total += int(hi or lo) - int(lo) + 1
    except ValueError:
        return None
    return total


def cpu_facts(sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """Topology and frequency scaling of the CPUs, read from sysfs (what ``lscpu`` reads): sockets, NUMA
    nodes, threads per core, the frequency governor and the highest frequency. A fact the kernel does not
    expose (no cpufreq in most VMs and containers) is None, i.e. not available; never raises."""
    cpu_root = sys_root / "devices" / "system" / "cpu"
    try:
        cpus = sorted(p for p in cpu_root.iterdir() if p.name[3:].isdigit() and p.name.startswith("cpu"))
    except OSError:
        cpus = []
    packages = {read_text(c / "topology" / "physical_package_id", 64) for c in cpus} - {None}
    governors = {(read_text(c / "cpufreq" / "scaling_governor", 256) or "").strip() for c in cpus} - {""}
    highest = []
    for c in cpus:
        text = (read_text(c / "cpufreq" / "cpuinfo_max_freq", 64) or "").strip()
        if text.isdigit():
            highest.append(int(text) // 1000)  # kHz
    try:
        numa = sum(1 for p in (sys_root / "devices" / "system" / "node").iterdir()
                   if p.name.startswith("node") and p.name[4:].isdigit())
    except OSError:
        numa = 0
    threads = _cpu_count(read_text(cpus[0] / "topology" / "thread_siblings_list", 4096)) if cpus else None
    return {
        "cpu_sockets": len(packages) or None,
        "numa_nodes": numa or None,
        "threads_per_core": threads,
        "cpu_governor": (next(iter(governors)) if len(governors) == 1 else
                         "mixed: " + ", ".join(sorted(governors)) if governors else None),
        "cpu_max_mhz": max(highest) if highest else None,
    }


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


__all__ = ["capture_hardware", "cpu_facts", "gpu_model", "gpu_topology", "read_nvml"]
