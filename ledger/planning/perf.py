"""The operator-level performance model: step time, MFU and memory of geometries x parallel plans on a
hardware profile. Every quantity is a numpy column, one row per (geometry, plan) candidate.

Per micro-batch and pipeline stage, forward, backward (2x the forward's GEMM work) and, with full
recomputation, the forward again:

- dense GEMMs (attention projections, dense FFNs, router, LM head) and the grouped GEMM of the routed
  experts: a roofline each, max(FLOPs / (peak x gemm efficiency), bytes / (HBM bandwidth x memory
  efficiency)). An expert sees rows = tokens x top_k x ep / experts; rows are rounded up to the GEMM
  tile, so small, fine-grained experts waste compute and become memory-bound on their weights;
- fused attention (causal: half of 4 x tokens x seq x hidden FLOPs);
- memory-bound work: norms, residuals, SwiGLU, router softmax/top-k, token permute and unpermute;
- all-to-all (dispatch and combine, forward and backward) over NVLink inside a node and the network
  beyond it; tensor-parallel all-gather/reduce-scatter (sequence parallel); pipeline p2p;
- expert-parallel load imbalance: the busiest of the ep ranks sets the pace of the expert GEMMs and the
  all-to-all, exceeding the mean by cv_rank x sqrt(2 ln ep), cv_rank = sqrt(cv^2 + 1/rows) / sqrt(local
  experts) (cv: the profile's ``expert_load_cv``; 1/rows: multinomial noise);
- a loop over experts (no grouped GEMM, the runner on a CPU) also pays autograd's full-size gradients:
  the backward of each expert's slice of the stacked weights (3 of them) and of the permuted rows zero-fills
  a buffer as large as the whole, which is then added into the accumulated gradient (4 passes: the fill's
  write, the add's two reads and its write), so per MoE layer local experts x (local experts x 3 D F + rows
  x D) elements, 4 passes each. These buffers range from kilobytes to megabytes across geometries, so they
  stream at the profile's ``cache_bw`` while their working set (the buffer and the accumulator) fits in
  ``cache_bytes`` and at hbm_bw beyond: a share min(1, cache / working set) at the cache's rate;
- kernel launches: CPU dispatch latency per kernel; a loop over experts (no grouped GEMM) costs ~9
  kernels per local expert. On GPUs launches overlap execution (the slower of the two counts), on a
  CPU they add to it.

Per step: (micro-batches + pp - 1) x the micro-batch time (1F1B pipeline: the bubble is pp - 1 of them),
plus the exposed part of the data-parallel gradient reduce-scatter / parameter all-gather (distributed
optimizer; experts over their own expert-data-parallel group of dp x tp / ep ranks), plus the
optimizer's memory traffic.

Memory per device (the first pipeline stage): bf16 weights + fp32 gradients + fp32 master weights and
Adam moments sharded over the data-parallel group (fp32 runs: 4 + 4 + 8 bytes per parameter, also
sharded), activations of min(micro-batches, pp) micro-batches in flight (only layer inputs with full
recomputation), fp32 logits, plus the profile's reserved bytes.

MFU = tokens per step x model FLOPs per token / (step time x devices x peak of the precision used).
The four calibration factors multiply the times of their operator class: compute (GEMMs, attention),
memory (memory-bound kernels, the memory side of rooflines), comm (every collective) and launch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ledger.planning.geometry import Geometry
from ledger.planning.hardware import Hardware, peak_key

Array = NDArray[np.float64]

FACTORS = ("compute", "memory", "comm", "launch")
"""Calibration factors, each multiplying the time of one operator class (1 = the profile as is)."""


@dataclass(frozen=True)
class Calibration:
    """Multipliers of the time of each operator class, fitted by `ledger fit perf`."""

    compute: float = 1.0
    memory: float = 1.0
    comm: float = 1.0
    launch: float = 1.0

    def to_dict(self) -> dict[str, float]:
        return {f: float(getattr(self, f)) for f in FACTORS}

    @classmethod
    def from_vector(cls, log_factors: Any) -> Calibration:
        return cls(**{f: float(np.exp(v)) for f, v in zip(FACTORS, log_factors, strict=True)})


NOMINAL = Calibration()


@dataclass(frozen=True)
class Plan:
    """Parallel plans, one row each (columns of the same length as the geometries they go with)."""

    tp: Array
    pp: Array
    ep: Array
    dp: Array
    micro_batch: Array
    """Sequences per micro-batch per data-parallel rank."""
    global_batch: Array
    """Sequences per optimizer step, all ranks."""
    recompute: Array
    """1: full activation recomputation; 0: none."""
    grouped: Array
    """1: experts computed by one grouped GEMM; 0: a loop of GEMMs over the local experts."""
    precision: NDArray[Any]
    """Precision policy per row (fp32, bf16, fp8...)."""

    @classmethod
    def of(cls, **values: Any) -> Plan:
        values.setdefault("recompute", 0)
        values.setdefault("grouped", 1)
        values.setdefault("precision", "bf16")
        names = [f.name for f in fields(cls)]
        cols = np.broadcast_arrays(*(np.atleast_1d(np.asarray(values[n])) for n in names))
        out = {n: np.array(c, dtype=float) for n, c in zip(names, cols, strict=True) if n != "precision"}
        return cls(precision=np.array(cols[-1], dtype=object), **out)

    @property
    def world(self) -> Array:
        return self.tp * self.pp * self.dp

    def take(self, index: Any) -> Plan:
        return replace(self, **{f.name: np.atleast_1d(getattr(self, f.name)[index]) for f in fields(self)})

    def row(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)[i]
            out[f.name] = str(v) if f.name == "precision" else int(v)
        out["recompute"] = "full" if out["recompute"] else "none"
        out["grouped"] = bool(out["grouped"])
        out["world"] = int(self.world[i])
        return out


@dataclass(frozen=True)
class Estimate:
    """Predictions per row."""

    step_s: Array
    mfu: Array
    memory_bytes: Array
    tokens_per_s: Array
    breakdown: dict[str, Array]
    """Seconds per step by operator class (they add up to step_s)."""
    peak_flops: Array
    """The nominal peak the MFU is relative to (per device)."""

    def take(self, index: Any) -> Estimate:
        return Estimate(
            self.step_s[index], self.mfu[index], self.memory_bytes[index], self.tokens_per_s[index],
            {k: v[index] for k, v in self.breakdown.items()}, self.peak_flops[index],
        )


def _ceil_to(x: Array, tile: float) -> Array:
    return np.ceil(np.maximum(x, 1e-12) / tile) * tile


def _stream(nbytes: Array, working_set: Array, hw: Hardware) -> Array:
    """Bytes of traffic expressed at hbm_bw: the share min(1, cache_bytes / working set) of them streams
    ``cache_bw / hbm_bw`` times faster (no cache in the profile: unchanged)."""
    speedup = max(1.0, hw.cache_bw / hw.hbm_bw)
    share = np.minimum(1.0, hw.cache_bytes / np.maximum(working_set, 1.0))
    return nbytes * (1.0 - share * (1.0 - 1.0 / speedup))


def predict(g: Geometry, p: Plan, hw: Hardware, cal: Calibration = NOMINAL) -> Estimate:
    """Step time, MFU and memory per device of each (geometry row, plan row)."""
    L, D, F, E, k = g.layers, g.hidden, g.ffn_hidden, g.experts, g.top_k
    S, V, Fe = g.seq_len, g.vocab, g.expert_hidden
    n_moe, n_dense = g.moe_layers, g.dense_layers
    tp, pp, ep, dp, mb, gb = p.tp, p.pp, p.ep, p.dp, p.micro_batch, p.global_batch
    uniq, inverse = np.unique(p.precision.astype(str), return_inverse=True)
    keys = np.array([peak_key(u) for u in uniq], dtype=object)[inverse]
    peak = np.array([hw.peak(u) for u in uniq], dtype=float)[inverse]
    bpe = np.where(keys == "fp32", 4.0, 2.0)  # activations
    bpw = np.where(np.isin(keys, ["fp8", "fp4"]), 1.0, bpe)  # GEMM weights
    c_rate = peak * hw.gemm_efficiency / cal.compute
    a_rate = peak * hw.attention_efficiency / cal.compute
    m_rate = hw.hbm_bw * hw.memory_efficiency / cal.memory
    nv = hw.nvlink_bw * hw.comm_efficiency / cal.comm
    net = hw.network_bw * hw.comm_efficiency / cal.comm
    lat = hw.collective_latency_s * cal.comm
    dpn = float(hw.devices_per_node)
    world = tp * pp * dp

    T = mb * S  # tokens of one micro-batch on one data-parallel replica
    Tr = T / tp  # tokens per rank (sequence parallel)
    Ls, moe_s, dense_s = L / pp, n_moe / pp, n_dense / pp

    def gemm(m: Array, kk: Array, n: Array, count: Array | float = 1.0) -> tuple[Array, Array]:
        """(compute-bound time, memory-bound time) of ``count`` GEMMs [m x kk] @ [kk x n]."""
        flops = 2.0 * _ceil_to(m, hw.gemm_tile) * kk * n * count
        bytes_ = (bpe * (m * kk + m * n) + bpw * kk * n) * count
        return flops / c_rate, bytes_ / m_rate

    def roof(*parts: tuple[Array, Array]) -> Array:
        return sum((np.maximum(c, m) for c, m in parts), np.zeros_like(T))

    def comp_share(*parts: tuple[Array, Array]) -> Array:
        """The part of roof() that is compute-bound (for the breakdown)."""
        return sum((np.where(c >= m, c, 0.0) for c, m in parts), np.zeros_like(T))

    # ---- one layer, forward, one micro-batch
    attn_gemms = (gemm(T, D, 3 * D / tp), gemm(T, D / tp, D))
    attn_core = 2.0 * T * S * D / tp / a_rate  # causal: half of 4 T S D
    elem_attn = 12.0 * Tr * D * bpe / m_rate  # norms, residuals, rope
    ffn_gemms = (gemm(T, D, 2 * F / tp), gemm(T, F / tp, D))
    elem_ffn = 3.0 * T * F / tp * bpe / m_rate
    El = E / ep
    rows = Tr * k * ep / E  # rows per local expert (balanced routing)
    # the busiest of the ep ranks sets the pace: its load exceeds the mean by ~ cv_rank x sqrt(2 ln ep)
    cv_rank = np.sqrt(hw.expert_load_cv**2 + 1.0 / np.maximum(rows, 1.0)) / np.sqrt(El)
    straggle = 1.0 + np.where(ep > 1, cv_rank * np.sqrt(2.0 * np.log(np.maximum(ep, 1.0))), 0.0)
    exp_gemms = (gemm(rows * straggle, D, 2 * Fe, El), gemm(rows * straggle, Fe, D, El))
    Fs = g.shared_experts * Fe
    shared_gemms = (gemm(Tr, D, 2 * Fs), gemm(Tr, Fs, D))
    router_gemm = gemm(Tr, D, np.where(E > 1, E, 0.0))
    elem_moe = (4.0 * Tr * k * D * bpe + 16.0 * Tr * E + 3.0 * Tr * k * Fe * bpe) / m_rate
    # a loop slices each expert's weights (3) and rows out of stacked tensors; autograd's backward of every
    # slice zero-fills a gradient as large as the whole, then adds it into the accumulated one (4 passes)
    w_buf = El * D * Fe * bpe  # one stacked weight of the local experts
    r_buf = rows * El * D * bpe  # the permuted rows of this rank
    loop_grad = np.where(p.grouped > 0, 0.0,
                         El * 4.0 * (3.0 * _stream(w_buf, 2.0 * w_buf, hw) + _stream(r_buf, 2.0 * r_buf, hw)) / m_rate)
    head_gemm = gemm(T, D, V / tp)
    elem_head = (3.0 * T * V / tp * 4.0 + T * D * bpe) / m_rate

    gemm_attn = roof(*attn_gemms) + attn_core
    gemm_ffn = roof(*ffn_gemms)
    gemm_moe = roof(*exp_gemms, *shared_gemms, router_gemm)
    gemm_head = roof(head_gemm)
    compute_bound = (
        Ls * (comp_share(*attn_gemms) + attn_core) + dense_s * comp_share(*ffn_gemms)
        + moe_s * comp_share(*exp_gemms, *shared_gemms, router_gemm) + comp_share(head_gemm)
    )
    gemm_fwd = Ls * gemm_attn + dense_s * gemm_ffn + moe_s * gemm_moe + gemm_head
    elem_fwd = Ls * elem_attn + dense_s * elem_ffn + moe_s * elem_moe + elem_head

    # ---- communication inside a micro-batch
    a2a_bytes = Tr * k * D * bpe  # one dispatch (or combine) per rank
    in_node = np.clip(np.floor(dpn / tp), 1.0, ep)
    a2a_one = np.where(
        ep > 1,
        straggle * np.maximum(a2a_bytes * (in_node - 1) / ep / nv, a2a_bytes * (ep - in_node) / ep / net) + lat,
        0.0,
    )
    a2a_fwd = moe_s * 2.0 * a2a_one
    tp_link = np.where(tp <= dpn, nv, net)
    tp_fwd = np.where(tp > 1, Ls * 4.0 * ((tp - 1) / tp * T * D * bpe / tp_link + lat), 0.0)
    pp_link = np.where(world > dpn, net, nv)
    p2p = np.where(pp > 1, 2.0 * (Tr * D * bpe / pp_link + lat), 0.0)

    passes = 2.0 + p.recompute  # forward (+ recomputed forward) and a backward of twice the forward
    compute = (gemm_fwd * (3.0 + p.recompute))
    memory = elem_fwd * passes + moe_s * loop_grad
    comm_mb = (a2a_fwd + tp_fwd) * passes + p2p

    # ---- kernel launches per micro-batch
    loop_kernels = np.where(p.grouped > 0, 6.0, 9.0 * El)
    k_fwd = (
        Ls * 14.0 + dense_s * 6.0
        + moe_s * (22.0 + loop_kernels + np.where(ep > 1, 4.0, 0.0) + np.where(Fs > 0, 6.0, 0.0))
        + 8.0
    )
    launch_mb = k_fwd * (3.0 + p.recompute) * hw.launch_s * cal.launch
    device_mb = compute + memory + comm_mb
    t_mb = np.maximum(device_mb, launch_mb) if hw.launch_overlaps else device_mb + launch_mb
    exposed_launch = t_mb - device_mb

    micro = np.maximum(1.0, gb / (dp * mb))
    pipeline = (micro + pp - 1.0) * t_mb

    # ---- data-parallel gradients and optimizer
    dense_rank = (Ls * g.attention_params_per_layer + dense_s * 3.0 * D * F + moe_s * g.router_params_per_layer
                  + g.head_params) / tp
    expert_rank = moe_s * g.expert_params_per_layer / ep
    edp = np.maximum(1.0, dp * tp / ep)
    dp_link = np.where(world > dpn, net, nv)
    gbytes = 4.0 + bpe
    t_dp = (
        np.where(dp > 1, 2.0 * (dp - 1) / dp * dense_rank * gbytes / 2.0 / dp_link + 2 * lat, 0.0)
        + np.where(edp > 1, 2.0 * (edp - 1) / edp * expert_rank * gbytes / 2.0 / dp_link + 2 * lat, 0.0)
    )
    dp_exposed = t_dp * (1.0 - hw.dp_overlap)
    shard = dense_rank / dp + expert_rank / edp
    opt_bytes = np.where(keys == "fp32", 28.0, 34.0)
    t_opt = shard * opt_bytes / m_rate + 10.0 * hw.launch_s * cal.launch

    step = pipeline + dp_exposed + t_opt
    bubble = (pp - 1.0) * t_mb
    scale = micro  # per-step totals of the micro-batch parts, bubble shown apart
    compute_only = compute_bound * (3.0 + p.recompute)
    breakdown = {
        "gemm_attention_compute": compute_only * scale,
        "memory_bound": (compute - compute_only + memory) * scale,
        "all_to_all": a2a_fwd * passes * scale,
        "tensor_parallel": tp_fwd * passes * scale,
        "pipeline_p2p": p2p * scale,
        "pipeline_bubble": bubble,
        "launch_exposed": exposed_launch * scale,
        "data_parallel_exposed": dp_exposed,
        "optimizer": t_opt,
    }

    # ---- memory per device (first stage)
    # the first stage holds the embedding; with pp > 1 it lacks the LM head, of about the same size
    embed = np.where(pp > 1, 0.0, g.embedding_params / tp)
    n_params = dense_rank + expert_rank + embed
    states = np.where(
        keys == "fp32",
        (4.0 + 4.0) * n_params + 8.0 * (shard + embed / dp),
        (2.0 + 4.0) * n_params + 12.0 * (shard + embed / dp),
    )
    act_attn = 15.0 * Tr * D * bpe / 2.0 + 2.0 * Tr * D * bpe
    act_ffn = 2.0 * Tr * D * bpe + 3.0 * T * F / tp * bpe
    act_moe = Tr * D * bpe + 8.0 * Tr * E + 2.0 * Tr * k * D * bpe + 3.0 * Tr * k * Fe * bpe
    per_layer = act_attn + (dense_s * act_ffn + moe_s * act_moe) / np.maximum(Ls, 1e-9)
    inflight = np.minimum(micro, pp)
    acts = np.where(p.recompute > 0, inflight * Ls * Tr * D * bpe + per_layer, inflight * Ls * per_layer)
    logits = np.where(pp > 1, 0.0, 2.0 * T * V / tp * 4.0)
    memory_bytes = states + acts + logits + hw.reserved_bytes

    tokens = gb * S
    mfu = tokens * g.flops_per_token / (step * world * peak)
    return Estimate(step, mfu, memory_bytes, tokens / step, breakdown, peak)


def concat_plans(parts: list[Plan]) -> Plan:
    """Rows of several plans, in order."""
    return Plan(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Plan)})
