"""Intervals too wide to mean anything, said as such: "too few runs", with the runs per side that would do.

A between-run interval from 2 runs against 1 rests on one degree of freedom: its t quantile is 12.7 and its
interval of B/A ran from x0.000001 to x1,039,039. Printed as numbers, that reads as a measurement. An interval is
**too wide** when it holds both a halving and a doubling of A (B/A <= x0.5 and >= x2, or B - A from -|A|/2 to
+|A| on a delta scale): no reader can act on it. It is then shown as ``too few runs (~N per side)``, where N is
the runs per side at which a two-sample t test finds the metric's smallest change worth reporting with 80% power,
with the between-run SD the interval itself implies (:func:`ledger.analyses.power.runs_needed`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledger.analyses.metrics import MetricRow

HALF, DOUBLE = 0.5, 2.0
TOO_FEW = "too few runs"


def too_wide(row: MetricRow) -> bool:
    """Whether the row's interval holds both a halving and a doubling of A's value."""
    if row.ci is None:
        return False
    lo, hi = row.ci
    if row.ci_of == "ratio":
        return lo <= HALF and hi >= DOUBLE
    if row.a is None or row.a == 0 or not math.isfinite(row.a):
        return False
    return lo <= -HALF * abs(row.a) and hi >= (DOUBLE - 1) * abs(row.a)


def log_too_wide(lo_hi: tuple[float, float] | list[float] | None) -> bool:
    """The same for an interval of a log-ratio (attribution's shares and totals)."""
    if lo_hi is None:
        return False
    lo, hi = lo_hi
    return math.exp(lo) <= HALF and math.exp(hi) >= DOUBLE


def too_few(row: MetricRow, level: float = 0.95, alpha: float = 0.05) -> str:
    """``too few runs (~6 per side)``, or without the number when it cannot be said."""
    from ledger.analyses.power import runs_needed

    n = runs_needed(row, level, alpha)
    if n is None:
        return f"{TOO_FEW} (over 1000 per side)" if row.ci is not None and row.threshold > 0 and min(row.n) >= 1 \
            and (row.df or 0) >= 1 else TOO_FEW
    return f"{TOO_FEW} (~{n} per side)"
