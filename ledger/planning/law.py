"""The sparse-MoE scaling law (issue 9; the form of Abnar et al. 2025 with a granularity interaction):

    L(N_tot, S, D, G) = a / N_tot^alpha + b / D^beta + c / (1 - S)^lam
                        + j / ((1 - S)^delta N_tot^gamma G^eta) + e

N_tot total parameters, D training tokens, S = 1 - top_k / experts, G = dense FFN width / expert width.

The default law (used by `ledger plan` without --law-from) takes a, alpha, b, beta, e from Chinchilla
(Hoffmann et al. 2022, approach 3: A = 406.4, alpha = 0.34, B = 410.7, beta = 0.28, E = 1.69), with the
total parameter count in N. The sparsity and granularity terms are our choice, not a published fit:
c = 0.005, lam = 0.5 (a penalty growing as (1 - S)^-1/2: diminishing returns of total parameters as experts
get sparser) and a weak interaction j = 0.05, delta = 0.1, gamma = 0.05, eta = 0.2 (finer experts help a
little, less so in larger models). With them, under a fixed model-FLOP budget the optimum sparsity sits at
the frontier of `ledger plan`'s search (0.985, MOSAIC's compute-optimal sparsity on B200s: Sarkar, Tang and
Zha 2026), with returns that flatten near it, so the fall of MFU with sparsity moves the optimum under
deliverable compute inside. Fit your own with `ledger fit law --json > law.json` and pass
``--law-from law.json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ledger.errors import BadInput

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

    def terms(self, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> dict[str, NDArray[np.float64]]:
        """Each term of the law (keys a, b, c, j, e), elementwise."""
        n, dd, ss, gg = (np.asarray(x, dtype=float) for x in (n_tot, d, s, g))
        dense = 1.0 - ss
        ones = np.ones(np.broadcast(n, dd, ss, gg).shape)
        return {
            "a": self.a * n ** (-self.alpha) * ones,
            "b": self.b * dd ** (-self.beta) * ones,
            "c": self.c * dense ** (-self.lam) * ones,
            "j": self.j * dense ** (-self.delta) * n ** (-self.gamma) * gg ** (-self.eta) * ones,
            "e": self.e * ones,
        }

    def predict(self, n_tot: ArrayLike, d: ArrayLike, s: ArrayLike, g: ArrayLike) -> NDArray[np.float64]:
        """Predicted loss, elementwise."""
        return np.asarray(sum(self.terms(n_tot, d, s, g).values()), dtype=float)

    def vector(self) -> NDArray[np.float64]:
        return np.array([getattr(self, p) for p in PARAMS], dtype=float)

    @classmethod
    def from_vector(cls, v: ArrayLike) -> Law:
        return cls(*(float(x) for x in np.asarray(v, dtype=float)))

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def with_(self, **changes: float) -> Law:
        return replace(self, **changes)


DEFAULT_LAW = Law(
    a=406.4, alpha=0.34, b=410.7, beta=0.28,
    c=0.005, lam=0.5, j=0.05, delta=0.1, gamma=0.05, eta=0.2,
    e=1.69,
)
"""The default law (see the module docstring for where each value comes from)."""
DEFAULT_SOURCE = (
    "default law: a, alpha, b, beta, e from Chinchilla (Hoffmann et al. 2022, approach 3) with total "
    "parameters as N; the sparsity/granularity terms (c=0.005, lam=0.5, j=0.05, delta=0.1, gamma=0.05, "
    "eta=0.2) are stackreceipt's choice, not a published fit: diminishing returns of sparsity under which a "
    "fixed model-FLOP budget favours the sparsity frontier, as MOSAIC (Sarkar, Tang and Zha 2026) reports"
)


def load(path: Path) -> tuple[Law, str]:
    """A law from a JSON file written by ``ledger fit law --json`` (or a plain object of the 11
    parameters). Returns the law and a line saying where it came from."""
    try:
        data: Any = json.loads(path.read_text())
    except OSError as exc:
        raise BadInput(f"cannot read --law-from {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise BadInput(f"--law-from {path} is not JSON: {exc}") from exc
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
    bad = [p for p in PARAMS if not math.isfinite(getattr(law, p)) or (p in COEFFICIENTS and getattr(law, p) < 0)]
    if bad:
        raise BadInput(f"--law-from {path}: {', '.join(bad)} must be finite (and coefficients >= 0)")
    return law, f"fitted law from {path}"


def names() -> list[str]:
    return [f.name for f in fields(Law)]
