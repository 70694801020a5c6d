"""Megatron-Core's MoELayer on CPU (allgather dispatcher), trained a few steps and recorded through the SDK
under the real `ledger record`. Needs megatron-core (pip install megatron-core==0.16.1)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import ids_in, load_receipt

pytestmark = pytest.mark.skipif(importlib.util.find_spec("megatron") is None
                                or importlib.util.find_spec("megatron.core") is None,
                                reason="megatron-core is not installed (pip install megatron-core==0.16.1)")


def test_moe_layer_trains_on_cpu_and_is_recorded(ledger_cli, ledger_dir: Path) -> None:
    proc = ledger_cli("record", "--name", "mcore-cpu", "--", "python", "-W", "error::UserWarning", "-m",
                      "runners.megatron.mcore_cpu", "--steps", "3", "--experts", "4", "--topk", "2",
                      cwd=Path(__file__).resolve().parents[3], timeout=300)
    assert proc.returncode == 0, proc.stderr
    (rid,) = ids_in(ledger_dir)
    r = load_receipt(ledger_dir, rid)
    assert r["status"] == "succeeded" and r["summary"]["steps"] == 3 and r["summary"]["routing_rows"] == 3
    assert r["stack"]["software"]["megatron_core"] is not None
    w = r["workload"]
    assert w["kernels"]["dispatcher"] == "allgather" and w["model"]["num_experts"] == 4 and w["device"] == "cpu"
    steps = pq.read_table(ledger_dir / rid / "steps.parquet").to_pylist()
    assert all(s["aux_loss"] is not None and s["aux_loss"] > 0 for s in steps)
    routing = pq.read_table(ledger_dir / rid / "routing.parquet").to_pylist()
    for step in (1, 2, 3):  # every token goes to top-2 experts: 8 tokens x 2 assignments per step
        assert sum(sum(row["tokens"]) for row in routing if row["step"] == step) == 8 * 2 * 2
