"""Robust non-linear least squares of the scaling law (scipy.optimize.least_squares).

- Residuals in log space, r = log L_pred - log L_obs, under a Huber loss (delta: ``huber_delta``, or
  "auto": 1.345 x the robust scale (MAD) of the residuals of a first least-squares fit, the usual
  95%-efficiency tuning), solved by scipy's trust-region reflective method with the analytic Jacobian;
  coefficients in log space with each term's variables centred on the data, so a, alpha and the others are
  not strongly correlated; exponents kept in [0, 3]. Everything is vectorised over observations.
- Multiple initialisations (the prior law, then random exponents with the coefficients that fit best for
  them); the lowest Huber objective wins.
- Before fitting, the design is checked (:mod:`ledger.planning.design`): distinct design points per free
  parameter, the range of each variable, collinearity. A design that cannot identify the law is refused with
  the runs that would make it identifiable, as commands. A variable that does not vary fixes its exponents
  (and a term whose variables are all constant, which merges with e), and the fit says so.
- After fitting, a term the fit drives to zero is dropped and its exponents fixed (they have no effect).
- 95% intervals from a case bootstrap over receipts (percentiles; the bootstrap vectors are kept, so that
  `ledger plan --law-from` resamples them with their correlations); held-out error from k-fold
  cross-validation over receipts (leave-one-out with 5 receipts or fewer), with its n.
- The support: the range of N_tot, D, S and G of the data, which `ledger plan` uses as its frontier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from ledger.planning.design import Check, check_law
from ledger.planning.errors import TooFewReceipts
from ledger.planning.law import (
    COEFFICIENTS,
    DEFAULT_LAW,
    EXPONENTS,
    FORM,
    PARAMS,
    TERM_VARIABLES,
    TERMS,
    VARIABLES,
    Law,
)

Array = NDArray[np.float64]

MIN_RECEIPTS = 4
"""Fewer receipts than this are refused: nothing would be left to check a fit against."""
PRIORITY = ("eta", "delta", "gamma", "j", "lam", "beta", "alpha", "c", "b", "a")
"""Order in which a near-collinear direction's parameter is fixed (the hardest to identify first)."""
EXP_BOUNDS = (0.0, 3.0)
LOG_BOUNDS = (-60.0, 60.0)
REFINE = 6
"""Random starts refined by the solver (the most promising of ``inits`` screened by their objective)."""
RANK_TOL = 1e-6
"""Relative singular value of the normalised Jacobian below which a direction is not identifiable."""
VARIABLE_NAMES = ("N_tot", "D", "S", "G")
_IDX = {p: i for i, p in enumerate(PARAMS)}


@dataclass(frozen=True)
class Data:
    """Observations: one row per (receipt, token count)."""

    n_tot: Array
    d: Array
    s: Array
    g: Array
    loss: Array
    group: NDArray[np.int64]
    """Receipt index of each row (bootstrap and cross-validation resample receipts, not rows)."""

    @classmethod
    def of(cls, n_tot: Any, d: Any, s: Any, g: Any, loss: Any, group: Any = None) -> Data:
        n_, d_, s_, g_, l_ = (np.array(c, dtype=float) for c in np.broadcast_arrays(
            *(np.asarray(x, dtype=float) for x in (n_tot, d, s, g, loss))))
        grp = np.arange(n_.shape[0]) if group is None else np.asarray(group, dtype=np.int64)
        return cls(n_tot=n_, d=d_, s=s_, g=g_, loss=l_, group=grp)

    def __len__(self) -> int:
        return int(self.loss.shape[0])

    @property
    def receipts(self) -> int:
        return int(np.unique(self.group).size)

    def logs(self) -> Array:
        """Columns ln N_tot, ln D, ln(1 - S), ln G."""
        return np.column_stack([np.log(self.n_tot), np.log(self.d), np.log1p(-self.s), np.log(self.g)])

    def variation(self) -> dict[str, tuple[int, float, float]]:
        """Per variable: (distinct values, min, max)."""
        out = {}
        for name, col in zip(VARIABLE_NAMES, (self.n_tot, self.d, self.s, self.g), strict=True):
            out[name] = (int(np.unique(np.round(col, 12)).size), float(col.min()), float(col.max()))
        return out

    def describe(self) -> str:
        """'varying: S (3 values, 0.5..0.875), G (2 values, 1..4); constant: N_tot = 4.4e+05, D = 4.1e+04'."""
        if len(self) == 0:
            return "no usable receipt (none matched, or none had a loss, total parameters and top-k/experts)"
        var = self.variation()
        varying = [f"{k} ({n} values, {lo:.4g}..{hi:.4g})" for k, (n, lo, hi) in var.items() if n > 1]
        const = [f"{k} = {lo:.4g}" for k, (n, lo, _) in var.items() if n <= 1]
        parts = [f"varying: {', '.join(varying) or 'nothing'}"]
        if const:
            parts.append(f"constant: {', '.join(const)}")
        return "; ".join(parts)


