"""The hardware probe: real host facts, the real NVML library, and NVML's API driven by a stand-in."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import pytest
from conftest import child_env

from ledger.record.capture.hardware import capture_hardware, gpu_model, read_nvml
from schemas.receipt import Drivers

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (the gpu extra) is not installed; `make test` installs it")


def test_host_facts() -> None:
    hardware, _ = capture_hardware()
    assert hardware.hostname == socket.gethostname()
    assert hardware.cpu_model
    assert hardware.cpu_cores is not None and 1 <= hardware.cpu_cores <= (os.cpu_count() or 1)
    assert hardware.memory_bytes is not None and hardware.memory_bytes > 2**28
    assert hardware.error is None


def test_nvml_through_the_real_library() -> None:
    """Here (no GPU) the clean no-GPU record; on a GPU machine, every GPU described."""
    hardware, drivers = capture_hardware()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        assert hardware.nvml == f"nvml unavailable: {exc}"
        assert (hardware.gpu_count, hardware.gpus, hardware.gpu_model, hardware.nvlinks) == (0, (), None, ())
        assert drivers == Drivers()
        return
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    assert hardware.nvml == "ok" and hardware.gpu_count == count
    assert drivers.gpu_driver and drivers.cuda_driver
    assert all(g.name and g.uuid and g.memory_bytes for g in hardware.gpus)


def test_without_nvidia_ml_py() -> None:
    code = ("import sys; sys.modules['pynvml'] = None\n"
            "from ledger.record.capture.hardware import capture_hardware\n"
            "h, d = capture_hardware(); print(h.nvml, h.gpu_count, d.gpu_driver, h.cpu_cores is not None)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=child_env()).stdout
    assert out.strip() == "nvidia-ml-py not installed 0 None True"


def test_gpu_model() -> None:
    assert gpu_model([]) is None
    assert gpu_model(["NVIDIA H200", "NVIDIA H200", None]) == "NVIDIA H200"
    assert gpu_model(["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]) == "mixed: NVIDIA A100-SXM4-80GB, NVIDIA H200"


class StandIn:
    """The slice of pynvml's API the probe calls, for a two-GPU node: the real library needs a GPU."""

    NVMLError = pynvml.NVMLError
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 4

    def __init__(self, names: list[str], fail_init: bool = False, lost: int | None = None) -> None:
        self.names, self.fail_init, self.lost = names, fail_init, lost
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.names[h].encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("Memory", (), {"total": 141 * 2**30, "used": 2**30})()

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return 700_000

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link == 3:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1 if link < 2 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        if h == 1 and link == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return type("Pci", (), {"busId": f"00000000:{0x18 + link:02X}:00.0".encode()})()


