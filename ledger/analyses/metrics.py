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
        return replace(_row(spec, a, b, None, None, None, None, n, threshold, IDENTICAL, None, note), **within)
    big, effect = _big(spec, a, b, threshold)
    log_scale = _log_scale(spec, [*va, *vb])
    xa = np.log(va) if log_scale else np.asarray(va, dtype=np.float64)
    xb = np.log(vb) if log_scale else np.asarray(vb, dtype=np.float64)
    test = stats.t_test(xa, xb, settings.level, floor.sd if floor else None, floor.df if floor else 0)
    if test is None:
        if spec.deterministic:
            verdict = _direction_verdict(spec, effect) if big else NO_DIFFERENCE
            return replace(_row(spec, a, b, None, None, None, None, n, threshold, verdict,
                                None, note + ("; " if note else "") + "deterministic: judged by the threshold"),
                           **within)
        why = "one run per side and no noise floor for this metric on this hardware and drivers: record replicates"
        return replace(_row(spec, a, b, None, None, None, None, n, threshold, INCONCLUSIVE, why, note), **within)
    ci = (math.exp(test.ci[0]), math.exp(test.ci[1])) if log_scale else test.ci
    own = n[0] + n[1] - 2
    source = f"{n[0]} vs {n[1]} runs" + (f", {floor.describe()}" if floor else "")
    verdict = _direction_verdict(spec, effect) if big and test.p_value < settings.alpha else NO_DIFFERENCE
    row = _row(spec, a, b, test.p_value, "t-test" if own else "t-test (noise floor)", ci,
               "ratio" if log_scale else "delta", n, threshold, verdict, None,
               note + ("; " if note else "") + f"between runs: {source}; df={test.df}")
    return replace(row, evidence=source, df=test.df, **within)


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
    """The rows with the headline family's false alarms held at ``alpha`` in all (strong control).

    Each headline family (the speed rows, or a headline row and the rows of its family) is tested once,
    by its first tested row (the headline itself when it has a test): these primary tests share alpha by
    Holm's weighted step-down (Holm 1979): the smallest ``p / w`` is significant when ``p < alpha w / W``,
    ``W`` the weights not yet rejected, and so on until one is not; speed weighs :data:`SPEED_WEIGHT`,
    every other headline 1. The other rows of a family keep a verdict only when their primary is
    significant and their own p is below the level their primary met (a fixed-sequence gate). A verdict
    taken back becomes ``no significant difference`` with the reason in its note. Rows outside the
    headline families are left as they are: they describe, each at alpha."""
    out = list(rows)
    def family(row: MetricRow) -> str:
        return "speed" if row.family in SPEED_FAMILIES else row.family

    families: dict[str, list[int]] = {family(row): [] for row in out if row.headline}
    for i, row in enumerate(out):
        if family(row) in families:
            families[family(row)].append(i)
    primary: dict[str, int] = {}  # family -> the row of its primary test
    p: dict[str, float] = {}  # family -> that test's p
    for key, members in families.items():
        tested = [(i, q) for i in members if (q := out[i].p_value) is not None]
        if tested:
            primary[key], p[key] = next(((i, q) for i, q in tested if out[i].headline), tested[0])
    level: dict[str, float] = {}  # the level each rejected primary met
    left = {key: SPEED_WEIGHT if key == "speed" else 1.0 for key in primary}  # weights not yet rejected
    while left:
        key = min(left, key=lambda k: p[k] / left[k])
        cut = alpha * left[key] / sum(left.values())
        if p[key] >= cut:
            break
        level[key] = cut
        del left[key]
    shown = len(primary)
    for key, members in families.items():
        for i in members:
            row = out[i]
            if row.verdict not in _CALLED or row.p_value is None:
                continue
            if key not in level:
                head = out[primary[key]]  # a tested row (this one) puts its family in primary
                why = (f"not significant once the {shown} headline families share alpha {alpha:g} (Holm, weighted): "
                       + (f"{head.name} p={head.p_value:.3g}" if i == primary[key] else
                          f"its headline {head.name} is not significant (p={head.p_value:.3g})"))
            elif row.p_value >= level[key]:
                why = f"not significant at the level its headline met ({level[key]:.3g}; p={row.p_value:.3g})"
            else:
                continue
            out[i] = replace(row, verdict=NO_DIFFERENCE, note=(row.note + "; " if row.note else "") + why)
    return out


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
