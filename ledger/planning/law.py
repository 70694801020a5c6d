"""The sparse-MoE scaling law L(N_tot, S, D, G), the published coefficients of the default law, their
uncertainty, and the support (the region of the data the law was fit on).

    L(N_tot, S, D, G) = a / N_tot^alpha + b / D^beta + c / (1 - S)^lam
                        + j / ((1 - S)^delta N_tot^gamma G^eta) + e

N_tot total parameters, D training tokens, S = 1 - top_k / experts, G = dense FFN width / expert width.

The default law and where each coefficient comes from (the mapping onto this form):

- a, alpha, b, beta, e: the dense terms A / N^alpha + B / D^beta + E of Hoffmann et al. 2022 ("Training
  Compute-Optimal Large Language Models", approach 3) as re-fitted by Besiroglu et al. 2024 ("Chinchilla
  Scaling: A Replication Attempt", arXiv:2404.10102): E = 1.8172 (standard error 0.03), A = 482.01
  (124.58), B = 2085.43 (1293.23), alpha = 0.3478 (0.02), beta = 0.3658 (0.02). Hoffmann et al.'s own values
  (A = 406.4, B = 410.7, alpha = 0.34, beta = 0.28, E = 1.69) are the law ``hoffmann2022``. Mapping: N is the
  total parameter count N_tot. The law was fit on dense models (N_tot = N_act); counting an MoE's expert
  parameters as dense ones is our assumption and the most that sparsity can buy through this term.
- j, delta, gamma, eta: the granularity term g / (G^gamma_K N_act^alpha_K) of Krajewski et al. 2024
  ("Scaling Laws for Fine-Grained Mixture of Experts", arXiv:2402.07871), whose fitted MoE law is
  L = c_K + (g / G^gamma_K + a_K) / N^alpha_K + b_K / D^beta_K with N the active non-embedding parameters,
  g = 2.1, gamma_K = 0.58, alpha_K = 0.115. Mapping, with N_act = (1 - S) N_tot (exact for the routed
  experts, an approximation for attention and embeddings): j = g = 2.1, delta = gamma = alpha_K = 0.115,
  eta = gamma_K = 0.58. Krajewski et al. publish no intervals for them (only the fit's RMSE, 0.015), so
  they are held at their values and the plan's probability does not cover them. Their losses are on C4
  with the GPT-2 tokenizer, Chinchilla's on MassiveText: the sum of the two papers' terms is our mapping,
  not a published law.
- c, lam: the sparsity term. Abnar et al. 2025 ("Parameters vs FLOPs", arXiv:2501.12370) use a term of
  this form, but we could not verify fitted values for it; Ludziejewski et al. 2025 ("Joint MoE Scaling
  Laws", arXiv:2502.05172) model the number of experts through the exponents of the N and D terms, which has
  no equivalent here. So there is no published value: c = 0 (lam unused) until a fit on receipts supplies
  them (``ledger fit law --json > law.json``, then ``ledger plan --law-from law.json``).

Support (the data the law was fit on): sparsity 0 (Chinchilla's dense models) to 63/64 (Krajewski et al.'s
MoE models: expansion rate 64, G of 64 x G experts active, S = 1 - 1/64 for every G); granularity 1 to 16
(Krajewski et al.); N_tot 7e7 to 1.6e10 and D 5e9 to 5e11 (Hoffmann et al.: "70 million to over 16 billion
parameters on 5 to 500 billion tokens"). ``ledger plan`` searches sparsity up to the support (its frontier)
and says when a choice lies outside it (an extrapolation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ledger.errors import BadInput

Array = NDArray[np.float64]

PARAMS = ("a", "alpha", "b", "beta", "c", "lam", "j", "delta", "gamma", "eta", "e")
"""Parameter names, in the order of the law's formula."""
COEFFICIENTS = ("a", "b", "c", "j", "e")
"""Parameters that scale a term (positive; fitted in log space)."""
EXPONENTS = ("alpha", "beta", "lam", "delta", "gamma", "eta")
TERMS = {"a": ("alpha",), "b": ("beta",), "c": ("lam",), "j": ("delta", "gamma", "eta"), "e": ()}
"""Each coefficient and the exponents of its term."""
VARIABLES = {"alpha": "N_tot", "beta": "D", "lam": "S", "delta": "S", "gamma": "N_tot", "eta": "G"}
"""The variable each exponent acts through."""
TERM_VARIABLES = {"a": ("N_tot",), "b": ("D",), "c": ("S",), "j": ("S", "N_tot", "G"), "e": ()}
SUPPORT_VARIABLES = ("N_tot", "D", "S", "G")
FORM = "L = a/N_tot^alpha + b/D^beta + c/(1-S)^lam + j/((1-S)^delta N_tot^gamma G^eta) + e"
_IDX = {p: i for i, p in enumerate(PARAMS)}


