"""The HTML report's eval curves: one chart per (split, source, metric), one marked line per run of either
side, points at tokens (the step when a row has no tokens), rows without a value left out."""

from __future__ import annotations

import re
from types import SimpleNamespace

from ledger.report.html import A_COLORS, B_COLORS, _eval_plots


def _ev(step: int, value: float | None, source: str | None, tokens: int | None = None) -> dict[str, object]:
    return {"step": step, "tokens": step * 100 if tokens is None else tokens, "split": "val", "source": source,
            "metric": "loss", "value": value}


def test_one_eval_chart_per_source_with_every_run() -> None:
    a = SimpleNamespace(id="a1", label="base", evals=[_ev(5, 3.0, "rare"), _ev(10, 2.5, "rare"), _ev(10, 2.0, None)])
    b1 = SimpleNamespace(id="b1", label="bf16", evals=[_ev(5, 2.9, "rare"), _ev(10, None, "rare"),
                                                        _ev(10, 1.9, None)])
    b2 = SimpleNamespace(id="b2", label="bf16-s1", evals=[_ev(5, 2.8, "rare"), _ev(10, 2.4, "rare")])
    c = SimpleNamespace(runs_a=[a], runs_b=[b1, b2])
    charts = {re.search(r"<title>([^<]*)</title>", fig).group(1): fig for fig, _ in _eval_plots(c)}  # type: ignore[arg-type, union-attr]
    assert sorted(charts) == ["eval val/all/loss vs tokens", "eval val/rare/loss vs tokens"]
    rare, everything = charts["eval val/rare/loss vs tokens"], charts["eval val/all/loss vs tokens"]
    # points: a 2 + b1 1 (its None left out) + b2 2 in the rare chart; a 1 + b1 1 in the other
    assert rare.count("<circle") == 5 and everything.count("<circle") == 2
    assert rare.count("<polyline") == 3 and everything.count("<polyline") == 2
    circles = re.findall(r'<circle [^>]*fill="(#[0-9a-f]+)"', rare)
    assert sorted(circles) == sorted([A_COLORS[0]] * 2 + [B_COLORS[0]] + [B_COLORS[1]] * 2)
    assert "A: base" in rare and "B: bf16-s1" in rare and "B: bf16-s1" not in everything
    # x ticks in tokens (500 .. 1,000), not steps (5 .. 10)
    assert "1000" in re.findall(r'text-anchor="middle"[^>]*>([^<]+)</text>', rare)
