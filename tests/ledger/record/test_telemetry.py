"""The telemetry sampler writing a real stream, RAPL counters in a fake sysfs tree, and energy_summary."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ledger.record.telemetry import Sampler
from ledger.store.energy import energy_summary
from ledger.store.layout import rank_dir
from schemas.tables import TELEMETRY


def read_stream(run_dir: Path, rank: int = -1) -> pa.Table:
    with pa.ipc.open_stream(rank_dir(run_dir, rank) / "telemetry.arrows") as reader:
        return reader.read_all()


def test_sampler_writes_host_rows(tmp_path: Path) -> None:
    sampler = Sampler(tmp_path, interval=0.05)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    sampler.stop()  # idempotent
    table = read_stream(tmp_path)
    assert table.schema.equals(TELEMETRY)
    host = [r for r in table.to_pylist() if r["device"] == "host"]
    assert 3 <= len(host) <= 9 and sampler.samples == len(host)
    assert all(r["rank"] == -1 and r["node"] == socket.gethostname() for r in host)
    assert all(r["memory_bytes"] > 0 for r in host)
    # utilisation needs CPU time to have advanced since the previous sample (stop() samples once more,
    # possibly within the same jiffy): it is then unknown (None), never invented
    measured = [r["utilization"] for r in host[1:] if r["utilization"] is not None]
    assert measured and all(0.0 <= u <= 1.0 for u in measured)
    times = [r["time"] for r in host]
    assert times == sorted(times)
    assert sampler.errors == []


def rapl_zone(root: Path, name: str, zone: str, energy_uj: int, max_uj: int = 2**32) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(zone + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def test_sampler_reads_rapl_packages_and_unwraps_the_counter(tmp_path: Path) -> None:
    powercap = tmp_path / "powercap"
    package = rapl_zone(powercap, "intel-rapl:0", "package-0", 999_000_000, max_uj=1_000_000_000)
    rapl_zone(powercap, "intel-rapl:0:0", "dram", 5)  # a sub-zone: not a package
    rapl_zone(powercap, "intel-rapl:1", "psys", 7)  # the platform: it includes the package
    locked = rapl_zone(powercap, "intel-rapl:2", "package-1", 0)
    (locked / "energy_uj").unlink()
    (locked / "energy_uj").mkdir()  # unreadable, as for non-root users on recent kernels
    sampler = Sampler(tmp_path / "run", interval=0.05, powercap=powercap)
    sampler.start()
    time.sleep(0.12)
    (package / "new").write_text("500000\n")  # wrapped: 0.5 J - 999 J + 1000 J (+1 µJ) = +1.500001 J
    os.replace(package / "new", package / "energy_uj")  # atomically, as sysfs reads are
    time.sleep(0.12)
    sampler.stop()
    rows = [r for r in read_stream(tmp_path / "run").to_pylist() if r["device"].startswith("cpu")]
    assert {r["device"] for r in rows} == {"cpu-package-0"}
    energies = [r["energy_j"] for r in rows]
    assert energies == sorted(energies) and energies[0] == pytest.approx(999.0)
    assert energies[-1] == pytest.approx(1000.500001)
    assert energy_summary(read_stream(tmp_path / "run")) == (pytest.approx(1.500001), "counter")
    assert sampler.errors == []


def table(rows: list[dict[str, Any]]) -> pa.Table:
    full = [{"rank": -1, "node": "n1", "power_w": None, "energy_j": None, "utilization": None,
             "memory_bytes": None, **r} for r in rows]
    return pa.Table.from_pylist(full, schema=TELEMETRY)


def test_energy_from_counters_summed_over_devices() -> None:
    rows = [{"time": t, "device": d, "energy_j": e, "power_w": 300.0}
            for d, series in {"gpu0": [1000.0, 1300.0, 1600.0], "gpu1": [50.0, 150.0, 250.0]}.items()
            for t, e in zip([0.0, 1.0, 2.0], series, strict=True)]
    rows.append({"time": 1.0, "device": "host", "memory_bytes": 2**30})
    assert energy_summary(table(rows)) == (pytest.approx(800.0), "counter")


def test_energy_counter_reset_counts_from_zero() -> None:
    counter = [100.0, 400.0, 50.0, 80.0]
    rows = [{"time": float(t), "device": "gpu0", "energy_j": e} for t, e in enumerate(counter)]
    assert energy_summary(table(rows)) == (pytest.approx(300.0 + 50.0 + 30.0), "counter")


def test_energy_counters_of_the_same_device_sampled_by_two_ranks_are_not_double_counted() -> None:
    rows = [{"time": float(t), "device": "gpu0", "energy_j": 10.0 * t, "rank": rank}
            for rank in (-1, 0) for t in range(4 if rank == -1 else 3)]
    rows += [{"time": float(t), "device": "gpu0", "energy_j": 5.0 * t, "node": "n2"} for t in range(3)]
    assert energy_summary(table(rows)) == (pytest.approx(30.0 + 10.0), "counter")


def test_energy_integrated_from_power_says_so() -> None:
    samples = [(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]
    rows = [{"time": t, "device": "gpu0", "power_w": p} for t, p in samples]
    assert energy_summary(table(rows)) == (pytest.approx(200.0 + 600.0), "power-integral")
    rows += [{"time": float(t), "device": "gpu1", "energy_j": 10.0 * t} for t in range(3)]
    assert energy_summary(table(rows)) == (pytest.approx(800.0 + 20.0), "power-integral")


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [{"time": 1.0, "device": "host", "memory_bytes": 2**30}, {"time": 2.0, "device": "host"}],
        [{"time": 1.0, "device": "gpu0", "energy_j": 500.0, "power_w": 250.0}],
        [{"time": 1.0, "device": "gpu0", "power_w": 250.0}, {"time": 2.0, "device": "gpu1", "power_w": 9.0}],
    ],
)
def test_energy_not_measured(rows: list[dict[str, Any]]) -> None:
    assert energy_summary(table(rows)) == (None, "not measured")


def test_energy_of_a_table_without_energy_columns() -> None:
    assert energy_summary(pa.table({"time": [1.0], "device": ["gpu0"]})) == (None, "not measured")


def test_the_launchs_process_tree_is_sampled_its_memory_and_cpu(tmp_path: Path) -> None:
    """A launch in a session of its own whose child holds 200 MB and spins: the ``process`` rows count both
    processes (the child's 200 MB, proportional to what it alone holds) and their CPU use, not the machine's. The
    CPU use is checked against the share of a core the child itself measured (its CPU time over its wall time):
    on a loaded machine a spinning process gets a third of a core, not one."""
    import subprocess
    import sys

    share = tmp_path / "share"
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import sys, time; b = bytearray(200 << 20); b[::4096] = b\"x\" * len(b[::4096]); t = time.time()\\n"
            "c = time.process_time()\\n"
            "while time.time() - t < 1.5: pass\\n"
            "open(sys.argv[1], \"w\").write(str((time.process_time() - c) / (time.time() - t)))', sys.argv[1]])\n"
            "child.wait()\n")
    launch = subprocess.Popen([sys.executable, "-c", code, str(share)], start_new_session=True)
    sampler = Sampler(tmp_path, interval=0.1, session=launch.pid)
    sampler.start()
    launch.wait(timeout=60)
    sampler.stop()
    rows = [r for r in read_stream(tmp_path).to_pylist() if r["device"] == "process"]
    peak = max(r["memory_bytes"] for r in rows)
    host = max(r["memory_bytes"] for r in read_stream(tmp_path).to_pylist() if r["device"] == "host")
    assert 200 << 20 <= peak < 400 << 20 < host, (peak, host)  # the child's 200 MB and two interpreters
    busy = [r["utilization"] for r in rows if r["utilization"] is not None]
    spun = float(share.read_text())  # the spinning child's own share of a core (about 1 on an idle machine)
    assert busy and 0.5 * spun < max(busy) <= 2.5, (busy, spun)  # one process spinning, never the whole machine


def test_a_wrapped_runs_peak_memory_is_its_process_trees(tmp_path: Path) -> None:
    """`ledger record` of a script that holds 150 MB: the receipt's peak memory is its process tree's, said so,
    never the machine's memory in use (several GB here)."""
    import json
    import subprocess
    import sys

    from conftest import BIN, child_env

    script = tmp_path / "hold.py"
    script.write_text("import time\nb = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\ntime.sleep(1.5)\n")
    env = child_env(LEDGER_DIR=str(tmp_path / "receipts"))
    subprocess.run([str(BIN / "ledger"), "record", "--name", "hold", "--telemetry-interval", "0.2", "--",
                    sys.executable, str(script)], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=120)
    shown = subprocess.run([str(BIN / "ledger"), "show", "hold", "--json"], cwd=tmp_path, env=env, check=True,
                           capture_output=True, text=True, timeout=120)
    summary = json.loads(shown.stdout)["summary"]
    assert summary["peak_memory_source"] == "process tree"
    assert 150 << 20 <= summary["peak_memory_bytes"] == summary["peak_host_memory_bytes"] < 300 << 20
