"""A run config -> Megatron-LM flags, the torchrun and `ledger record` commands, and the receipt's Workload.

The Workload is built here from the config directly (not by parsing the flags), so the round trip
``build_flags -> ledger.ingest parser -> Workload`` is a real check that both sides agree.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from runners.megatron.config import MegatronConfig
from schemas import (
    Architecture,
    Batch,
    Data,
    Kernels,
    Launch,
    Optimizer,
    Parallelism,
    Precision,
    Router,
    Task,
    Workload,
)

ENTRY = "runners.megatron.entry"
WORKLOAD_ENV = "STACKRECEIPT_MEGATRON_WORKLOAD"
"""Path of the workload JSON the launcher writes for the entry script (rank 0 sets it through the SDK)."""

_RECIPES = {"fp8-delayed": "delayed", "fp8-tensorwise": "tensorwise", "fp8-blockwise": "blockwise",
            "mxfp8": "mxfp8"}


def _flag(name: str, value: object) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{name}"]
    return [f"--{name}", str(value)]


def build_flags(cfg: MegatronConfig) -> list[str]:
    """The pretrain_gpt.py flags of a config."""
    f: list[str] = []
    for name, value in (
        ("num-layers", cfg.num_layers), ("hidden-size", cfg.hidden_size),
        ("num-attention-heads", cfg.num_attention_heads), ("ffn-hidden-size", cfg.ffn_hidden_size),
        ("seq-length", cfg.seq_length), ("max-position-embeddings", cfg.seq_length),
        ("micro-batch-size", cfg.micro_batch_size), ("global-batch-size", cfg.global_batch_size),
        ("train-iters", cfg.train_iters), ("seed", cfg.seed),
        ("tensor-model-parallel-size", cfg.tp), ("pipeline-model-parallel-size", cfg.pp),
        ("context-parallel-size", cfg.cp), ("sequence-parallel", cfg.sequence_parallel),
        ("lr", cfg.lr), ("min-lr", cfg.min_lr), ("lr-decay-style", cfg.lr_decay_style),
        ("lr-warmup-iters", cfg.lr_warmup_iters), ("weight-decay", cfg.weight_decay), ("clip-grad", cfg.clip_grad),
        ("log-interval", cfg.log_interval), ("eval-interval", cfg.eval_interval), ("eval-iters", cfg.eval_iters),
        ("tokenizer-type", cfg.tokenizer_type), ("vocab-size", cfg.vocab_size),
    ):
        f += _flag(name, value)
    if cfg.data_path:
        f += ["--data-path", *cfg.data_path]
    else:
        f += ["--mock-data"]
    if cfg.num_experts is not None:
        for name, value in (
            ("num-experts", cfg.num_experts), ("moe-router-topk", cfg.moe_router_topk),
            ("moe-ffn-hidden-size", cfg.moe_ffn_hidden_size), ("moe-layer-freq", cfg.moe_layer_freq),
            ("moe-aux-loss-coeff", cfg.moe_aux_loss_coeff), ("moe-z-loss-coeff", cfg.moe_z_loss_coeff),
            ("moe-router-load-balancing-type", cfg.moe_router_load_balancing_type),
            ("moe-router-score-function", cfg.moe_router_score_function),
            ("moe-router-enable-expert-bias", cfg.moe_router_enable_expert_bias),
            ("moe-expert-capacity-factor", cfg.moe_expert_capacity_factor),
            ("moe-token-dispatcher-type", cfg.moe_token_dispatcher_type), ("moe-grouped-gemm", cfg.moe_grouped_gemm),
            ("moe-shared-expert-intermediate-size", cfg.moe_shared_expert_intermediate_size),
            ("moe-shared-expert-overlap", cfg.moe_shared_expert_overlap),
            ("expert-model-parallel-size", cfg.ep), ("expert-tensor-parallel-size", cfg.etp),
        ):
            f += _flag(name, value)
        if cfg.moe_expert_capacity_factor is not None:
            f += _flag("moe-token-drop-policy", cfg.moe_token_drop_policy)
            f += _flag("moe-pad-expert-input-to-capacity", cfg.moe_pad_expert_input_to_capacity)
    f += ["--bf16", "--transformer-impl", "transformer_engine"]
    if cfg.precision != "bf16":
        fmt = "e4m3" if cfg.precision == "mxfp8" else cfg.fp8_format
        f += ["--fp8-format", fmt, "--fp8-recipe", _RECIPES[cfg.precision]]
        f += _flag("first-last-layers-bf16", cfg.first_last_layers_bf16)
    return f + list(cfg.extra_args)


def torchrun_command(cfg: MegatronConfig, pretrain: str | Path, python: str | None = None) -> list[str]:
    """``python -m torch.distributed.run ... -m runners.megatron.entry PRETRAIN <flags>``."""
    return [python or sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(cfg.nproc_per_node),
            "--nnodes", str(cfg.nnodes), *cfg.torchrun_args, "-m", ENTRY, str(pretrain), *build_flags(cfg)]


def record_command(cfg: MegatronConfig, pretrain: str | Path, name: str | None = None,
                   tags: Sequence[str] = (), ledger: str | None = None) -> list[str]:
    """The same launch under `ledger record`."""
    cmd = [str(Path(sys.executable).with_name("ledger")), "record"]
    if ledger:
        cmd += ["--ledger", ledger]
    if name:
        cmd += ["--name", name]
    for tag in tags:
        cmd += ["--tag", tag]
    return [*cmd, "--", *torchrun_command(cfg, pretrain)]


def workload(cfg: MegatronConfig, config_name: str | None = None, overrides: Sequence[str] = ()) -> Workload:
    """The receipt's workload for a config (what Megatron will run)."""
    moe = cfg.num_experts is not None
    world = cfg.world_size
    fp8 = cfg.precision != "bf16"
    capacity = cfg.moe_expert_capacity_factor if moe else None
    return Workload(
        task=Task(dataset=" ".join(cfg.data_path) if cfg.data_path else "megatron-mock-data",
                  tokenizer=cfg.tokenizer_type, vocab_size=cfg.vocab_size, objective="causal-lm"),
        data=Data(sequence_length=cfg.seq_length, paths=tuple(cfg.data_path),
                  generator={} if cfg.data_path else {"kind": "megatron-mock-data"}),
        model=Architecture(
            layers=cfg.num_layers, hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
            ffn_hidden=cfg.ffn_hidden_size, num_experts=cfg.num_experts if moe else None,
            top_k=cfg.moe_router_topk if moe else None, expert_hidden=cfg.moe_ffn_hidden_size if moe else None,
            granularity=cfg.ffn_hidden_size / cfg.moe_ffn_hidden_size if moe and cfg.moe_ffn_hidden_size else None,
            shared_expert_hidden=cfg.moe_shared_expert_intermediate_size if moe else None,
            moe_layer_freq=cfg.moe_layer_freq if moe else None,
            moe_layers=sum(1 for i in range(cfg.num_layers) if i % cfg.moe_layer_freq == 0) if moe else None,
        ),
        router=Router(
            score_function=cfg.moe_router_score_function if moe else None,
            load_balancing=cfg.moe_router_load_balancing_type if moe else None,
            aux_loss_coeff=cfg.moe_aux_loss_coeff if moe else None,
            z_loss_coeff=cfg.moe_z_loss_coeff if moe else None,
            expert_bias=cfg.moe_router_enable_expert_bias if moe else None,
            capacity_factor=capacity,
            drop_policy=cfg.moe_token_drop_policy if capacity is not None else None,
            pad_to_capacity=cfg.moe_pad_expert_input_to_capacity if capacity is not None else None,
        ),
        kernels=Kernels(grouped_gemm=cfg.moe_grouped_gemm if moe else None,
                        dispatcher=cfg.moe_token_dispatcher_type if moe else None,
                        fused=("moe_shared_expert_overlap",) if moe and cfg.moe_shared_expert_overlap else ()),
        parallelism=Parallelism(tp=cfg.tp, pp=cfg.pp, cp=cfg.cp, ep=cfg.ep if moe else None,
                                etp=cfg.etp if moe else None, dp=world // (cfg.tp * cfg.pp * cfg.cp),
                                world_size=world),
        precision=Precision(
            params="bf16", compute="mxfp8" if cfg.precision == "mxfp8" else "fp8" if fp8 else "bf16",
            fp8_format=("e4m3" if cfg.precision == "mxfp8" else cfg.fp8_format) if fp8 else None,
            fp8_recipe=_RECIPES.get(cfg.precision), fp8_backend="transformer_engine" if fp8 else None,
            bf16_layers=("first", "last") if fp8 and cfg.first_last_layers_bf16 else (),
        ),
        batch=Batch(global_batch=cfg.global_batch_size, micro_batch=cfg.micro_batch_size,
                    tokens_per_step=cfg.global_batch_size * cfg.seq_length, steps=cfg.train_iters),
        optimizer=Optimizer(lr=cfg.lr, warmup_steps=cfg.lr_warmup_iters or None, schedule=cfg.lr_decay_style,
                            weight_decay=cfg.weight_decay, grad_clip=cfg.clip_grad),
        seed=cfg.seed,
        device="cuda",
        launch=Launch(runner="runners.megatron", config=config_name, overrides=tuple(overrides)),
    )


__all__ = ["ENTRY", "WORKLOAD_ENV", "build_flags", "record_command", "torchrun_command", "workload"]
