"""Run configs for Megatron-LM launches: one frozen dataclass, configs as small functions, variants that
change one field, and ``key=value`` overrides (from ``--set`` or a params.yaml section)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRECISIONS = ("bf16", "fp8-delayed", "fp8-tensorwise", "fp8-blockwise", "mxfp8")
"""Transformer Engine precision recipes (all keep bf16 parameters; mxfp8 needs Blackwell, sm_100+)."""
DISPATCHERS = ("allgather", "alltoall", "flex")
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")


class ConfigError(ValueError):
    """An invalid run config or override; the message names the field."""


@dataclass(frozen=True)
class MegatronConfig:
    """One Megatron-LM launch."""

    # model
    num_layers: int = 2
    hidden_size: int = 256
    num_attention_heads: int = 4
    ffn_hidden_size: int = 1024
    seq_length: int = 512
    # MoE (num_experts None: a dense model)
    num_experts: int | None = 8
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = 256
    moe_layer_freq: int = 1
    moe_aux_loss_coeff: float | None = 0.01
    moe_z_loss_coeff: float | None = None
    moe_router_load_balancing_type: str = "aux_loss"
    moe_router_score_function: str = "softmax"
    moe_router_enable_expert_bias: bool = False
    moe_expert_capacity_factor: float | None = None
    """None: dropless."""
    moe_token_drop_policy: str = "probs"
    moe_pad_expert_input_to_capacity: bool = False
    moe_token_dispatcher_type: str = "alltoall"
    moe_grouped_gemm: bool = True
    moe_shared_expert_intermediate_size: int | None = None
    moe_shared_expert_overlap: bool = False
    # parallelism
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    sequence_parallel: bool = False
    # precision
    precision: str = "bf16"
    fp8_format: str = "hybrid"
    """e4m3 or hybrid (e4m3 forward, e5m2 backward); mxfp8 always uses e4m3."""
    first_last_layers_bf16: bool = False
    # batch, data, optimizer
    micro_batch_size: int = 2
    global_batch_size: int = 16
    train_iters: int = 50
    seed: int = 1234
    data_path: tuple[str, ...] = ()
    """Empty: Megatron's --mock-data."""
    tokenizer_type: str = "NullTokenizer"
    vocab_size: int | None = 32000
    lr: float = 3e-4
    min_lr: float = 3e-5
    lr_decay_style: str = "cosine"
    lr_warmup_iters: int = 10
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    log_interval: int = 1
    eval_interval: int = 1000
    eval_iters: int = 0
    # launch
    nproc_per_node: int = 1
    nnodes: int = 1
    torchrun_args: tuple[str, ...] = ()
    """Extra torchrun arguments (rendezvous for multi-node launches)."""
    extra_args: tuple[str, ...] = field(default=())
    """Extra Megatron flags, passed through unchanged."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if self.fp8_format not in ("hybrid", "e4m3"):
            raise ConfigError(f"fp8_format {self.fp8_format!r}: choose hybrid or e4m3")
        if self.moe_token_dispatcher_type not in DISPATCHERS:
            raise ConfigError(f"moe_token_dispatcher_type {self.moe_token_dispatcher_type!r}: choose one of "
                              f"{', '.join(DISPATCHERS)}")
        if self.moe_router_load_balancing_type not in LOAD_BALANCING:
            raise ConfigError(f"moe_router_load_balancing_type {self.moe_router_load_balancing_type!r}: choose "
                              f"one of {', '.join(LOAD_BALANCING)}")
        if self.num_experts is not None and not 1 <= self.moe_router_topk <= self.num_experts:
            raise ConfigError(f"moe_router_topk {self.moe_router_topk} must be within 1..num_experts")
        world = self.nproc_per_node * self.nnodes
        model_parallel = self.tp * self.pp * self.cp
        if world % model_parallel:
            raise ConfigError(f"world size {world} is not a multiple of tp x pp x cp = {model_parallel}")
        if self.num_experts is not None and self.num_experts % self.ep:
            raise ConfigError(f"num_experts {self.num_experts} is not a multiple of ep {self.ep}")
        if self.global_batch_size % (self.micro_batch_size * (world // model_parallel)):
            raise ConfigError(f"global_batch_size {self.global_batch_size} is not a multiple of micro_batch_size "
                              f"x data-parallel size {self.micro_batch_size * (world // model_parallel)}")

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


def tiny_moe() -> MegatronConfig:
    """A 2-layer 8-expert top-2 MoE that fits any GPU: smoke tests of the launch path."""
    return MegatronConfig()


def tiny_dense() -> MegatronConfig:
    """tiny_moe without experts: the dense baseline."""
    return dataclasses.replace(tiny_moe(), num_experts=None, moe_ffn_hidden_size=None, moe_aux_loss_coeff=None,
                               moe_grouped_gemm=False)


def small_moe() -> MegatronConfig:
    """A 16-layer 64-expert top-8 fine-grained MoE with a shared expert, for one 8-GPU node (EP 8)."""
    return dataclasses.replace(
        tiny_moe(), num_layers=16, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=8192,
        seq_length=4096, num_experts=64, moe_router_topk=8, moe_ffn_hidden_size=1024,
        moe_shared_expert_intermediate_size=2048, moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True, moe_router_load_balancing_type="seq_aux_loss",
        moe_aux_loss_coeff=1e-4, ep=8, nproc_per_node=8, micro_batch_size=1, global_batch_size=256,
        train_iters=200,
    )


CONFIGS: dict[str, Callable[[], MegatronConfig]] = {"tiny_moe": tiny_moe, "tiny_dense": tiny_dense,
                                                    "small_moe": small_moe}


def get_config(name: str) -> MegatronConfig:
    try:
        return CONFIGS[name]()
    except KeyError:
        raise ConfigError(f"unknown config {name!r}: choose one of {', '.join(CONFIGS)}") from None


def _coerce(name: str, current: Any, text: Any, hint: Any) -> Any:
    if not isinstance(text, str):
        value = text
    elif text.lower() in ("none", "null"):
        return None
    elif hint in (bool, "bool") or isinstance(current, bool):
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"{name}: expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    elif isinstance(current, tuple) or "tuple" in str(hint):
        return tuple(t for t in text.replace(",", " ").split() if t)
    else:
        try:
            value = json.loads(text)
        except ValueError:
            value = text
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(str(v) for v in value)
    return value


def apply_overrides(config: MegatronConfig, overrides: Iterable[str] | Mapping[str, Any]) -> MegatronConfig:
    """``key=value`` strings (or a mapping) applied to a config; unknown keys and bad values raise."""
    items = overrides.items() if isinstance(overrides, Mapping) else (
        _split(o) for o in overrides)
    fields = {f.name: f for f in dataclasses.fields(MegatronConfig)}
    changes: dict[str, Any] = {}
    for key, value in items:
        key = key.replace("-", "_")
        if key not in fields:
            raise ConfigError(f"unknown field {key!r}; fields: {', '.join(fields)}")
        changes[key] = _coerce(key, getattr(config, key), value, fields[key].type)
    try:
        return dataclasses.replace(config, **changes)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc


def _split(override: str) -> tuple[str, str]:
    key, sep, value = override.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {override!r}: expected key=value, e.g. precision=fp8-delayed")
    return key.strip(), value.strip()


def load_params(path: Path, section: str | None = None) -> dict[str, Any]:
    """A section of a params file (YAML needs PyYAML, which the dvc extra brings; JSON always works)."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise ConfigError(f"{path}: reading YAML needs PyYAML (pip install pyyaml, or the dvc extra); "
                              "or give the params as JSON") from exc
        data = yaml.safe_load(text) or {}
    else:
        data = json.loads(text)
    if section:
        for part in section.split("."):
            if not isinstance(data, dict) or part not in data:
                raise ConfigError(f"{path}: no section {section!r}")
            data = data[part]
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: section {section!r} is not a mapping")
    return data


__all__ = ["CONFIGS", "PRECISIONS", "ConfigError", "MegatronConfig", "apply_overrides", "get_config",
           "load_params", "small_moe", "tiny_dense", "tiny_moe"]
