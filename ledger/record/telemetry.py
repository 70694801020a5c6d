"""Telemetry of one node: GPU power, energy, utilisation and memory, CPU package energy, host memory.

:class:`Sampler` runs a daemon thread that samples every ``interval`` seconds (once more when stopped, so
energy counters cover the whole run) and writes rows of the ``telemetry`` table through
:class:`ledger.sdk.Run`. Devices, one row each per sample:

- ``gpu<i>`` (NVML index ``i``): power (W), the cumulative energy counter (J, from
  ``nvmlDeviceGetTotalEnergyConsumption``; Volta and later), utilisation (0..1), memory used (bytes), SM and
  memory clocks (MHz), temperature (C), and the volatile corrected / uncorrected ECC error counts;
- ``cpu-package-<n>``: the RAPL package energy counter (``/sys/class/powercap/intel-rapl:<n>``), unwrapped
  into a monotonic counter (J), and the power between two samples (W); skipped when unreadable (recent
  kernels let only root read it);
- ``host``: memory in use (MemTotal - MemAvailable) and CPU utilisation (0..1) from ``/proc``: the whole
  machine, other processes included;
- ``process`` (when the sampler is given the launch's session): the memory of the launch's process tree (every
  process of its session: the launch runs in a session of its own, and so do its children unless they leave it),
  each process's proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``: pages shared between a loop and
  its data-loader workers counted once) or, where that cannot be read, its resident size; and its CPU use in
  cores (``utilization``: CPU seconds of the tree per second, summed over its processes);
- ``gpu<i>:process`` (the same, on a GPU): the memory NVML says the tree's processes hold on GPU ``i``
  (``nvmlDeviceGetComputeRunningProcesses``).

The run's own peak memory is taken from these (:func:`ledger.store.summary.summarize`), never from ``host`` or a
GPU's memory in use, which count other processes.

Sampling is best effort: a reading that fails is left empty, a source that fails is skipped, nothing is
raised; the first distinct failures are kept in :attr:`Sampler.errors` for the receipt's problems.

:func:`ledger.store.energy.energy_summary` turns the table back into one energy figure.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from ledger.sdk import Run
from ledger.store.energy import energy_summary

POWERCAP = Path("/sys/class/powercap")
PROC = Path("/proc")
FLUSH_EVERY_S = 1.0
"""Rows are written at least this often: a crash loses about a second of telemetry."""
MAX_ERRORS = 20

Reading = tuple[str, dict[str, Any]]
"""(device, log_telemetry keyword arguments)."""


class _Source(Protocol):
    def sample(self, now: float) -> Iterator[Reading]: ...

    def close(self) -> None: ...


class Sampler:
    """Samples this node every ``interval`` seconds into ``run_dir`` as rank ``rank`` (-1: the wrapper).

    ``gpus`` restricts NVML sampling to those indices (a rank sampling only its own GPU); ``powercap`` and
    ``proc`` are the sysfs and procfs roots (tests point them at fake trees).
    """

    def __init__(
        self,
        run_dir: Path,
        interval: float = 1.0,
        *,
        rank: int = -1,
        gpus: Sequence[int] | None = None,
        powercap: Path = POWERCAP,
        proc: Path = PROC,
        session: int | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.run_dir = Path(run_dir)
        self.interval = interval
        self.rank = rank
        self.gpus = None if gpus is None else tuple(gpus)
        self.powercap = powercap
        self.proc = proc
        self.tree = _Tree(proc, session) if session is not None else None
        """The launch's process tree (the wrapper's sampler; None for a rank's)."""
        self.errors: list[str] = []
        """The first distinct failures (at most 20), as 'source: Type: message'."""
        self.samples = 0
        """Sampling rounds completed."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._run: Run | None = None

    def start(self) -> None:
        """Start sampling in a daemon thread (sources are opened there: NVML start-up can be slow)."""
        if self._thread is not None:
            return
        try:
            self._run = Run(self.run_dir, rank=self.rank, background=False)
        except Exception as exc:
            self._error("writer", exc)
            return
        self._thread = threading.Thread(target=self._loop, name="ledger-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Take a last sample, stop the thread, flush and close the files. Never raises."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(10.0, 3 * self.interval))
        if self._run is not None:
            try:
                self._run.close()
            except Exception as exc:
                self._error("writer", exc)

    # ------------------------------------------------------------------------------------- thread
    def _loop(self) -> None:
        sources = self._open()
        last_flush = time.monotonic()
        due = time.monotonic()
        try:
            while True:
                stopping = self._stop.is_set()
                self._sample(sources)
                if stopping:
                    break
                if time.monotonic() - last_flush >= FLUSH_EVERY_S:
                    self._flush()
                    last_flush = time.monotonic()
                due += self.interval
                self._stop.wait(max(0.0, due - time.monotonic()))
                if time.monotonic() > due + self.interval:  # fell behind (suspended): don't burst
                    due = time.monotonic()
        finally:
            for _, source in sources:
                try:
                    source.close()
                except Exception as exc:
                    self._error("close", exc)

    def _open(self) -> list[tuple[str, _Source]]:
        openers: dict[str, Callable[[], _Source | None]] = {
            "nvml": lambda: _Gpus.open(self.gpus, self.tree),
            "rapl": lambda: _Rapl.open(self.powercap),
            "host": lambda: _Host(self.proc),
        }
        if self.tree is not None:
            tree = self.tree
            openers["process"] = lambda: tree
        sources = []
        for name, opener in openers.items():
            try:
                source = opener()
            except Exception as exc:
                self._error(name, exc)
                continue
            if source is not None:
                sources.append((name, source))
        return sources

    def _sample(self, sources: list[tuple[str, _Source]]) -> None:
        assert self._run is not None
        now = time.time()
        for name, source in sources:
            try:
                for device, values in source.sample(now):
                    self._run.log_telemetry(device, time_s=now, **values)
            except Exception as exc:
                self._error(name, exc)
        self.samples += 1

    def _flush(self) -> None:
        try:
            if self._run is not None:
                self._run.flush()
        except Exception as exc:
            self._error("writer", exc)

    def _error(self, source: str, exc: BaseException) -> None:
        text = f"{source}: {type(exc).__name__}: {' '.join(str(exc).split())}"
        if text not in self.errors and len(self.errors) < MAX_ERRORS:
            self.errors.append(text)


# --------------------------------------------------------------------------------------- sources
class _Gpus:
    """NVML readings of each GPU; a metric the device does not support is not asked for again."""

    METRICS: dict[str, Callable[[Any, Any], Any]] = {
        "power_w": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "energy_j": lambda nv, h: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,
        "utilization": lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h).gpu / 100.0,
        "memory_bytes": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).used),
        "sm_clock_mhz": lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        "memory_clock_mhz": lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        "temperature_c": lambda nv, h: float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "ecc_corrected": lambda nv, h: int(nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)),
        "ecc_uncorrected": lambda nv, h: int(nv.nvmlDeviceGetTotalEccErrors(
            h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)),
    }
    """Each reading (NVML call) of a GPU sample; ECC counts are NVML's volatile totals (since the driver
    loaded), so a rise during a run is that run's errors."""

    def __init__(self, nvml: Any, handles: list[tuple[int, Any]], tree: _Tree | None = None) -> None:
        self.nvml = nvml
        self.handles = handles
        self.tree = tree
        self.unsupported: set[tuple[int, str]] = set()

    @classmethod
    def open(cls, indices: Sequence[int] | None, tree: _Tree | None = None) -> _Gpus | None:
        """The GPUs NVML sees (or those of ``indices``); None without nvidia-ml-py or a driver."""
        from ledger.record.capture.hardware import load_nvml

        pynvml, _ = load_nvml()
        if pynvml is None:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return None
        try:
            count = pynvml.nvmlDeviceGetCount()
            wanted = range(count) if indices is None else [i for i in indices if 0 <= i < count]
            return cls(pynvml, [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in wanted], tree)
        except Exception:
            pynvml.nvmlShutdown()
            raise

    def sample(self, now: float) -> Iterator[Reading]:
        for index, handle in self.handles:
            values = {}
            for metric, read in self.METRICS.items():
                if (index, metric) in self.unsupported:
                    continue
                try:
                    values[metric] = read(self.nvml, handle)
                except self.nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", -1):
                        self.unsupported.add((index, metric))
            if values:
                yield f"gpu{index}", values
            if self.tree is not None and (index, "process") not in self.unsupported:
                held = self._held(index, handle, self.tree.pids(now))
                if held is not None:
                    yield f"gpu{index}:process", {"memory_bytes": held}

    def _held(self, index: int, handle: Any, pids: set[int]) -> int | None:
        """GPU memory the tree's processes hold on this GPU (None when NVML cannot tell)."""
        try:
            running = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", -1):
                self.unsupported.add((index, "process"))
            return None
        used = [getattr(p, "usedGpuMemory", None) for p in running if getattr(p, "pid", None) in pids]
        known = [int(u) for u in used if isinstance(u, int) and u >= 0]
        return sum(known) if known or not used else None

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class _RaplZone:
    """One RAPL package zone, its wrapping microjoule counter unwrapped into a monotonic one."""

    def __init__(self, path: Path) -> None:
        self.path = path / "energy_uj"
        self.device = "cpu-" + (path / "name").read_text().strip()
        try:
            self.range_uj: int | None = int((path / "max_energy_range_uj").read_text()) or None
        except (OSError, ValueError):
            self.range_uj = None
        self.last_raw = int(self.path.read_text())  # raises when unreadable: the zone is skipped
        self.total_uj = self.last_raw
        self.last_time: float | None = None

    def read(self, now: float) -> dict[str, Any]:
        raw = int(self.path.read_text())
        delta = raw - self.last_raw
        if delta < 0:  # wrapped around max_energy_range_uj (or reset, when the range is unknown)
            delta = delta + self.range_uj + 1 if self.range_uj else raw
        self.total_uj += delta
        power = delta / 1e6 / (now - self.last_time) if self.last_time and now > self.last_time else None
        self.last_raw, self.last_time = raw, now
        return {"energy_j": self.total_uj / 1e6, "power_w": power}


