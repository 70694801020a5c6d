"""The launch's configuration from its command line and the config files it names."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ledger.ingest.arguments import capture_arguments, parse_argv, script_arguments
from ledger.redact import Redactor


@pytest.mark.parametrize(("command", "expected"), [
    (["python", "train.py", "--lr", "3e-3"], ["--lr", "3e-3"]),
    (["python3.11", "-u", "train.py", "--lr=3e-3"], ["--lr=3e-3"]),
    (["torchrun", "--nproc_per_node", "8", "--rdzv_endpoint", "h:29500", "train.py", "--lr", "1"], ["--lr", "1"]),
    (["python", "-m", "torch.distributed.run", "--nnodes", "2", "-m", "pkg.train", "--bf16"], ["--bf16"]),
    (["accelerate", "launch", "--config_file", "acc.yaml", "--num_processes", "2", "sft.py", "x=1"], ["x=1"]),
    (["deepspeed", "--num_gpus", "8", "pretrain.py", "--deepspeed_config", "ds.json"],
     ["--deepspeed_config", "ds.json"]),
    (["python", "-m", "runners.moe", "--config", "tiny"], ["--config", "tiny"]),
    (["./train", "--steps", "10"], ["--steps", "10"]),
    (["python", "-c", "print(1)"], []),
])
def test_launcher_and_interpreter_tokens_are_skipped(command: list[str], expected: list[str]) -> None:
    assert script_arguments(command) == expected


def test_argv_forms() -> None:
    assert parse_argv(["--lr", "3e-3", "--warmup=100", "--bf16", "--betas", "0.9", "0.95", "--shift", "-1",
                       "model.layers=4", "+trainer.devices=2", "~callbacks", "cfg.py", "-n", "5"]) == [
        ("lr", "3e-3"), ("warmup", "100"), ("bf16", "true"), ("betas", "0.9 0.95"), ("shift", "-1"),
        ("model.layers", "4"), ("trainer.devices", "2"), ("callbacks", "<deleted>"), ("arg1", "cfg.py"),
        ("n", "5")]


def test_config_files_flattened_with_digests_and_secrets_redacted(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "train.yaml").write_text("model:\n  layers: 4\n  act: gelu\nlr: 3e-3\ntags: [a, b]\n"
                                                  "hf_token: hf_abcdefghijklmnopqrstuvwxyz123456\n")
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "fp16": {"enabled": true}}')
    (tmp_path / "opt.toml").write_text("[optimizer]\nname = 'adamw'\nbetas = [0.9, 0.95]\n")
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    command = ["python", "train.py", "--config", "conf/train.yaml", "--deepspeed_config", "ds.json", "opt.toml",
               "--extra", "bad.yaml", "--wandb_api_key", "0123456789abcdef", "--seed", "7"]
    args = capture_arguments(command, tmp_path, Redactor({}))
    v = args.values
    assert v["config"] == "conf/train.yaml" and v["seed"] == "7"
    assert v["conf/train.yaml:model.layers"] == "4" and v["conf/train.yaml:model.act"] == "gelu"
    assert v["conf/train.yaml:lr"] == "3e-3"  # YAML 1.1 reads 3e-3 as text: kept as written
    assert v["conf/train.yaml:tags"] == '["a", "b"]'
    assert v["conf/train.yaml:hf_token"] == "<redacted>" and v["wandb_api_key"] == "<redacted>"
    assert v["ds.json:zero_optimization.stage"] == "2" and v["ds.json:fp16.enabled"] == "true"
    assert v["opt.toml:optimizer.name"] == "adamw" and v["opt.toml:optimizer.betas"] == "[0.9, 0.95]"
    assert v["ds.json:@sha256"] == hashlib.sha256((tmp_path / "ds.json").read_bytes()).hexdigest()
    assert "bad.yaml:@sha256" in v and not any(k.startswith("bad.yaml:") and k != "bad.yaml:@sha256" for k in v)
    assert args.sources == ["argv", "conf/train.yaml", "ds.json", "opt.toml"]
    assert any(n.startswith("bad.yaml: could not be parsed") for n in args.notes)
    assert "hf_abcdefghijklmnopqrstuvwxyz123456" not in str(v) and "0123456789abcdef" not in str(v)


def test_hydra_config_name_names_a_file(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text("optim:\n  lr: 0.1\n")
    args = capture_arguments(["python", "main.py", "--config-path", "configs", "--config-name", "base",
                              "optim.lr=0.2"], tmp_path, Redactor({}))
    assert args.values["configs/base.yaml:optim.lr"] == "0.1" and args.values["optim.lr"] == "0.2"
