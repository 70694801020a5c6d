"""Plotly figures of the web view, as JSON-ready dicts (``{"data": [...], "layout": {...}}``).

Built with :mod:`plotly.graph_objects`, so traces are validated by Plotly; serialised with
:func:`plotly.io.to_json`, which turns numpy arrays and NaN into JSON. Nothing here computes a statistic:
the curves are the logged values, decimated to at most :data:`MAX_POINTS` evenly spaced rows.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

MAX_POINTS = 2000
"""Points per trace (evenly spaced rows, first and last kept)."""
PALETTE = ("#1f5fa8", "#c8372d", "#2a9d4b", "#8e44ad", "#e8743b", "#17a2b8", "#b8860b", "#555555", "#d63384",
           "#0b3b6f")


@dataclass(frozen=True)
class Line:
    """One run's values of a metric against an x axis."""

    label: str
    x: NDArray[np.float64]
    y: NDArray[np.float64]


def decimate(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Finite points only, at most :data:`MAX_POINTS` of them (evenly spaced indices)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size > MAX_POINTS:
        idx = np.linspace(0, x.size - 1, MAX_POINTS).round().astype(np.int64)
        x, y = x[idx], y[idx]
    return x, y


def _e(text: str) -> str:
    """Plotly reads a few HTML tags in its texts (<b>, <a href>...): user text goes in as entities."""
    return html.escape(text, quote=True)


def _layout(title: str, xlabel: str, ylabel: str, **extra: Any) -> dict[str, Any]:
    return {"title": {"text": _e(title), "font": {"size": 14}}, "xaxis": {"title": {"text": _e(xlabel)}},
            "yaxis": {"title": {"text": _e(ylabel)}}, "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
            "height": 340, "legend": LEGEND, **extra}


LEGEND = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"}
"""Legends beside the plot, outside its area (Plotly widens the right margin for them): a horizontal legend under
the plot at a fixed height covered the x axis title once its entries wrapped (8 runs). Pages of several runs
draw one legend of their own instead (:mod:`ledger.report.web.overlay`)."""


def lines(series: Sequence[Line], title: str, xlabel: str, ylabel: str, markers: bool = False) -> dict[str, Any]:
    """Overlaid lines, one per run, each its own colour (with markers: for sparse points such as evals)."""
    import plotly.graph_objects as go

    fig = go.Figure(layout=_layout(title, xlabel, ylabel))
    for i, s in enumerate(series):
        x, y = decimate(s.x, s.y)
        fig.add_trace(go.Scatter(x=x, y=y, name=_e(s.label), mode="lines+markers" if markers else "lines",
                                   line={"color": PALETTE[i % len(PALETTE)], "width": 1.6}))
    if not series:
        fig.add_annotation(text="no data", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return as_dict(fig)


def heatmap(matrix: NDArray[np.float64], steps: NDArray[np.float64], title: str) -> dict[str, Any]:
    """Experts (rows) x steps (columns) of load relative to the mean load (1 = even)."""
    import plotly.graph_objects as go

    m = np.asarray(matrix, dtype=np.float64)
    fig = go.Figure(go.Heatmap(z=m, x=np.asarray(steps, dtype=np.float64), y=[f"e{e}" for e in range(m.shape[0])],
                               zmin=0.0, zmid=1.0, zmax=2.0, colorscale="RdBu_r",
                               colorbar={"title": {"text": "x mean"}}),
                    layout=_layout(title, "step (binned)", "expert"))
    return as_dict(fig)


def bars(labels: Sequence[str], values: Sequence[float], title: str, xlabel: str) -> dict[str, Any]:
    """Horizontal bars (e.g. seconds per phase)."""
    import plotly.graph_objects as go

    bar = go.Bar(x=list(values), y=[_e(label) for label in labels], orientation="h", marker={"color": PALETTE[0]})
    fig = go.Figure(bar, layout=_layout(title, xlabel, ""))
    return as_dict(fig)


def as_dict(fig: Any) -> dict[str, Any]:
    """A figure as plain JSON data."""
    import plotly.io as pio

    out: dict[str, Any] = json.loads(pio.to_json(fig, validate=False))
    out["layout"].pop("template", None)  # Plotly's default template is 8 kB per figure: the page sets none
    return out


def script_json(figure: dict[str, Any]) -> str:
    """JSON safe to put inside a ``<script type="application/json">`` element (no ``</script>``, no ``<!--``)."""
    return json.dumps(figure, allow_nan=False, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace(
        "&", "\\u0026")
