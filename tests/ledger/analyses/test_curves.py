"""B - A at matched tokens and its band over replicate pairs, against hand-computed lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ledger.analyses.curves import difference, smooth


@dataclass
class Run:
    """The part of a RunData that curves read: step columns."""

    steps: dict[str, Any]
    train_time: Any = field(default_factory=lambda: np.array([]))

    @property
    def n_steps(self) -> int:
        return int(self.steps["tokens"].size)


def _run(offset: float, start: float = 0.0, end: float = 1000.0) -> Run:
    tokens = np.linspace(start, end, 51)
    return Run({"tokens": tokens, "loss": 4.0 + offset - tokens / 1000})


def test_difference_and_band_by_hand() -> None:
    a = [_run(0.0, 0, 1000)]
    b = [_run(-0.5, 100, 1200), _run(-0.7, 0, 900)]
    d = difference(a, b, points=9)  # type: ignore[arg-type]
    assert not isinstance(d, str)
    assert d.x[0] == pytest.approx(100) and d.x[-1] == pytest.approx(900)  # the range every run covers
    assert d.diff == pytest.approx(np.full(9, -0.6))  # mean of B (-0.5, -0.7) minus A
    assert d.lo == pytest.approx(np.full(9, -0.7)) and d.hi == pytest.approx(np.full(9, -0.5)) and d.pairs == 2
    single = difference(a, b[:1], points=5)  # type: ignore[arg-type]
    assert not isinstance(single, str) and single.lo is None and single.pairs == 1
    assert difference(a, [_run(0, 2000, 3000)]) == "the runs share no range"  # type: ignore[arg-type]


def test_smooth_is_a_centred_moving_mean() -> None:
    y = np.array([0.0, 3.0, 6.0, 9.0, np.nan, 15.0])
    assert smooth(y, 3) == pytest.approx([1.5, 3.0, 6.0, 7.5, 12.0, 15.0])
