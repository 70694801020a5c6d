"""Plot primitives of the HTML report: 1-2-5 ticks, an empty histogram, bands, bars, shared timelines."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ledger.report import svg


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (1, 119, [20, 40, 60, 80, 100]),           # was 1, 41, 81, 119 in the heatmap
    (0, 5120, [0, 1000, 2000, 3000, 4000, 5000]),
    (2.1, 4.3, [2.5, 3.0, 3.5, 4.0]),
    (0.0, 0.013, [0.0, 0.002, 0.004, 0.006, 0.008, 0.01, 0.012]),
])
def test_ticks_are_1_2_5_steps(lo: float, hi: float, expected: list[float]) -> None:
    assert svg.nice_ticks(lo, hi) == pytest.approx(expected)


def test_empty_histogram_says_so_without_a_tiny_axis() -> None:
    page = svg.histogram([("A", "#000", np.array([]))], "step time", "seconds")
    assert "no data" in page and "1e-09" not in page and "e-" not in "".join(re.findall(r">([^<]*)</text>", page))


def test_band_bars_markers_and_heatmap_ticks() -> None:
    x = np.linspace(0, 1000, 11)
    chart = svg.line_chart([svg.Series("B - A", "#c00", x, -0.5 + 0 * x, smooth=-0.5 + 0 * x, markers=True)],
                           "diff", "tokens", "loss", bands=[svg.Band("#c00", x, -0.7 + 0 * x, -0.3 + 0 * x)],
                           hline=0.0)
    assert chart.count('class="band"') == 1 and chart.count("<circle") == 11
    assert 'class="raw"' in chart and 'class="smooth"' in chart
    bars = svg.bars(["expert", "<attn>"], [("A", "#00c", [0.004, None]), ("B", "#c00", [0.002, 0.001])],
                    "time per phase", "seconds")
    assert bars.count("<rect") == 1 + 3 and "&lt;attn&gt;" in bars  # the frame and the 3 values given
    heat = svg.heatmap(np.ones((4, 119)), np.arange(1, 120, dtype=np.float64), "routing")
    labels = re.findall(r'text-anchor="middle" style="[^"]*">(\d+)</text>', heat)
    assert labels == ["20", "40", "60", "80", "100"]
