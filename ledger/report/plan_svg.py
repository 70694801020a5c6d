"""The plot of `ledger plan --plot FILE`: predicted loss against sparsity under the fixed model-FLOP budget
and under the deliverable budget, drawn by hand as SVG (no plotting library). Sparsity is spaced by
-log10(1 - S), so 0.5, 0.75, 0.875, ... are evenly apart; each budget's optimum is ringed; the law's support
(its highest sparsity) is a dotted line when it lies inside the plot.
"""

from __future__ import annotations

import html
import math
from typing import Any

from ledger.planning.plan import PlanResult

WIDTH, HEIGHT = 840, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 240, 50, 60
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:12px"
SERIES = (
    ("loss_fixed_budget", "fixed model-FLOP budget", "#1f77b4", "6 4"),
    ("loss_deliverable", "deliverable compute (C_peak x MFU x goodput)", "#d62728", ""),
)


def _x(s: float) -> float:
    return -math.log10(max(1.0 - s, 1e-9))


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-12:
        out.append(round(t, 10))
        t += step
    return out


def plot(result: PlanResult, title: str | None = None) -> str:
    """The SVG document as a string."""
    curves = [c for c in result.curves if math.isfinite(c["loss_fixed_budget"]) or math.isfinite(c["loss_deliverable"])]
    xs = [_x(c["sparsity"]) for c in curves]
    ys = [c[k] for c in curves for k, *_ in SERIES if math.isfinite(c[k])]
    x0, x1 = min(xs), max(xs)
    if x1 - x0 < 1e-9:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = min(ys), max(ys)
    pad = (y1 - y0) * 0.08 or 0.01
    y0, y1 = y0 - pad, y1 + pad
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + (y1 - y) / (y1 - y0) * ph

    inp = result.inputs
    head = title or (f"Predicted loss against sparsity on {inp.get('hardware', '?')}: "
                     f"{inp.get('nodes', '?')} nodes, {inp.get('days', 0):g} days, goodput {inp.get('goodput', 0):.2f}")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" style="{FONT}">',
        f"<title>{_esc(head)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="24" style="font-size:14px;font-weight:600">{_esc(head)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>',
    ]
    for t in _ticks(y0, y1):
        y = py(t)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{t:.3f}</text>')
    for c in curves:
        x = px(_x(c["sparsity"]))
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="#f3f3f3"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + ph + 16}" text-anchor="middle">{c["sparsity"]:.4g}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 18}" text-anchor="middle">sparsity S = 1 - top_k / experts '
               "(spaced by -log10(1 - S))</text>")
    out.append(f'<text transform="translate(18 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
               "predicted loss (best geometry at each S)</text>")
    hi = (result.support.get("law_support") or {}).get("S")
    if hi and x0 <= _x(hi[1]) <= x1:
        sx = px(_x(hi[1]))
        out.append(f'<line x1="{sx:.1f}" x2="{sx:.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="#555" '
                   f'stroke-dasharray="2 3"><title>law support: S &lt;= {hi[1]:.4g}</title></line>')
        out.append(f'<text x="{sx - 4:.1f}" y="{TOP + 12}" text-anchor="end" fill="#555">law support</text>')
    best = {"loss_fixed_budget": result.compute_optimal, "loss_deliverable": result.cluster_optimal}
    names = {"loss_fixed_budget": "compute-optimal", "loss_deliverable": "cluster-optimal"}
    for i, (key, label, color, dash) in enumerate(SERIES):
        pts = [(px(_x(c["sparsity"])), py(c[key])) for c in curves if math.isfinite(c[key])]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        style = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{style}>'
                   f"<title>{_esc(label)}</title></polyline>")
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
        choice = best[key]
        bx, by = px(_x(choice.geometry["sparsity"])), py(choice.loss)
        out.append(f'<circle cx="{bx:.1f}" cy="{by:.1f}" r="8" fill="none" stroke="{color}" stroke-width="2">'
                   f"<title>{names[key]}: S={choice.geometry['sparsity']:.4g}, loss {choice.loss:.4f}</title></circle>")
        ly = TOP + 14 + i * 56
        lx = LEFT + pw + 14
        out.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{style}/>')
        out.append(f'<text x="{lx + 30}" y="{ly + 4}">{_esc(label.split(" (")[0])}</text>')
        out.append(f'<text x="{lx + 30}" y="{ly + 18}" fill="#555">{names[key]}: S={choice.geometry["sparsity"]:.4g}'
                   "</text>")
        out.append(f'<text x="{lx + 30}" y="{ly + 32}" fill="#555">predicted loss {choice.loss:.4f}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
