"""What the fits read from receipts: losses at a token count (the law) and measured step times of
geometries x plans on known hardware (the performance model). Receipts that lack something are skipped,
each with the reason, never guessed.

Loss of a receipt (``--loss``):

- ``train`` (default): the mean training loss of the logged steps in the last 5% of the run's tokens (the
  last step alone is one batch's noise); at a matched token count T (``--at-tokens``), the mean over the
  steps within 2.5% of T. Receipts without a steps table fall back to ``summary.final_loss``.
- ``val``: the validation loss of the whole split (split=val, no source, metric=loss): the last eval, or
  at T the value interpolated linearly in log tokens between the evals around T.

A receipt that never reached T tokens gives no observation at T (it is not extrapolated).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ledger.mfu import model_flops_per_token
from ledger.planning.fitting import Data
from ledger.planning.geometry import Geometry
from ledger.planning.hardware import Hardware, for_receipt
from ledger.planning.perf import Plan

if TYPE_CHECKING:
    import duckdb

    from ledger.store.receipts import Ledger
    from schemas import Receipt

TRAIN_TAIL = 0.05
"""Share of the run's tokens over which the final training loss is averaged."""
MATCH_WINDOW = 0.025
"""Relative window around a matched token count for training losses."""


@dataclass(frozen=True)
class Skipped:
    """A receipt left out of a fit, and why."""

    label: str
    reason: str


def label(r: Receipt) -> str:
    return f"{r.name} ({r.id[:8]})" if r.name else r.id[:12]


def select(con: duckdb.DuckDBPyConnection, where: str | None) -> list[Receipt]:
    """The indexed receipts matching ``--where`` (all when None), oldest first, as receipt models (the
    index holds each as its current-schema JSON; the filter reads that JSON, as `ledger ls --where` does)."""
    import json

    from ledger.store import filters
    from schemas import Receipt

    keep = filters.parse(where) if where else (lambda _r: True)
    rows = con.execute("SELECT receipt FROM receipts ORDER BY started_at NULLS LAST, id").fetchall()
    return [Receipt.model_validate(r) for r in (json.loads(row[0]) for row in rows) if keep(r)]


def _usable(r: Receipt) -> str | None:
    if r.status not in ("succeeded", "imported"):
        return f"status {r.status}"
    return None


# ------------------------------------------------------------------------------------------------ law
def _law_inputs(r: Receipt) -> tuple[float, float, float] | str:
    """(N_tot, S, G) of a receipt, or why they are unknown."""
    m = r.workload.model
    n_tot = m.total_params
    if not n_tot:
        return "no workload.model.total_params"
    experts, top_k = m.num_experts or 1, m.top_k or 1
    if top_k > experts:
        return f"top_k {top_k} > num_experts {experts}"
    g = m.granularity
    if g is None and m.ffn_hidden and m.expert_hidden:
        g = m.ffn_hidden / m.expert_hidden
    if g is None:
        if experts > 1:
            return "no workload.model.granularity (nor ffn_hidden and expert_hidden)"
        g = 1.0
    return float(n_tot), 1.0 - top_k / experts, float(g)


def _train_losses(con: Any, rid: str) -> tuple[np.ndarray, np.ndarray]:
    rows = con.execute(
        "SELECT tokens, loss FROM steps WHERE receipt_id = ? AND loss IS NOT NULL AND tokens IS NOT NULL "
        "AND isfinite(loss) AND NOT coalesce(skipped, false) ORDER BY step", [rid]).fetchall()
    if not rows:
        return np.empty(0), np.empty(0)
    arr = np.array(rows, dtype=float)
    return arr[:, 0], arr[:, 1]


def _val_losses(con: Any, r: Receipt) -> tuple[np.ndarray, np.ndarray]:
    rows = con.execute(
        "SELECT step, tokens, value FROM evals WHERE receipt_id = ? AND split = 'val' AND source IS NULL "
        "AND metric = 'loss' AND value IS NOT NULL AND isfinite(value) ORDER BY step", [r.id]).fetchall()
    per_step = r.workload.batch.tokens_per_step
    out = []
    for step, tokens, value in rows:
        t = tokens if tokens is not None else (step * per_step if per_step else None)
        if t:
            out.append((float(t), float(value)))
    if not out:
        return np.empty(0), np.empty(0)
    arr = np.array(out)
    return arr[:, 0], arr[:, 1]


