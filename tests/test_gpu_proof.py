"""scripts/gpu_proof.sh --dry-run: the GPU proof's steps on CPU at toy size, through the real `ledger record`.

CI runs the steps every later one builds on (the machine probe, fp32 / bf16 / fp8 runs of the reference runner,
MFU, telemetry, gate): three recorded runs. The other steps (dense, compare with replicates, the 2x2 lattice,
the perf sweep, Megatron-Core) add eight more runs; the whole dry run was run by hand (see the README)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import ROOT, child_env

sys.path.insert(0, str(ROOT / "scripts"))
import gpu_proof  # noqa: E402


@pytest.mark.slow  # three toy runs under `ledger record` and three ledger commands
def test_dry_run_records_receipts_and_writes_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_proof.sh"), str(out), "--dry-run", "--only",
                           "env,precision,mfu,telemetry,gate"], env=child_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["proof.log", "receipts.tar.gz", "summary.json", "summary.md"]
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == list(gpu_proof.Proof.STEPS)
    assert summary["kind"].startswith("dry-run") and summary["environment"]["device"] == "cpu"
    assert summary["environment"]["fp8_scaled_mm"] == "works"  # torch 2.13's CPU float8 matmul
    for name in ("env", "precision", "mfu", "gate"):
        assert steps[name]["status"] == "ok", steps[name]
    for name in ("dense", "compare", "lattice", "perf", "megatron"):
        assert (steps[name]["status"], steps[name]["reason"]) == ("skipped", "not selected (--only)")
    tele = steps["telemetry"]
    assert tele["status"] == "ok" or (tele["status"] == "skipped" and "NVML" in tele["reason"])
    assert tele["figures"]["devices"]["host"]["samples"] >= 1
    assert "sm_clock_mhz" in tele["figures"]["devices"]["host"]["readings"]  # the NVML columns exist

    runs = steps["precision"]["figures"]
    assert set(runs) == {"moe-fp32", "moe-bf16", "moe-fp8"}
    fp8 = runs["moe-fp8"]["precision"]
    assert (fp8["compute"], fp8["fp8_backend"], fp8["fp8_recipe"]) == ("fp8", "torch", "tensorwise")
    assert runs["moe-bf16"]["grouped_gemm"] is True and "fp8_backend" not in runs["moe-bf16"]["precision"]
    for name in ("moe-fp32", "moe-bf16", "moe-fp8"):
        assert runs[name]["tokens_per_s"] > 0
        mfu = steps["mfu"]["figures"][name]
        assert mfu["mfu"] is None and "no GPU model" in mfu["reason"]  # a CPU has no peak: never guessed
        assert mfu["model_flops_per_token"] > 0
    gate = steps["gate"]["figures"]["gate"]
    assert gate["run_id"] == summary["receipts"]["moe-bf16"] and gate["gates"]
    assert gate["run_cost"]["total"]["energy_method"] in ("counter", "power-integral", "not measured")

    # the receipts came back in the tarball and are a ledger the CLI reads
    with tarfile.open(out / "receipts.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    ls = subprocess.run([sys.executable, "-m", "ledger.cli", "--ledger", str(tmp_path / "back" / "receipts"), "ls",
                         "--json"], env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    listed = {r["name"]: r for r in json.loads(ls.stdout)}
    assert set(listed) == {"moe-fp32", "moe-bf16", "moe-fp8"}
    assert {r["id"] for r in listed.values()} == set(summary["receipts"].values())
    assert all(r["status"] == "succeeded" for r in listed.values())
    assert "| precision | ok |" in (out / "summary.md").read_text()


def test_steps_past_the_budget_are_skipped_and_reported(tmp_path: Path) -> None:
    assert gpu_proof.main(["--out", str(tmp_path), "--dry-run", "--budget-s", "1"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["status"] for s in summary["steps"]] == ["skipped"] * len(gpu_proof.Proof.STEPS)
    assert all(s["reason"] == "the time budget ran out before this step" for s in summary["steps"])
    assert summary["receipts"] == {} and not (tmp_path / "receipts.tar.gz").exists()
    assert "| megatron | skipped |" in (tmp_path / "summary.md").read_text()


def test_an_unknown_step_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        gpu_proof.main(["--out", str(tmp_path), "--only", "precision,warp"])
    assert exc.value.code == 2 and "unknown steps ['warp']" in capsys.readouterr().err