def test_nvml_api_two_gpus() -> None:
    nvml = StandIn(["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
    hardware, drivers = read_nvml(nvml, {"hostname": "n1"})
    assert drivers == Drivers(gpu_driver="570.124.06", cuda_driver="12.8")
    assert hardware.nvml == "ok" and hardware.hostname == "n1" and hardware.error is None
    assert hardware.gpu_count == 2 and hardware.gpu_model == "mixed: NVIDIA H100 80GB HBM3, NVIDIA H200"
    first, second = hardware.gpus
    assert (first.name, first.uuid, first.memory_bytes, first.compute_capability, first.power_limit_w) == (
        "NVIDIA H200", "GPU-00000000", 141 * 2**30, "9.0", 700.0)
    assert second.power_limit_w is None  # refused by NVML: unknown, not a failure
    assert [(lk.gpu, lk.link, lk.peer) for lk in hardware.nvlinks] == [
        (0, 0, "00000000:18:00.0"), (0, 1, "00000000:19:00.0"), (1, 0, "00000000:18:00.0"), (1, 1, None)]
    assert nvml.shutdown


def test_nvml_api_driver_not_loaded() -> None:
    hardware, drivers = read_nvml(StandIn(["x"], fail_init=True))
    assert hardware.nvml == f"nvml unavailable: {pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)}"
    assert hardware.gpu_count == 0 and drivers == Drivers()


def test_nvml_api_lost_gpu_is_counted_and_reported() -> None:
    hardware, _ = read_nvml(StandIn(["NVIDIA H200", "NVIDIA H200"], lost=1))
    assert hardware.gpu_count == 2 and hardware.gpu_model == "NVIDIA H200"
    assert hardware.gpus[1].name is None
    assert hardware.error is not None and hardware.error.startswith("gpu 1: ")


class Clocked(StandIn):
    """A node of four GPUs with clocks, ECC and PCI ids: GPUs 0 and 1 joined by two direct NVLinks, GPUs
    2 and 3 each with two links to an NVSwitch, GPU 3 with ECC off and one uncorrected error."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0
    PEERS = {(0, 0): "00000000:19:00.0", (0, 1): "00000000:19:00.0", (1, 0): "00000000:18:00.0",
             (1, 1): "00000000:18:00.0", (2, 0): "00000000:A0:00.0", (2, 1): "00000000:A1:00.0",
             (3, 0): "00000000:A0:00.0", (3, 1): "00000000:A1:00.0"}
    BUS = ["0000:18:00.0", "0000:19:00.0", "0000:3B:00.0", "0000:3C:00.0"]  # 4-digit domain, as some drivers

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetApplicationsClock(self, h: int, clock: int) -> int:
        if clock == self.NVML_CLOCK_SM:
            return 1755 if h == 2 else 1980
        return 2619

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return [0, 1] if h == 3 else [1, 1]  # current, pending

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)
        return 1 if h == 3 else 0

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return type("Pci", (), {"busId": self.BUS[h].encode()})()

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return 1 if link < 2 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return type("Pci", (), {"busId": self.PEERS[(h, link)].encode()})()

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        if {a, b} == {1, 2}:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 10 if {a, b} <= {0, 1} else 50  # PIX, SYS


def test_clocks_ecc_and_topology_through_nvml_api() -> None:
    hardware, _ = read_nvml(Clocked(["NVIDIA H200"] * 4))
    g0, _, g2, g3 = hardware.gpus
    assert (g0.sm_clock_max_mhz, g0.sm_clock_app_mhz, g0.mem_clock_app_mhz) == (1980, 1980, 2619)
    assert g2.sm_clock_app_mhz == 1755
    assert (g0.ecc_enabled, g0.ecc_uncorrected, g3.ecc_enabled, g3.ecc_uncorrected) == (True, 0, False, 1)
    assert g0.pci_bus_id == "0000:18:00.0"
    # by hand: 0-1 two direct links (each end sees both); 2-3 two links each to the NVSwitch (A0, A1: no
    # GPU's bus); 0-2, 0-3, 1-3 no NVLink in common: the PCIe ancestor (SYS); 1-2 refused: left out
    assert hardware.gpu_topology == ("0-1 NV2", "0-2 SYS", "0-3 SYS", "1-3 SYS", "2-3 NV2")


def test_clocks_ecc_topology_not_offered_stay_unknown() -> None:
    """An NVML without these calls (the plain stand-in) gives None: shown as not available, never a guess."""
    hardware, _ = read_nvml(StandIn(["NVIDIA H200", "NVIDIA H200"]))
    assert all(g.sm_clock_app_mhz is None and g.ecc_enabled is None and g.pci_bus_id is None for g in hardware.gpus)
    assert hardware.gpu_topology == ()


def _sysfs(root: Any, cpus: int, governors: list[str] | None, numa: int, siblings: str) -> Any:
    for c in range(cpus):
        d = root / "devices" / "system" / "cpu" / f"cpu{c}"
        (d / "topology").mkdir(parents=True)
        (d / "topology" / "physical_package_id").write_text(f"{c * 2 // cpus}\n")
        (d / "topology" / "thread_siblings_list").write_text(siblings + "\n")
        if governors is not None:
            (d / "cpufreq").mkdir()
            (d / "cpufreq" / "scaling_governor").write_text(governors[c % len(governors)] + "\n")
            (d / "cpufreq" / "cpuinfo_max_freq").write_text(f"{3_700_000 if c else 3_500_000}\n")
    (root / "devices" / "system" / "cpu" / "cpufreq").mkdir(exist_ok=True)  # not a cpuN directory
    for n in range(numa):
        (root / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
    return root


def test_cpu_facts_from_a_sysfs_tree(tmp_path: Any) -> None:
    from ledger.record.capture.hardware import cpu_facts

    two = _sysfs(tmp_path / "a", 8, ["performance"], 2, "0,4")
    assert cpu_facts(two) == {"cpu_sockets": 2, "numa_nodes": 2, "threads_per_core": 2,
                              "cpu_governor": "performance", "cpu_max_mhz": 3700}
    mixed = _sysfs(tmp_path / "b", 4, ["performance", "powersave"], 1, "0-3")
    assert cpu_facts(mixed)["cpu_governor"] == "mixed: performance, powersave"
    assert cpu_facts(mixed)["threads_per_core"] == 4
    bare = _sysfs(tmp_path / "c", 2, None, 0, "0")  # a VM without cpufreq: not available
    assert cpu_facts(bare) == {"cpu_sockets": 2, "numa_nodes": None, "threads_per_core": 1,
                               "cpu_governor": None, "cpu_max_mhz": None}
    assert cpu_facts(tmp_path / "nothing") == dict.fromkeys(cpu_facts(bare), None)


def test_cpu_facts_of_this_machine_agree_with_sysfs() -> None:
    from pathlib import Path

    hardware, _ = capture_hardware()
    governors = sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"))
    if governors:
        assert hardware.cpu_governor is not None and hardware.cpu_max_mhz is not None
    else:
        assert hardware.cpu_governor is None  # said as "not available", never guessed
    packages = {p.read_text() for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology/physical_package_id")}
    assert hardware.cpu_sockets == (len(packages) or None)


NVML_PROBE = ("import ctypes, json, sys\n"
              "from ledger.record.capture.hardware import capture_hardware\n"
              "try:\n    ctypes.CDLL('libnvidia-ml.so.1'); loads = True\nexcept OSError:\n    loads = False\n"
              "h, d = capture_hardware()\n"
              "print(json.dumps([loads, 'pynvml' in sys.modules, h.nvml, h.gpu_count]))")


def _nvml_probe(env: dict[str, str]) -> list[Any]:
    import json

    out = subprocess.run([sys.executable, "-c", NVML_PROBE], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def test_pynvml_is_imported_only_where_nvmls_library_loads() -> None:
    """Here, NVIDIA's library loads or not (a GPU host or not): pynvml is imported exactly when it does, and
    without it the record says what pynvml itself says then (the real exception's text, not ours)."""
    loads, imported, nvml, count = _nvml_probe(child_env())
    assert imported == loads
    if not loads:
        with pytest.raises(pynvml.NVMLError) as exc:
            pynvml.nvmlInit()
        assert nvml == f"nvml unavailable: {exc.value}" and count == 0


def test_a_library_that_loads_but_is_not_nvml_goes_through_pynvml(tmp_path) -> None:
    """A file named like NVML's library that is some other library (zlib): it loads, so pynvml is imported and
    its nvmlInit says what is wrong (no NVML function in it), rather than the skip's "not found"."""
    import ctypes.util

    zlib = ctypes.util.find_library("z")
    dirs = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64")
    found = [os.path.join(d, zlib) for d in dirs if zlib and os.path.exists(os.path.join(d, zlib))]
    assert found, "zlib's shared library not found"
    os.symlink(found[0], tmp_path / "libnvidia-ml.so.1")
    env = child_env(LD_LIBRARY_PATH=f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    loads, imported, nvml, count = _nvml_probe(env)
    assert loads and imported and count == 0
    assert nvml == f"nvml unavailable: {pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)}"
