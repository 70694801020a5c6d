"""The sequential A/B verdict: an always-valid test of each headline after every round of interleaved runs.

`ledger ab A B --until-verdict` records A, B, A, B, ... and judges after each round; this module is the
judging, a pure function of the rounds recorded so far (:func:`judge`). Stopping whenever the evidence
suffices is only honest with a test that stays valid under optional stopping: with a fixed-sample t test
looked at after every round, two runs of one configuration are called different far more often than alpha.

**The test** is a mixture sequential probability ratio test (mSPRT: Robbins 1970; Johari, Koomen, Pekelis and
Walsh 2017, "Peeking at A/B tests", KDD; 2022, Operations Research) for the difference ``delta`` of the per-run
values (on the log scale for rates and losses) of B and A. The run-to-run SD ``sigma`` is not known here (a
handful of runs), so the mixture is the one of the linear model ``y = mu + delta [run is B] + e``, ``e ~ N(0,
sigma^2)``, with ``delta ~ N(0, sigma^2 / phi)`` and the right-Haar prior on ``(mu, sigma)`` (Lindon, Ham,
Tingley and Bojinov 2022, "Anytime-valid linear models and regression adjusted causal inference in randomized
experiments", arXiv:2210.08589; Pérez-Ortiz, Lardy, de Heide and Grünwald 2024 for why group invariance makes
it a test martingale). Its Bayes factor has a closed form in the two-sample t statistic::

    BF = sqrt(r) ((1 + t^2 / nu) / (1 + r t^2 / nu)) ^ ((nu + 1) / 2),   r = phi / (phi + n_A n_B / (n_A + n_B))

with ``nu = n_A + n_B - 2``; under no difference it is a nonnegative martingale, so by Ville's inequality it
ever exceeds ``1 / alpha`` with probability at most alpha: the always-valid p-value is ``min(1, 1 / max BF)``
over the rounds so far, and inverting the test gives a confidence sequence (an interval that covers the true
difference at every round at once with probability ``1 - alpha``; the running intersection). It is computed
here (a few lines) because no maintained package has it without heavy dependencies: ``savvi`` (the authors'
code) requires cvxpy and three solver packages, and has been unreleased since 2024; and its degrees of freedom
are one lower than the model's (``n - p - 1``), which is conservative. ``tests/ledger/analyses/
test_sequential.py`` checks the closed form against scipy's numerical integration of the two marginal
likelihoods.

``phi`` = :data:`PHI` puts the effect's prior SD at 1.4 run-to-run SDs: mass from the minimum change (about one
SD of a shared machine) to three SDs. Validity does not depend on it, only how soon a difference of a given size
is found; it was chosen from simulations of the expected rounds (``bench/bench_sequential.py``).

**Two headlines share alpha**, as in `compare`: the speed (tokens/s per device) is tested at 0.8 alpha and the
loss at matched tokens at 0.2 alpha (Bonferroni with :data:`ledger.analyses.metrics.SPEED_WEIGHT`), each
interval at its own level. The loss is tested only when it differs: losses bit-identical in every round (the
same seed on a deterministic stack) are ``identical``, decided.

**A headline is decided** when its test rejects (the interval excludes no change; the verdict is better or worse
when the estimate exceeds the metric's minimum change, else no significant difference, "below the minimum
change"), or for futility: the interval lies within the minimum change either way (no change worth reporting).
The sequence stops when the speed is decided, or at the cap (then the speed is inconclusive). The loss is judged
in the same rounds: when it differs (its test rejects) the verdict says so, decided, whether before or with the
speed; when it has not, its interval is reported as it stands. It does not hold the sequence: showing two losses
equal within 1% takes far more rounds than a speed verdict (in the simulations, 11-12 rounds whatever the speed
effect, against 4-6 for the speed alone), and `compare` then says how many runs it would take.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ledger.analyses import builtin_metrics
from ledger.analyses.metrics import SPEED_WEIGHT, Metric, PairedMetric, RunMetric
from ledger.analyses.series import RunData

PHI = 0.5
"""Prior precision of the standardized effect ``delta / sigma`` in the mixture (its prior SD is 1.41)."""
SPEED = "tokens/s per device"
LOSS = "loss @ matched tokens"
SPEED_ROWS = (SPEED, "steps/s", "step time (median)")
"""The speed headline: the first of these rows every run of the sequence has (a wrapped run that prints no token
counts has no tokens/s, but its steps/s or step times)."""
LOSS_ROWS = (LOSS, "loss @ matched steps")
"""The loss headline, likewise (never the loss at matched wall time: a faster run is ahead there by its speed)."""
MIN_ROUNDS = 2
"""Rounds before the first test (two runs per side: the model's first degree of freedom beyond the mean)."""

Status = Literal["significant", "futile", "undecided", "identical", "unavailable"]


@dataclass(frozen=True)
class Mixture:
    """The always-valid test of one headline after ``rounds`` rounds."""

    estimate: float
    """mean(B) - mean(A) of the per-run values (log scale for ratio metrics)."""
    p_value: float
    """Always-valid p-value: min(1, 1 / the largest Bayes factor so far)."""
    interval: tuple[float, float]
    """The confidence sequence at level 1 - alpha (running intersection), on the estimate's scale."""
    sd: float
    """Pooled SD of one run's value."""
    df: int


def bayes_factor(t2: float, nu: int, r: float) -> float:
    """The mixture's Bayes factor for a squared t statistic ``t2`` with ``nu`` degrees of freedom (module
    docstring); ``t2 = inf`` (no variance, a difference) gives its limit ``r ** (-nu / 2)``."""
    if math.isinf(t2):
        return float(r ** (-nu / 2))
    log_bf = 0.5 * math.log(r) + 0.5 * (nu + 1) * (math.log1p(t2 / nu) - math.log1p(r * t2 / nu))
    return math.exp(min(log_bf, 700.0))


def radius(se: float, nu: int, r: float, alpha: float) -> float:
    """Half-width of the level ``1 - alpha`` confidence set of the difference after one look: the values
    ``delta0`` with ``BF(delta0) < 1 / alpha``; infinite while the data cannot exclude any."""
    c = (alpha**2 * r) ** (1 / (nu + 1))
    if c <= r:
        return math.inf
    return se * math.sqrt(nu * (1 - c) / (c - r))


def mixture_test(xa: Sequence[float] | NDArray[np.float64], xb: Sequence[float] | NDArray[np.float64], alpha: float,
                 phi: float = PHI, start: int = MIN_ROUNDS) -> Mixture | None:
    """The always-valid test of the per-run values ``xa`` and ``xb`` (one per round each, in order): the
    Bayes factor and confidence set at each round from ``start`` on, their running maximum and intersection.
    None before ``start`` rounds."""
    a, b = np.asarray(xa, dtype=np.float64), np.asarray(xb, dtype=np.float64)
    n = min(a.size, b.size)
    if n < start:
        return None
    best_bf, low, high = 0.0, -math.inf, math.inf
    estimate, sd, nu = 0.0, 0.0, 0
    for k in range(start, n + 1):
        ak, bk = a[:k], b[:k]
        nu = 2 * k - 2
        sse = float(((ak - ak.mean()) ** 2).sum() + ((bk - bk.mean()) ** 2).sum())
        estimate = float(bk.mean() - ak.mean())
        sd = math.sqrt(sse / nu)
        z2 = k * k / (2 * k)  # n_A n_B / (n_A + n_B)
        r = phi / (phi + z2)
        se = sd / math.sqrt(z2)
        if se > 0:
            t2 = (estimate / se) ** 2
        else:
            t2 = math.inf if estimate != 0 else 0.0
        best_bf = max(best_bf, bayes_factor(t2, nu, r))
        half = radius(se, nu, r, alpha)
        low, high = max(low, estimate - half), min(high, estimate + half)
    if low > high:  # the running intersection is empty only with probability < alpha: keep the last point
        low = high = estimate
    return Mixture(estimate, min(1.0, 1.0 / best_bf) if best_bf > 0 else 1.0, (low, high), sd, nu)


# ------------------------------------------------------------------------------------------ the headlines
@dataclass(frozen=True)
class Headline:
    """One headline's state after a round."""

    name: str
    role: str
    """speed or loss."""
    alpha: float
    """Its share of alpha (the interval's level is 1 - alpha)."""
    threshold: float
    """The minimum change worth reporting (relative)."""
    direction: str
    """higher or lower is better."""
    status: Status
    verdict: str
    """better, worse, no significant difference, identical, inconclusive (undecided), unavailable."""
    rule: str
    """The rule that decided it, in words."""
    ratio: float | None = None
    """B/A (exp of the mean log difference)."""
    interval: tuple[float, float] | None = None
    """Confidence sequence of B/A at level 1 - alpha."""
    p_value: float | None = None
    """Always-valid p-value."""
    sd: float | None = None
    """Pooled run-to-run SD (log scale: about a relative SD)."""
    a: list[float] = field(default_factory=list)
    """Per-round values of A."""
    b: list[float] = field(default_factory=list)

    @property
    def decided(self) -> bool:
        return self.status in ("significant", "futile", "identical")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "alpha": self.alpha, "level": 1 - self.alpha,
                "threshold": self.threshold,
                "status": self.status, "verdict": self.verdict, "rule": self.rule, "ratio": self.ratio,
                "interval": list(self.interval) if self.interval else None, "p_value": self.p_value, "sd": self.sd,
                "a": self.a, "b": self.b}