@dataclass
class LawFit:
    """A fitted law with its uncertainty and the parameters the data could not identify."""

    law: Law
    free: list[str]
    fixed: dict[str, str]
    """Fixed parameter -> why."""
    ci: dict[str, tuple[float, float]]
    """95% bootstrap interval of each parameter (a point for fixed ones)."""
    in_sample: dict[str, float]
    held_out: dict[str, float]
    """rmse_log, mape_pct, max_ape_pct, folds and n (observations predicted while held out)."""
    n_observations: int
    n_receipts: int
    variation: str
    huber_delta: float
    inits: int
    bootstrap: int
    notes: list[str] = field(default_factory=list)
    prior: Law = DEFAULT_LAW
    samples: Array | None = None
    """The bootstrap parameter vectors (bootstrap x 11)."""
    support: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Range of each variable (N_tot, D, S, G) in the data."""
    design: Check | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "law": {
                p: {
                    "value": getattr(self.law, p),
                    "ci95": list(self.ci[p]),
                    "fixed": p in self.fixed,
                    **({"why_fixed": self.fixed[p]} if p in self.fixed else {}),
                }
                for p in PARAMS
            },
            "form": FORM,
            "free": self.free,
            "fixed": self.fixed,
            "in_sample": self.in_sample,
            "held_out": self.held_out,
            "observations": self.n_observations,
            "receipts": self.n_receipts,
            "variation": self.variation,
            "support": {k: list(v) for k, v in self.support.items()},
            "design": self.design.to_dict() if self.design else None,
            "huber_delta": self.huber_delta,
            "inits": self.inits,
            "bootstrap": self.bootstrap,
            "samples": self.samples.tolist() if self.samples is not None else [],
            "notes": self.notes,
        }


# -------------------------------------------------------------------------------- the model in log space
class _Model:
    """log L as a log-sum-exp of five terms, with centred variables; theta = PARAMS with coefficients
    replaced by the log of the term's value at the centre."""

    def __init__(self, data: Data) -> None:
        X = data.logs()
        self.center = X.mean(axis=0)
        self.Xc = X - self.center
        self.y = np.log(data.loss)

    def sub(self, rows: NDArray[np.int64]) -> _Model:
        """The same model (same centre, so theta means the same) on some rows, repeats allowed."""
        out = object.__new__(_Model)
        out.center, out.Xc, out.y = self.center, self.Xc[rows], self.y[rows]
        return out

    def to_theta(self, law: Law) -> Array:
        cN, cD, cS, cG = self.center
        v = law.vector()
        th = v.copy()

        def lg(x: float) -> float:
            return math.log(x) if x > 0 else LOG_BOUNDS[0]

        th[_IDX["a"]] = lg(law.a) - law.alpha * cN
        th[_IDX["b"]] = lg(law.b) - law.beta * cD
        th[_IDX["c"]] = lg(law.c) - law.lam * cS
        th[_IDX["j"]] = lg(law.j) - law.delta * cS - law.gamma * cN - law.eta * cG
        th[_IDX["e"]] = lg(law.e)
        return _clip(th)

    def to_law(self, th: Array) -> Law:
        cN, cD, cS, cG = self.center
        v = th.copy()
        v[_IDX["a"]] = math.exp(th[_IDX["a"]] + th[_IDX["alpha"]] * cN)
        v[_IDX["b"]] = math.exp(th[_IDX["b"]] + th[_IDX["beta"]] * cD)
        v[_IDX["c"]] = math.exp(th[_IDX["c"]] + th[_IDX["lam"]] * cS)
        v[_IDX["j"]] = math.exp(
            th[_IDX["j"]] + th[_IDX["delta"]] * cS + th[_IDX["gamma"]] * cN + th[_IDX["eta"]] * cG
        )
        v[_IDX["e"]] = math.exp(th[_IDX["e"]])
        return Law.from_vector(v)

    def terms(self, th: Array, Xc: Array | None = None) -> Array:
        X = self.Xc if Xc is None else Xc
        i = _IDX
        return np.column_stack([
            th[i["a"]] - th[i["alpha"]] * X[:, 0],
            th[i["b"]] - th[i["beta"]] * X[:, 1],
            th[i["c"]] - th[i["lam"]] * X[:, 2],
            th[i["j"]] - th[i["delta"]] * X[:, 2] - th[i["gamma"]] * X[:, 0] - th[i["eta"]] * X[:, 3],
            np.full(X.shape[0], th[i["e"]]),
        ])

    def predict_log(self, th: Array) -> Array:
        t = self.terms(th)
        m = t.max(axis=1)
        out: Array = m + np.log(np.exp(t - m[:, None]).sum(axis=1))
        return out

    def jacobian(self, th: Array) -> tuple[Array, Array]:
        """(log L_pred, d log L_pred / d theta) at theta."""
        t = self.terms(th)
        m = t.max(axis=1)
        w = np.exp(t - m[:, None])
        tot = w.sum(axis=1)
        pred = m + np.log(tot)
        p = w / tot[:, None]
        X = self.Xc
        J = np.empty((t.shape[0], len(PARAMS)))
        i = _IDX
        J[:, i["a"]] = p[:, 0]
        J[:, i["alpha"]] = -p[:, 0] * X[:, 0]
        J[:, i["b"]] = p[:, 1]
        J[:, i["beta"]] = -p[:, 1] * X[:, 1]
        J[:, i["c"]] = p[:, 2]
        J[:, i["lam"]] = -p[:, 2] * X[:, 2]
        J[:, i["j"]] = p[:, 3]
        J[:, i["delta"]] = -p[:, 3] * X[:, 2]
        J[:, i["gamma"]] = -p[:, 3] * X[:, 0]
        J[:, i["eta"]] = -p[:, 3] * X[:, 3]
        J[:, i["e"]] = p[:, 4]
        return pred, J


