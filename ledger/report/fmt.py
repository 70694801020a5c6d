"""Number formatting shared by the terminal, Markdown and HTML reports."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: `ledger ls` imports this module and must not load scipy
    from ledger.analyses.metrics import MetricRow


def num(value: float | None, digits: int = 4) -> str:
    """A number with ``digits`` significant digits, thousands separated; '-' for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** digits:
        return f"{value:,.0f}"
    if magnitude >= 1e-3:
        places = max(0, digits - 1 - int(math.floor(math.log10(magnitude))))
        return f"{value:,.{places}f}"
    return f"{value:.{digits - 1}e}"


def value(row_value: float | None, unit: str) -> str:
    """A metric value with its unit."""
    if row_value is None:
        return "-"
    if unit == "fraction":
        return f"{100 * row_value:.2f}%"
    if unit == "%":
        return f"{row_value:.3g}%"
    return num(row_value) + (f" {unit}" if unit and unit not in ("loss",) else "")


def ratio(r: float | None) -> str:
    """A ratio as ``x1.234``."""
    return "-" if r is None else f"x{r:.3f}"


def delta(d: float | None, unit: str) -> str:
    """A signed difference."""
    if d is None:
        return "-"
    if unit == "fraction":
        return f"{100 * d:+.2f} pp"
    return ("+" if d > 0 else "") + num(d) + (f" {unit}" if unit and unit not in ("loss", "fraction") else "")


def ci(row: MetricRow, level: float = 0.95, alpha: float = 0.05) -> str:
    """The row's confidence interval; ``too few runs (~N per side)`` when it is too wide to mean anything
    (:mod:`ledger.report.intervals`; ``level`` and ``alpha``: the comparison's settings)."""
    if row.ci is None:
        return "-"
    from ledger.report import intervals

    if intervals.too_wide(row):
        return intervals.too_few(row, level, alpha)
    lo, hi = row.ci
    if row.ci_of == "ratio":
        return f"[x{lo:.3f}, x{hi:.3f}]"
    return f"[{delta(lo, row.unit)}, {delta(hi, row.unit)}]"


def p(value_: float | None) -> str:
    """A p-value."""
    if value_ is None:
        return "-"
    return "<1e-4" if value_ < 1e-4 else f"{value_:.3g}"


def share(s: float | None) -> str:
    """A log-ratio share with its multiplicative factor: ``x0.478 (-0.738)``."""
    if s is None:
        return "-"
    return f"x{math.exp(s):.3f} ({s:+.3g})"


def interval(lo_hi: tuple[float, float] | list[float] | None) -> str:
    """A log-ratio interval as factors; ``(too few runs)`` when it holds both a halving and a doubling."""
    if lo_hi is None:
        return "-"
    from ledger.report import intervals

    if intervals.log_too_wide(lo_hi):
        return f"({intervals.TOO_FEW})"
    lo, hi = lo_hi
    return f"[x{math.exp(lo):.3f}, x{math.exp(hi):.3f}]"


def fraction(f: float | None) -> str:
    """A share of the total."""
    if f is None:
        return "-"
    return "0%" if abs(f) < 0.005 else f"{100 * f:.0f}%"


def within(ci: tuple[float, float] | None, centre: float | None) -> str:
    """A run's within-run interval as ' +-x%' of its value ('' when there is none)."""
    if ci is None or centre is None or centre == 0 or not all(map(math.isfinite, ci)):
        return ""
    return f" \u00b1{100 * (ci[1] - ci[0]) / 2 / abs(centre):.1f}%"


def runs(row: MetricRow) -> str:
    """Runs per side of a row, and whether a noise floor joined them: '3v3', '1v1+floor'."""
    if row.verdict == "unavailable":
        return "-"
    text = f"{row.n[0]}v{row.n[1]}"
    return text + ("+floor" if row.evidence and "noise floor" in row.evidence else "")


def threshold(row: MetricRow) -> str:
    """The smallest change worth reporting of a row."""
    if row.scale == "ratio":
        return f"{100 * row.threshold:g}%"
    if row.unit == "fraction":
        return f"{100 * row.threshold:g} pp"
    return f"{row.threshold:g}" + (" pp" if row.unit == "%" else f" {row.unit}" if row.unit else "")


def si(value: float | None, unit: str = "") -> str:
    """A figure with an SI suffix and three significant digits: ``14.5k tok/s``, ``1.2M``; '-' for None/NaN."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    magnitude = abs(value)
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= factor * 0.9995:
            text = f"{value / factor:.3g}{suffix}"
            break
    else:
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}" if unit else text


def size(n: float | None) -> str:
    """A byte count in binary units: ``23.5 GiB``, ``812 KiB``, ``40 B``."""
    if n is None or (isinstance(n, float) and not math.isfinite(n)):
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float | None) -> str:
    """Seconds as ``42.1 s``, ``3m 05s`` or ``2h 07m``."""
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return "-"
    s = float(seconds)
    if abs(s) < 60:
        return f"{s:.3g} s"
    whole = int(round(s))
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