def headline_metrics() -> dict[str, Metric]:
    """The speed and loss metrics as `compare` defines them (builtin providers)."""
    found: dict[str, Metric] = {}
    for provider in builtin_metrics.BUILTIN[:2]:
        for m in provider.build([], []):
            if m.spec.name in (*SPEED_ROWS, *LOSS_ROWS):
                found[m.spec.name] = m
    return found


def _speed_values(metric: Metric, rounds: Sequence[tuple[RunData, RunData]]) -> tuple[list[float], list[float]] | str:
    assert isinstance(metric, RunMetric)
    xa: list[float] = []
    xb: list[float] = []
    for k, (ra, rb) in enumerate(rounds, start=1):
        for side, run, out in (("A", ra, xa), ("B", rb, xb)):
            obs = metric.observe(run)
            if obs.value is None or not obs.value > 0:
                return f"round {k} {side} ({run.label}): {obs.reason or 'no positive value'}"
            out.append(float(obs.value))
    return xa, xb


def _loss_values(metric: Metric, rounds: Sequence[tuple[RunData, RunData]]) -> tuple[list[float], list[float]] | str:
    assert isinstance(metric, PairedMetric)
    xa: list[float] = []
    xb: list[float] = []
    for k, (ra, rb) in enumerate(rounds, start=1):
        key = f"sequential.loss:{rb.id}"  # each round's matched losses once, not again after every round
        if key not in ra.memo:
            ra.memo[key] = metric.observe([ra], [rb])
        got = ra.memo[key]
        if isinstance(got, str):
            return f"round {k}: {got}"
        va, vb = float(got.a.mean()), float(got.b.mean())
        if not (va > 0 and vb > 0):
            return f"round {k}: a loss that is not positive"
        xa.append(va)
        xb.append(vb)
    return xa, xb


