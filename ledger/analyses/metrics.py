"""Metrics side by side: what a metric and a provider of metrics are, and the statistics that turn two sides
into a verdict.

A **metric** says how to observe one quantity in a run (:class:`RunMetric`: per-run samples or one value)
or in two sides at once (:class:`PairedMetric`: values at shared points, e.g. losses at matched token
counts). A **provider** builds the metrics that apply to the runs being compared (evals per source, timing
per phase...). The built-in providers are :data:`ledger.analyses.builtin_metrics.BUILTIN`; :func:`plugins`
finds the ``METRICS`` of every other module of :mod:`ledger.analyses`, so a new analysis plugs in without
editing either file; :func:`ledger.analyses.builtin_metrics.compare_all` judges them all.

How a row is decided (:func:`compare_metric`; the rules of :mod:`ledger.analyses.evidence`):

- each run of a side gives one value (its statistic over its samples; post-warm-up steps are samples);
  a side is its named receipt plus the replicates compare found (or a ``--group``);
- the sides' per-run values are compared by a t test (on the log scale for ratio metrics) whose variance
  pools the sides' own replicates and the ledger's noise floor for the metric on that hardware; the CI is
  of the ratio B/A (or the difference B - A on a delta scale);
- without any between-run evidence (one run per side, no floor) the verdict is ``inconclusive``, with the
  commands that get replicates: samples within one run never decide between two configurations;
- a change counts only when it is significant (p < alpha) **and** larger than the metric's threshold (the
  smallest change worth reporting); the verdict is then better or worse by the metric's direction
  (``higher``/``lower`` when a metric has no better direction), else ``no significant difference``;
- equal values on both sides are ``identical``; deterministic quantities (memory) with one run per side are
  judged by the threshold alone;
- the **headline** rows (throughput, loss at matched tokens, time to a quality gate) are one family of
  claims: their verdicts share alpha (:func:`control_headlines`), so that two runs of one configuration are
  called different on *any* headline at most alpha of the time, not alpha per headline; the rows that move
  with a headline (step time, TFLOP/s and MFU with throughput; the loss rows with the loss) follow it;
- a metric that cannot be computed on a side is ``unavailable`` with the reason, never zero;
- one run per side also gets a within-run interval of each side's value (batch means that respect
  autocorrelation, :func:`ledger.analyses.stats.within_run_interval`): how precisely that run was measured,
  not evidence about the configuration.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ledger.analyses import evidence, stats
from ledger.analyses.series import RunData

Direction = Literal["higher", "lower", "none"]
"""Which way is better: higher, lower, or none (a change is only higher or lower)."""
Scale = Literal["ratio", "delta"]
"""ratio: relative threshold and a CI of B/A; delta: absolute threshold and a CI of B - A."""
Statistic = Literal["median", "p90", "mean", "count", "value"]

RANK_TEST_MAX = 20_000
"""The rank tests use at most this many evenly spaced samples per side (the bootstrap uses all of them)."""


@dataclass(frozen=True)
class Settings:
    """Statistical settings of a comparison."""

    alpha: float = 0.05
    """Significance level of the tests."""
    level: float = 0.95
    """Confidence level of the intervals."""
    n_boot: int = 2000
    """Draws of the attribution's intervals."""
    seed: int = 0
    """Seed of the draws (each headline draws from its own stream, seeded by this and its name)."""
    noise: float | None = None
    """Overrides every ratio-scale metric's threshold (the smallest relative change worth reporting)."""

    def rng(self, name: str) -> np.random.Generator:
        """The metric's own random stream: results never depend on which other metrics ran."""
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])


@dataclass(frozen=True)
class Spec:
    """What a metric is and how it is judged."""

    name: str
    """Row name, e.g. ``tokens/s per device``."""
    family: str
    """Section of the report: throughput, step time, loss, evals, routing, timing, stability, memory, energy."""
    unit: str
    """Unit of a and b."""
    direction: Direction
    """Which way is better."""
    threshold: float
    """The smallest change worth reporting: relative (0.05 = 5%) on a ratio scale, absolute (in ``unit``) on a
    delta scale. Whether a change is real is decided by the between-run test, not by this."""
    scale: Scale = "ratio"
    """ratio or delta."""
    statistic: Statistic = "median"
    """How a run's samples become its value."""
    deterministic: bool = False
    """One value per run is reliable (judged by the threshold alone when it cannot be tested)."""
    note: str = ""
    """How the metric is computed (shown with the row)."""


