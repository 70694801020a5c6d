"""runners.megatron: config -> flags, the CLI, and the round trip through the ingest parser."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env

from ledger.ingest.megatron_args import args_from_command, workload_from_args
from runners.megatron.config import ConfigError, apply_overrides, get_config, load_params, tiny_dense, tiny_moe
from runners.megatron.flags import build_flags, record_command, torchrun_command, workload
from schemas import Launch, Workload

VARIANTS = {
    "tiny_moe": tiny_moe(),
    "tiny_dense": tiny_dense(),
    "small_moe": get_config("small_moe"),
    "fp8_delayed": dataclasses.replace(tiny_moe(), precision="fp8-delayed", first_last_layers_bf16=True),
    "fp8_tensorwise_e4m3": dataclasses.replace(tiny_moe(), precision="fp8-tensorwise", fp8_format="e4m3"),
    "mxfp8": dataclasses.replace(tiny_moe(), precision="mxfp8"),
    "shared_overlap": dataclasses.replace(tiny_moe(), moe_shared_expert_intermediate_size=512,
                                          moe_shared_expert_overlap=True, moe_router_enable_expert_bias=True),
    "capacity": dataclasses.replace(tiny_moe(), moe_expert_capacity_factor=1.25, moe_pad_expert_input_to_capacity=True,
                                    moe_token_drop_policy="position", moe_z_loss_coeff=1e-3),
    "parallel": dataclasses.replace(tiny_moe(), tp=2, pp=2, ep=4, etp=1, nproc_per_node=8, nnodes=2,
                                    sequence_parallel=True, global_batch_size=64, moe_token_dispatcher_type="allgather",
                                    data_path=("0.7", "/data/a_text_document", "0.3", "/data/b_text_document")),
}


def _comparable(w: Workload) -> Workload:
    return w.model_copy(update={"launch": Launch(), "device": None})


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_round_trip_build_flags_parse_same_workload(name: str) -> None:
    cfg = VARIANTS[name]
    args, complete = args_from_command(torchrun_command(cfg, "/opt/Megatron-LM/pretrain_gpt.py"))
    assert complete
    assert _comparable(workload_from_args(args, complete=True)) == _comparable(workload(cfg))


def test_flag_mapping() -> None:
    flags = build_flags(VARIANTS["fp8_delayed"])
    joined = " ".join(flags)
    for expected in ("--num-experts 8", "--moe-router-topk 2", "--moe-aux-loss-coeff 0.01", "--moe-grouped-gemm",
                     "--moe-token-dispatcher-type alltoall", "--expert-model-parallel-size 1", "--bf16",
                     "--fp8-format hybrid", "--fp8-recipe delayed", "--first-last-layers-bf16", "--mock-data"):
        assert expected in joined
    assert "--moe-expert-capacity-factor" not in joined  # dropless: no capacity flags at all
    mx = " ".join(build_flags(VARIANTS["mxfp8"]))
    assert "--fp8-format e4m3 --fp8-recipe mxfp8" in mx
    dense = " ".join(build_flags(tiny_dense()))
    assert "--num-experts" not in dense and "--fp8" not in dense
    w = workload(VARIANTS["parallel"])
    assert (w.parallelism.world_size, w.parallelism.dp) == (16, 4) and w.data.paths[1] == "/data/a_text_document"


def test_commands() -> None:
    cfg = dataclasses.replace(tiny_moe(), nproc_per_node=8, torchrun_args=("--rdzv-backend", "c10d"))
    cmd = torchrun_command(cfg, "/m/pretrain_gpt.py")
    assert cmd[1:7] == ["-m", "torch.distributed.run", "--nproc-per-node", "8", "--nnodes", "1"]
    assert cmd[7:12] == ["--rdzv-backend", "c10d", "-m", "runners.megatron.entry", "/m/pretrain_gpt.py"]
    rec = record_command(cfg, "/m/pretrain_gpt.py", name="fp8", tags=["sweep=precision"])
    assert rec[1:6] == ["record", "--name", "fp8", "--tag", "sweep=precision"] and rec[6] == "--"


def test_overrides_and_their_errors(tmp_path: Path) -> None:
    cfg = apply_overrides(tiny_moe(), ["precision=fp8-tensorwise", "num_experts=16", "moe_grouped_gemm=false",
                                       "moe_expert_capacity_factor=none", "data_path=/a,/b"])
    assert (cfg.precision, cfg.num_experts, cfg.moe_grouped_gemm, cfg.data_path) == (
        "fp8-tensorwise", 16, False, ("/a", "/b"))
    for bad, message in (("precision=fp4", "precision"), ("nope=1", "unknown field"), ("noequals", "key=value"),
                         ("moe_router_topk=9", "moe_router_topk"), ("ep=3", "multiple of ep"),
                         ("moe_grouped_gemm=maybe", "true or false")):
        with pytest.raises(ConfigError, match=message):
            apply_overrides(tiny_moe(), [bad])
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"megatron": {"precision": "mxfp8", "nproc_per_node": 8, "ep": 8}}))
    assert apply_overrides(tiny_moe(), load_params(params, "megatron")).precision == "mxfp8"
    with pytest.raises(ConfigError, match="no section"):
        load_params(params, "other")


def test_params_yaml(tmp_path: Path) -> None:
    pytest.importorskip("yaml", reason="params.yaml needs PyYAML (the dvc extra)")
    params = tmp_path / "params.yaml"
    params.write_text("megatron:\n  precision: fp8-delayed\n  num_experts: 16\n  moe_router_topk: 4\n")
    cfg = apply_overrides(tiny_moe(), load_params(params, "megatron"))
    assert (cfg.precision, cfg.num_experts, cfg.moe_router_topk) == ("fp8-delayed", 16, 4)


def test_cli_dry_run_and_bad_override() -> None:
    run = [sys.executable, "-m", "runners.megatron", "--pretrain", "/m/pretrain_gpt.py", "--config", "tiny_moe"]
    proc = subprocess.run([*run, "--set", "precision=mxfp8", "--dry-run"], capture_output=True, text=True,
                          env=child_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, rest = proc.stdout.split("\n", 1)
    assert "ledger record --" in first and "--fp8-recipe mxfp8" in first
    assert json.loads(rest)["precision"]["compute"] == "mxfp8"
    proc = subprocess.run([*run, "--set", "precision=fp4"], capture_output=True, text=True, env=child_env(),
                          timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: precision 'fp4'")
