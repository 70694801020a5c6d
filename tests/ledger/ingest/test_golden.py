"""Megatron-LM CI golden values and their model_config.yaml."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ledger.errors import BadInput
from ledger.ingest import golden
from ledger.ingest.yamlite import YamlError, load

CONFIG = "8experts2parallel_dist_optimizer__model_config.yaml"
# file -> (steps, last lm loss, iteration-time at step 100, gpu)
EXPECTED = {
    "8experts2parallel_dist_optimizer__golden_values_dev_dgx_a100.json": (21, 9.44307, 0.31638, "A100"),
    "8experts2parallel_dist_optimizer__golden_values_dev_dgx_gb200.json": (100, 9.76527, 0.3277, "GB200"),
    "8experts2parallel_dist_optimizer__golden_values_dev_dgx_h100.json": (100, 9.76018, 0.36424, "H100"),
}


def test_every_golden_fixture_is_covered(golden_dir: Path) -> None:
    assert sorted(p.name for p in golden_dir.iterdir()) == sorted([*EXPECTED, CONFIG])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_values(golden_dir: Path, name: str) -> None:
    n, last_loss, last_time, gpu = EXPECTED[name]
    ev = golden.evidence(golden_dir / name, golden_dir / CONFIG)
    rows = ev.tables["steps"].to_pylist()
    raw = json.loads((golden_dir / name).read_text())
    assert len(rows) == n == len(raw["lm loss"]["values"])
    assert rows[-1]["step"] == 100 and rows[-1]["loss"] == last_loss and rows[-1]["step_time_s"] == last_time
    assert rows[-1]["memory_bytes"] == int(raw["mem-max-allocated-bytes"]["values"]["100"])
    assert dict(rows[-1]["extra"])["num-zeros"] == raw["num-zeros"]["values"]["100"]
    assert ev.stack.hardware.gpu_model == gpu and ev.stack.hardware.system == f"dgx_{gpu.lower()}"
    if raw["iteration-time"]["start_step"] == 2:  # H100/GB200 time step 1 is not given: stays null
        assert rows[0]["step"] == 1 and rows[0]["step_time_s"] is None


def test_model_config_is_the_workload(golden_dir: Path) -> None:
    ev = golden.evidence(golden_dir / next(iter(EXPECTED)), golden_dir / CONFIG)
    w = ev.workload
    assert w is not None
    assert (w.model.layers, w.model.hidden, w.model.heads, w.model.num_experts, w.model.top_k) == (12, 512, 8, 8, 1)
    assert (w.parallelism.tp, w.parallelism.pp, w.parallelism.ep) == (2, 1, 2)
    assert w.router.load_balancing == "sinkhorn" and w.precision.compute == "bf16" and w.precision.params == "bf16"
    assert (w.batch.global_batch, w.batch.micro_batch, w.batch.steps, w.data.sequence_length) == (32, 4, 100, 1024)
    assert w.optimizer.lr == 0.00015 and w.optimizer.grad_clip == 1.0 and w.optimizer.schedule == "cosine"
    assert ev.stack.environment == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
                                    "NCCL_ALGO": "Ring", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def test_list_values_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "golden_values_lts_dgx_h100.json"
    path.write_text(json.dumps({"lm loss": {"start_step": 0, "end_step": 10, "step_interval": 5,
                                            "values": [10.5, "nan", "n/a", 9.5]}}))
    ev = golden.evidence(path)
    rows = ev.tables["steps"].to_pylist()
    assert [r["step"] for r in rows] == [0, 5, 15] and math.isnan(rows[1]["loss"]) and rows[2]["loss"] == 9.5
    assert ev.issues is not None and any("'n/a' is not a number" in n for n in ev.issues.notes)


def test_wrong_kinds(golden_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="expected Megatron-LM golden values.*found a PyTorch profiler trace"):
        bad = tmp_path / "t.json"
        bad.write_text('{"traceEvents": []}')
        golden.evidence(bad)
    with pytest.raises(BadInput, match="expected a Megatron-LM model_config.yaml"):
        golden.evidence(golden_dir / next(iter(EXPECTED)), golden_dir / next(iter(EXPECTED)))


def test_yaml_subset_rejects_what_it_cannot_read() -> None:
    assert load("A:\n  b: 1 # c\n  d: 'x # y'\nE: [1, 2]\n") == {"A": {"b": "1", "d": "x # y"}, "E": ["1", "2"]}
    with pytest.raises(YamlError, match="line 2"):
        load("A: 1\n   B: 2\n")
