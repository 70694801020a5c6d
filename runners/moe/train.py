"""The training loop, top to bottom: set up, (resume), train, evaluate, checkpoint; report through ledger.sdk.

Legend: B batch on this rank, S sequence positions, V vocabulary, E routed experts, L MoE layers.

Rank 0 logs steps, evals and routing (summed over all ranks); every rank logs its own events and timing.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import ledger.sdk
from runners.moe import checkpoint, comm
from runners.moe.configs import ConfigError, RunConfig, to_dict
from runners.moe.data import Corpus, load_corpus
from runners.moe.experts import grouped_mm_works
from runners.moe.model import Transformer, flops_per_token
from runners.moe.moe import MoELayer
from runners.moe.precision import PrecisionPolicy, check_precision
from runners.moe.timing import PhaseTimer
from runners.moe.workload import build_workload


class DeliberateFailure(RuntimeError):
    """Raised by --fail-at-step: a planted crash for testing restarts."""


@dataclass
class TrainResult:
    """What a run produced (for tests and the benchmark; the ledger gets the same through the SDK)."""

    losses: list[tuple[int, float]] = field(default_factory=list)
    """(step, global LM loss) at every logged step."""
    evals: dict[str, float] = field(default_factory=dict)
    """Last val loss per source ("all" for the mixture)."""
    tokens_per_s: list[float] = field(default_factory=list)
    """Throughput of every logged step, all ranks."""
    timing: dict[str, float] = field(default_factory=dict)
    """Seconds per phase, summed over the logged steps (this rank)."""
    step_time_s: float = 0.0
    """Wall time of the logged steps, summed (this rank)."""
    start_step: int = 0
    """Last step of the checkpoint resumed from (0: fresh)."""


def resolve_device(name: str) -> torch.device:
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but no CUDA device is visible (use device=cpu)")
        _, _, local_rank = comm.world_from_env()
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def check_launch(cfg: RunConfig, world: int) -> None:
    """Checks that need the launch (world size, device), not just the config: ConfigError before training."""
    if world % cfg.parallel.ep:
        raise ConfigError(
            f"parallel.ep={cfg.parallel.ep} needs a world size divisible by it, got {world} "
            f"(launch with torchrun --nproc_per_node {cfg.parallel.ep})"
        )
    if cfg.batch_size % world:
        raise ConfigError(f"batch_size ({cfg.batch_size}) must be divisible by the world size ({world})")
    check_precision(cfg.precision, resolve_device(cfg.device), cfg.fp8_backend)


def _set_determinism(cfg: RunConfig, device: torch.device) -> None:
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    threads = cfg.threads
    if threads == 0:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        threads = max(1, min(8, (os.cpu_count() or 1) // local))
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)


def _expert_backend(cfg: RunConfig, device: torch.device, policy: PrecisionPolicy) -> str:
    if cfg.moe.pad_to_capacity:
        return "padded"
    if cfg.moe.grouped_gemm == "off":
        return "loop"
    if cfg.moe.grouped_gemm == "on":
        if not hasattr(torch, "_grouped_mm"):
            raise ConfigError("moe.grouped_gemm=on but this torch has no torch._grouped_mm (use auto or off)")
        return "grouped"
    return "grouped" if grouped_mm_works(device, policy.autocast_dtype or torch.float32) else "loop"


def _lr_lambda(cfg: RunConfig) -> Any:
    def f(i: int) -> float:  # i = optimizer steps taken so far
        if cfg.warmup_steps and i < cfg.warmup_steps:
            return (i + 1) / cfg.warmup_steps
        progress = min(1.0, (i - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return f


def _adamw(groups: list[dict[str, Any]], lr: float) -> torch.optim.AdamW:
    """Fused AdamW (one kernel per step; ~9x faster than the default loop on CPU), else the default."""
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def _resume_key(cfg: RunConfig, world: int) -> dict[str, Any]:
    d = to_dict(cfg)
    return {k: d[k] for k in ("model", "moe", "data", "parallel", "batch_size", "seed")} | {"world": world}


def train(
    cfg: RunConfig,
    *,
    config_name: str = "custom",
    overrides: Sequence[str] = (),
    checkpoint_dir: str | None = None,
    resume: bool = False,
    fail_at_step: int | None = None,
    run: ledger.sdk.Run | ledger.sdk.NullRun | None = None,
) -> TrainResult:
    """Train ``cfg`` in this process (one rank of a torchrun launch, or alone)."""
    run = run if run is not None else ledger.sdk.current()
    _, world, _ = comm.world_from_env()
    run.event("init_start", world=world, ep=cfg.parallel.ep, config=config_name)
    check_launch(cfg, world)
    device = resolve_device(cfg.device)
    _set_determinism(cfg, device)
    topo = comm.init_topology(cfg.parallel.ep, device)
    try:
        return _train(cfg, topo, device, run, config_name, overrides, checkpoint_dir, resume, fail_at_step)
    finally:
        comm.shutdown(topo)


def _train(
    cfg: RunConfig,
    topo: comm.Topology,
    device: torch.device,
    run: Any,
    config_name: str,
    overrides: Sequence[str],
    checkpoint_dir: str | None,
    resume: bool,
    fail_at_step: int | None,
) -> TrainResult:
    lead = topo.rank == 0
    run.report_runtime()

    corpus = load_corpus(cfg.data, cfg.model.seq_len)
    policy = PrecisionPolicy(cfg.precision, device, cfg.fp8_backend)
    timer = PhaseTimer(enabled=False, device=device)
    backend = _expert_backend(cfg, device, policy)
    model = Transformer(
        cfg,
        corpus.vocab_size,
        timer=timer,
        ep_rank=topo.ep_rank,
        ep_group=topo.ep_group,
        dp_group=topo.dp_group,
        expert_backend=backend,
        linear=policy.linear_factory(),
    ).to(device)
    dense_params, expert_params = model.dense_parameters(), model.expert_parameters()
    decay = [
        p
        for p in model.parameters()
        if p.ndim >= 2 and p is not model.tok_emb.weight and p is not model.pos_emb.weight
    ]
    decay_ids = {id(p) for p in decay}
    no_decay = [p for p in model.parameters() if id(p) not in decay_ids]
    optimizer = _adamw(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        cfg.lr,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(cfg))
    if lead:
        run.set_workload(
            build_workload(cfg, corpus, topo, policy, backend, config_name=config_name, overrides=overrides)
        )

    result = TrainResult()
    start = 0
    root = Path(checkpoint_dir) if checkpoint_dir else None
    if resume and root is not None:
        found = checkpoint.latest(root)
        if found is None:
            _say(lead, f"--resume: no checkpoint in {root}; starting from step 0")
        else:
            run.event("checkpoint_restore_start", path=str(found))
            state = checkpoint.load(found, topo.rank)
            if state["meta"]["key"] != _resume_key(cfg, topo.world):
                raise ConfigError(
                    f"checkpoint {found} was written by a different model, data, batch, seed or "
                    "world size; resume with the same config"
                )
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            torch.set_rng_state(state["rng"]["torch"])
            if device.type == "cuda" and state["rng"].get("cuda") is not None:
                torch.cuda.set_rng_state(state["rng"]["cuda"], device)
            start = int(state["data"]["next_step_index"])
            run.event("checkpoint_restore_end", step=start, path=str(found))
            _say(lead, f"resumed from {found} at step {start}")
    result.start_step = start
    run.event("init_end", step=start)

    tokens_per_step = cfg.batch_size * cfg.model.seq_len
    fpt = flops_per_token(cfg, corpus.vocab_size)
    moe_layers = model.moe_layers
    model.train()
    for step in range(start + 1, cfg.steps + 1):
        if fail_at_step is not None and step == fail_at_step:
            run.event("failure", step=step, reason="--fail-at-step")
            run.flush()
            raise DeliberateFailure(f"deliberate failure at step {step} (--fail-at-step)")
        record = step % cfg.log_every == 0 or step == cfg.steps
        timer.enabled = cfg.timing and record
        for layer in moe_layers:
            layer.record_entropy = record
        if device.type == "cuda" and record:
            torch.cuda.reset_peak_memory_stats(device)
        t0, cpu0 = time.perf_counter(), time.process_time()

        batch_BS = corpus.batch(step - 1, cfg.batch_size, cfg.seed, topo.rank, topo.world).to(device)
        with policy.forward_context():
            logits_BSV = model(batch_BS[:, :-1])
        lm_loss = F.cross_entropy(
            logits_BSV.float().reshape(-1, logits_BSV.shape[-1]), batch_BS[:, 1:].reshape(-1)
        )
        stats = [layer.stats for layer in moe_layers if layer.stats is not None]
        aux = torch.stack([s.aux_loss for s in stats]).mean() if stats else lm_loss.new_zeros(())
        z = torch.stack([s.z_loss for s in stats]).mean() if stats else lm_loss.new_zeros(())
        loss = lm_loss + cfg.moe.aux_loss_coeff * aux + cfg.moe.z_loss_coeff * z
        with timer.phase("backward"):
            loss.backward()
        with timer.phase("grad_sync"):
            comm.sync_gradients(dense_params, expert_params, topo)
        with timer.phase("optimizer"):
            grad_norm = comm.clip_grad_norm(dense_params, expert_params, cfg.grad_clip, topo)
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if cfg.moe.expert_bias and stats:
                counts_LE = comm.all_reduce_sum(torch.stack([s.counts_E for s in stats]), topo)
                for layer, counts_E in zip(moe_layers, counts_LE, strict=True):
                    layer.router.update_bias(counts_E)
        if cfg.delay_s and cfg.delay_rank in (-1, topo.rank):
            time.sleep(cfg.delay_s)

        if record:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            step_time = time.perf_counter() - t0
            cpu_time = time.process_time() - cpu0  # this process's CPU time: its own work, not its waits
            phases = timer.collect()
            scalars = (
                comm.all_reduce_sum(
                    torch.stack([lm_loss.detach().float(), aux.detach().float(), z.detach().float()]), topo
                )
                / topo.world
            )
            loss_v, aux_v, z_v = scalars.tolist()
            tps = tokens_per_step / step_time
            result.losses.append((step, loss_v))
            result.tokens_per_s.append(tps)
            result.step_time_s += step_time
            for name, sec in phases.items():
                result.timing[name] = result.timing.get(name, 0.0) + sec
            routing = _routing(stats, topo)
            if lead:
                run.log_step(
                    step,
                    loss=loss_v,
                    aux_loss=None if cfg.moe.dense or not stats else aux_v,
                    z_loss=None if cfg.moe.dense or not stats else z_v,
                    tokens=step * tokens_per_step,
                    lr=lr,
                    grad_norm=float(grad_norm),
                    step_time_s=step_time,
                    cpu_time_s=cpu_time,
                    tokens_per_s=tps,
                    flops_per_s=tps * fpt,
                    memory_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
                )
                for layer_id, row in zip(_moe_layer_ids(model), routing, strict=True):
                    run.log_routing(
                        step,
                        layer_id,
                        row["counts"],
                        dropped=row["dropped"],
                        capacity=row["capacity"],
                        entropy=row["entropy"],
                    )
            if cfg.timing:
                for name, sec in phases.items():
                    run.log_timing(step, name, sec)
                run.log_timing(step, "other", max(0.0, step_time - sum(phases.values())))

        if step % cfg.eval_every == 0 or step == cfg.steps:
            run.event("eval_start", step=step)
            result.evals = evaluate(model, corpus, policy, cfg.eval_batch, device)
            if lead:
                for source, value in result.evals.items():
                    run.log_eval(
                        step,
                        value,
                        metric="loss",
                        split="val",
                        source=None if source == "all" else source,
                        tokens=step * tokens_per_step,
                    )
            run.event("eval_end", step=step)
            _say(
                lead,
                f"step {step}: train loss {result.losses[-1][1] if result.losses else float('nan'):.4f}, "
                + ", ".join(f"val[{k}] {v:.4f}" for k, v in result.evals.items()),
            )

        if root is not None and (
            (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps
        ):
            run.event("checkpoint_save_start", step=step)
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": {
                    "torch": torch.get_rng_state(),
                    "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                },
                "data": {"next_step_index": step, "samples_consumed": step * cfg.batch_size},
                "meta": {"key": _resume_key(cfg, topo.world), "rank": topo.rank, "step": step},
            }
            path = checkpoint.save(root, step, state, topo.rank, topo.distributed)
            run.event("checkpoint_save_end", step=step, path=str(path))
    run.flush()
    return result


def _moe_layer_ids(model: Transformer) -> list[int]:
    return [i for i, b in enumerate(model.blocks) if isinstance(b.ffn, MoELayer)]


def _routing(stats: list[Any], topo: comm.Topology) -> list[dict[str, Any]]:
    """Per MoE layer, summed over ranks: n_e, d_e, capacity (C per rank x ranks), mean entropy / log E."""
    if not stats:
        return []
    device = stats[0].counts_E.device
    counts_L2E = torch.stack([torch.stack([s.counts_E, s.dropped_E]) for s in stats])
    ent_L = torch.stack(
        [s.entropy if s.entropy is not None else torch.zeros((), device=device) for s in stats]
    )
    counts = comm.all_reduce_sum(counts_L2E.clone(), topo).tolist()
    ent = (comm.all_reduce_sum(ent_L.float(), topo) / topo.world).tolist()
    rows = []
    for s, (n, d), e in zip(stats, counts, ent, strict=True):
        rows.append(
            {
                "counts": n,
                "dropped": d,
                "capacity": None if s.capacity is None else s.capacity * topo.world,
                "entropy": e if s.entropy is not None else None,
            }
        )
    return rows


@torch.no_grad()
def evaluate(
    model: Transformer, corpus: Corpus, policy: PrecisionPolicy, eval_batch: int, device: torch.device
) -> dict[str, float]:
    """Mean token loss per source, and "all": the mixture-weighted mean. Every rank evaluates the same data
    (the experts are sharded, so all must take part)."""
    model.eval()
    out: dict[str, float] = {}
    for source, seqs_NS in corpus.val.items():
        total, count = 0.0, 0
        for i in range(0, seqs_NS.shape[0], eval_batch):
            chunk_BS = seqs_NS[i : i + eval_batch].to(device)
            with policy.forward_context():
                logits_BSV = model(chunk_BS[:, :-1])
            total += float(
                F.cross_entropy(
                    logits_BSV.float().reshape(-1, logits_BSV.shape[-1]),
                    chunk_BS[:, 1:].reshape(-1),
                    reduction="sum",
                )
            )
            count += chunk_BS[:, 1:].numel()
        out[source] = total / count
    out["all"] = sum(corpus.weights[s] * out[s] for s in corpus.val)
    model.train()
    return out


def _say(lead: bool, message: str) -> None:
    if lead:
        print(message, flush=True)
