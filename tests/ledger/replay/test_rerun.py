"""`ledger rerun`: identical replay on CPU, drift warnings, scale changes, and launches that cannot be rebuilt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_receipt

from ledger.errors import BadInput
from ledger.replay.rerun import rebuild_command
from ledger.replay.scale import parse_scale
from schemas import Launch, Receipt, Workload

TINY = ["python", "-m", "runners.moe", "--config", "tiny", "--set", "steps=12", "--set", "eval_every=6",
        "--set", "model.layers=1"]


def _fake_distribution(root: Path, name: str, version: str) -> Path:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def test_cpu_receipt_reruns_identically_and_at_another_scale(ledger_cli, ledger_dir) -> None:
    ledger_cli("record", "--name", "base", "--", *TINY, check=True)
    out = ledger_cli("rerun", "base")
    assert out.returncode == 0, out.stderr
    assert "\nreproduced: identical loss at all 12 common steps" in out.stdout
    assert "drift" not in out.stderr
    rows = json.loads(ledger_cli("ls", "--json").stdout)
    assert [r["name"] for r in rows] == ["base", "base-rerun"]
    rerun = load_receipt(ledger_dir, rows[1]["id"])
    assert rerun["links"]["replicates"] == rows[0]["id"] and rerun["tags"]["rerun_of"] == rows[0]["id"][:12]

    # the same receipt at another scale (one record serves both: each record costs a torch start-up)
    out = ledger_cli("rerun", "base", "--scale", "layers=x2", "--set", "steps=6")
    assert out.returncode == 0, out.stderr
    rows = json.loads(ledger_cli("ls", "--json").stdout)
    assert len(rows) == 3
    scaled = load_receipt(ledger_dir, rows[2]["id"])
    assert scaled["workload"]["model"]["layers"] == 2 and scaled["summary"]["steps"] == 6
    assert scaled["links"]["replicates"] == rows[0]["id"]
    bad = ledger_cli("rerun", "base", "--scale", "depth=2")
    assert bad.returncode == 2 and "unknown scale dimension" in bad.stderr and "layers, width" in bad.stderr


def test_drift_is_reported_and_the_rerun_still_records(ledger_cli, ledger_dir, tmp_path) -> None:
    extra = _fake_distribution(tmp_path / "site", "stackreceipt-drift-probe", "1.0")
    ledger_cli("record", "--name", "old", "--", *TINY, env={"PYTHONPATH": str(extra)}, check=True)
    out = ledger_cli("rerun", "old")
    assert "stack drift since" in out.stderr and "stackreceipt-drift-probe 1.0 -> -" in out.stderr
    assert out.returncode == 0 and "\nreproduced: " in out.stdout
    assert len(json.loads(ledger_cli("ls", "--json").stdout)) == 2


def test_imported_and_redacted_launches_cannot_be_rebuilt() -> None:
    imported = Receipt(run_uuid="u", status="imported")
    with pytest.raises(BadInput, match="imported from evidence"):
        rebuild_command(imported)
    redacted = Receipt(run_uuid="u", status="succeeded", command=("train", "--token", "<redacted>"))
    with pytest.raises(BadInput, match="secrets redacted"):
        rebuild_command(redacted)
    with pytest.raises(BadInput, match="need a runner receipt"):
        rebuild_command(Receipt(run_uuid="u", status="succeeded", command=("train",)), sets=["x=1"])


def test_scale_rebuilds_runner_overrides() -> None:
    r = Receipt(run_uuid="u", status="succeeded", workload=Workload.model_validate({
        "model": {"layers": 2, "hidden": 64, "ffn_hidden": 256, "num_experts": 8},
        "parallelism": {"ep": 1}, "batch": {"global_batch": 16, "steps": 100},
        "launch": Launch(runner="runners.moe", config="tiny", overrides=("seed=3",)).model_dump()}))
    cmd = rebuild_command(r, scale=[parse_scale("width=128"), parse_scale("ranks=2")])
    joined = " ".join(cmd)
    assert "--set seed=3" in joined and "--set model.hidden=128" in joined and "--set model.ffn_hidden=512" in joined
    assert "torch.distributed.run --standalone --nproc_per_node 2 -m runners.moe" in joined
    with pytest.raises(BadInput, match="not a positive integer"):
        rebuild_command(r, scale=[parse_scale("layers=x0.3")])