@dataclass(frozen=True)
class Observation:
    """One run's evidence for one metric: samples, or one value, or the reason there is none."""

    value: float | None
    """The run's value (its statistic over the samples), None when unavailable."""
    samples: NDArray[np.float64] | None = None
    """Within-run samples (post-warm-up steps), when the metric has them."""
    reason: str | None = None
    """Why the value is unavailable."""
    note: str = ""
    """Detail for this run (e.g. which peak FLOP/s)."""


def unavailable(reason: str) -> Observation:
    """An observation that cannot be made, with the reason."""
    return Observation(None, None, reason)


@dataclass(frozen=True)
class RunMetric:
    """A metric observed in each run on its own."""

    spec: Spec
    observe: Callable[[RunData], Observation]


@dataclass(frozen=True)
class Paired:
    """Values of both sides at shared points (rows: points; columns: runs), or the reason there are none."""

    a: NDArray[np.float64]
    b: NDArray[np.float64]
    note: str = ""


@dataclass(frozen=True)
class PairedMetric:
    """A metric observed on both sides at once, at shared points (matched tokens or wall time)."""

    spec: Spec
    observe: Callable[[Sequence[RunData], Sequence[RunData]], Paired | str]


Metric = RunMetric | PairedMetric


@dataclass(frozen=True)
class MetricProvider:
    """Builds the metrics that apply to two sides (e.g. one row per eval source present)."""

    family: str
    """What the provider measures."""
    build: Callable[[Sequence[RunData], Sequence[RunData]], list[Metric]]
    """(runs of A, runs of B) -> metrics."""


@dataclass(frozen=True)
class MetricRow:
    """One metric side by side."""

    name: str
    family: str
    unit: str
    direction: Direction
    a: float | None
    """A's value (the mean over its runs for a group)."""
    b: float | None
    delta: float | None
    """b - a."""
    ratio: float | None
    """b / a (None when a is 0 or the values are not positive)."""
    ci: tuple[float, float] | None
    """Confidence interval of the ratio (``ci_of`` = ratio) or of the delta."""
    ci_of: Literal["ratio", "delta"] | None
    p_value: float | None
    test: str | None
    """t-test (between runs), t-test (noise floor), or None."""
    n: tuple[int, int]
    """Runs per side."""
    threshold: float
    scale: Scale
    verdict: str
    """better, worse, higher, lower, no significant difference, identical, inconclusive, unavailable."""
    reason: str | None = None
    """Why the metric is unavailable or untested."""
    note: str = ""
    headline: bool = False
    evidence: str | None = None
    """What the between-run test rested on, e.g. '3 vs 3 runs, noise floor 4.8% (...)'."""
    df: int | None = None
    """Degrees of freedom of the between-run test."""
    ci_a: tuple[float, float] | None = None
    """Within-run interval of A's value (one run per side): how precisely that run was measured."""
    ci_b: tuple[float, float] | None = None
    rule: str | None = None
    """The rule that decided the verdict, in words: the p-value against the level it was tested at (a headline
    family's share of alpha), or the minimum change the estimate is below ("1.05x is below the 5% minimum
    change (p = 0.001)")."""
    level: float | None = None
    """The level the row's p was judged at (alpha, or its share of alpha once the rows share it)."""
    sd: float | None = None
    """The pooled SD of one run's value in the between-run test (log scale for ratio CIs)."""
    runs_for_power: int | None = None
    """An undecided headline (inconclusive, or no significant difference while its CI still holds a change as
    large as the minimum change): the runs per side that would give 80% power for the minimum change at the
    measured noise (:mod:`ledger.analyses.power`); None otherwise or when more than 200."""

    def to_json(self) -> dict[str, Any]:
        """The row with stable keys."""
        return {
            "name": self.name, "family": self.family, "unit": self.unit, "direction": self.direction,
            "a": self.a, "b": self.b, "delta": self.delta, "ratio": self.ratio,
            "ci": list(self.ci) if self.ci is not None else None, "ci_of": self.ci_of,
            "p_value": self.p_value, "test": self.test, "n": list(self.n), "threshold": self.threshold,
            "scale": self.scale, "verdict": self.verdict, "reason": self.reason, "note": self.note,
            "evidence": self.evidence, "df": self.df,
            "ci_a": list(self.ci_a) if self.ci_a is not None else None,
            "ci_b": list(self.ci_b) if self.ci_b is not None else None,
            "rule": self.rule, "level": self.level, "sd": self.sd, "runs_for_power": self.runs_for_power,
        }