_EXP_IDX = np.array([_IDX[p] for p in EXPONENTS])
_COEF_IDX = np.array([_IDX[p] for p in COEFFICIENTS])


def _clip(th: Array) -> Array:
    out = th.copy()
    out[_EXP_IDX] = np.clip(out[_EXP_IDX], *EXP_BOUNDS)
    out[_COEF_IDX] = np.clip(out[_COEF_IDX], *LOG_BOUNDS)
    return out


def huber(r: Array, delta: float) -> Array:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def _bounds(free: NDArray[np.int64]) -> tuple[Array, Array]:
    lo = np.array([EXP_BOUNDS[0] if PARAMS[i] in EXPONENTS else LOG_BOUNDS[0] for i in free], dtype=float)
    hi = np.array([EXP_BOUNDS[1] if PARAMS[i] in EXPONENTS else LOG_BOUNDS[1] for i in free], dtype=float)
    return lo, hi


def _solve(model: _Model, th0: Array, free: NDArray[np.int64], delta: float,
           max_nfev: int = 200) -> tuple[Array, float]:
    """Robust non-linear least squares of the free parameters (scipy's trust-region reflective solver with
    a Huber loss of threshold ``delta`` on log residuals, bounds on exponents); returns (theta, objective)."""
    base = _clip(th0)
    if free.size == 0:
        return base, float(huber(model.predict_log(base) - model.y, delta).sum())
    lo, hi = _bounds(free)

    def fun(x: Array) -> Array:
        th = base.copy()
        th[free] = x
        out: Array = model.predict_log(th) - model.y
        return out

    def jac(x: Array) -> Array:
        th = base.copy()
        th[free] = x
        _, J = model.jacobian(th)
        out: Array = J[:, free]
        return out

    x0 = np.clip(base[free], lo, hi)
    try:
        res = least_squares(fun, x0, jac=jac, bounds=(lo, hi), loss="huber" if delta < 1e5 else "linear",
                            f_scale=min(delta, 1e5), method="trf", max_nfev=max_nfev, x_scale="jac")
    except (ValueError, np.linalg.LinAlgError):
        return base, math.inf
    th = base.copy()
    th[free] = res.x
    obj = float(huber(np.asarray(res.fun), delta).sum())
    return th, obj if math.isfinite(obj) else math.inf