class _Rapl:
    """CPU package energy of every readable RAPL package zone."""

    ZONE = re.compile(r"intel-rapl:\d+")

    def __init__(self, zones: list[_RaplZone]) -> None:
        self.zones = zones

    @classmethod
    def open(cls, root: Path) -> _Rapl | None:
        zones = []
        for path in sorted(root.glob("intel-rapl:*")) if root.is_dir() else ():
            if not cls.ZONE.fullmatch(path.name):
                continue  # sub-zones (core, uncore, dram) are inside the package figure or not CPU
            try:
                zone = _RaplZone(path)
            except (OSError, ValueError):
                continue  # unreadable without privileges: skipped silently
            if zone.device.startswith("cpu-package"):
                zones.append(zone)
        return cls(zones) if zones else None

    def sample(self, now: float) -> Iterator[Reading]:
        for zone in self.zones:
            yield zone.device, zone.read(now)

    def close(self) -> None:
        pass


class _Host:
    """Host memory in use and CPU utilisation since the previous sample, from /proc."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc
        self.last_cpu: tuple[int, int] | None = None

    def sample(self, now: float) -> Iterator[Reading]:
        values: dict[str, Any] = {}
        meminfo = {}
        for line in (self.proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if rest.split():
                meminfo[key] = int(rest.split()[0]) * 1024
        if "MemTotal" in meminfo and "MemAvailable" in meminfo:
            values["memory_bytes"] = meminfo["MemTotal"] - meminfo["MemAvailable"]
        cpu = self._cpu_times()
        if cpu and self.last_cpu and cpu[1] > self.last_cpu[1]:
            values["utilization"] = 1.0 - (cpu[0] - self.last_cpu[0]) / (cpu[1] - self.last_cpu[1])
        self.last_cpu = cpu or self.last_cpu
        yield "host", values

    def _cpu_times(self) -> tuple[int, int] | None:
        """(idle + iowait, total) jiffies of all CPUs."""
        try:
            with open(self.proc / "stat") as f:
                fields = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        return fields[3] + fields[4], sum(fields)

    def close(self) -> None:
        pass


class _Tree:
    """The launch's process tree: every process of its session, and their memory and CPU use."""

    def __init__(self, proc: Path, session: int) -> None:
        self.proc = proc
        self.session = session
        self.page = _page_size()
        self.ticks = _clock_ticks()
        self._pids: tuple[float, set[int]] | None = None
        self._cpu = 0.0
        """CPU seconds of the processes found by the last :meth:`pids`."""
        self.last_cpu: tuple[float, float] | None = None

    def pids(self, now: float) -> set[int]:
        """The session's live processes (found once per sample)."""
        if self._pids is not None and self._pids[0] == now:
            return self._pids[1]
        found: set[int] = set()
        self._cpu = 0.0
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 13 and int(fields[3]) == self.session and fields[0] not in ("Z", "X"):
                found.add(int(entry.name))
                self._cpu += (int(fields[11]) + int(fields[12])) / self.ticks
        self._pids = (now, found)
        return found

    def sample(self, now: float) -> Iterator[Reading]:
        pids = self.pids(now)
        if not pids:
            return
        memory = sum(self._memory(pid) for pid in pids)
        values: dict[str, Any] = {"memory_bytes": memory}
        cpu = self._cpu
        if self.last_cpu is not None and now > self.last_cpu[0] and cpu >= self.last_cpu[1]:
            values["utilization"] = (cpu - self.last_cpu[1]) / (now - self.last_cpu[0])
        self.last_cpu = (now, cpu)
        yield "process", values

    def _memory(self, pid: int) -> int:
        """A process's proportional set size, else its resident size; 0 when it is gone."""
        base = self.proc / str(pid)
        try:
            for line in (base / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        try:
            return int((base / "statm").read_text().split()[1]) * self.page
        except (OSError, ValueError, IndexError):
            return 0

    def close(self) -> None:
        pass


def _page_size() -> int:
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4096


def _clock_ticks() -> int:
    import os

    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


__all__ = ["Sampler", "energy_summary"]