# ------------------------------------------------------------------------------------------ the engine
INCONCLUSIVE = "inconclusive"
NO_DIFFERENCE = "no significant difference"
IDENTICAL = "identical"


def summary_statistic(samples: NDArray[np.float64], statistic: Statistic) -> float:
    """One run's value of a metric: the statistic of its samples."""
    if statistic == "median":
        return stats.median(samples)
    if statistic == "p90":
        return float(np.quantile(samples, 0.9))
    if statistic == "count":
        return float(samples.sum())
    return float(samples.mean())


def _statistic_fn(statistic: Statistic) -> Callable[[NDArray[np.float64]], float]:
    return lambda x: summary_statistic(x, statistic)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0 or not (a > 0 and b >= 0):
        return None
    return b / a


def _big(spec: Spec, a: float, b: float, threshold: float) -> tuple[bool, float]:
    """Whether the change from a to b exceeds the threshold, and its signed size."""
    if spec.scale == "ratio" and a > 0 and b > 0:
        effect = math.log(b / a)
        return abs(effect) > math.log1p(threshold), effect
    effect = b - a
    return abs(effect) > (threshold * abs(a) if spec.scale == "ratio" else threshold), effect


def _direction_verdict(spec: Spec, effect: float) -> str:
    if spec.direction == "none":
        return "higher" if effect > 0 else "lower"
    better = effect > 0 if spec.direction == "higher" else effect < 0
    return "better" if better else "worse"


def _log_scale(spec: Spec, values: Sequence[float]) -> bool:
    return spec.scale == "ratio" and all(v > 0 for v in values)


def compare_metric(metric: Metric, runs_a: Sequence[RunData], runs_b: Sequence[RunData], settings: Settings,
                   groups: Sequence[Sequence[RunData]] = ()) -> MetricRow:
    """One row: both sides' values, delta, ratio, CI, test and verdict (see the module docstring). ``groups``
    are the ledger's replicate groups on the same hardware and drivers, for the metric's noise floor."""
    spec = metric.spec
    threshold = settings.noise if settings.noise is not None and spec.scale == "ratio" else spec.threshold
    values = _per_run(metric, runs_a, runs_b)
    if isinstance(values, MetricRow):
        return replace(values, threshold=threshold)
    va, vb, samples_a, samples_b, note = values
    floor = _floor(metric, groups, _log_scale(spec, [*va, *vb]))
    return judge(spec, va, vb, settings, threshold, note, floor, samples_a, samples_b)


_Values = tuple[list[float], list[float], NDArray[np.float64] | None, NDArray[np.float64] | None, str]


def _per_run(metric: Metric, runs_a: Sequence[RunData], runs_b: Sequence[RunData]) -> _Values | MetricRow:
    """Each run's value (and, for one run per side, its samples), or an ``unavailable`` row."""
    spec = metric.spec
    if isinstance(metric, PairedMetric):
        got = metric.observe(runs_a, runs_b)
        if isinstance(got, str):
            return _row(spec, None, None, None, None, None, None, (0, 0), 0.0, "unavailable", got, spec.note)
        note = "; ".join(x for x in (spec.note, got.note) if x)
        return ([float(v) for v in got.a.mean(axis=0)], [float(v) for v in got.b.mean(axis=0)], None, None, note)
    obs_a = [metric.observe(r) for r in runs_a]
    obs_b = [metric.observe(r) for r in runs_b]
    notes = sorted({o.note for o in obs_a + obs_b if o.note})
    note = "; ".join([spec.note, *notes] if spec.note else notes)
    missing = [(side, r, o) for side, runs, obs in (("A", runs_a, obs_a), ("B", runs_b, obs_b))
               for r, o in zip(runs, obs, strict=True) if o.value is None]
    if missing:
        side, run, o = missing[0]
        single = len(runs_a) == 1 if side == "A" else len(runs_b) == 1
        label = side if single else f"{side} {run.label}"
        return _row(spec, None, None, None, None, None, None, (0, 0), 0.0, "unavailable", f"{label}: {o.reason}",
                    note)
    single = len(runs_a) == 1 and len(runs_b) == 1
    return ([float(o.value) for o in obs_a if o.value is not None],
            [float(o.value) for o in obs_b if o.value is not None],
            obs_a[0].samples if single else None, obs_b[0].samples if single else None, note)


