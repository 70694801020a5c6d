"""Calibration of the performance model on receipts, and how well it predicts held-out ones.

Per hardware profile, the four factors of :data:`ledger.planning.perf.FACTORS` (log scale) minimise
sum rho(log predicted - log measured step time) + ridge x sum log(factor)^2 (scipy.optimize.least_squares,
a soft-L1 robust loss of scale 0.1 on the log residuals, numeric Jacobian): the small ridge keeps a factor the
receipts barely exercise near 1. A factor that changes no receipt's predicted step time by 1% or more is left
at 1 and reported. Before fitting, the design is checked (:mod:`ledger.planning.design`): distinct
(geometry, plan) points per free factor and collinearity of the factors' sensitivities; a design that cannot
identify them is refused with the runs that would.

The run is the unit: a receipt's step time is its median after warm-up, and receipts of the same (geometry,
plan) are replicates of one design point, whose measured step time is their median. Held-out error:
leave-one-point-out (calibrate on the other points, predict the one left out, all its replicates with it, so
no replicate of a point helps predict it), with its n = points; MAPE of step time over points, which is also
the MAPE of tokens/s-based MFU's reciprocal, and over receipts (each against its point's held-out
prediction: this one includes the run-to-run noise). Without replicates, points are receipts and this is
leave-one-out. Rank agreement of predicted and measured MFU over points: Spearman and Kendall.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from ledger.planning.design import Check, check_perf
from ledger.planning.errors import TooFewReceipts
from ledger.planning.geometry import concat
from ledger.planning.observations import PerfObs
from ledger.planning.perf import FACTORS, NOMINAL, Calibration, concat_plans, predict
from ledger.planning.ranks import discordant_pairs, kendall, spearman

Array = NDArray[np.float64]
MIN_PERF_RECEIPTS = 3
"""Receipts on one hardware profile needed to calibrate (and leave one out)."""
RIDGE = 1e-4
SENSITIVITY = 0.01
ROBUST_SCALE = 0.1
"""Log residual (about 10%) beyond which the soft-L1 loss grows linearly, so one odd receipt does not steer
the calibration."""


@dataclass
class PerfFit:
    """The calibrated performance model of one hardware profile."""

    hardware: str
    calibration: Calibration
    fixed: dict[str, str]
    rows: list[dict[str, Any]]
    metrics: dict[str, float]
    """MAPE (nominal, in-sample, held out: leave-one-out over ``receipts`` = n) and rank correlations."""
    notes: list[str] = field(default_factory=list)
    design: Check | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "calibration": self.calibration.to_dict(), "fixed": self.fixed,
                "metrics": self.metrics, "receipts": self.rows, "notes": self.notes,
                "design": self.design.to_dict() if self.design else None}


class _Batch:
    def __init__(self, obs: list[PerfObs]) -> None:
        self.obs = obs
        self.geometry = concat([o.geometry for o in obs])
        self.plan = concat_plans([o.plan for o in obs])
        self.hw = obs[0].hardware
        self.y = np.log([o.step_s for o in obs])

    def log_step(self, phi: Array) -> Array:
        return np.log(predict(self.geometry, self.plan, self.hw, Calibration.from_vector(phi)).step_s)

    def jacobian(self, phi: Array, h: float = 1e-4) -> tuple[Array, Array]:
        f0 = self.log_step(phi)
        J = np.empty((f0.size, phi.size))
        for i in range(phi.size):
            d = phi.copy()
            d[i] += h
            J[:, i] = (self.log_step(d) - f0) / h
        return f0, J


def _fit(batch: _Batch, free: NDArray[np.int64], mask: Array, phi0: Array, ridge: float = RIDGE) -> Array:
    """Least squares of the free log factors on the receipts where ``mask`` is 1."""
    rows = np.where(mask > 0)[0]
    root = np.sqrt(ridge)

    def fun(x: Array) -> Array:
        phi = phi0.copy()
        phi[free] = x
        r = (batch.log_step(phi) - batch.y)[rows]
        return np.concatenate([r, root * x])

    res = least_squares(fun, phi0[free], bounds=(-5.0, 5.0), loss="soft_l1", f_scale=ROBUST_SCALE,
                        method="trf", max_nfev=200)
    out = phi0.copy()
    out[free] = res.x
    return out


def _mape(pred: Array, meas: Array) -> float:
    return float(100 * np.mean(np.abs(pred - meas) / meas))


def fit_profile(obs: list[PerfObs], ridge: float = RIDGE) -> PerfFit:
    """Calibrate on receipts of one hardware profile (at least :data:`MIN_PERF_RECEIPTS`)."""
    batch = _Batch(obs)
    n = len(obs)
    zero = np.zeros(len(FACTORS))
    _, J = batch.jacobian(zero)
    fixed = {FACTORS[i]: "no receipt's predicted step time depends on it by 1% or more; left at 1"
             for i in range(len(FACTORS)) if float(np.abs(J[:, i]).max()) < SENSITIVITY}
    free = np.array([i for i, f in enumerate(FACTORS) if f not in fixed], dtype=np.int64)
    point = _points(obs)
    n_points = int(point.max()) + 1
    design = check_perf(n_points, J[:, free], [FACTORS[i] for i in free], ref=obs[0].id[:12])
    design.raise_if_degenerate(f"the performance model of {batch.hw.name} on {n} receipts ({describe(obs)})")
    ones = np.ones(n)
    phi = _fit(batch, free, ones, zero, ridge) if free.size else zero
    cal = Calibration.from_vector(phi)
    nominal = predict(batch.geometry, batch.plan, batch.hw, NOMINAL)
    fitted = predict(batch.geometry, batch.plan, batch.hw, cal)
    held = np.full(n, np.nan)
    for j in range(n_points):
        out = point == j
        phi_j = _fit(batch, free, np.where(out, 0.0, 1.0), phi, ridge) if free.size else zero
        held[out] = np.exp(batch.log_step(phi_j)[out])
    meas = np.exp(batch.y)
    mfu = np.array([o.mfu for o in obs])
    # predicted MFU: the same model FLOPs as the measured one, over the predicted step time
    pred_mfu = mfu * meas / fitted.step_s
    held_mfu = mfu * meas / held
    first = np.array([int(np.flatnonzero(point == j)[0]) for j in range(n_points)])
    p_meas = np.array([float(np.median(meas[point == j])) for j in range(n_points)])
    p_mfu = np.array([float(np.median(mfu[point == j])) for j in range(n_points)])
    p_held, p_fit, p_nom = held[first], fitted.step_s[first], nominal.step_s[first]
    metrics = {
        "receipts": float(n),
        "points": float(n_points),
        "mape_nominal_pct": _mape(p_nom, p_meas),
        "mape_in_sample_pct": _mape(p_fit, p_meas),
        "mape_held_out_pct": _mape(p_held, p_meas),
        "held_out_n": float(n_points),
        "mape_held_out_receipts_pct": _mape(held, meas),
        "spearman_in_sample": spearman(p_mfu * p_meas / p_fit, p_mfu),
        "kendall_in_sample": kendall(p_mfu * p_meas / p_fit, p_mfu),
        "spearman_held_out": spearman(p_mfu * p_meas / p_held, p_mfu),
        "kendall_held_out": kendall(p_mfu * p_meas / p_held, p_mfu),
        "spearman_nominal": spearman(p_mfu * p_meas / p_nom, p_mfu),
        "kendall_nominal": kendall(p_mfu * p_meas / p_nom, p_mfu),
    }
    if n_points < n:  # the spread of replicates: what no model of the mean step time can predict
        spread = [float(meas[point == j].max() / meas[point == j].min() - 1) for j in range(n_points)
                  if (point == j).sum() > 1]
        metrics["replicated_points"] = float(len(spread))
        metrics["replicate_spread_max_pct"] = 100 * max(spread)
        metrics["replicate_spread_median_pct"] = 100 * float(np.median(spread))
    rows = []
    for i, o in enumerate(obs):
        rows.append({
            "id": o.id, "label": o.label, "geometry": o.geometry.row(0), "plan": o.plan.row(0),
            "measured_step_s": float(meas[i]), "predicted_step_s": float(fitted.step_s[i]),
            "held_out_step_s": float(held[i]), "nominal_step_s": float(nominal.step_s[i]),
            "measured_mfu": float(mfu[i]), "predicted_mfu": float(pred_mfu[i]),
            "held_out_mfu": float(held_mfu[i]), "predicted_memory_bytes": float(fitted.memory_bytes[i]),
        })
    notes = []
    bad = discordant_pairs(p_mfu * p_meas / p_held, p_mfu)
    if bad:
        notes.append("held-out MFU ranking swaps " + "; ".join(
            f"{obs[first[a]].label} / {obs[first[b]].label}" for a, b in bad))
    return PerfFit(batch.hw.name, cal, fixed, rows, metrics, notes, design)


def held_out_phrase(metrics: dict[str, float]) -> str:
    """How the held-out error was measured: "leave-one-out, n = 12", or with replicates "leave-one-point-out,
    n = 12 points of 24 receipts"."""
    n, points = int(metrics["receipts"]), int(metrics.get("points", metrics["receipts"]))
    return f"leave-one-out, n = {n}" if points == n else f"leave-one-point-out, n = {points} points of {n} receipts"


