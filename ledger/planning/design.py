"""Identifiability of a fit from its design: before `ledger fit law` or `ledger fit perf` fits anything, it
checks that the receipts can tell the free parameters apart, and refuses (one line, exit 2) with the runs that
would make the fit identifiable, as commands.

Checks, for the law (variables ln N_tot, ln D, ln(1 - S), ln G over the distinct design points):

- distinct design points per free parameter: at least ``free + 2`` distinct (N_tot, D, S, G) points (one
  left over for the fit, one for held-out error);
- range: a variable that varies must span a factor of at least :data:`MIN_SPAN` (N_tot, D, 1 - S, G);
  a narrower one moves the loss less than the noise, and its exponents are a guess;
- collinearity: no two varying variables with |correlation| >= :data:`MAX_CORRELATION` (a sweep of the
  number of experts moves N_tot and S together), and no near-singular combination of them (the smallest
  singular value of the standardised design below :data:`MIN_SINGULAR_LAW`).

For the performance model (the sensitivity of log step time to each free calibration factor, one row per
receipt): at least ``free + 2`` distinct (geometry, plan) points, and columns that are not collinear (the
smallest singular value of the column-normalised sensitivities below :data:`MIN_SINGULAR`: receipts whose
step time splits the same way between compute, memory and launches cannot tell those factors apart).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ledger.planning.errors import DegenerateDesign

Array = NDArray[np.float64]
MIN_SPAN = 2.0
"""Smallest max/min ratio of a varying variable."""
MAX_CORRELATION = 0.95
"""Largest |correlation| of two varying law variables: a variance inflation factor of about 10, the usual
threshold of serious collinearity."""
MIN_SINGULAR_LAW = 0.3
"""Smallest singular value of the law's standardised design (unit-norm centred columns) that still identifies
a direction (its square, 0.09, is the eigenvalue of a variance inflation factor of about 11)."""
MIN_SINGULAR = 0.05
"""Smallest singular value of the performance model's column-normalised sensitivities that still identifies
a direction."""
LAW_VARIABLES = ("N_tot", "D", "S", "G")


@dataclass
class Check:
    """What a design can identify; ``problems`` empty when it is fine."""

    points: int
    free: int
    problems: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def add(self, problem: str, *commands: str) -> None:
        self.problems.append(problem)
        for c in commands:
            if c not in self.commands:
                self.commands.append(c)

    def to_dict(self) -> dict[str, Any]:
        return {"distinct_points": self.points, "free_parameters": self.free, "problems": self.problems,
                "commands": self.commands}

    def raise_if_degenerate(self, what: str) -> None:
        if self.problems:
            runs = "; ".join(f"`{c}`" for c in self.commands) or "more varied receipts"
            raise DegenerateDesign(f"cannot fit {what}: {'; '.join(self.problems)}. Runs that would make it "
                                   f"identifiable: {runs}")


def _span(col: Array) -> float:
    return float(col.max() / col.min()) if col.min() > 0 else float("inf")


def check_law(n_tot: Array, d: Array, s: Array, g: Array, free: int, ref: str = "REF",
              granularity: float = 1.0) -> Check:
    """The law's design. ``free``: parameters left to fit; ``ref``: a receipt the suggested reruns start
    from; ``granularity``: its G."""
    X = np.column_stack([n_tot, d, 1.0 - s, g])
    pts = np.unique(np.round(np.log(X), 9), axis=0)
    check = Check(points=int(pts.shape[0]), free=free)
    cmd = {
        "N_tot": f"ledger rerun {ref} --scale width=x2",
        "D": "ledger fit law --at-tokens T1,T2,T3 (losses at matched token counts along each run), or "
             f"ledger rerun {ref} --scale steps=x4",
        "S": f"ledger rerun {ref} --scale experts=x4",
        "G": f"ledger rerun {ref} --set moe.granularity={granularity * 4:g}",
    }
    varying = []
    for k, name in enumerate(LAW_VARIABLES):
        col = X[:, k]
        if np.unique(np.round(col, 12)).size <= 1:
            continue
        varying.append(k)
        span = _span(col)
        if span < MIN_SPAN:
            label = "1 - S" if name == "S" else name
            check.add(f"{label} spans only x{span:.3g} (at least x{MIN_SPAN:g} is needed to identify its exponents)",
                      cmd[name])
    if check.points < free + 2:
        check.add(f"{check.points} distinct design points for {free} free parameters (at least {free + 2} needed)",
                  *(cmd[n] for n in LAW_VARIABLES))
    if len(varying) >= 2 and pts.shape[0] >= 3:
        Z = pts[:, varying] - pts[:, varying].mean(axis=0)
        norms = np.linalg.norm(Z, axis=0)
        Z = Z / np.where(norms > 0, norms, 1.0)
        corr = Z.T @ Z
        flagged = False
        for a in range(len(varying)):
            for b in range(a + 1, len(varying)):
                if abs(corr[a, b]) >= MAX_CORRELATION:
                    na, nb = LAW_VARIABLES[varying[a]], LAW_VARIABLES[varying[b]]
                    check.add(f"{na} and {nb} move together (correlation {corr[a, b]:+.3f} over the design): "
                              "their terms cannot be told apart", cmd[na], cmd[nb])
                    flagged = True
        if not flagged:
            sv = np.linalg.svd(Z, compute_uv=False)
            if sv[-1] < MIN_SINGULAR_LAW:
                names = " and ".join(LAW_VARIABLES[k] for k in varying)
                check.add(f"{names} are nearly collinear over the design (smallest singular value {sv[-1]:.3g})",
                          *(cmd[LAW_VARIABLES[k]] for k in varying))
    return check


def check_perf(points: int, sensitivities: Array, names: list[str], ref: str = "REF") -> Check:
    """The performance model's design: ``sensitivities`` (receipts x free factors) = d log step time /
    d log factor at the nominal profile."""
    free = len(names)
    check = Check(points=points, free=free)
    cmd = [f"ledger rerun {ref} --scale batch=x4", f"ledger rerun {ref} --scale experts=x4",
           f"ledger rerun {ref} --scale width=x2"]
    if points < free + 2:
        check.add(f"{points} distinct (geometry, plan) points for {free} free calibration factors (at least "
                  f"{free + 2} needed)", *cmd)
    if free >= 2 and sensitivities.shape[0] >= 2:
        J = sensitivities / np.maximum(np.linalg.norm(sensitivities, axis=0), 1e-300)
        _, sv, vt = np.linalg.svd(J, full_matrices=False)
        if sv[-1] < MIN_SINGULAR:
            weak = np.abs(vt[-1])
            carriers = [names[i] for i in np.argsort(-weak) if weak[i] > 0.3 * weak.max()]
            check.add(f"the receipts split their step time the same way between {' and '.join(carriers)} "
                      f"(smallest singular value {sv[-1]:.3g} of their sensitivities): those factors cannot be "
                      "told apart", *cmd)
    return check