def _floor(metric: Metric, groups: Sequence[Sequence[RunData]], log_scale: bool) -> evidence.Floor | None:
    """The metric's noise floor from the replicate groups (each group observed on its own)."""
    values: list[list[float]] = []
    for group in groups:
        if isinstance(metric, PairedMetric):
            got = metric.observe(group, group)
            if not isinstance(got, str):
                values.append([float(v) for v in got.a.mean(axis=0)])
            continue
        values.append([float(o.value) for o in (metric.observe(r) for r in group) if o.value is not None])
    return evidence.learn_floor(values, log_scale)


def judge(spec: Spec, va: Sequence[float], vb: Sequence[float], settings: Settings, threshold: float,
          note: str = "", floor: evidence.Floor | None = None, samples_a: NDArray[np.float64] | None = None,
          samples_b: NDArray[np.float64] | None = None) -> MetricRow:
    """The verdict on per-run values ``va`` and ``vb`` (the module docstring's rules)."""
    a, b = float(np.mean(va)), float(np.mean(vb))
    n = (len(va), len(vb))
    within = _within(spec, samples_a, samples_b, settings.level)
    if sorted(va) == sorted(vb):
        return replace(_row(spec, a, b, None, None, None, None, n, threshold, IDENTICAL, None, note),
                       rule="equal values on both sides", **within)
    big, effect = _big(spec, a, b, threshold)
    log_scale = _log_scale(spec, [*va, *vb])
    xa = np.log(va) if log_scale else np.asarray(va, dtype=np.float64)
    xb = np.log(vb) if log_scale else np.asarray(vb, dtype=np.float64)
    test = stats.t_test(xa, xb, settings.level, floor.sd if floor else None, floor.df if floor else 0)
    if test is None:
        if spec.deterministic:
            verdict = _direction_verdict(spec, effect) if big else NO_DIFFERENCE
            rule = (f"deterministic, one run per side: {_size(spec.scale, a, b, spec.unit)} "
                    + ("exceeds" if big else "is within") + f" the {_threshold_text(spec.scale, threshold, spec.unit)}")
            return replace(_row(spec, a, b, None, None, None, None, n, threshold, verdict,
                                None, note + ("; " if note else "") + "deterministic: judged by the threshold"),
                           rule=rule, **within)
        why = "one run per side and no noise floor for this metric on this hardware and drivers: record replicates"
        return replace(_row(spec, a, b, None, None, None, None, n, threshold, INCONCLUSIVE, why, note),
                       rule="no between-run test: one run per side and no noise floor", **within)
    ci = (math.exp(test.ci[0]), math.exp(test.ci[1])) if log_scale else test.ci
    own = n[0] + n[1] - 2
    source = f"{n[0]} vs {n[1]} runs" + (f", {floor.describe()}" if floor else "")
    p = test.p_value
    how = f"between runs: {source}; df={test.df}"
    if spec.statistic == "count":
        p, counted = max(p, _poisson_p(va, vb)), p
        how += f"; counts: the larger of the t test's p ({counted:.3g}) and the Poisson E-test's"
    verdict = _direction_verdict(spec, effect) if big and p < settings.alpha else NO_DIFFERENCE
    row = _row(spec, a, b, p, "t-test" if own else "t-test (noise floor)", ci,
               "ratio" if log_scale else "delta", n, threshold, verdict, None, note + ("; " if note else "") + how)
    row = replace(row, evidence=source, df=test.df, sd=test.sd, **within)
    return replace(row, rule=rule_text(row, settings.alpha), level=settings.alpha)


