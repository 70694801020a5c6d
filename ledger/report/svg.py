"""Plots as inline SVG strings, drawn in Python: no JavaScript, no external resources.

Line charts (decimated to at most :data:`MAX_POINTS` points per series), overlaid histograms and
heatmaps. Every text is escaped; every chart has a ``<title>`` for accessibility and tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ledger.report.safe import xml

MAX_POINTS = 1200
"""Points per series in a line chart (evenly spaced indices, first and last kept)."""
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:11px"


@dataclass(frozen=True)
class Series:
    """One line of a chart."""

    label: str
    color: str
    x: NDArray[np.float64]
    y: NDArray[np.float64]
    dash: bool = False
    smooth: NDArray[np.float64] | None = None
    """The same line smoothed (drawn with class ``smooth``, the raw one with class ``raw``: the page's CSS
    chooses which show)."""
    markers: bool = False
    """Also mark each point (sparse series such as evals)."""


@dataclass(frozen=True)
class Band:
    """A shaded range between two lines (e.g. the spread over replicate pairs)."""

    color: str
    x: NDArray[np.float64]
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]


def _esc(text: str) -> str:
    return xml(text)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick positions covering [lo, hi], at a 1-2-5 step (x a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10)), key=lambda st: abs(math.log((hi - lo) / st / count)))
    first = math.ceil(lo / step) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def tick_label(v: float) -> str:
    """A short tick label (1.2k, 3M...)."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _keep(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.int64]:
    """Indices of at most :data:`MAX_POINTS` finite points, evenly spaced, first and last kept."""
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    if ok.size <= MAX_POINTS:
        return ok
    return ok[np.linspace(0, ok.size - 1, MAX_POINTS).round().astype(np.int64)]