# ------------------------------------------------------------------------------------------ the fit
def _structural(data: Data) -> dict[str, str]:
    """Parameters no variation in the data can identify."""
    var = data.variation()
    constant = {k for k, (n, _, _) in var.items() if n <= 1}
    fixed: dict[str, str] = {}
    for exp, v in VARIABLES.items():
        if v in constant:
            fixed[exp] = f"{v} does not vary in the data"
    for coef, vs in TERM_VARIABLES.items():
        if vs and all(v in constant for v in vs):
            verb = "does" if len(vs) == 1 else "do"
            fixed[coef] = f"{' and '.join(vs)} {verb} not vary: the term is a constant that e absorbs"
    return fixed


def _linear_coefficients(model: _Model, th: Array, free: NDArray[np.int64]) -> Array:
    """Theta with the free coefficients set by least squares of the relative error, the exponents held:
    with exponents fixed the law is linear in its coefficients (a variable-projection start)."""
    t = model.terms(th)
    basis = np.exp(t - th[_COEF_IDX][None, :])  # each term at coefficient 1 (internal, centred)
    loss = np.exp(model.y)
    free_coefs = [k for k, i in enumerate(_COEF_IDX) if i in set(free.tolist())]
    if not free_coefs:
        return th
    fixed_part = sum((np.exp(t[:, k]) for k in range(len(_COEF_IDX)) if k not in free_coefs), np.zeros(loss.size))
    A = basis[:, free_coefs] / loss[:, None]
    b = (loss - fixed_part) / loss
    w, *_ = np.linalg.lstsq(A, b, rcond=None)
    floor = 1e-4 * float(loss.min())
    out = th.copy()
    for k, v in zip(free_coefs, w, strict=True):
        out[_COEF_IDX[k]] = math.log(max(float(v), floor))
    return _clip(out)


def _random_theta(model: _Model, base: Array, free: NDArray[np.int64], rng: np.random.Generator) -> Array:
    """Random free exponents, then the coefficients that fit best with them."""
    th = base.copy()
    for i in free:
        if PARAMS[i] in EXPONENTS:
            th[i] = rng.uniform(0.02, 1.0)
    return _linear_coefficients(model, th, free)