def _poisson_p(va: Sequence[float], vb: Sequence[float]) -> float:
    """p of the Poisson E-test (Krishnamoorthy and Thomson 2004, :func:`scipy.stats.poisson_means_test`) that
    the sides' event counts per run have equal rates: a count never differs "significantly" because the runs
    it is compared with happened to have equal counts (a noise floor of zero variance)."""
    from scipy import stats as sps

    ka, kb = round(sum(va)), round(sum(vb))
    if ka + kb == 0:
        return 1.0
    return float(sps.poisson_means_test(kb, len(vb), ka, len(va)).pvalue)


def _size(scale: Scale, a: float, b: float, unit: str) -> str:
    """The estimate in the words of the verdict: ``1.05x`` (ratio scale) or ``+2 steps`` (delta)."""
    if scale == "ratio" and a > 0 and b >= 0:
        return f"{b / a:.3g}x"
    d = b - a
    return f"{d:+.3g}" + (f" {unit}" if unit and unit not in ("loss", "ratio") else "")


def _threshold_text(scale: Scale, threshold: float, unit: str) -> str:
    if scale == "ratio":
        return f"{100 * threshold:g}% minimum change"
    return f"{threshold:g}" + (f" {unit}" if unit and unit not in ("loss", "ratio", "fraction") else "") + \
        " minimum change"


def ratio_words(ratio: float, of: str = "A", what: str = "the speed") -> str:
    """A ratio in words that cannot be misread: ``0.90x the speed of A (10% slower)``, never "0.90x slower"."""
    pct = abs(ratio - 1) * 100
    if not round(pct):
        return f"{ratio:.2f}x {what} of {of}"
    way = ("faster" if ratio > 1 else "slower") if what == "the speed" else ("higher" if ratio > 1 else "lower")
    return f"{ratio:.2f}x {what} of {of} ({pct:.0f}% {way})"


def is_big(row: MetricRow) -> bool:
    """Whether the row's estimate exceeds its minimum change (the rule of :func:`judge`)."""
    if row.a is None or row.b is None:
        return False
    if row.scale == "ratio" and row.a > 0 and row.b > 0:
        return abs(math.log(row.b / row.a)) > math.log1p(row.threshold)
    return abs(row.b - row.a) > (row.threshold * abs(row.a) if row.scale == "ratio" else row.threshold)


def rule_text(row: MetricRow, level: float, whose: str = "") -> str:
    """The rule that decided a tested row at ``level`` (``whose``: e.g. "the speed family's level")."""
    assert row.p_value is not None and row.a is not None and row.b is not None
    at = f"{level:.2g}" + (f", {whose}" if whose else "")
    size = _size(row.scale, row.a, row.b, row.unit)
    limit = _threshold_text(row.scale, row.threshold, row.unit)
    p = f"p = {row.p_value:.2g}"
    if row.p_value >= level:
        return f"{p} {'>' if row.p_value > level else '>='} {at}"
    if not is_big(row):
        return f"{size} is below the {limit} ({p} < {at})"
    return f"{p} < {at}, and {size} exceeds the {limit}"


def undecided(row: MetricRow) -> bool:
    """A tested row whose CI still holds a change as large as the minimum change either way, and that is not
    called better or worse: more runs would decide it."""
    if row.verdict in _CALLED or row.ci is None or row.a is None:
        return False
    lo, hi = row.ci
    if row.ci_of == "ratio":
        bound = 1 + row.threshold
        return lo < 1 / bound or hi > bound
    limit = row.threshold * abs(row.a) if row.scale == "ratio" else row.threshold
    return lo < -limit or hi > limit


SPEED_FAMILIES = ("throughput", "step time")
"""Families of rows that measure one quantity, the speed, each way (tokens/s, TFLOP/s, MFU, step time)."""
SPEED_WEIGHT = 4.0
"""The speed headline's weight in the headlines' share of alpha against 1 for each other headline: with the
loss alone beside it, speed is tested at 0.8 alpha and the loss at 0.2 alpha (either at the full alpha once the
other is significant). The ledger exists to say whether a change made training faster; the loss verdict
guards that it did not make it worse. Power for a planted 15% throughput change, 3 vs 3 runs and a noise floor
of 16 degrees of freedom: 0.85-0.87 at 0.04 by the noncentral t, against 0.87-0.90 at 0.05."""
_CALLED = ("better", "worse", "higher", "lower")