def _decimate(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    idx = _keep(x, y)
    return x[idx], y[idx]


class _Frame:
    """Plot area and scales of one chart."""

    def __init__(self, width: int, height: int, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = 58, 12, 28, 40
        self.x0, self.x1 = xlim if xlim[1] > xlim[0] else (xlim[0] - 1, xlim[0] + 1)
        self.y0, self.y1 = ylim if ylim[1] > ylim[0] else (ylim[0] - 1, ylim[0] + 1)

    def sx(self, x: NDArray[np.float64] | float) -> NDArray[np.float64]:
        w = self.width - self.left - self.right
        return np.asarray(self.left + (np.asarray(x) - self.x0) / (self.x1 - self.x0) * w, dtype=np.float64)

    def sy(self, y: NDArray[np.float64] | float) -> NDArray[np.float64]:
        h = self.height - self.top - self.bottom
        return np.asarray(self.top + (1 - (np.asarray(y) - self.y0) / (self.y1 - self.y0)) * h, dtype=np.float64)

    def axes(self, title: str, xlabel: str, ylabel: str) -> list[str]:
        w, h = self.width, self.height
        parts = [
            f'<rect x="{self.left}" y="{self.top}" width="{w - self.left - self.right}" '
            f'height="{h - self.top - self.bottom}" fill="#fff" stroke="#999"/>',
            f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" style="{FONT};font-weight:600">{_esc(title)}</text>',
            f'<text x="{w / 2:.0f}" y="{h - 6}" text-anchor="middle" style="{FONT}">{_esc(xlabel)}</text>',
            f'<text x="12" y="{h / 2:.0f}" text-anchor="middle" transform="rotate(-90 12 {h / 2:.0f})" '
            f'style="{FONT}">{_esc(ylabel)}</text>',
        ]
        for t in nice_ticks(self.x0, self.x1):
            px = float(self.sx(t))
            parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{self.top}" y2="{h - self.bottom}" stroke="#eee"/>')
            parts.append(f'<text x="{px:.1f}" y="{h - self.bottom + 14}" text-anchor="middle" '
                         f'style="{FONT}">{tick_label(t)}</text>')
        for t in nice_ticks(self.y0, self.y1):
            py = float(self.sy(t))
            parts.append(f'<line x1="{self.left}" x2="{w - self.right}" y1="{py:.1f}" y2="{py:.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{self.left - 4}" y="{py + 4:.1f}" text-anchor="end" '
                         f'style="{FONT}">{tick_label(t)}</text>')
        return parts


def _legend(items: Sequence[tuple[str, str, bool]], x: float, y: float) -> list[str]:
    parts = []
    for i, (label, color, dash) in enumerate(items):
        yy = y + 14 * i
        style = ' stroke-dasharray="4 3"' if dash else ""
        parts.append(f'<line x1="{x}" x2="{x + 18}" y1="{yy}" y2="{yy}" stroke="{color}" stroke-width="2"{style}/>')
        parts.append(f'<text x="{x + 22}" y="{yy + 4}" style="{FONT}">{_esc(label)}</text>')
    return parts


def _svg(width: int, height: int, title: str, parts: list[str]) -> str:
    body = "".join(parts)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"><title>{_esc(title)}</title>{body}</svg>')


def _range(values: Sequence[NDArray[np.float64]], pad: float = 0.04) -> tuple[float, float]:
    finite = [v[np.isfinite(v)] for v in values]
    finite = [v for v in finite if v.size]
    if not finite:
        return (0.0, 1.0)
    lo = min(float(v.min()) for v in finite)
    hi = max(float(v.max()) for v in finite)
    span = hi - lo or abs(hi) or 1.0
    return (lo - pad * span, hi + pad * span)


def line_chart(series: Sequence[Series], title: str, xlabel: str, ylabel: str, width: int = 580,
               height: int = 320, bands: Sequence[Band] = (), hline: float | None = None,
               xlim: tuple[float, float] | None = None) -> str:
    """Lines of y against x, optionally over shaded bands and with a horizontal reference line (e.g. 0);
    ``xlim`` fixes the x range (charts side by side share it)."""
    data = []
    for s in series:
        x, y = np.asarray(s.x, dtype=np.float64), np.asarray(s.y, dtype=np.float64)
        idx = _keep(x, y)
        sm = None if s.smooth is None else np.asarray(s.smooth, dtype=np.float64)[idx]
        data.append((s, x[idx], y[idx], sm))
    xs = [d[1] for d in data] + [np.asarray(b.x, dtype=np.float64) for b in bands]
    ys = ([d[2] for d in data] + [np.asarray(b.lo, dtype=np.float64) for b in bands]
          + [np.asarray(b.hi, dtype=np.float64) for b in bands])
    if hline is not None:
        ys.append(np.array([hline]))
    frame = _Frame(width, height, xlim or _range(xs, 0.0), _range(ys))
    parts = frame.axes(title, xlabel, ylabel)
    if not any(x.size for x in xs):
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" style="{FONT}">no data</text>')
    for b in bands:
        bx = np.asarray(b.x, dtype=np.float64)
        ok = np.isfinite(bx) & np.isfinite(b.lo) & np.isfinite(b.hi)
        if ok.sum() < 2:
            continue
        upper = zip(frame.sx(bx[ok]), frame.sy(np.asarray(b.hi)[ok]), strict=True)
        lower = zip(frame.sx(bx[ok][::-1]), frame.sy(np.asarray(b.lo)[ok][::-1]), strict=True)
        pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in [*upper, *lower])
        parts.append(f'<polygon class="band" fill="{b.color}" fill-opacity="0.18" stroke="none" points="{pts}"/>')
    if hline is not None:
        py = float(frame.sy(hline))
        parts.append(f'<line x1="{frame.left}" x2="{width - frame.right}" y1="{py:.1f}" y2="{py:.1f}" '
                     'stroke="#555" stroke-dasharray="2 2"/>')
    for s, x, y, sm in data:
        if x.size < 1:
            continue
        dash = ' stroke-dasharray="4 3"' if s.dash else ""
        pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in zip(frame.sx(x), frame.sy(y), strict=True))
        parts.append(f'<polyline class="raw" fill="none" stroke="{s.color}" stroke-width="1.4" '
                     f'stroke-opacity="0.85"{dash} points="{pts}"/>')
        if s.markers:
            parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{s.color}"/>'
                      for px, py in zip(frame.sx(x), frame.sy(y), strict=True)]
        if sm is not None:
            ok = np.isfinite(sm)
            pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in zip(frame.sx(x[ok]), frame.sy(sm[ok]), strict=True))
            parts.append(f'<polyline class="smooth" fill="none" stroke="{s.color}" stroke-width="1.8"'
                         f'{dash} points="{pts}"/>')
    parts += _legend([(s.label, s.color, s.dash) for s in series], width - frame.right - 230, frame.top + 14)
    return _svg(width, height, title, parts)


