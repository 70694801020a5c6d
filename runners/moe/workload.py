"""The run's schemas.Workload: what the receipt says this run computed."""

from __future__ import annotations

from collections.abc import Sequence

from runners.moe.comm import Topology
from runners.moe.configs import RunConfig
from runners.moe.data import Corpus
from runners.moe.model import param_counts
from runners.moe.precision import PrecisionPolicy
from schemas.receipt import (
    Architecture,
    Batch,
    Data,
    Kernels,
    Launch,
    Optimizer,
    Parallelism,
    Precision,
    QualityGate,
    Router,
    Task,
    Workload,
)


def quality_gates(cfg: RunConfig, corpus: Corpus) -> tuple[QualityGate, ...]:
    gates = []
    if cfg.data.gate_loss is not None:
        gates.append(
            QualityGate(
                name="val-loss",
                metric="loss",
                threshold=cfg.data.gate_loss,
                direction="min",
                split="val",
                source=None,
            )
        )
    if cfg.data.gate_rare_loss is not None and corpus.rare_source is not None:
        gates.append(
            QualityGate(
                name=f"{corpus.rare_source}-val-loss",
                metric="loss",
                threshold=cfg.data.gate_rare_loss,
                direction="min",
                split="val",
                source=corpus.rare_source,
            )
        )
    return tuple(gates)


def load_balancing(cfg: RunConfig) -> str:
    if cfg.moe.dense:
        return "none"
    if cfg.moe.expert_bias:
        return "aux_free"
    return "aux_loss" if cfg.moe.aux_loss_coeff > 0 else "none"


UNMODELLED = {"delay_s": 0.0, "threads": 0, "timing": True}
"""Config keys that change a run but have no workload field of their own, with their defaults: a changed one is
recorded under the ``arguments`` factor, so two runs that differ in it are never taken for replicates."""


def unmodelled_arguments(cfg: RunConfig) -> dict[str, str]:
    """The unmodelled config keys that differ from their defaults, as strings."""
    return {k: str(getattr(cfg, k)) for k, default in UNMODELLED.items() if getattr(cfg, k) != default}


def build_workload(
    cfg: RunConfig,
    corpus: Corpus,
    topo: Topology,
    policy: PrecisionPolicy,
    expert_backend: str,
    *,
    config_name: str,
    overrides: Sequence[str],
) -> Workload:
    m, moe = cfg.model, cfg.moe
    counts = param_counts(cfg, corpus.vocab_size)
    local = moe.num_experts // cfg.parallel.ep
    return Workload(
        task=Task(
            dataset=corpus.name,
            dataset_fingerprint=corpus.fingerprint,
            tokenizer=corpus.tokenizer,
            vocab_size=corpus.vocab_size,
            objective="causal-lm",
            sources=corpus.sources,
            quality_gates=quality_gates(cfg, corpus),
        ),
        data=Data(sequence_length=m.seq_len, paths=corpus.paths, generator=corpus.generator),
        model=Architecture(
            layers=m.layers,
            hidden=m.hidden,
            heads=m.heads,
            ffn_hidden=m.ffn_hidden,
            num_experts=moe.num_experts,
            top_k=moe.top_k,
            expert_hidden=cfg.expert_hidden,
            granularity=moe.granularity,
            shared_experts=moe.shared_experts,
            shared_expert_hidden=moe.shared_experts * cfg.expert_hidden or None,
            moe_layer_freq=moe.layer_freq,
            moe_layers=len(cfg.moe_layer_ids),
            total_params=counts.total,
            active_params=counts.active,
        ),
        router=Router(
            score_function=None if moe.dense else moe.score_function,
            load_balancing=load_balancing(cfg),
            aux_loss_coeff=moe.aux_loss_coeff,
            z_loss_coeff=moe.z_loss_coeff,
            expert_bias=moe.expert_bias,
            capacity_factor=moe.capacity_factor,
            drop_policy=moe.drop_policy if moe.capacity_factor is not None else None,
            pad_to_capacity=moe.pad_to_capacity,
        ),
        kernels=Kernels(
            grouped_gemm=expert_backend == "grouped",
            dispatcher="alltoall" if cfg.parallel.ep > 1 else "local",
            attention="sdpa",
        ),
        parallelism=Parallelism(
            tp=1,
            pp=1,
            ep=cfg.parallel.ep,
            etp=1,
            cp=1,
            dp=topo.world,
            world_size=topo.world,
            expert_placement=tuple(e // local for e in range(moe.num_experts)),
        ),
        precision=Precision(**policy.describe()),
        batch=Batch(
            global_batch=cfg.batch_size,
            micro_batch=cfg.batch_size // topo.world,
            tokens_per_step=cfg.batch_size * m.seq_len,
            steps=cfg.steps,
        ),
        optimizer=Optimizer(
            name="adamw",
            lr=cfg.lr,
            warmup_steps=cfg.warmup_steps,
            schedule="cosine",
            weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip or None,
            min_lr=cfg.lr * cfg.min_lr_ratio,
        ),
        seed=cfg.seed,
        arguments=unmodelled_arguments(cfg),
        device=policy.device.type,
        launch=Launch(runner="runners.moe", config=config_name, overrides=tuple(overrides)),
    )