def judge_headline(name: str, xa: Sequence[float], xb: Sequence[float], alpha: float, threshold: float,
                   direction: str, phi: float = PHI, role: str = "speed") -> Headline:
    """One headline after the rounds so far (its per-round values on each side)."""
    base = Headline(name, role, alpha, threshold, direction, "undecided", "inconclusive", "", a=list(xa),
                    b=list(xb))
    if list(xa) == list(xb):
        return replace(base, status="identical", verdict="identical", rule="equal values in every round")
    test = mixture_test(np.log(np.asarray(xa, dtype=np.float64)), np.log(np.asarray(xb, dtype=np.float64)), alpha,
                        phi)
    if test is None:
        return replace(base, rule=f"no test before {MIN_ROUNDS} rounds")
    lo, hi = (math.exp(test.interval[0]), math.exp(test.interval[1]))
    base = replace(base, ratio=math.exp(test.estimate), interval=(lo, hi), p_value=test.p_value, sd=test.sd)
    bound = math.log1p(threshold)
    shown = f"{100 * (1 - alpha):g}% confidence sequence {interval_text((lo, hi))}"
    limit = f"the {100 * threshold:g}% minimum change"
    if test.p_value <= alpha:
        big = abs(test.estimate) > bound
        better = test.estimate > 0 if direction == "higher" else test.estimate < 0
        return replace(base, status="significant",
                       verdict=("better" if better else "worse") if big else "no significant difference",
                       rule=f"always-valid p = {test.p_value:.2g} <= {alpha:g}, its share of alpha; {shown}"
                            + ("" if big else f"; {math.exp(test.estimate):.3f}x is below {limit}"))
    if -bound <= test.interval[0] and test.interval[1] <= bound:
        return replace(base, status="futile", verdict="no significant difference",
                       rule=f"the {shown} lies within {limit} either way")
    return replace(base, rule=f"always-valid p = {test.p_value:.2g} > {alpha:g}, its share of alpha, and the {shown} "
                              f"still holds changes beyond {limit}")


