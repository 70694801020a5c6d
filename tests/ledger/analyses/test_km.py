"""Kaplan-Meier against hand-computed examples."""

from __future__ import annotations

import pytest

from ledger.analyses.km import kaplan_meier


def test_hand_computed_curve_and_median() -> None:
    # costs 1..5; the runs at 2 and 5 never reached the gate (censored there)
    #   t=1: 5 at risk, 1 event  -> S = 4/5            = 0.8
    #   t=2: censored            -> 4 at risk after
    #   t=3: 3 at risk, 1 event  -> S = 0.8 * 2/3      = 0.5333
    #   t=4: 2 at risk, 1 event  -> S = 0.5333 * 1/2   = 0.2667   <- first S <= 0.5: the median
    #   t=5: censored
    km = kaplan_meier([3.0, 1.0, 5.0, 2.0, 4.0], [True, True, False, False, True])
    assert [(s.time, s.at_risk, s.events) for s in km.steps] == [(1.0, 5, 1), (3.0, 3, 1), (4.0, 2, 1)]
    assert [s.survival for s in km.steps] == pytest.approx([0.8, 0.8 * 2 / 3, 0.8 * 2 / 3 * 0.5])
    assert km.median == 4.0
    assert km.n == 5 and km.reached == 3 and km.fraction_reached == pytest.approx(0.6)
    # the naive median of the reached runs alone (3) would flatter the configuration
    assert km.median > sorted([1.0, 3.0, 4.0])[1]


def test_survival_exactly_one_half_takes_that_cost() -> None:
    km = kaplan_meier([1.0, 2.0, 3.0, 4.0], [True, True, True, True])
    assert km.steps[1].survival == pytest.approx(0.5)
    assert km.median == 2.0


def test_ties_count_events_before_censorings() -> None:
    # at t=2 one run reaches and one is censored: both are at risk at t=2
    km = kaplan_meier([1.0, 2.0, 2.0, 3.0], [True, True, False, True])
    assert [(s.time, s.at_risk, s.events) for s in km.steps] == [(1.0, 4, 1), (2.0, 3, 1), (3.0, 1, 1)]
    assert km.steps[1].survival == pytest.approx(0.75 * 2 / 3)
    assert km.median == 2.0
    assert km.steps[-1].survival == pytest.approx(0.0)


def test_mostly_censored_has_no_median() -> None:
    km = kaplan_meier([5.0, 6.0, 7.0], [True, False, False])
    assert km.steps[0].survival == pytest.approx(2 / 3)
    assert km.median is None and km.max_event == 5.0 and km.fraction_reached == pytest.approx(1 / 3)
    nobody = kaplan_meier([5.0, 6.0], [False, False])
    assert nobody.steps == () and nobody.median is None and nobody.max_event is None


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="2 times but 1"):
        kaplan_meier([1.0, 2.0], [True])
    with pytest.raises(ValueError, match="finite"):
        kaplan_meier([float("nan")], [True])
    empty = kaplan_meier([], [])
    assert empty.n == 0 and empty.median is None and empty.fraction_reached == 0.0