def _at(tokens: np.ndarray, losses: np.ndarray, t: float, kind: str) -> float | None:
    if tokens.size == 0 or t > tokens.max() * (1 + 1e-9) or t < tokens.min() * (1 - MATCH_WINDOW):
        return None
    if kind == "train":
        near = np.abs(tokens - t) <= MATCH_WINDOW * t
        if not near.any():
            near = np.abs(tokens - t) == np.abs(tokens - t).min()
        return float(losses[near].mean())
    if t <= tokens.min():
        return float(losses[0])
    return float(np.interp(math.log(t), np.log(tokens), losses))


def law_data(con: duckdb.DuckDBPyConnection, receipts: Sequence[Receipt], loss: str = "train",
             at_tokens: Sequence[float] | None = None) -> tuple[Data, list[str], list[str], list[Skipped]]:
    """Observations for :func:`ledger.planning.fitting.fit_law`, the label and the id of each receipt used,
    and the receipts skipped."""
    rows: list[tuple[float, float, float, float, float, int]] = []
    labels: list[str] = []
    ids: list[str] = []
    skipped: list[Skipped] = []
    for r in receipts:
        why = _usable(r)
        inputs = _law_inputs(r)
        if why is None and isinstance(inputs, str):
            why = inputs
        if why is not None:
            skipped.append(Skipped(label(r), why))
            continue
        assert not isinstance(inputs, str)
        n_tot, s, g = inputs
        if loss == "val":
            tokens, losses = _val_losses(con, r)
            if tokens.size == 0:
                skipped.append(Skipped(label(r), "no validation loss (split=val, whole split, metric=loss)"))
                continue
        else:
            tokens, losses = _train_losses(con, r.id)
            if tokens.size == 0:
                final, total = r.summary.final_loss, r.summary.tokens
                if final is None or not total:
                    skipped.append(Skipped(label(r), "no training loss with token counts"))
                    continue
                tokens, losses = np.array([float(total)]), np.array([float(final)])
        points: list[tuple[float, float]] = []
        if at_tokens:
            for t in at_tokens:
                v = _at(tokens, losses, float(t), loss)
                if v is not None:
                    points.append((float(t), v))
            if not points:
                skipped.append(Skipped(label(r), f"never reached the matched token counts (ran {tokens.max():.4g})"))
                continue
        elif loss == "val":
            points.append((float(tokens[-1]), float(losses[-1])))
        else:
            tail = tokens >= tokens.max() * (1 - TRAIN_TAIL)
            points.append((float(tokens.max()), float(losses[tail].mean())))
        index = len(labels)
        labels.append(label(r))
        ids.append(r.id)
        rows += [(n_tot, t, s, g, v, index) for t, v in points]
    if not rows:
        return Data.of([], [], [], [], [], np.empty(0, dtype=np.int64)), labels, ids, skipped
    a = np.array(rows, dtype=float)
    data = Data.of(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5].astype(np.int64))
    return data, labels, ids, skipped


# ----------------------------------------------------------------------------------------------- perf
@dataclass(frozen=True)
class PerfObs:
    """One receipt as the performance model sees it."""

    id: str
    label: str
    geometry: Geometry
    plan: Plan
    hardware: Hardware
    step_s: float
    """Measured median step time after warm-up (summary.step_time_s)."""
    flops_per_token: float
    """Model FLOPs per token (DESIGN.md), from the receipt's active parameters."""
    tokens_per_step: float

    @property
    def world(self) -> float:
        return float(self.plan.world[0])

    @property
    def mfu(self) -> float:
        """Measured MFU against the profile's peak for the receipt's precision."""
        peak = self.hardware.peak(str(self.plan.precision[0]))
        return self.tokens_per_step * self.flops_per_token / (self.step_s * self.world * peak)


def perf_obs(receipts: Sequence[Receipt], hardware: Hardware | None = None,
             extra: dict[str, Hardware] | None = None) -> tuple[list[PerfObs], list[Skipped]]:
    """Receipts with a geometry, a parallel plan, a known hardware profile and a measured step time."""
    out: list[PerfObs] = []
    skipped: list[Skipped] = []
    for r in receipts:
        got = _perf_one(r, hardware, extra)
        if isinstance(got, str):
            skipped.append(Skipped(label(r), got))
        else:
            out.append(got)
    return out, skipped