def _points(obs: list[PerfObs]) -> NDArray[np.int64]:
    """The design point of each receipt: receipts of the same (geometry, plan) share one, numbered in order of
    first appearance."""
    seen: dict[tuple[Any, ...], int] = {}
    out = []
    for o in obs:
        key = (tuple(round(v, 9) for v in o.geometry.row(0).values() if isinstance(v, int | float)),
               tuple(str(v) for v in o.plan.row(0).values()))
        out.append(seen.setdefault(key, len(seen)))
    return np.array(out, dtype=np.int64)


def fit_perf(obs: list[PerfObs], ridge: float = RIDGE) -> list[PerfFit]:
    """One calibration per hardware profile with enough receipts."""
    groups: dict[str, list[PerfObs]] = {}
    for o in obs:
        groups.setdefault(o.hardware.name, []).append(o)
    enough = {k: v for k, v in groups.items() if len(v) >= MIN_PERF_RECEIPTS}
    if not enough:
        counts = ", ".join(f"{k}: {len(v)}" for k, v in groups.items()) or "none"
        raise TooFewReceipts(
            f"too few receipts to fit the performance model: {len(obs)} usable ({counts}); at least "
            f"{MIN_PERF_RECEIPTS} on one hardware profile are needed; {describe(obs)}"
        )
    return [fit_profile(v, ridge) for v in enough.values()]


def describe(obs: list[PerfObs]) -> str:
    """Which geometry and plan dimensions vary among the receipts."""
    if not obs:
        return "varying: nothing (no usable receipt)"
    keys = ("layers", "hidden", "experts", "top_k", "granularity", "seq_len")
    pkeys = ("tp", "pp", "ep", "dp", "micro_batch", "global_batch")
    vary: list[str] = []
    const: list[str] = []
    for k in keys:
        vals = sorted({float(getattr(o.geometry, k)[0]) for o in obs})
        (vary if len(vals) > 1 else const).append(f"{k} ({len(vals)} values)" if len(vals) > 1 else f"{k}={vals[0]:g}")
    for k in pkeys:
        vals = sorted({float(getattr(o.plan, k)[0]) for o in obs})
        (vary if len(vals) > 1 else const).append(f"{k} ({len(vals)} values)" if len(vals) > 1 else f"{k}={vals[0]:g}")
    return f"varying: {', '.join(vary) or 'nothing'}; constant: {', '.join(const)}"
