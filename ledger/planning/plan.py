"""The cluster-optimal search (MOSAIC): geometries x parallel plans on a cluster and a training window, with
the law's uncertainty propagated by resampling.

1. Geometries: widths (hidden) with layers = hidden / aspect, heads of 128, a dense FFN of 4 x hidden,
   and every (experts, top_k, granularity) of the grid with top_k < experts and sparsity up to the frontier,
   plus the dense model. The frontier is the law's support (the highest sparsity of the data it was fit on),
   or ``--max-sparsity``; beyond the support the plan says it extrapolates.
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
5. Uncertainty: the choice is repeated for ``draws`` parameter vectors of the law (its bootstrap vectors, or
   its published standard errors); the result gives the probability that the cluster-optimal choice beats
   the compute-optimal one on this cluster, the loss gap with its 95% interval, and how often the optimum
   is interior. ``sensitivity`` moves one coefficient at a time to the ends of its interval (or removes a
   term without one) and names the coefficients that decide interior against frontier.
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
from ledger.planning.law import COEFFICIENTS, PARAMS, LawSpec, predict_many
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
    max_sparsity: float | None = None
    """The sparsity frontier of the search (None: no limit; ``ledger plan`` sets the law's support)."""
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
                    if k >= e or (self.max_sparsity is not None and 1.0 - k / e > self.max_sparsity + 1e-12):
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
    law: dict[str, Any]
    """The law: its name, every parameter with its source and interval, support, caveats."""
    uncertainty: dict[str, Any]
    support: dict[str, Any]
    """The frontier, where it comes from, and where the choices extrapolate beyond the law's support."""
    sensitivity: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "law": self.law,
            "cluster_optimal": self.cluster_optimal.to_dict(),
            "compute_optimal": self.compute_optimal.to_dict()
            | {"loss_under_deliverable_budget": self.compute_optimal_deliverable_loss,
               "tokens_under_deliverable_budget": self.compute_optimal_deliverable_tokens},
            "budgets": {"fixed_model_flops": self.fixed_budget_flops,
                        "deliverable_model_flops_of_cluster_optimal": self.deliverable_flops},
            "curves": self.curves,
            "verdict": self.verdict,
            "uncertainty": self.uncertainty,
            "support": self.support,
            "sensitivity": self.sensitivity,
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


@dataclass(frozen=True)
class _Context:
    """What the choice needs besides the law (all per geometry, law-independent)."""

    n_tot: Array
    s: Array
    gran: Array
    fpt: Array
    mfu: Array
    c_del: Array
    d_del: Array
    ok_del: NDArray[np.bool_]
    feasible: NDArray[np.bool_]
    c_peak_window: float
    """C_peak x goodput x window."""
    tokens: float | None
    budget_flops: float | None


@dataclass(frozen=True)
class _Chosen:
    """The choice under each parameter row (k of them)."""

    best: NDArray[np.int64]
    co: NDArray[np.int64]
    loss_del: Array
    loss_fix: Array
    d_fix: Array
    c_fix: Array


def _choose(V: Array, x: _Context) -> _Chosen:
    """Cluster-optimal and compute-optimal choices for every parameter row of V (k x 11)."""
    loss_del = np.where(x.ok_del[None, :], predict_many(V, x.n_tot, np.maximum(x.d_del, 1.0), x.s, x.gran), np.inf)
    best = np.argmin(loss_del, axis=1)
    c_fix = (np.full(V.shape[0], x.budget_flops) if x.budget_flops is not None
             else x.c_peak_window * x.mfu[best])
    if x.tokens is not None:
        d_fix = np.full((V.shape[0], x.n_tot.size), float(x.tokens))
        ok_fix = x.feasible[None, :] & (x.fpt[None, :] * x.tokens <= c_fix[:, None])
    else:
        d_fix = c_fix[:, None] / x.fpt[None, :]
        ok_fix = np.broadcast_to(x.feasible[None, :], d_fix.shape)
    loss_fix = np.where(ok_fix, predict_many(V, x.n_tot, np.maximum(d_fix, 1.0), x.s, x.gran), np.inf)
    co = np.argmin(loss_fix, axis=1)
    return _Chosen(best, co, loss_del, loss_fix, d_fix, c_fix)


def _interior(s_choice: Array, s_lo: float, s_hi: float) -> NDArray[np.bool_]:
    """Strictly inside the searched sparsity range (not at the frontier, not at the least sparse end)."""
    return (s_choice < s_hi - 1e-9) & (s_choice > s_lo + 1e-9)


def _pct(a: Array) -> list[float]:
    return [float(v) for v in np.percentile(a, [2.5, 97.5])]


def _uncertainty(spec: LawSpec, x: _Context, best: int, co: int, s_lo: float, s_hi: float, draws: int,
                 seed: int) -> dict[str, Any]:
    """The point choices' standing under the law's uncertainty, and how often the optimum itself moves."""
    uncertain = spec.uncertain()
    held = [p for p in PARAMS if p not in uncertain]
    if draws <= 0 or not uncertain:
        return {"draws": 0, "resampled": uncertain, "held_fixed": held,
                "note": "no resampling: " + ("--draws 0" if draws <= 0 else "the law gives no interval for any "
                                             "coefficient")}
    V = spec.draws(draws, np.random.default_rng(seed))
    ch = _choose(V, x)
    rows = np.arange(draws)
    # the point choices under each draw: the compute-optimal geometry's loss on this cluster minus the
    # cluster-optimal one's (positive: the cluster-optimal choice is better on this cluster)
    gap = ch.loss_del[rows, co] - ch.loss_del[rows, best]
    same = best == co
    s_best, s_co = x.s[ch.best], x.s[ch.co]
    return {
        "draws": draws,
        "seed": seed,
        "resampled": uncertain,
        "held_fixed": held,
        "from": "bootstrap vectors of the fit" if spec.samples is not None else "published standard errors "
                "(independent normal draws truncated at 0)",
        "same_choice": bool(same),
        "p_cluster_optimal_beats_compute_optimal": 0.0 if same else float(np.mean(gap > 0)),
        "loss_gap": {"point": None, "median": float(np.median(gap)), "ci95": _pct(gap),
                     "what": "predicted loss on this cluster of the compute-optimal choice minus the "
                             "cluster-optimal one's, for the point choices under each draw"},
        "p_cluster_optimal_interior": float(np.mean(_interior(s_best, s_lo, s_hi))),
        "p_compute_optimal_at_frontier": float(np.mean(s_co >= s_hi - 1e-9)),
        "cluster_optimal_sparsity": {"median": float(np.median(s_best)), "ci95": _pct(s_best)},
        "compute_optimal_sparsity": {"median": float(np.median(s_co)), "ci95": _pct(s_co)},
    }


def _sensitivity(spec: LawSpec, x: _Context, s_lo: float, s_hi: float) -> list[dict[str, Any]]:
    """One coefficient at a time: the ends of its 95% interval, or its term removed when it has none; and
    the value (0.1x to 10x its own) nearest to it at which the optimum changes between interior and frontier."""
    base = spec.law.vector()
    out = []
    iv_of = spec.interval
    point = _choose(base[None, :], x)
    point_interior = bool(_interior(x.s[point.best], s_lo, s_hi)[0])
    cases: list[tuple[str, str, list[float]]] = []
    for p in PARAMS:
        iv = spec.interval(p)
        if iv is not None:
            cases.append((p, "95% interval ends", list(iv)))
        elif p in COEFFICIENTS and p != "e" and getattr(spec.law, p) > 0:
            cases.append((p, "no interval: term removed", [0.0, getattr(spec.law, p)]))
    for p, kind, values in cases:
        V = np.tile(base, (len(values), 1))
        V[:, PARAMS.index(p)] = values
        ch = _choose(V, x)
        rows = np.arange(len(values))
        interior = _interior(x.s[ch.best], s_lo, s_hi)
        gap = ch.loss_del[rows, ch.co] - ch.loss_del[rows, ch.best]
        flip = _break_even(base, PARAMS.index(p), x, s_lo, s_hi, point_interior)
        iv = iv_of(p)
        inside = bool(flip is not None and iv is not None and iv[0] <= flip <= iv[1])
        out.append({
            "parameter": p, "kind": kind, "values": values, "flips_at": flip,
            "flip_inside_interval": inside,
            "cluster_optimal_sparsity": [float(v) for v in x.s[ch.best]],
            "compute_optimal_sparsity": [float(v) for v in x.s[ch.co]],
            "cluster_optimal_interior": [bool(v) for v in interior],
            "loss_gap": [float(v) for v in gap],
            "decides": bool(len(set(interior.tolist()) | {point_interior}) > 1 or inside),
        })
    return out


SCAN = np.geomspace(0.1, 10.0, 41)
"""Multiples of a coefficient's value scanned for the point where the optimum changes side."""


def _break_even(base: Array, i: int, x: _Context, s_lo: float, s_hi: float, point_interior: bool) -> float | None:
    """The value of parameter i nearest its point value (over 0.1x..10x) at which the cluster-optimal choice
    changes between interior and frontier, others held; None when it never does in that range."""
    if base[i] <= 0:
        return None
    V = np.tile(base, (SCAN.size, 1))
    V[:, i] = base[i] * SCAN
    interior = _interior(x.s[_choose(V, x).best], s_lo, s_hi)
    changed = np.where(interior != point_interior)[0]
    if not changed.size:
        return None
    nearest = changed[np.argmin(np.abs(np.log(SCAN[changed])))]
    return float(V[nearest, i])


def _outside(value: float, rng: tuple[float, float] | None) -> bool:
    return rng is not None and not (rng[0] * (1 - 1e-9) <= value <= rng[1] * (1 + 1e-9))


def search(
    space: Space,
    hw: Hardware,
    nodes: int,
    days: float,
    goodput: float,
    law: LawSpec,
    cal: Calibration = NOMINAL,
    *,
    tokens: float | None = None,
    budget_flops: float | None = None,
    geometry: Geometry | None = None,
    plan: dict[str, int] | None = None,
    inputs: dict[str, Any] | None = None,
    draws: int = 200,
    seed: int = 0,
    sensitivity: bool = False,
    frontier_source: str = "",
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
    notes: list[str] = []
    point_law = law.law
    if point_law.b < 1e-12:
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
    x = _Context(n_tot=g.total_params, s=g.sparsity, gran=g.granularity, fpt=fpt, mfu=est.mfu, c_del=c_del,
                 d_del=d_del, ok_del=ok, feasible=cands.feasible, c_peak_window=c_peak * goodput * window,
                 tokens=tokens, budget_flops=budget_flops)
    pt = _choose(point_law.vector()[None, :], x)
    best, co = int(pt.best[0]), int(pt.co[0])
    loss_del, loss_fix = pt.loss_del[0], pt.loss_fix[0]
    if not np.isfinite(loss_fix).any():
        raise NoFeasiblePlan(f"no feasible geometry fits the fixed model-FLOP budget of {pt.c_fix[0]:.3g} FLOPs")
    s = x.s
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
    interior = bool(_interior(np.array([s_cl]), s_min, s_max)[0])
    at_frontier = bool(s_co >= s_max - 1e-9)
    gain = float(loss_del[co] - loss_del[best])
    if interior:
        finding = (f"interior optimum: the cluster-optimal sparsity {s_cl:.4g} lies inside the frontier {s_max:.4g}"
                   + (" while the compute-optimal one sits at it" if at_frontier else ""))
    elif s_cl >= s_max - 1e-9:
        finding = f"no interior optimum: the cluster-optimal choice sits at the frontier (S = {s_max:.4g})"
    else:
        finding = f"no interior optimum: the cluster-optimal choice is the least sparse searched (S = {s_cl:.4g})"
    verdict = {
        "compute_optimal_sparsity": s_co,
        "cluster_optimal_sparsity": s_cl,
        "search_sparsity_range": [s_min, s_max],
        "frontier": s_max,
        "compute_optimal_at_frontier": at_frontier,
        "cluster_optimal_interior": interior,
        "interior_optimum": interior,
        "finding": finding,
        "loss_gain_over_compute_optimal": gain,
    }
    unc = _uncertainty(law, x, best, co, s_min, s_max, draws, seed)
    if unc.get("draws"):
        unc["loss_gap"]["point"] = gain
    sup = law.support
    extrap = []
    for who, i in (("cluster-optimal", best), ("compute-optimal", co)):
        tok = float(d_del[i]) if who == "cluster-optimal" else float(pt.d_fix[0, i])
        for var, value in (("S", float(s[i])), ("G", float(x.gran[i])), ("N_tot", float(x.n_tot[i])), ("D", tok)):
            if _outside(value, sup.get(var)):
                lo, hi = sup[var]
                extrap.append(f"the {who} choice's {var} = {value:.4g} lies outside the law's support "
                              f"[{lo:.4g}, {hi:.4g}]: the plan extrapolates")
    if not sup:
        extrap.append("the law gives no support: the plan cannot say where it extrapolates")
    support = {
        "law_support": {k: list(v) for k, v in sup.items()},
        "support_source": law.support_source,
        "frontier": s_max,
        "frontier_source": frontier_source or "the search grid",
        "extrapolates": bool(extrap),
        "extrapolation": extrap,
    }
    result = PlanResult(
        inputs=(inputs or {}) | {"devices": devices, "peak_flops_per_device": peak,
                                 "peak": hw.peak_name(space.precision), "c_peak": c_peak,
                                 "window_s": window, "goodput": goodput},
        cluster_optimal=_choice(cands, best, float(d_del[best]), float(loss_del[best])),
        compute_optimal=_choice(cands, co, float(pt.d_fix[0, co]), float(loss_fix[co])),
        compute_optimal_deliverable_loss=float(loss_del[co]),
        compute_optimal_deliverable_tokens=float(d_del[co]),
        fixed_budget_flops=float(pt.c_fix[0]),
        deliverable_flops=float(c_del[best]),
        curves=curves,
        verdict=verdict,
        search={"geometries": len(g), "memory_feasible": int(cands.feasible.sum()),
                "plans_evaluated": cands.plans_evaluated, "seconds": cands.seconds},
        law={"name": law.name, "form": "L = a/N_tot^alpha + b/D^beta + c/(1-S)^lam + "
                                       "j/((1-S)^delta N_tot^gamma G^eta) + e",
             "parameters": law.parameters(), "caveats": list(law.caveats)},
        uncertainty=unc,
        support=support,
        sensitivity=_sensitivity(law, x, s_min, s_max) if sensitivity else None,
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
