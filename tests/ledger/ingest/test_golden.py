"""Megatron-LM CI golden values and their model_config.yaml."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledger.cli.app import cli
from ledger.errors import BadInput
from ledger.ingest import golden
from ledger.ingest.common import Issues
from ledger.ingest.megatron_args import YamlError, args_from_text, layer_pattern, load_yaml

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


CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "megatron_configs"


def test_yaml_is_read_by_pyyaml_with_scalars_as_text() -> None:
    # a key with an empty value and its plain scalar on the next, deeper line; comments; quoted '#'; flow lists
    text = "A:\n  b: 1 # c\n  d: 'x # y'\n  e:\n    true\n  f: 1e-2\n  g: .01\nE: [1, 2]\n"
    assert load_yaml(text) == {"A": {"b": "1", "d": "x # y", "e": True, "f": "1e-2", "g": ".01"}, "E": ["1", "2"]}
    with pytest.raises(YamlError, match="line 2"):
        load_yaml("A: 1\n   B: 2\n")
    with pytest.raises(YamlError, match="not a mapping"):
        load_yaml("- 1\n- 2\n")


def test_megatron_ci_config_with_a_multi_line_plain_scalar() -> None:
    path = CONFIGS / "deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release__model_config.yaml"
    lines = path.read_text().splitlines()
    assert lines[131:133] == ["  --auto-detect-ckpt-format:", "    true"]  # line 133: the old reader refused it
    workload, env = golden.read_config(path, Issues(path.name))
    p = workload.parallelism
    assert (p.tp, p.pp, p.ep, p.etp, p.cp) == (2, 4, 16, 1, 1)
    assert (workload.model.num_experts, workload.model.top_k, workload.kernels.dispatcher) == (64, 8, "flex:hybridep")
    assert (workload.batch.global_batch, workload.data.sequence_length, workload.optimizer.lr) == (512, 4096, 1e-5)
    assert env["NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN"] == "8"
    # --moe-layer-freq: ([0]*3+[1]*11) with --num-layers: 14: three dense layers, then eleven MoE layers
    assert (workload.model.layers, workload.model.moe_layers, workload.model.moe_layer_freq) == (14, 11, None)
    assert args_from_text(path.read_text())["auto_detect_ckpt_format"] is True


def test_megatron_ci_config_with_anchors_and_merge_keys() -> None:
    path = CONFIGS / "gpt3_mcore_reruns_resume_check_grads__model_config.yaml"
    data = load_yaml(path.read_text())
    assert data["MODEL_ARGS"]["--rotary-base"] == "500"  # from BASE_MODEL_ARGS through "<<: *BASE_MODEL_ARGS"
    workload, _ = golden.read_config(path, Issues(path.name))
    assert (workload.model.layers, workload.optimizer.lr, workload.batch.global_batch) == (32, 3e-4, 2)


def test_tokens_per_step_from_the_config(golden_dir: Path) -> None:
    name = "8experts2parallel_dist_optimizer__golden_values_dev_dgx_h100.json"
    ev = golden.evidence(golden_dir / name, golden_dir / CONFIG)
    raw = json.loads((golden_dir / name).read_text())["iteration-time"]["values"]
    rows = ev.tables["steps"].to_pylist()
    per_step = 1024 * 32  # --seq-length 1024 x --global-batch-size 32 in the model_config.yaml
    assert [r["tokens"] for r in rows] == [r["step"] * per_step for r in rows]
    assert {r["global_batch"] for r in rows} == {32}
    timed = [r for r in rows if str(r["step"]) in raw]
    assert len(timed) == 99 and rows[0]["tokens_per_s"] is None  # step 1 has no iteration-time
    assert all(r["tokens_per_s"] == pytest.approx(per_step / raw[str(r["step"])]) for r in timed)
    w = ev.workload
    assert w is not None and (w.parallelism.tp, w.parallelism.ep, w.batch.tokens_per_step) == (2, 2, per_step)
    assert ev.issues is not None and any("number of GPUs" in n for n in ev.issues.notes)


def test_no_tokens_without_config_or_with_a_batch_ramp_up(golden_dir: Path, tmp_path: Path) -> None:
    name = "8experts2parallel_dist_optimizer__golden_values_dev_dgx_h100.json"
    ev = golden.evidence(golden_dir / name)
    assert set(ev.tables["steps"].column("tokens").to_pylist()) == {None}
    ramp = tmp_path / "model_config.yaml"
    ramp.write_text((golden_dir / CONFIG).read_text().replace("MODEL_ARGS:\n",
                                                               "MODEL_ARGS:\n  --rampup-batch-size: 16 16 100\n"))
    ev = golden.evidence(golden_dir / name, ramp)
    assert set(ev.tables["steps"].column("tokens").to_pylist()) == {None}
    assert ev.issues is not None and any("ramps the batch size up" in n for n in ev.issues.notes)


def test_two_golden_receipts_have_a_headline_throughput(golden_dir: Path, tmp_path: Path) -> None:
    ids = []
    for platform in ("h100", "gb200"):
        values = golden_dir / f"8experts2parallel_dist_optimizer__golden_values_dev_dgx_{platform}.json"
        result = CliRunner().invoke(cli, ["--ledger", str(tmp_path / "receipts"), "ingest", "golden", str(values),
                                          "--config", str(golden_dir / CONFIG), "--name", platform])
        assert result.exit_code == 0, result.output
        ids.append(result.stdout.strip().splitlines()[-1])
    result = CliRunner().invoke(cli, ["--ledger", str(tmp_path / "receipts"), "compare", *ids, "--json"])
    assert result.exit_code == 0, result.output
    rows = {m["name"]: m for m in json.loads(result.stdout)["metrics"]}
    tput = rows["tokens/s per device"]
    assert tput["verdict"] != "unavailable" and tput["a"] > 0 and tput["b"] > 0
    assert rows["loss @ matched tokens"]["verdict"] != "unavailable"


def test_layer_patterns_are_read_never_evaluated() -> None:
    assert layer_pattern("([0]*3+[1]*2)") == [0, 0, 0, 1, 1] and layer_pattern("[1,0,1]") == [1, 0, 1]
    assert layer_pattern(2 * "[1]*3+") is None  # not an expression
    for text in ('__import__("os").getpid()', "([0]*3+[2]*2)", "[1]*10**9", "[1]*99999"):
        assert layer_pattern(text) is None


def test_tokens_and_parallelism_from_a_synthetic_config(tmp_path: Path) -> None:
    """Rule 6 without the shared fixtures: 128 tokens x global batch 4 = 512 tokens a step, counted by hand."""
    values = tmp_path / "golden_values_dev_dgx_h100.json"
    values.write_text(json.dumps({
        "lm loss": {"start_step": 1, "end_step": 3, "step_interval": 1, "values": {"1": 10.0, "2": 9.5, "3": 9.0}},
        "iteration-time": {"start_step": 1, "end_step": 3, "step_interval": 1,
                           "values": {"1": 0.5, "2": 0.25, "3": "nan"}}}))
    config = tmp_path / "model_config.yaml"
    config.write_text("ENV_VARS:\n  NCCL_ALGO: Ring\nMODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 64\n"
                      "  --num-attention-heads: 4\n  --seq-length: 128\n  --global-batch-size: 4\n"
                      "  --micro-batch-size: 2\n  --tensor-model-parallel-size: 2\n"
                      "  --expert-model-parallel-size:\n    2\n  --num-experts: 4\n  --moe-router-topk: 2\n")
    ev = golden.evidence(values, config)
    rows = ev.tables["steps"].to_pylist()
    assert [(r["step"], r["tokens"], r["global_batch"]) for r in rows] == [(1, 512, 4), (2, 1024, 4), (3, 1536, 4)]
    assert [r["tokens_per_s"] for r in rows] == [1024.0, 2048.0, None]  # 512 / 0.5, 512 / 0.25, nan: none
    w = ev.workload
    assert w is not None and (w.parallelism.tp, w.parallelism.ep, w.batch.tokens_per_step) == (2, 2, 512)
    assert (w.model.num_experts, w.model.top_k) == (4, 2)