@dataclass(frozen=True)
class Law:
    """One parameter set of the law."""

    a: float
    alpha: float
    b: float
    beta: float
    c: float
    lam: float
    j: float
    delta: float
    gamma: float
    eta: float
    e: float

    def terms(self, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> dict[str, Array]:
        """Each term of the law (keys a, b, c, j, e), elementwise."""
        t = terms_of(self.vector()[None, :], n_tot, d, s, g)
        return {k: v[0] for k, v in t.items()}

    def predict(self, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> Array:
        """Predicted loss, elementwise."""
        out: Array = predict_many(self.vector()[None, :], n_tot, d, s, g)[0]
        return out

    def vector(self) -> Array:
        return np.array([getattr(self, p) for p in PARAMS], dtype=float)

    @classmethod
    def from_vector(cls, v: ArrayLike) -> Law:
        return cls(*(float(x) for x in np.asarray(v, dtype=float)))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def with_(self, **changes: float) -> Law:
        return replace(self, **changes)


def terms_of(V: Array, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> dict[str, Array]:
    """Each term for every parameter row of ``V`` (k x 11): arrays of shape (k, m). The variables are
    arrays of m points, or (k, m) arrays (a value per parameter row and point)."""

    def prep(x: ArrayLike) -> Array:
        a = np.atleast_1d(np.asarray(x, dtype=float))
        return a[None, :] if a.ndim == 1 else a

    n, dd, ss, gg = np.broadcast_arrays(*(prep(x) for x in (n_tot, d, s, g)))
    ln_n, ln_d, ln_g = np.log(n), np.log(dd), np.log(gg)
    with np.errstate(divide="ignore"):
        ln_dense = np.log1p(-ss)
    col = {p: V[:, i][:, None] for i, p in enumerate(PARAMS)}

    def term(coef: Array, exponent: Array) -> Array:
        # coef x exp(exponent); a zero coefficient is a zero term whatever the exponent
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.where(coef > 0, coef * np.exp(exponent), 0.0)
        return np.asarray(out, dtype=float)

    return {
        "a": term(col["a"], -col["alpha"] * ln_n),
        "b": term(col["b"], -col["beta"] * ln_d),
        "c": term(col["c"], -col["lam"] * ln_dense),
        "j": term(col["j"], -col["delta"] * ln_dense - col["gamma"] * ln_n - col["eta"] * ln_g),
        "e": np.broadcast_to(col["e"], (V.shape[0], n.shape[1])).astype(float),
    }


def predict_many(V: Array, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> Array:
    """Predicted loss for every parameter row of ``V`` (k x 11) at every point: shape (k, m)."""
    return np.asarray(sum(terms_of(np.atleast_2d(V), n_tot, d, s, g).values()), dtype=float)


# ------------------------------------------------------------------------------ a law with provenance
@dataclass(frozen=True)
class LawSpec:
    """A law with where each value comes from, its uncertainty and its support."""

    law: Law
    name: str
    """One line: which law this is."""
    sources: dict[str, str]
    """Parameter -> its citation (or how it was fitted, or why it has no value)."""
    se: dict[str, float] = field(default_factory=dict)
    """Published standard errors (draws: independent normals, truncated at 0)."""
    samples: Array | None = None
    """Bootstrap parameter vectors (k x 11) of a fit on receipts (draws: rows, correlations kept)."""
    support: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Variable (N_tot, D, S, G) -> the range of the data the law was fit on."""
    support_source: str = ""
    caveats: tuple[str, ...] = ()

    def uncertain(self) -> list[str]:
        """Parameters with an interval (published or bootstrapped)."""
        if self.samples is not None and self.samples.shape[0] >= 2:
            spread = self.samples.max(axis=0) - self.samples.min(axis=0)
            return [p for i, p in enumerate(PARAMS) if spread[i] > 0]
        return [p for p in PARAMS if self.se.get(p, 0.0) > 0]

    def interval(self, p: str) -> tuple[float, float] | None:
        """The 95% interval of one parameter, or None when it has none."""
        i = _IDX[p]
        if self.samples is not None and self.samples.shape[0] >= 2:
            lo, hi = np.percentile(self.samples[:, i], [2.5, 97.5])
            return (float(lo), float(hi)) if hi > lo else None
        se = self.se.get(p, 0.0)
        if se <= 0:
            return None
        v = getattr(self.law, p)
        return (max(0.0, v - 1.96 * se), v + 1.96 * se)

    def draws(self, n: int, rng: np.random.Generator) -> Array:
        """``n`` parameter vectors (n x 11) from the law's uncertainty; parameters without one stay put."""
        base = self.law.vector()
        if self.samples is not None and self.samples.shape[0] >= 2:
            return np.asarray(self.samples[rng.integers(0, self.samples.shape[0], n)], dtype=float)
        out = np.tile(base, (n, 1))
        for p, se in self.se.items():
            if se > 0:
                i = _IDX[p]
                x = rng.normal(base[i], se, n)
                bad = x < 0
                while bad.any():  # truncated at 0: coefficients and exponents are non-negative
                    x[bad] = rng.normal(base[i], se, int(bad.sum()))
                    bad = x < 0
                out[:, i] = x
        return out

    def parameters(self) -> dict[str, dict[str, Any]]:
        """Per parameter: value, source, and its interval when it has one (the JSON of `ledger plan`)."""
        out: dict[str, dict[str, Any]] = {}
        for p in PARAMS:
            iv = self.interval(p)
            out[p] = {"value": getattr(self.law, p), "source": self.sources.get(p, ""),
                      "ci95": list(iv) if iv else None,
                      **({"se": self.se[p]} if p in self.se else {})}
        return out


BESIROGLU = "Besiroglu et al. 2024, 'Chinchilla Scaling: A Replication Attempt' (arXiv:2404.10102), re-fit of " \
            "Hoffmann et al. 2022 approach 3"
HOFFMANN = "Hoffmann et al. 2022, 'Training Compute-Optimal Large Language Models' (arXiv:2203.15556), approach 3"
KRAJEWSKI = "Krajewski et al. 2024, 'Scaling Laws for Fine-Grained Mixture of Experts' (arXiv:2402.07871)"
NO_SPARSITY = ("no published value: Abnar et al. 2025 (arXiv:2501.12370) use a term c/(1-S)^lam but we could not "
               "verify fitted values; Ludziejewski et al. 2025 (arXiv:2502.05172) have no such term. 0 until a fit "
               "on receipts supplies it (`ledger fit law --json > law.json`, `ledger plan --law-from law.json`)")
_DENSE_SUPPORT = {"N_tot": (7e7, 1.6e10), "D": (5e9, 5e11)}
_SUPPORT_SOURCE = ("S 0 (Hoffmann et al.'s dense models) to 63/64 and G 1 to 16 (Krajewski et al.: expansion rate "
                   "64, G of 64 x G experts active); N_tot 7e7 to 1.6e10 and D 5e9 to 5e11 (Hoffmann et al.)")
_CAVEATS = (
    "the dense terms were fit on dense models; N is taken as total parameters (our mapping)",
    "Krajewski et al.'s term is on C4 with the GPT-2 tokenizer, Chinchilla's on MassiveText: the sum is our "
    "mapping, not a published law",
    "Krajewski et al. publish no intervals: j, delta, gamma, eta are held at their values in the resampling",
)


def _krajewski_sources() -> dict[str, str]:
    return {
        "j": f"{KRAJEWSKI}: g = 2.1 of their term g/(G^gamma N_act^alpha), with N_act = (1-S) N_tot",
        "delta": f"{KRAJEWSKI}: alpha = 0.115 (the N_act exponent; (1-S) part of N_act = (1-S) N_tot)",
        "gamma": f"{KRAJEWSKI}: alpha = 0.115 (the N_act exponent; N_tot part of N_act = (1-S) N_tot)",
        "eta": f"{KRAJEWSKI}: gamma = 0.58 (the granularity exponent)",
        "c": NO_SPARSITY,
        "lam": "unused while c = 0 (no published value)",
    }


DEFAULT_LAW = Law(a=482.01, alpha=0.3478, b=2085.43, beta=0.3658, c=0.0, lam=0.0,
                  j=2.1, delta=0.115, gamma=0.115, eta=0.58, e=1.8172)
"""The default law (see the module docstring for where each value comes from)."""
DEFAULT = LawSpec(
    law=DEFAULT_LAW,
    name="default law: dense terms of Besiroglu et al. 2024 (Chinchilla re-fit), granularity term of Krajewski et "
         "al. 2024, no published sparsity term (c = 0)",
    sources={p: f"{BESIROGLU}: {v}" for p, v in (
        ("a", "A = 482.01 (SE 124.58)"), ("alpha", "alpha = 0.3478 (SE 0.02)"), ("b", "B = 2085.43 (SE 1293.23)"),
        ("beta", "beta = 0.3658 (SE 0.02)"), ("e", "E = 1.8172 (SE 0.03)"))} | _krajewski_sources(),
    se={"a": 124.58, "alpha": 0.02, "b": 1293.23, "beta": 0.02, "e": 0.03},
    support={"S": (0.0, 63 / 64), "G": (1.0, 16.0)} | _DENSE_SUPPORT,
    support_source=_SUPPORT_SOURCE,
    caveats=_CAVEATS + ("Besiroglu et al. publish standard errors, not covariances: drawn independently, which "
                        "overstates the spread of predictions (A and alpha are correlated)",),
)
HOFFMANN2022 = LawSpec(
    law=DEFAULT_LAW.with_(a=406.4, alpha=0.34, b=410.7, beta=0.28, e=1.69),
    name="hoffmann2022: dense terms of Hoffmann et al. 2022 as published, granularity term of Krajewski et al. 2024",
    sources={p: f"{HOFFMANN}: {v}" for p, v in (("a", "A = 406.4"), ("alpha", "alpha = 0.34"), ("b", "B = 410.7"),
                                                 ("beta", "beta = 0.28"), ("e", "E = 1.69"))} | _krajewski_sources(),
    support={"S": (0.0, 63 / 64), "G": (1.0, 16.0)} | _DENSE_SUPPORT,
    support_source=_SUPPORT_SOURCE,
    caveats=_CAVEATS + ("Hoffmann et al.'s intervals are implausibly narrow (Besiroglu et al. 2024): none used",),
)
BUILTIN_LAWS = {"default": DEFAULT, "besiroglu2024": DEFAULT, "hoffmann2022": HOFFMANN2022}


def resolve(ref: str | Path | None) -> LawSpec:
    """A built-in law by name (default, besiroglu2024, hoffmann2022) or a file of `ledger fit law --json`."""
    if ref is None:
        return DEFAULT
    if str(ref).lower() in BUILTIN_LAWS:
        return BUILTIN_LAWS[str(ref).lower()]
    return load(Path(ref))


def load(path: Path) -> LawSpec:
    """A law from a JSON file written by ``ledger fit law --json`` (or a plain object of the 11 parameters)."""
    try:
        data: Any = json.loads(path.read_text())
    except OSError as exc:
        raise BadInput(f"cannot read --law-from {path}: {exc.strerror or exc}; give a file of `ledger fit law "
                       f"--json` or one of {', '.join(BUILTIN_LAWS)}") from exc
    except json.JSONDecodeError as exc:
        raise BadInput(f"--law-from {path} is not JSON: {exc}") from exc
    whole = data if isinstance(data, dict) else {}
    if isinstance(data, dict) and isinstance(data.get("law"), dict):
        data = data["law"]
    if not isinstance(data, dict):
        raise BadInput(f"--law-from {path}: expected the JSON of `ledger fit law --json`")
    values: dict[str, Any] = {k: (v.get("value") if isinstance(v, dict) else v) for k, v in data.items()}
    missing = [p for p in PARAMS if p not in values]
    if missing:
        raise BadInput(f"--law-from {path} lacks {', '.join(missing)} (write it with `ledger fit law --json`)")
    try:
        law = Law(**{p: float(values[p]) for p in PARAMS})
    except (TypeError, ValueError) as exc:
        raise BadInput(f"--law-from {path}: every parameter must be a number ({exc})") from exc
    bad = [p for p in PARAMS if not math.isfinite(getattr(law, p)) or getattr(law, p) < 0]
    if bad:
        raise BadInput(f"--law-from {path}: {', '.join(bad)} must be finite and >= 0")
    n = whole.get("receipts")
    sources = {}
    for p in PARAMS:
        entry = data.get(p)
        why = entry.get("why_fixed") if isinstance(entry, dict) else None
        sources[p] = f"fixed: {why}" if why else (f"fitted on {n} receipts ({path})" if n else f"given in {path}")
    samples = None
    raw = whole.get("samples")
    if isinstance(raw, list) and raw:
        try:
            arr = np.array(raw, dtype=float)
        except (TypeError, ValueError):
            raise BadInput(f"--law-from {path}: samples must be rows of 11 numbers") from None
        if arr.ndim != 2 or arr.shape[1] != len(PARAMS) or not np.isfinite(arr).all():
            raise BadInput(f"--law-from {path}: samples must be rows of {len(PARAMS)} finite numbers")
        samples = arr
    support = _support_of(whole.get("support"), path)
    return LawSpec(law=law, name=f"fitted law from {path}", sources=sources, samples=samples, support=support,
                   support_source=f"the receipts the law was fitted on ({path})" if support else "",
                   caveats=() if support else ("the file gives no support: the plan cannot say where it "
                                               "extrapolates",))


def _support_of(raw: Any, path: Path) -> dict[str, tuple[float, float]]:
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, tuple[float, float]] = {}
    for k in SUPPORT_VARIABLES:
        v = raw.get(k)
        if v is None:
            continue
        try:
            lo, hi = float(v[0]), float(v[1])
        except (TypeError, ValueError, IndexError, KeyError):
            raise BadInput(f"--law-from {path}: support.{k} must be [low, high]") from None
        out[k] = (lo, hi)
    return out


def names() -> list[str]:
    return [f.name for f in fields(Law)]