def control_headlines(rows: Sequence[MetricRow], alpha: float) -> list[MetricRow]:
    """The rows with false alarms held at ``alpha`` in all (strong control), the headline families and the
    rows outside them alike, each row's rule naming the level it was tested at.

    Each headline family (the speed rows, or a headline row and the rows of its family) is tested once,
    by its first tested row (the headline itself when it has a test): these primary tests share alpha by
    Holm's weighted step-down (Holm 1979): the smallest ``p / w`` is significant when ``p < alpha w / W``,
    ``W`` the weights not yet rejected, and so on until one is not; speed weighs :data:`SPEED_WEIGHT`,
    every other headline 1. The other rows of a family keep a verdict only when their primary is
    significant and their own p is below the level their primary met (a fixed-sequence gate). The rows
    outside the headline families (routing, timing per phase, memory, goodput, evals...) each measure a
    quantity of their own: they share another alpha by Holm's step-down over all of them, so that two runs of
    one configuration have some such row called different at most alpha of the time, however many rows
    there are (tested each at alpha, peak host memory and goodput alarmed on a third of real A/A pairs). A
    verdict taken back becomes ``no significant difference`` with the reason in its note. An undecided
    headline gets the runs per side that would give it 80% power (:attr:`MetricRow.runs_for_power`)."""
    out = _control_side(_control_headline_families(list(rows), alpha), alpha)
    return [_with_power(row) for row in out]


def _family_key(row: MetricRow) -> str:
    return "speed" if row.family in SPEED_FAMILIES else row.family


def _control_headline_families(out: list[MetricRow], alpha: float) -> list[MetricRow]:
    families: dict[str, list[int]] = {_family_key(row): [] for row in out if row.headline}
    for i, row in enumerate(out):
        if _family_key(row) in families:
            families[_family_key(row)].append(i)
    primary: dict[str, int] = {}  # family -> the row of its primary test
    p: dict[str, float] = {}  # family -> that test's p
    for key, members in families.items():
        tested = [(i, q) for i in members if (q := out[i].p_value) is not None]
        if tested:
            primary[key], p[key] = next(((i, q) for i, q in tested if out[i].headline), tested[0])
    level: dict[str, float] = {}  # the level each rejected primary met
    tried: dict[str, float] = {}  # the level each primary was last tested at
    left = {key: SPEED_WEIGHT if key == "speed" else 1.0 for key in primary}  # weights not yet rejected
    while left:
        for k in left:
            tried[k] = alpha * left[k] / sum(left.values())
        key = min(left, key=lambda k: p[k] / left[k])
        if p[key] >= tried[key]:
            break
        level[key] = tried[key]
        del left[key]
    shown = len(primary)
    for key, members in families.items():
        whose = f"the {key} family's level" + (f" (Holm over {shown} headline families)" if shown > 1 else "")
        for i in members:
            row = out[i]
            if row.p_value is None or row.verdict not in (*_CALLED, NO_DIFFERENCE):
                continue
            at = level.get(key, tried[key])
            head = out[primary[key]]
            if i != primary[key] and key not in level:
                rule = f"its headline {head.name} is not significant (p = {head.p_value:.2g} >= {at:.2g}, {whose})"
            else:
                rule = rule_text(row, at, whose)
            row = out[i] = replace(row, rule=rule, level=at)
            if row.verdict not in _CALLED:
                continue
            if key not in level:
                why = (f"not significant once the {shown} headline families share alpha {alpha:g} (Holm, weighted): "
                       + (f"{head.name} p={head.p_value:.3g}" if i == primary[key] else
                          f"its headline {head.name} is not significant (p={head.p_value:.3g})"))
            elif (row.p_value or 0.0) >= level[key]:
                why = f"not significant at the level its headline met ({level[key]:.3g}; p={row.p_value:.3g})"
            else:
                continue
            out[i] = replace(row, verdict=NO_DIFFERENCE, note=(row.note + "; " if row.note else "") + why)
    return out


