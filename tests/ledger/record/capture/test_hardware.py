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