def bars(labels: Sequence[str], groups: Sequence[tuple[str, str, Sequence[float | None]]], title: str,
         xlabel: str, width: int = 580) -> str:
    """Grouped horizontal bars: one row per label, one bar per group (name, colour, a value per label)."""
    bar_h, gap = 11, 8
    rows = len(labels)
    per_row = bar_h * max(1, len(groups)) + gap
    top, bottom = 28, 40 + 14 * len(groups)
    height = top + rows * per_row + bottom
    values = [v for _, _, vs in groups for v in vs if v is not None and math.isfinite(v)]
    frame = _Frame(width, height, (0.0, max(values) * 1.08 if values and max(values) > 0 else 1.0), (0.0, 1.0))
    frame.left = 130
    frame.bottom = bottom
    w, h = width, height
    parts = [
        f'<rect x="{frame.left}" y="{top}" width="{w - frame.left - frame.right}" height="{h - top - bottom}" '
        'fill="#fff" stroke="#999"/>',
        f'<text x="{w / 2:.0f}" y="16" text-anchor="middle" style="{FONT};font-weight:600">{_esc(title)}</text>',
        f'<text x="{w / 2:.0f}" y="{h - bottom + 30}" text-anchor="middle" style="{FONT}">{_esc(xlabel)}</text>',
    ]
    for t in nice_ticks(frame.x0, frame.x1):
        px = float(frame.sx(t))
        parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top}" y2="{h - bottom}" stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{h - bottom + 14}" text-anchor="middle" style="{FONT}">'
                     f"{tick_label(t)}</text>")
    if not values:
        parts.append(f'<text x="{w / 2}" y="{top + 20}" text-anchor="middle" style="{FONT}">no data</text>')
    for i, label in enumerate(labels):
        y0 = top + gap / 2 + i * per_row
        parts.append(f'<text x="{frame.left - 4}" y="{y0 + per_row / 2:.1f}" text-anchor="end" '
                     f'style="{FONT}">{_esc(label)}</text>')
        for j, (name, color, vs) in enumerate(groups):
            v = vs[i]
            if v is None or not math.isfinite(v):
                continue
            x1 = float(frame.sx(v))
            parts.append(f'<rect x="{frame.left}" y="{y0 + j * bar_h:.1f}" width="{max(0.5, x1 - frame.left):.1f}" '
                         f'height="{bar_h - 1}" fill="{color}"><title>{_esc(f"{name}, {label}: {v:.4g}")}</title>'
                         "</rect>")
    legend_y = h - bottom + 44
    parts += _legend([(name, color, False) for name, color, _ in groups], frame.left, legend_y)
    return _svg(width, height, title, parts)


