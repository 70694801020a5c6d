"""NVML readings of a GPU into telemetry rows, on a machine without a GPU: the real nvidia-ml-py module (its
constants and its NVMLError) with a stand-in for the driver's answers, since no driver is here. What is checked
is ours: the units (mW -> W, mJ -> J, percent -> 0..1), which NVML constants ask for which clock and which ECC
count, and that a reading the device does not support is left empty and never asked for again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml  # nvidia-ml-py: the `gpu` extra, installed by `make test`

from ledger.record.telemetry import _Gpus


class Driver:
    """Answers as an H200's driver would (values chosen here), ECC unsupported on device 1."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)  # constants and NVMLError from the real module

    def _ask(self, what: str, h: int) -> None:
        self.asked.append((what, h))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802 (NVML's names)
        self._ask("power", h)
        return 612_500  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        self._ask("energy", h)
        return 9_876_543  # mJ

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(used=80 << 30, total=141 << 30)

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:  # noqa: N802
        return {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 3201}[clock]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:  # noqa: N802
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:  # noqa: N802
        self._ask("ecc", h)
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        assert counter == pynvml.NVML_VOLATILE_ECC
        return {pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: 3, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: 0}[kind]


def test_gpu_readings_in_the_table_units_with_clocks_temperature_and_ecc() -> None:
    driver = Driver()
    gpus = _Gpus(driver, [(0, 0), (1, 1)])
    rows = dict(gpus.sample(0.0))
    assert rows["gpu0"] == {"power_w": 612.5, "energy_j": 9876.543, "utilization": 0.87, "memory_bytes": 80 << 30,
                            "sm_clock_mhz": 1980.0, "memory_clock_mhz": 3201.0, "temperature_c": 61.0,
                            "ecc_corrected": 3, "ecc_uncorrected": 0}
    assert "ecc_corrected" not in rows["gpu1"] and rows["gpu1"]["sm_clock_mhz"] == 1980.0
    asked = driver.asked.count(("ecc", 1))
    dict(gpus.sample(1.0))
    assert driver.asked.count(("ecc", 1)) == asked  # unsupported: not asked again
    assert driver.asked.count(("ecc", 0)) == 4  # corrected and uncorrected, twice


def test_the_gpu_memory_the_launchs_processes_hold(tmp_path: Any) -> None:
    """On GPU 0 the launch's two processes hold 30 and 12 GiB and another user's process 20 GiB: the launch's row
    says 42 GiB, never the 80 GiB in use on the device; a process whose memory NVML cannot tell (None) is left out;
    a device that cannot list its processes gives no such row, and is not asked again."""
    from pathlib import Path

    from ledger.record.telemetry import _Tree

    class Listing(Driver):
        def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:  # noqa: N802
            self._ask("processes", h)
            if h == 1:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return [SimpleNamespace(pid=101, usedGpuMemory=30 << 30), SimpleNamespace(pid=102, usedGpuMemory=12 << 30),
                    SimpleNamespace(pid=900, usedGpuMemory=20 << 30), SimpleNamespace(pid=103, usedGpuMemory=None)]

    proc = Path(tmp_path)
    for pid, session in ((101, 100), (102, 100), (103, 100), (900, 900)):  # a /proc of four processes
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "stat").write_text(f"{pid} (python) S 1 {pid} {session} 0 0 0 0 0 0 0 0 5 5 0 0 20 0\n")
    driver = Listing()
    gpus = _Gpus(driver, [(0, 0), (1, 1)], _Tree(proc, 100))
    rows = dict(gpus.sample(1.0))
    assert rows["gpu0:process"] == {"memory_bytes": 42 << 30} and "gpu1:process" not in rows
    assert rows["gpu0"]["memory_bytes"] == 80 << 30
    dict(gpus.sample(2.0))
    assert driver.asked.count(("processes", 1)) == 1 and driver.asked.count(("processes", 0)) == 2
