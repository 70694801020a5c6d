"""The cluster-optimal search (MOSAIC): geometries x parallel plans on a cluster and a training window.

1. Geometries: widths (hidden) with layers = hidden / aspect, heads of 128, a dense FFN of 4 x hidden,
   and every (experts, top_k, granularity) of the grid with top_k < experts, plus the dense model.
2. Plans per geometry: tp (within a node) x pp (dividing the layers) x ep (dividing the experts and
   dp x tp) x micro-batch x full recomputation on/off, dp = devices / (tp x pp); a plan is feasible when
   its predicted memory per device fits the hardware's. Each geometry keeps its highest-MFU feasible plan.
3. Deliverable budget: a geometry trains for the whole window at the throughput its plan delivers,
   D = C_peak x MFU x goodput x window / model FLOPs per token. (With --tokens D is fixed and a geometry
   is kept only when its model FLOPs fit that deliverable compute.) The cluster-optimal choice is the
   geometry with the lowest predicted loss.
4. Fixed model-FLOP budget (the compute-optimal view): every geometry gets the same model FLOPs,
   C = C_peak x goodput x window x MFU*, MFU* the cluster-optimal plan's (so both budgets agree at the
   cluster-optimal choice), or ``budget_flops``. The compute-optimal choice ignores what MFU the cluster
   delivers for it; its loss under the deliverable budget says what that costs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ledger.planning.errors import NoFeasiblePlan
from ledger.planning.geometry import Geometry
from ledger.planning.hardware import Hardware
from ledger.planning.law import Law
from ledger.planning.perf import NOMINAL, Calibration, Estimate, Plan, predict

Array = NDArray[np.float64]
SECONDS_PER_DAY = 86400.0
CHUNK = 200_000
"""Candidate rows evaluated per numpy batch (bounds memory)."""


@dataclass(frozen=True)
class Space:
    """What the search enumerates."""

    widths: tuple[int, ...] = (1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192)
    aspect: float = 128.0
    """hidden / layers."""
    experts: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 512)
    top_k: tuple[int, ...] = (1, 2, 4, 8)
    granularity: tuple[float, ...] = (1, 2, 4, 8)
    max_sparsity: float = 0.985
    """The sparsity frontier of the search (MOSAIC's compute-optimal sparsity on B200s was about 0.985)."""
    dense: bool = True
    """Also consider the dense model of each width."""
    ffn_mult: float = 4.0
    seq_len: int = 4096
    vocab: int = 128_000
    batch_tokens: float = 4 * 2**20
    """Tokens per optimizer step (global batch x seq_len)."""
    precision: str = "bf16"
    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4, 8, 16)
    micro_batch: tuple[int, ...] = (1, 2)
    recompute: tuple[int, ...] = (0, 1)

    def geometries(self) -> Geometry:
        rows: list[tuple[float, ...]] = []
        for h in self.widths:
            layers = max(1, round(h / self.aspect))
            f = self.ffn_mult * h
            if self.dense:
                rows.append((layers, h, f, 1, 1, 1, 0))
            for e in self.experts:
                for k in self.top_k:
                    if k >= e or 1.0 - k / e > self.max_sparsity + 1e-12:
                        continue
                    for g in self.granularity:
                        if (f / g) < 1 or abs(f / g - round(f / g)) > 1e-9:
                            continue
                        rows.append((layers, h, f, e, k, g, layers))
        a = np.array(rows, dtype=float)
        return Geometry.of(layers=a[:, 0], hidden=a[:, 1], heads=np.maximum(1, a[:, 1] // 128), ffn_hidden=a[:, 2],
                           experts=a[:, 3], top_k=a[:, 4], granularity=a[:, 5], seq_len=self.seq_len,
                           vocab=self.vocab, moe_layers=a[:, 6])


@dataclass(frozen=True)
class Candidates:
    """Every geometry with its best feasible plan (rows of ``geometry``)."""

    geometry: Geometry
    plan: Plan
    estimate: Estimate
    feasible: NDArray[np.bool_]
    min_memory: Array
    """Smallest predicted memory per device over all plans of each geometry."""
    min_memory_plan: Plan
    plans_evaluated: int
    seconds: float


def _plans_for(g: Geometry, i: int, space: Space, hw: Hardware, devices: int) -> NDArray[np.float64]:
    """Rows (tp, pp, ep, dp, mb, recompute) valid for geometry i."""
    L, E, H = g.layers[i], g.experts[i], g.heads[i]
    gb = space.batch_tokens / space.seq_len
    out = []
    for tp in space.tp:
        if tp > hw.devices_per_node or H % tp:
            continue
        for pp in space.pp:
            if pp > L or L % pp or devices % (tp * pp):
                continue
            dp = devices // (tp * pp)
            eps = [1] if E <= 1 else [e for e in (2**n for n in range(0, 12)) if e <= E and E % e == 0
                                      and (dp * tp) % e == 0]
            for ep in eps:
                for mb in space.micro_batch:
                    if gb % (dp * mb):
                        continue
                    for rc in space.recompute:
                        out.append((tp, pp, ep, dp, mb, rc))
    return np.array(out, dtype=float).reshape(-1, 6)


def enumerate_candidates(space: Space, hw: Hardware, devices: int, cal: Calibration = NOMINAL,
                         geometry: Geometry | None = None, plan: dict[str, int] | None = None) -> Candidates:
    """Evaluate every plan of every geometry; keep each geometry's best feasible plan."""
    t0 = time.perf_counter()
    geo = geometry if geometry is not None else space.geometries()
    gb = space.batch_tokens / space.seq_len
    gi_parts, plan_parts = [], []
    for i in range(len(geo)):
        rows = _plans_for(geo, i, space, hw, devices)
        if plan:
            keys = ("tp", "pp", "ep", "dp", "micro_batch", "recompute")
            keep = np.ones(rows.shape[0], dtype=bool)
            for c, k in enumerate(keys):
                if k in plan:
                    keep &= rows[:, c] == plan[k]
            rows = rows[keep]
        gi_parts.append(np.full(rows.shape[0], i))
        plan_parts.append(rows)
    gidx = np.concatenate(gi_parts).astype(np.int64)
    prow = np.concatenate(plan_parts) if plan_parts else np.empty((0, 6))
    n = len(geo)
    best_mfu = np.full(n, -np.inf)
    best_row = np.full(n, -1, dtype=np.int64)
    min_mem = np.full(n, np.inf)
    min_mem_row = np.full(n, -1, dtype=np.int64)
    for start in range(0, gidx.size, CHUNK):
        sl = slice(start, min(start + CHUNK, gidx.size))
        gsub = geo.take(gidx[sl])
        r = prow[sl]
        psub = Plan.of(tp=r[:, 0], pp=r[:, 1], ep=r[:, 2], dp=r[:, 3], micro_batch=r[:, 4], global_batch=gb,
                       recompute=r[:, 5], grouped=int(hw.grouped_gemm), precision=space.precision)
        est = predict(gsub, psub, hw, cal)
        ok = est.memory_bytes <= hw.hbm_bytes
        score = np.where(ok, est.mfu, -np.inf)
        idx = np.arange(sl.start, sl.stop)
        _scatter_best(best_mfu, best_row, gidx[sl], score, idx, maximise=True)
        _scatter_best(min_mem, min_mem_row, gidx[sl], est.memory_bytes, idx, maximise=False)
    feasible = np.isfinite(best_mfu)
    chosen = np.where(feasible, best_row, min_mem_row)
    chosen = np.where(chosen < 0, 0, chosen)
    r = prow[chosen] if prow.size else np.ones((n, 6))
    best_plan = Plan.of(tp=r[:, 0], pp=r[:, 1], ep=r[:, 2], dp=r[:, 3], micro_batch=r[:, 4], global_batch=gb,
                        recompute=r[:, 5], grouped=int(hw.grouped_gemm), precision=space.precision)
    est = predict(geo, best_plan, hw, cal)
    rm = prow[np.where(min_mem_row < 0, 0, min_mem_row)] if prow.size else np.ones((n, 6))
    mm_plan = Plan.of(tp=rm[:, 0], pp=rm[:, 1], ep=rm[:, 2], dp=rm[:, 3], micro_batch=rm[:, 4], global_batch=gb,
                      recompute=rm[:, 5], grouped=int(hw.grouped_gemm),
                      precision=space.precision)
    return Candidates(geo, best_plan, est, feasible & (best_row >= 0), min_mem, mm_plan, int(gidx.size),
                      time.perf_counter() - t0)


def _scatter_best(best: Array, where: NDArray[np.int64], groups: NDArray[np.int64], values: Array,
                  rows: NDArray[np.int64], maximise: bool) -> None:
    """best[g] = max (or min) of values per group g, and the row that holds it."""
    order = np.lexsort((-values if maximise else values, groups))
    g_sorted = groups[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = g_sorted[1:] != g_sorted[:-1]
    top, vals, at = g_sorted[first], values[order][first], rows[order][first]
    better = vals > best[top] if maximise else vals < best[top]
    best[top[better]] = vals[better]
    where[top[better]] = at[better]


@dataclass
class Choice:
    """One geometry, its plan and what the law predicts for it."""

    geometry: dict[str, Any]
    plan: dict[str, Any]
    mfu: float
    step_s: float
    tokens_per_s: float
    memory_bytes: float
    total_params: float
    active_params: float
    flops_per_token: float
    tokens: float
    model_flops: float
    loss: float
    """Predicted loss under the budget the choice was made for."""
    breakdown: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PlanResult:
    """The outcome of `ledger plan`."""

    inputs: dict[str, Any]
    cluster_optimal: Choice
    compute_optimal: Choice
    compute_optimal_deliverable_loss: float
    compute_optimal_deliverable_tokens: float
    fixed_budget_flops: float
    deliverable_flops: float
    curves: list[dict[str, float]]
    verdict: dict[str, Any]
    search: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "cluster_optimal": self.cluster_optimal.to_dict(),
            "compute_optimal": self.compute_optimal.to_dict()
            | {"loss_under_deliverable_budget": self.compute_optimal_deliverable_loss,
               "tokens_under_deliverable_budget": self.compute_optimal_deliverable_tokens},
            "budgets": {"fixed_model_flops": self.fixed_budget_flops,
                        "deliverable_model_flops_of_cluster_optimal": self.deliverable_flops},
            "curves": self.curves,
            "verdict": self.verdict,
            "search": self.search,
            "notes": self.notes,
        }


def _choice(c: Candidates, i: int, tokens: float, loss: float) -> Choice:
    g, e = c.geometry, c.estimate
    return Choice(
        geometry=g.row(i), plan=c.plan.row(i), mfu=float(e.mfu[i]), step_s=float(e.step_s[i]),
        tokens_per_s=float(e.tokens_per_s[i]), memory_bytes=float(e.memory_bytes[i]),
        total_params=float(g.total_params[i]), active_params=float(g.active_params[i]),
        flops_per_token=float(g.flops_per_token[i]), tokens=float(tokens),
        model_flops=float(tokens * g.flops_per_token[i]), loss=float(loss),
        breakdown={k: float(v[i]) for k, v in e.breakdown.items()},
    )


def infeasible_message(c: Candidates, hw: Hardware, devices: int, nodes: int) -> str:
    i = int(np.argmin(c.min_memory))
    g, p = c.geometry.row(i), c.min_memory_plan.row(i)
    what = (f"layers={g['layers']}, hidden={g['hidden']}, experts={g['experts']}, top_k={g['top_k']}, "
            f"granularity={g['granularity']}")
    plan = (f"tp={p['tp']}, pp={p['pp']}, ep={p['ep']}, dp={p['dp']}, micro_batch={p['micro_batch']}, "
            f"recompute={p['recompute']}")
    where = f"in the {hw.hbm_bytes / 1e9:.0f} GB of a {hw.name} on {nodes} node(s) x {hw.devices_per_node} " \
            f"({devices} devices)"
    head = (f"no parallel plan fits {what}, {where}: the smallest plan" if len(c.geometry) == 1 else
            f"no parallel plan fits any of the {len(c.geometry)} geometries {where}; the least demanding, {what}, "
            "with its smallest plan")
    return (f"{head} ({plan}) needs {c.min_memory[i] / 1e9:.1f} GB per device; add nodes, pick hardware with "
            "more memory, or a smaller geometry")


def search(
    space: Space,
    hw: Hardware,
    nodes: int,
    days: float,
    goodput: float,
    law: Law,
    cal: Calibration = NOMINAL,
    *,
    tokens: float | None = None,
    budget_flops: float | None = None,
    geometry: Geometry | None = None,
    plan: dict[str, int] | None = None,
    inputs: dict[str, Any] | None = None,
) -> PlanResult:
    """Run the search; see the module docstring."""
    devices = nodes * hw.devices_per_node
    cands = enumerate_candidates(space, hw, devices, cal, geometry, plan)
    if not cands.feasible.any():
        raise NoFeasiblePlan(infeasible_message(cands, hw, devices, nodes))
    g, est = cands.geometry, cands.estimate
    peak = float(hw.peak(space.precision))
    window = days * SECONDS_PER_DAY
    c_peak = devices * peak
    fpt = g.flops_per_token
    c_del = c_peak * est.mfu * goodput * window
    n_tot, s, gran = g.total_params, g.sparsity, g.granularity
    notes: list[str] = []
    if law.b < 1e-12:
        notes.append("the law has no token term (b = 0, fitted on receipts that all trained the same tokens): "
                     "more tokens do not lower its loss; fit it at matched token counts (--at-tokens)")
    ok = cands.feasible.copy()
    if tokens is not None:
        d_del = np.full(len(g), float(tokens))
        fits = fpt * tokens <= c_del
        if not (ok & fits).any():
            raise NoFeasiblePlan(
                f"no feasible geometry trains {tokens:.3g} tokens in {days:g} days on {nodes} node(s) of {hw.name}: "
                f"the most deliverable is {float(np.max(np.where(ok, c_del / fpt, 0))):.3g} tokens; lower --tokens "
                "or add days or nodes")
        notes.append(f"{int((ok & ~fits).sum())} memory-feasible geometries cannot train {tokens:.3g} tokens in "
                     "the window and were dropped")
        ok &= fits
    else:
        d_del = c_del / fpt
    loss_del = np.where(ok, law.predict(n_tot, np.maximum(d_del, 1.0), s, gran), np.inf)
    best = int(np.argmin(loss_del))
    mfu_ref = float(est.mfu[best])
    c_fix = budget_flops if budget_flops is not None else c_peak * goodput * window * mfu_ref
    if tokens is not None:
        d_fix = np.full(len(g), float(tokens))
        ok_fix = cands.feasible & (fpt * tokens <= c_fix)
    else:
        d_fix = c_fix / fpt
        ok_fix = cands.feasible.copy()
    loss_fix = np.where(ok_fix, law.predict(n_tot, np.maximum(d_fix, 1.0), s, gran), np.inf)
    if not np.isfinite(loss_fix).any():
        raise NoFeasiblePlan(f"no feasible geometry fits the fixed model-FLOP budget of {c_fix:.3g} FLOPs")
    co = int(np.argmin(loss_fix))

    curves = []
    for sv in np.unique(np.round(s[cands.feasible], 12)):
        at = np.isclose(s, sv)
        lf, ld = loss_fix[at], loss_del[at]
        row: dict[str, float] = {"sparsity": float(sv)}
        row["loss_fixed_budget"] = float(lf.min()) if np.isfinite(lf).any() else float("nan")
        row["loss_deliverable"] = float(ld.min()) if np.isfinite(ld).any() else float("nan")
        if np.isfinite(ld).any():
            row["mfu_of_deliverable_best"] = float(est.mfu[at][np.argmin(ld)])
        curves.append(row)
    s_all = s[cands.feasible]
    s_max, s_min = float(s_all.max()), float(s_all.min())
    s_co, s_cl = float(s[co]), float(s[best])
    verdict = {
        "compute_optimal_sparsity": s_co,
        "cluster_optimal_sparsity": s_cl,
        "search_sparsity_range": [s_min, s_max],
        "compute_optimal_at_frontier": bool(np.isclose(s_co, s_max)),
        "cluster_optimal_interior": bool(s_min < s_cl < s_max and not np.isclose(s_cl, s_max)),
        "loss_gain_over_compute_optimal": float(loss_del[co] - loss_del[best]),
    }
    result = PlanResult(
        inputs=(inputs or {}) | {"devices": devices, "peak_flops_per_device": peak,
                                 "peak": hw.peak_name(space.precision), "c_peak": c_peak,
                                 "window_s": window, "goodput": goodput},
        cluster_optimal=_choice(cands, best, float(d_del[best]), float(loss_del[best])),
        compute_optimal=_choice(cands, co, float(d_fix[co]), float(loss_fix[co])),
        compute_optimal_deliverable_loss=float(loss_del[co]),
        compute_optimal_deliverable_tokens=float(d_del[co]),
        fixed_budget_flops=float(c_fix),
        deliverable_flops=float(c_del[best]),
        curves=curves,
        verdict=verdict,
        search={"geometries": len(g), "memory_feasible": int(cands.feasible.sum()),
                "plans_evaluated": cands.plans_evaluated, "seconds": cands.seconds},
        notes=notes,
    )
    return result


def parse_list(text: str, name: str, kind: type = int) -> tuple[Any, ...]:
    """'8,16,32' -> (8, 16, 32), with a one-line error naming the option."""
    from ledger.errors import BadInput

    try:
        values = tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadInput(f"{name} must be a comma-separated list of numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise BadInput(f"{name} must list positive numbers, got {text!r}")
    return values