def _control_side(out: list[MetricRow], alpha: float) -> list[MetricRow]:
    """Holm's step-down over every tested row outside the headline families (equal weights)."""
    heads = {_family_key(row) for row in out if row.headline}
    tested = [i for i, row in enumerate(out) if _family_key(row) not in heads and row.p_value is not None
              and row.verdict in (*_CALLED, NO_DIFFERENCE)]
    order = sorted(tested, key=lambda i: out[i].p_value or 0.0)
    m = len(order)
    stopped = False
    for rank, i in enumerate(order):
        row = out[i]
        cut = alpha / (m - rank)
        whose = f"its share of alpha {alpha:g} among {m} rows outside the headlines (Holm)" if m > 1 else ""
        assert row.p_value is not None
        stopped = stopped or row.p_value >= cut
        if not stopped:
            out[i] = replace(row, rule=rule_text(row, cut, whose), level=cut)
            continue
        out[i] = row = replace(row, level=cut, rule=rule_text(row, cut, whose) if row.p_value >= cut else
                               f"p = {row.p_value:.2g}, but a smaller p before it did not pass its share "
                               f"(Holm over {m} rows outside the headlines)")
        if row.verdict in _CALLED:
            out[i] = replace(row, verdict=NO_DIFFERENCE, note=(row.note + "; " if row.note else "")
                             + f"not significant once the {m} rows outside the headlines share alpha {alpha:g} "
                               f"(Holm): p={row.p_value:.3g} against {cut:.3g}")
    return out


def _with_power(row: MetricRow) -> MetricRow:
    """An undecided headline row with the runs per side that would give 80% power for its minimum change."""
    from ledger.analyses.power import runs_for_power

    if not row.headline or row.sd is None or row.df is None or not undecided(row):
        return row
    level = row.level if row.level is not None else 0.05
    prior = max(0, row.df - (row.n[0] + row.n[1] - 2))
    need = runs_for_power(row.sd, row.threshold, level, prior_df=prior, log_scale=row.ci_of == "ratio")
    return replace(row, runs_for_power=need)


def _within(spec: Spec, sa: NDArray[np.float64] | None, sb: NDArray[np.float64] | None,
            level: float) -> dict[str, Any]:
    """Within-run intervals of each side's value (one run per side, metrics with samples)."""
    out: dict[str, Any] = {}
    for key, samples in (("ci_a", sa), ("ci_b", sb)):
        if samples is None or samples.size < stats.INTERVAL_MIN_SAMPLES or spec.statistic == "count":
            continue
        iv = stats.within_run_interval(samples, _statistic_fn(spec.statistic), level)
        if iv is not None:
            out[key] = (iv.low, iv.high)
    return out


def _row(spec: Spec, a: float | None, b: float | None, p: float | None, test: str | None,
         ci: tuple[float, float] | None, ci_of: Literal["ratio", "delta"] | None, n: tuple[int, int],
         threshold: float, verdict: str, reason: str | None, note: str) -> MetricRow:
    delta = b - a if a is not None and b is not None else None
    return MetricRow(spec.name, spec.family, spec.unit, spec.direction, a, b, delta, _ratio(a, b), ci, ci_of, p,
                     test, n, threshold, spec.scale, verdict, reason, note)


@dataclass(frozen=True)
class Plugins:
    """What the other modules of :mod:`ledger.analyses` contribute."""

    metrics: list[MetricProvider] = field(default_factory=list)
    headlines: list[Any] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Modules that failed to import (their metrics are missing; the comparison still runs)."""


def plugins() -> Plugins:
    """``METRICS`` and ``HEADLINES`` of every module of :mod:`ledger.analyses` (imported on demand)."""
    import ledger.analyses as package

    found = Plugins()
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception as exc:  # one broken analysis must not take compare down with it
            found.problems.append(f"ledger.analyses.{info.name} failed to import: {str(exc).splitlines()[0]}")
            continue
        found.metrics.extend(getattr(module, "METRICS", ()))
        found.headlines.extend(getattr(module, "HEADLINES", ()))
    return found