def histogram(groups: Sequence[tuple[str, str, NDArray[np.float64]]], title: str, xlabel: str, bins: int = 40,
              width: int = 580, height: int = 320, marks: Sequence[tuple[str, float]] = ()) -> str:
    """Overlaid histograms (as shares of each group's samples) with vertical marks (e.g. medians)."""
    arrays = [np.asarray(v, dtype=np.float64) for _, _, v in groups]
    arrays = [a[np.isfinite(a)] for a in arrays]
    lo, hi = _range(arrays, 0.0)
    edges = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    shares = [np.histogram(a, edges)[0] / max(1, a.size) for a in arrays]
    top = max([float(s.max()) for s in shares if s.size] + [0.0])
    empty = top <= 0
    frame = _Frame(width, height, (float(edges[0]), float(edges[-1])), (0.0, 1.0 if empty else top * 1.08))
    parts = frame.axes(title, xlabel, "share of steps")
    if empty:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" style="{FONT}">no data</text>')
    for (_, color, _values), share in zip(groups, shares, strict=True):
        for i, v in enumerate(share):
            if v <= 0:
                continue
            x0, x1 = float(frame.sx(edges[i])), float(frame.sx(edges[i + 1]))
            y = float(frame.sy(v))
            parts.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(0.5, x1 - x0 - 0.5):.1f}" '
                         f'height="{float(frame.sy(0.0)) - y:.1f}" fill="{color}" fill-opacity="0.45"/>')
    for color, value in marks:
        if math.isfinite(value):
            px = float(frame.sx(value))
            parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{frame.top}" y2="{height - frame.bottom}" '
                         f'stroke="{color}" stroke-width="1.5" stroke-dasharray="5 3"/>')
    parts += _legend([(label, color, False) for label, color, _ in groups], width - frame.right - 230, frame.top + 14)
    return _svg(width, height, title, parts)


def _diverging(v: float, vmax: float) -> str:
    """White at 1, red above (up to vmax), blue below (down to 0); grey for missing."""
    if not math.isfinite(v):
        return "#ddd"
    if v >= 1:
        t = min(1.0, (v - 1) / max(1e-9, vmax - 1))
        r, g, b = 255, int(255 - 200 * t), int(255 - 210 * t)
    else:
        t = min(1.0, max(0.0, 1 - v))
        r, g, b = int(255 - 210 * t), int(255 - 150 * t), 255
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(matrix: NDArray[np.float64], steps: NDArray[np.float64], title: str, width: int = 580,
            vmax: float = 2.0) -> str:
    """Experts (rows) x steps (columns) of load relative to the mean load (1 = even, white)."""
    m = np.asarray(matrix, dtype=np.float64)
    rows, cols = (m.shape if m.ndim == 2 else (0, 0))
    left, top, right = 58, 28, 70
    cell_h = max(4, min(16, 240 // max(1, rows)))
    height = top + rows * cell_h + 40
    plot_w = width - left - right
    cell_w = plot_w / max(1, cols)
    parts = [f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" style="{FONT};font-weight:600">'
             f'{_esc(title)}</text>']
    for e in range(rows):
        for j in range(cols):
            parts.append(f'<rect x="{left + j * cell_w:.1f}" y="{top + e * cell_h}" width="{cell_w + 0.3:.1f}" '
                         f'height="{cell_h}" fill="{_diverging(float(m[e, j]), vmax)}"/>')
        if rows <= 32 or e % max(1, rows // 16) == 0:
            parts.append(f'<text x="{left - 4}" y="{top + e * cell_h + cell_h - 2}" text-anchor="end" '
                         f'style="{FONT}">e{e}</text>')
    if cols:  # step ticks at 1-2-5 values, placed in the column that holds them
        s = np.asarray(steps, dtype=np.float64)
        for t in nice_ticks(float(s[0]), float(s[-1])):
            j = int(np.searchsorted(s, t, side="right")) - 1
            if 0 <= j < cols:
                parts.append(f'<text x="{left + (j + 0.5) * cell_w:.1f}" y="{top + rows * cell_h + 14}" '
                             f'text-anchor="middle" style="{FONT}">{tick_label(t)}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" style="{FONT}">'
                 'step (binned)</text>')
    for k, v in enumerate((0.0, 0.5, 1.0, 1.5, vmax)):
        y = top + k * 14
        parts.append(f'<rect x="{width - right + 10}" y="{y}" width="14" height="12" fill="{_diverging(v, vmax)}" '
                     'stroke="#999" stroke-width="0.5"/>')
        parts.append(f'<text x="{width - right + 28}" y="{y + 10}" style="{FONT}">{v:g}x</text>')
    return _svg(width, height, title, parts)
