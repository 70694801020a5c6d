"""Kaplan-Meier: summaries of costs where some runs never reached the gate (right-censored).

A run that reaches a gate contributes an *event* at its cost; a run that never reaches it contributes a
*censored* observation at its total cost: it is known to need at least that much. Dropping such runs
would make a configuration that often fails look cheap; counting their total cost as if they had reached
the gate would too. The product-limit estimator uses each censored run for as long as it was observed.

    S(t) = prod over event costs t_i <= t of (1 - d_i / n_i)

with ``d_i`` runs reaching the gate at ``t_i`` and ``n_i`` runs still "at risk" (cost >= ``t_i``). At a
tie between an event and a censoring, the censored run counts as at risk (the usual convention).

The estimate is scipy's (:func:`scipy.stats.ecdf` of :class:`scipy.stats.CensoredData`); this module adds the
at-risk counts and the median as the gate reports use them.

The median is the smallest cost at which S(t) <= 0.5 (as lifelines and most texts define it); it is
``None`` when S never falls to 0.5, i.e. when fewer than half of the runs are known to have reached the
gate — then the median is only known to exceed the largest event cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class KMStep:
    """One event cost of the survival curve."""

    time: float
    """Cost at which at least one run reached the gate."""
    at_risk: int
    """Runs with cost >= time (not yet reached, not yet censored)."""
    events: int
    """Runs that reached the gate at exactly this cost."""
    survival: float
    """S(time): the estimated share of runs that have not reached the gate by this cost."""


@dataclass(frozen=True)
class KMSummary:
    """The survival curve of one set of runs and its median."""

    n: int
    """Runs."""
    reached: int
    """Runs that reached the gate (events)."""
    steps: tuple[KMStep, ...]
    """The curve, one entry per distinct event cost."""
    median: float | None
    """Smallest cost with S <= 0.5; None when S stays above 0.5."""
    max_event: float | None
    """Largest event cost (a median of None is above it, and above the smallest censored cost)."""

    @property
    def fraction_reached(self) -> float:
        """Share of runs that reached the gate (censored runs count as not reached)."""
        return self.reached / self.n if self.n else 0.0


def kaplan_meier(times: Sequence[float], reached: Sequence[bool]) -> KMSummary:
    """The Kaplan-Meier estimate over runs with costs ``times``; ``reached[i]`` is False for a run that
    never reached the gate (its time is the censoring cost). Raises ValueError on mismatched lengths or a
    cost that is negative or not finite."""
    if len(times) != len(reached):
        raise ValueError(f"{len(times)} times but {len(reached)} reached flags")
    for t in times:
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"costs must be finite and >= 0, got {t}")
    events_at = sorted({float(t) for t, r in zip(times, reached, strict=True) if r})
    steps: list[KMStep] = []
    median: float | None = None
    if events_at:
        from scipy import stats

        data = stats.CensoredData(uncensored=[float(t) for t, r in zip(times, reached, strict=True) if r],
                                  right=[float(t) for t, r in zip(times, reached, strict=True) if not r])
        sf = stats.ecdf(data).sf  # scipy's product-limit estimate (censored runs at a tie count as at risk)
        survival = dict(zip(sf.quantiles.tolist(), sf.probabilities.tolist(), strict=True))
        for t_event in events_at:
            at_risk = sum(1 for t in times if t >= t_event)
            events = sum(1 for t, r in zip(times, reached, strict=True) if r and t == t_event)
            s_t = float(survival[t_event])
            steps.append(KMStep(time=t_event, at_risk=at_risk, events=events, survival=s_t))
            if median is None and s_t <= 0.5 + 1e-12:
                median = t_event
    n = len(times)
    reached_count = sum(1 for r in reached if r)
    return KMSummary(
        n=n,
        reached=reached_count,
        steps=tuple(steps),
        median=median,
        max_event=steps[-1].time if steps else None,
    )


__all__ = ["KMStep", "KMSummary", "kaplan_meier"]
