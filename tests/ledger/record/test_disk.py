"""Full or read-only disk: the training runs to completion, the wrapper says where the staging data is
and how to publish it, and it publishes once there is room. Uses real tmpfs mounts (root, as in CI)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ids_in, load_receipt


@pytest.fixture
def mountpoint(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "mnt"
    point.mkdir()
    probe = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(point)], capture_output=True)
    if probe.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI must be able to mount tmpfs (runs as root): {probe.stderr.decode()}")
        pytest.skip(f"cannot mount tmpfs here: {probe.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_full_disk(mountpoint: Path, ledger_cli, workload) -> None:
    ledger = mountpoint / "receipts"
    marker = mountpoint.parent / "finished"
    # far more metrics than 160 KiB can hold
    script = workload(f"run.flush()\nfor i in range(60000):\n    run.log_step(1000 + i, loss=1.0, lr=0.1, note=i)\n"
                      f"run.flush()\nopen({str(marker)!r}, 'w').close()\n", steps=5)
    proc = ledger_cli("record", "--ledger", str(ledger), "--", "python", str(script))
    assert marker.exists(), proc.stderr  # the training ran to completion
    assert proc.returncode == 75
    assert "could not publish the receipt" in proc.stderr and str(ledger / ".staging") in proc.stderr
    assert ids_in(ledger) == []
    subprocess.run(["mount", "-o", "remount,size=64m", str(mountpoint)], check=True)
    out = ledger_cli("recover", "--ledger", str(ledger))
    assert "published" in out.stdout, out.stdout + out.stderr
    (rid,) = ids_in(ledger)
    r = load_receipt(ledger, rid)
    assert r["status"] == "succeeded"
    assert r["summary"]["steps"] >= 5  # what was flushed before the disk filled is kept
    assert any("sdk_errors.log" in p["source"] for p in r["problems"])  # and the loss is recorded


def test_read_only_ledger(mountpoint: Path, ledger_cli, workload, tmp_path: Path) -> None:
    (mountpoint / "receipts").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(mountpoint)], check=True)
    marker = tmp_path / "finished"
    script = workload(f"open({str(marker)!r}, 'w').close()\n", steps=4)
    proc = ledger_cli("record", "--ledger", str(mountpoint / "receipts"), "--", "python", str(script),
                      env={"TMPDIR": str(tmp_path)})
    assert marker.exists() and proc.returncode == 75
    assert "is not writable" in proc.stderr and "staging this run in" in proc.stderr
    target = tmp_path / "elsewhere"
    fallback = tmp_path / f"ledger-staging-{os.getuid()}"  # this user's private fallback (mode 0700)
    assert f"staging this run in {fallback} instead" in proc.stderr
    out = ledger_cli("recover", "--from", str(fallback), "--ledger", str(target))
    assert "published" in out.stdout
    (rid,) = ids_in(target)
    assert load_receipt(target, rid)["summary"]["steps"] == 4


def test_full_disk_keeps_what_fits_and_says_why_the_rest_is_lost(mountpoint: Path, ledger_cli, tmp_path) -> None:
    """Issue 34, item 10: 20,000 SDK rows flushed at once were written as one piece, so none survived a full disk;
    and two of the receipt's problems had empty messages. Now the rows go out in pieces (those that fit are
    kept) and every problem says something."""
    ledger = mountpoint / "receipts"
    script = tmp_path / "train.py"
    script.write_text("import ledger.sdk\nrun = ledger.sdk.current()\n"
                      "for i in range(1, 20_001):\n    run.log_step(i, loss=1.0 / i, lr=0.1, grad_norm=float(i))\n"
                      "run.flush()\nprint('trained', flush=True)\n")
    proc = ledger_cli("record", "--ledger", str(ledger), "--", "python", str(script))
    assert "trained" in proc.stdout and proc.returncode == 75, proc.stderr
    subprocess.run(["mount", "-o", "remount,size=64m", str(mountpoint)], check=True)
    out = ledger_cli("recover", "--ledger", str(ledger))
    assert "published" in out.stdout, out.stdout + out.stderr
    (rid,) = ids_in(ledger)
    r = load_receipt(ledger, rid)
    assert 0 < r["summary"]["steps"] < 20_000, r["problems"]  # what fitted is kept, the rest is not
    assert r["problems"] and all(p["message"].strip() for p in r["problems"]), r["problems"]
    assert any("sdk_errors.log" in p["source"] for p in r["problems"])