def interval_text(interval: tuple[float, float]) -> str:
    """A ratio interval, ``[0.912, 1.034]``; one the data cannot bound yet reads ``(unbounded yet)``."""
    lo, hi = interval
    if not (math.isfinite(hi) and lo > 0):
        return "(unbounded yet)"
    return f"[{lo:.3f}, {hi:.3f}]"


def alphas(alpha: float) -> dict[str, float]:
    """Each headline's share of alpha, by role (speed :data:`SPEED_WEIGHT` to the loss's 1)."""
    speed = alpha * SPEED_WEIGHT / (SPEED_WEIGHT + 1)
    return {"speed": speed, "loss": alpha - speed}


def judge(rounds: Sequence[tuple[RunData, RunData]], alpha: float = 0.05, phi: float = PHI,
          min_change: float | None = None) -> list[Headline]:
    """The speed and the loss after the rounds so far (``rounds``: (A run, B run) of each round, in order), each
    by the first of its rows (:data:`SPEED_ROWS`, :data:`LOSS_ROWS`) that every run has. ``min_change``
    overrides the speed's minimum change (the metric's threshold, 5%)."""
    metrics = headline_metrics()
    shares = alphas(alpha)
    out = []
    for role, names, values in (("speed", SPEED_ROWS, _speed_values), ("loss", LOSS_ROWS, _loss_values)):
        first: Headline | None = None
        for name in (n for n in names if n in metrics):
            spec = metrics[name].spec
            threshold = min_change if min_change is not None and role == "speed" else spec.threshold
            got = values(metrics[name], rounds)
            if isinstance(got, str):
                first = first or Headline(name, role, shares[role], threshold, spec.direction, "unavailable",
                                          "unavailable", got)
                continue
            out.append(judge_headline(name, got[0], got[1], shares[role], threshold, spec.direction, phi, role))
            break
        else:
            assert first is not None
            out.append(first)
    return out


def finished(headlines: Sequence[Headline]) -> bool:
    """The speed is decided (module docstring: the loss does not hold the sequence)."""
    return speed_of(headlines).decided


def speed_of(headlines: Sequence[Headline]) -> Headline:
    """The speed headline."""
    return next(h for h in headlines if h.role == "speed")


def speed_ratio(h: Headline) -> float | None:
    """B's speed over A's: the ratio of a rate, the inverse ratio of a time."""
    if h.ratio is None:
        return None
    return h.ratio if h.direction == "higher" else 1 / h.ratio


__all__ = [
    "LOSS", "LOSS_ROWS", "MIN_ROUNDS", "PHI", "SPEED", "SPEED_ROWS", "Headline", "Mixture", "alphas",
    "bayes_factor", "finished", "interval_text", "judge", "judge_headline", "mixture_test", "radius", "speed_of",
    "speed_ratio",
]