def _perf_one(r: Receipt, hardware: Hardware | None, extra: dict[str, Hardware] | None) -> PerfObs | str:
    why = _usable(r)
    if why:
        return why
    w = r.workload
    m, par, batch = w.model, w.parallelism, w.batch
    need = {"layers": m.layers, "hidden": m.hidden, "ffn_hidden": m.ffn_hidden,
            "sequence_length": w.data.sequence_length, "vocab_size": w.task.vocab_size,
            "global_batch": batch.global_batch, "step_time_s": r.summary.step_time_s}
    missing = [k for k, v in need.items() if not v]
    if missing:
        return f"no {', '.join(missing)}"
    # all present (checked just above): the narrowed names the type checker follows
    layers, hidden, ffn_hidden = int(m.layers or 0), int(m.hidden or 0), int(m.ffn_hidden or 0)
    seq_len, vocab, gb = int(w.data.sequence_length or 0), int(w.task.vocab_size or 0), int(batch.global_batch or 0)
    hw = hardware or for_receipt(r, extra)
    if hw is None:
        return f"no hardware profile for {r.stack.hardware.gpu_model!r} (give --hardware NAME or a profile file)"
    experts, top_k = m.num_experts or 1, m.top_k or 1
    g = m.granularity or (ffn_hidden / m.expert_hidden if m.expert_hidden else 1.0)
    geom = Geometry.of(
        layers=layers, hidden=hidden, heads=m.heads or max(1, hidden // 128),
        ffn_hidden=ffn_hidden, experts=experts, top_k=top_k, granularity=g, seq_len=seq_len, vocab=vocab,
        moe_layers=m.moe_layers if m.moe_layers is not None else (layers if experts > 1 else 0),
        shared_experts=m.shared_experts or 0,
    )
    tp, pp, ep = par.tp or 1, par.pp or 1, par.ep or 1
    world = par.world_size or (tp * pp * (par.dp or 1))
    dp = par.dp or max(1, world // (tp * pp))
    mb = batch.micro_batch or max(1, gb // dp)
    device = w.device
    grouped = w.kernels.grouped_gemm
    if grouped is None:
        grouped = device != "cpu" and hw.grouped_gemm
    precision = w.precision.compute or ("fp32" if device == "cpu" else "bf16")
    plan = Plan.of(tp=tp, pp=pp, ep=ep, dp=dp, micro_batch=mb, global_batch=gb, grouped=int(bool(grouped)),
                   precision=precision)
    active = m.active_params
    fpt = (model_flops_per_token(float(active), layers, hidden, seq_len) if active
           else float(geom.flops_per_token[0]))
    tokens = batch.tokens_per_step or gb * seq_len
    return PerfObs(r.id, label(r), geom, plan, hw, float(r.summary.step_time_s or 0), float(fpt), float(tokens))


# -------------------------------------------------------------------------------------------- goodput
def goodput_from(ledger: Ledger, spec: str) -> tuple[float, str]:
    """Measured goodput of a logical run (REF: any attempt's id, prefix or name) or of a group
    (TAG=VALUE: productive time summed over its runs / their wall time summed). Returns (goodput, what)."""
    from ledger.analyses.goodput_index import goodput_of_run
    from ledger.analyses.groups import group_runs
    from ledger.errors import BadInput
    from ledger.store import index
    from ledger.store.attempts import logical_run

    with index.reader(ledger) as con:
        runs = group_runs(con, spec) if "=" in spec else [logical_run(con, spec)]
        measured = [goodput_of_run(con, run) for run in runs]
    wall = sum(g.wall_s for g in measured)
    if wall <= 0:
        raise BadInput(f"--goodput-from {spec}: no wall time recorded, so no goodput")
    value = sum(g.productive_s for g in measured) / wall
    first = measured[0].name or measured[0].run_id[:12]
    what = f"group {spec} ({len(measured)} runs)" if "=" in spec else f"run {first}"
    return value, f"measured goodput of {what}: {100 * value:.1f}% of {wall:.4g} s wall time"