def _shares(model: _Model, th: Array) -> dict[str, float]:
    """The largest share of the predicted loss each term takes over the observations."""
    t = model.terms(th)
    p = np.exp(t - t.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return {c: float(p[:, k].max()) for k, c in enumerate(COEFFICIENTS)}


def _rank_deficient(model: _Model, th: Array, free: NDArray[np.int64]) -> str | None:
    """The free parameter of the least identifiable direction, if the Jacobian is (near) rank-deficient."""
    _, J = model.jacobian(th)
    Jf = J[:, free]
    norms = np.linalg.norm(Jf, axis=0)
    scale = max(float(norms.max()), 1e-300)
    dead = np.where(norms < 1e-8 * scale)[0]
    if dead.size:
        return PARAMS[free[dead[0]]]
    _, sv, vt = np.linalg.svd(Jf / norms, full_matrices=False)
    if sv[-1] < RANK_TOL * sv[0] or Jf.shape[0] < Jf.shape[1]:
        v = np.abs(vt[-1])
        # among the parameters that carry the weak direction, fix the one hardest to identify first
        order = [PARAMS[free[i]] for i in np.argsort(-v) if PARAMS[free[i]] != "e"]
        carriers = [PARAMS[free[i]] for i in np.where(v > 0.3 * v.max())[0] if PARAMS[free[i]] != "e"]
        return min(carriers, key=PRIORITY.index) if carriers else (order[0] if order else None)
    return None


def _distinct_optima(optima: list[tuple[float, Array]], best: float, free: NDArray[np.int64],
                     keep: int = 1, within: float = 3.0) -> list[Array]:
    """Up to ``keep`` local optima other than the best, within a few times its objective, that differ
    from it and from each other (in the free parameters)."""
    out: list[Array] = []
    ref = [min(optima, key=lambda o: o[0])[1]]
    for obj, th in sorted(optima, key=lambda o: o[0]):
        if len(out) >= keep or obj > within * best + 1e-12:
            break
        if all(float(np.abs(th[free] - r[free]).max()) > 0.05 for r in ref):
            out.append(th)
            ref.append(th)
    return out


def _errors(pred_log: Array, y: Array) -> dict[str, float]:
    r = pred_log - y
    pct = np.abs(np.expm1(r))
    return {"rmse_log": float(np.sqrt(np.mean(r * r))), "mape_pct": float(100 * pct.mean()),
            "max_ape_pct": float(100 * pct.max()), "n": float(r.size)}


def fit_law(
    data: Data,
    *,
    prior: Law = DEFAULT_LAW,
    inits: int = 24,
    bootstrap: int = 200,
    folds: int = 5,
    huber_delta: float | None = None,
    seed: int = 0,
    fixed: dict[str, float] | None = None,
    ref: str = "REF",
) -> LawFit:
    """Fit the law to ``data``; see the module docstring. ``fixed`` pins parameters to given values;
    ``ref`` names a receipt in the commands of a refusal. The solver's linear algebra (an SVD of a
    400 x 11 Jacobian per step) runs on one BLAS thread: threads cost more than such small products, and
    on a busy machine far more (:mod:`ledger.analyses.blas`)."""
    from ledger.analyses.blas import one_thread

    with one_thread():
        return _fit_law(data, prior=prior, inits=inits, bootstrap=bootstrap, folds=folds,
                        huber_delta=huber_delta, seed=seed, fixed=fixed, ref=ref)


def _fit_law(data: Data, *, prior: Law, inits: int, bootstrap: int, folds: int, huber_delta: float | None,
             seed: int, fixed: dict[str, float] | None, ref: str) -> LawFit:
    if data.receipts < MIN_RECEIPTS:
        raise TooFewReceipts(
            f"too few receipts to fit the law: {data.receipts} usable, at least {MIN_RECEIPTS} needed; "
            f"{data.describe()}"
        )
    if len(data) == 0 or all(n <= 1 for n, _, _ in data.variation().values()):
        raise TooFewReceipts(
            f"nothing varies among the {data.receipts} receipts (one N_tot, D, S and G): a law needs "
            f"receipts that differ in size, tokens, sparsity or granularity; {data.describe()}"
        )
    if not (np.all(np.isfinite(data.loss)) and np.all(data.loss > 0)):
        raise TooFewReceipts("every loss must be a positive finite number")
    rng = np.random.default_rng(seed)
    model = _Model(data)
    base = prior.with_(**(fixed or {}))
    prior_th = model.to_theta(base)
    why: dict[str, str] = {p: "given" for p in (fixed or {})}
    # a term that cannot vary is dropped (coefficient 0); an exponent that cannot be identified keeps the
    # prior's value and has no say in the prediction within the support
    zero = prior.with_(**{c: 0.0 for c in COEFFICIENTS if c != "e"})
    for p, reason in _structural(data).items():
        why.setdefault(p, reason)
        if p in COEFFICIENTS:
            prior_th[_IDX[p]] = model.to_theta(zero)[_IDX[p]]
    design = check_law(data.n_tot, data.d, data.s, data.g, free=len([p for p in PARAMS if p not in why]),
                       ref=ref, granularity=float(np.median(data.g)))
    design.raise_if_degenerate(f"the law on {data.receipts} receipts ({data.describe()})")

    def free_idx() -> NDArray[np.int64]:
        return np.array([_IDX[p] for p in PARAMS if p not in why], dtype=np.int64)

    # a first least-squares fit (from the prior's exponents with fitted coefficients) sets an automatic delta
    free = free_idx()
    prior_th = _linear_coefficients(model, prior_th, free)
    th, _ = _solve(model, prior_th, free, 1e6)
    delta = huber_delta
    if delta is None:
        r = model.predict_log(th) - model.y
        mad = float(np.median(np.abs(r - np.median(r)))) / 0.6745
        delta = max(1.345 * mad, 1e-4)

    best_th, best_obj = th, math.inf
    optima: list[tuple[float, Array]] = []
    notes: list[str] = []
    for _round in range(len(PARAMS)):
        free = free_idx()
        starts = [prior_th, best_th] + [_random_theta(model, best_th, free, rng) for _ in range(max(0, inits - 2))]
        # screen every start by its objective (cheap), refine the most promising ones
        screened = [float(huber(model.predict_log(st) - model.y, delta).sum()) for st in starts[2:]]
        starts = starts[:2] + [starts[2 + i] for i in np.argsort(screened)[:REFINE]]
        best_obj = math.inf
        optima = []
        for start in starts:
            cand, obj = _solve(model, start, free, delta)
            optima.append((obj, cand))
            if obj < best_obj:
                best_th, best_obj = cand, obj
        weak = _rank_deficient(model, best_th, free) if free.size > 1 else None
        if weak is None:
            break
        share = _shares(model, best_th)
        owner = weak if weak in COEFFICIENTS else next(c for c, e in TERMS.items() if weak in e)
        if share[owner] < 1e-6:
            for p in (owner, *TERMS[owner]):
                if p not in why:
                    why[p] = "the fit drives its term to zero" if p == owner else \
                        f"no effect: the fit drives {owner}'s term to zero"
                    if p != owner:
                        best_th[_IDX[p]] = prior_th[_IDX[p]]
        else:  # a flat direction: any value along it fits as well, so keep the one found
            why[weak] = "not identifiable from these receipts (a near-collinear direction of the Jacobian); " \
                        "kept at the value found"
    free = free_idx()
    law = model.to_law(best_th)
    for p in free:
        name = PARAMS[p]
        if name in EXPONENTS and best_th[p] in EXP_BOUNDS:
            notes.append(f"{name} sits at its bound {best_th[p]:g}")
    in_sample = _errors(model.predict_log(best_th), model.y)

    # held-out error: k-fold over receipts, warm-started at the fit
    groups = np.unique(data.group)
    k = min(folds, groups.size)
    order = rng.permutation(groups)
    held_pred = np.full(len(data), np.nan)
    for f in range(k):
        test = np.isin(data.group, order[f::k])
        th_f, _ = _solve(model.sub(np.where(~test)[0]), best_th, free, delta)
        held_pred[test] = model.predict_log(th_f)[test]
    held_out = _errors(held_pred, model.y) | {"folds": float(k), "receipts": float(groups.size)}

    # case bootstrap over receipts; each refit starts from the best fit and from another distinct local
    # optimum the initialisations found (a flat valley, like c against e, is then explored, not assumed)
    starts_b = [best_th] + _distinct_optima(optima, best_obj, free, within=1.1)
    index = {g: np.where(data.group == g)[0] for g in groups}
    samples = []
    for _ in range(bootstrap):
        pick = rng.choice(groups, size=groups.size, replace=True)
        sub = model.sub(np.concatenate([index[g] for g in pick]))
        th_b, obj = min((_solve(sub, st, free, delta, max_nfev=30) for st in starts_b), key=lambda f: f[1])
        if math.isfinite(obj):
            samples.append(model.to_law(th_b).vector())
    arr = np.array(samples) if samples else np.empty((0, len(PARAMS)))
    fixed_idx = [i for i, p in enumerate(PARAMS) if p in why]
    if arr.shape[0]:
        arr[:, fixed_idx] = law.vector()[fixed_idx]
    ci: dict[str, tuple[float, float]] = {}
    for i, p in enumerate(PARAMS):
        if p in why or arr.shape[0] < 2:
            v = getattr(law, p)
            ci[p] = (v, v)
        else:
            lo, hi = np.percentile(arr[:, i], [2.5, 97.5])
            ci[p] = (float(lo), float(hi))
    if bootstrap and arr.shape[0] < bootstrap:
        notes.append(f"{bootstrap - arr.shape[0]} bootstrap refits failed and were left out")
    support = {"N_tot": (float(data.n_tot.min()), float(data.n_tot.max())),
               "D": (float(data.d.min()), float(data.d.max())),
               "S": (float(data.s.min()), float(data.s.max())), "G": (float(data.g.min()), float(data.g.max()))}
    return LawFit(
        law=law,
        free=[PARAMS[i] for i in free],
        fixed={p: why[p] for p in PARAMS if p in why},
        ci=ci,
        in_sample=in_sample,
        held_out=held_out,
        n_observations=len(data),
        n_receipts=data.receipts,
        variation=data.describe(),
        huber_delta=delta,
        inits=inits,
        bootstrap=int(arr.shape[0]),
        notes=notes,
        prior=prior,
        samples=arr if arr.shape[0] else None,
        support=support,
        design=design,
    )


def synthetic(law: Law, n_tot: Sequence[float], d: Sequence[float], s: Sequence[float], g: Sequence[float],
              noise: float, seed: int = 0) -> Data:
    """Data on the full grid n_tot x d x s x g from ``law`` with multiplicative log-normal noise."""
    grid = np.array(np.meshgrid(n_tot, d, s, g, indexing="ij")).reshape(4, -1)
    rng = np.random.default_rng(seed)
    loss = law.predict(*grid) * np.exp(rng.normal(0.0, noise, grid.shape[1]))
    return Data.of(grid[0], grid[1], grid[2], grid[3], loss)
