"""`ledger ab A B --until-verdict`: interleaved rounds (A then B, each round a new seed) until the sequential test
of :mod:`ledger.analyses.sequential` decides, or the cap.

:func:`until_verdict` is the loop, and the whole of the command's logic: it is handed a function that records
round ``k`` and returns its two runs, judges after each round, and stops when every headline is decided (the
speed, and the loss at matched tokens unless bit-identical) or at the cap. The command hands it a recorder
that runs `ledger record` twice per round; the calibration (``tests/ledger/analyses/test_sequential.py`` and
``bench/bench_sequential.py``) hands it one that makes simulated runs: both go through this code.

The cap: ``--max-rounds N``, else the runs per side that give a fixed design 80% power for the speed's minimum
change at the noise measured before the rounds (the comparison's between-run SD, or the ledger's noise floor:
the number `compare` prints for an undecided headline, :func:`ledger.analyses.power.runs_for_power`), else,
when nothing was measured before, the same number at the noise of the rounds themselves once three rounds are
in. The test is valid whatever the stopping rule, a cap that moves with the data included. At the cap an
undecided headline is inconclusive, with how many more runs would decide it.

The cost is printed against the fixed design of that power: its rounds times the device-hours a round took here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

from ledger.analyses.power import MAX_RUNS, runs_for_power
from ledger.analyses.pricing import devices_of
from ledger.analyses.sequential import (
    MIN_ROUNDS,
    PHI,
    SPEED_ROWS,
    Headline,
    alphas,
    finished,
    interval_text,
    judge,
    speed_of,
    speed_ratio,
)
from ledger.analyses.series import RunData
from ledger.errors import BadInput, LedgerError
from ledger.replay.replicates import MAX_TIMES

if TYPE_CHECKING:
    from ledger.store.receipts import Ledger
    from schemas import Receipt

NOISE_ROUNDS = 3
"""Rounds after which the rounds' own noise sets the cap when nothing was measured before."""
MIN_CAP = 3
"""The cap is never below this many rounds."""


@dataclass(frozen=True)
class Options:
    """How `ab --until-verdict` runs."""

    alpha: float = 0.05
    max_rounds: int | None = None
    """The cap (None: the sample-size hint, see the module docstring)."""
    min_change: float | None = None
    """Overrides the speed's minimum change (5%)."""
    noise_sd: float | None = None
    """Run-to-run SD of the speed (log scale) measured before the rounds: sets the default cap."""
    prior_df: int = 0
    """Degrees of freedom of that measurement beyond the sides' own runs (a noise floor's)."""
    phi: float = PHI

    def __post_init__(self) -> None:
        if self.max_rounds is not None and not MIN_ROUNDS <= self.max_rounds <= MAX_TIMES:
            raise BadInput(f"--max-rounds must be between {MIN_ROUNDS} and {MAX_TIMES}, got {self.max_rounds}")
        if not 0 < self.alpha < 1:
            raise BadInput(f"alpha must be between 0 and 1, got {self.alpha}")


@dataclass(frozen=True)
class Result:
    """What `ab --until-verdict` found."""

    rounds: int
    verdict: str
    """The speed's verdict: better, worse, no significant difference, identical, inconclusive, unavailable."""
    stopped: str
    """decided (every headline) or cap."""
    cap: int
    cap_from: str
    """Where the cap came from, in words."""
    headlines: list[Headline]
    hours: float | None
    """Device-hours of the rounds' runs (duration x devices)."""
    device: str
    """GPU or CPU: what the hours are of."""
    fixed_rounds: int | None
    """Rounds of the fixed design with 80% power for the speed's minimum change at the measured noise (None: not
    measured, or more than 200)."""
    noise_sd: float | None = None
    """The run-to-run SD the fixed design is sized for (log scale)."""
    runs: list[tuple[str, str]] = field(default_factory=list)
    """Receipt ids (A, B) of each round."""
    names: tuple[str, str] = ("A", "B")
    """What to call A and B in the summary (the refs the command was given)."""

    @property
    def fixed_hours(self) -> float | None:
        if self.fixed_rounds is None or self.hours is None or not self.rounds:
            return None
        return self.hours / self.rounds * self.fixed_rounds

    def speed(self) -> Headline:
        return speed_of(self.headlines)

    def summary(self) -> str:
        """One line: rounds, verdict and why, cost against the fixed design."""
        from ledger.analyses.metrics import ratio_words

        s = self.speed()
        a, b = self.names
        ratio = speed_ratio(s)
        what = (f"{b} runs at {ratio_words(ratio, a)}" if ratio is not None and s.verdict in ("better", "worse")
                else f"speed ({s.name}): {s.verdict}" + (f", {b}/{a} {s.ratio:.3f}x" if s.ratio is not None else ""))
        how = "decided" if self.stopped == "decided" else f"stopped at the cap of {self.cap} rounds ({self.cap_from})"
        return f"{self.rounds} rounds, {how}: {what}: {s.rule}"

    def cost(self) -> str:
        """The device-hours spent against the fixed design of 80% power for the minimum change."""
        if self.hours is None:
            return "cost: the runs' durations are not known"
        unit = "GPU-hours" if self.device == "GPU" else "CPU device-hours"
        spent = f"{self.hours:.3g} {unit} over {self.rounds} rounds"
        if self.noise_sd is None:
            return f"cost: {spent}; no fixed design to set against it (the noise was not measured)"
        if self.fixed_rounds is None or self.fixed_hours is None:
            return (f"cost: {spent}; at the measured noise (SD {100 * self.noise_sd:.2g}%) a fixed design would need "
                    f"more than {MAX_RUNS} runs per side for 80% power")
        s = self.speed()
        share = self.hours / self.fixed_hours if self.fixed_hours else math.nan
        return (f"cost: {spent}, against {self.fixed_hours:.3g} for the fixed design of {self.fixed_rounds} rounds "
                f"with 80% power for the {100 * s.threshold:g}% minimum change at the measured noise "
                f"({share:.0%} of it)")

    def to_json(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "verdict": self.verdict, "stopped": self.stopped, "cap": self.cap,
                "cap_from": self.cap_from, "headlines": [h.to_json() for h in self.headlines],
                "device_hours": self.hours, "device": self.device, "fixed_rounds": self.fixed_rounds,
                "fixed_device_hours": self.fixed_hours, "noise_sd": self.noise_sd, "runs": [list(r) for r in self.runs],
                "names": list(self.names), "summary": self.summary(), "cost": self.cost()}


def _hours(run: RunData) -> tuple[float | None, str]:
    """Device-hours of one run and whether they are GPU's."""
    count, model = devices_of(run.receipt)
    seconds = run.receipt.duration_s
    if seconds is None:
        t = run.train_time
        seconds = float(t[-1]) if t.size and math.isfinite(t[-1]) else None
    return (None if seconds is None else seconds * count / 3600), ("CPU" if model == "cpu" else "GPU")


def _cap(options: Options, headlines: Sequence[Headline], rounds: int) -> tuple[int, str, int | None, float | None]:
    """(cap, where it came from, the fixed design's rounds, the noise it is sized for)."""
    speed = speed_of(headlines) if headlines else None
    share = alphas(options.alpha)["speed"]
    change = options.min_change if options.min_change is not None else (speed.threshold if speed else 0.05)
    fixed, noise, source = None, None, ""
    if options.noise_sd is not None:
        noise = options.noise_sd
        fixed = runs_for_power(noise, change, share, prior_df=options.prior_df)
        source = f"the sample-size hint at the noise measured before the rounds (SD {100 * noise:.2g}%)"
    elif speed is not None and speed.sd is not None and rounds >= NOISE_ROUNDS:
        noise = speed.sd
        fixed = runs_for_power(noise, change, share)
        source = f"the sample-size hint at the noise of the rounds (SD {100 * noise:.2g}%)"
    if options.max_rounds is not None:
        return options.max_rounds, "--max-rounds", fixed, noise
    if source:
        found = fixed if fixed is not None else MAX_TIMES
        return min(MAX_TIMES, max(MIN_CAP, found)), source, fixed, noise
    return MAX_TIMES, f"at most {MAX_TIMES} rounds until the noise is measured", None, None


def until_verdict(record_round: Callable[[int], tuple[RunData, RunData]], options: Options | None = None,
                  on_round: Callable[[int, list[Headline]], None] | None = None) -> Result:
    """Record round after round (``record_round(k)`` runs A then B of round ``k``, 1-based) and judge after
    each, until every headline is decided or the cap (module docstring); ``on_round`` sees each round's
    state (progress lines)."""
    options = options or Options()
    rounds: list[tuple[RunData, RunData]] = []
    headlines: list[Headline] = []
    cap, cap_from, fixed, noise = _cap(options, headlines, 0)
    hours: float | None = 0.0
    device = "CPU"
    while len(rounds) < cap:
        pair = record_round(len(rounds) + 1)
        rounds.append(pair)
        for run in pair:
            h, device = _hours(run)
            hours = None if hours is None or h is None else hours + h
        headlines = judge(rounds, options.alpha, options.phi, options.min_change)
        if on_round is not None:
            on_round(len(rounds), headlines)
        if speed_of(headlines).status == "unavailable":
            raise LedgerError(f"the runs give no speed to judge ({speed_of(headlines).rule}): ab --until-verdict needs "
                              "tokens/s, steps/s or step times in every run; the first round is recorded")
        cap, cap_from, fixed, noise = _cap(options, headlines, len(rounds))
        if len(rounds) >= MIN_ROUNDS and finished(headlines):
            break
    done = bool(headlines) and finished(headlines)
    speed = speed_of(headlines)
    return Result(len(rounds), speed.verdict, "decided" if done else "cap", cap, cap_from, headlines, hours, device,
                  fixed, noise, [(a.id, b.id) for a, b in rounds])


def measured_noise(ledger: Ledger, a: Receipt, b: Receipt) -> tuple[float | None, int]:
    """The speed's run-to-run SD (log scale) as `compare A B` measures it before any round (the sides'
    replicates and the ledger's noise floor), and the floor's degrees of freedom beyond the sides' own runs:
    (None, 0) when there is no between-run evidence yet."""
    from ledger.analyses.compare import CompareOptions, Ref, compare
    from ledger.store import index

    with index.reader(ledger) as con:
        c = compare(con, Ref(ref=a.id), Ref(ref=b.id), CompareOptions(attribution=False, plugins=False))
    row = next((r for name in SPEED_ROWS for r in c.metrics if r.name == name and r.sd is not None), None)
    if row is None or row.sd is None or row.df is None:
        return None, 0
    return row.sd, max(0, row.df - (row.n[0] + row.n[1] - 2))


def run_ab(ledger: Ledger, a: Receipt, b: Receipt, options: Options, *, same_seed: bool = False,
           stdout: IO[bytes] | None = None, progress: Callable[[str], None] | None = None) -> Result:
    """`ledger ab A B --until-verdict`: record round after round under `ledger record` (A then B, the plan of
    :func:`ledger.replay.replicates.plan_round`, tagged ``ab=<id>``) and judge after each (:func:`until_verdict`).
    ``stdout``: where the runs' output goes; ``progress``: one line per round. A run that fails stops the
    sequence (:class:`~ledger.errors.LedgerError`)."""
    from ledger.analyses.series import load_run
    from ledger.record.wrapper import RecordOptions, record
    from ledger.replay.replicates import experiment_id, plan_round
    from ledger.store import index

    experiment = experiment_id()

    def record_round(k: int) -> tuple[RunData, RunData]:
        runs = []
        for item in plan_round(a, b, k, same_seed=same_seed, experiment=experiment):
            result = record(ledger, RecordOptions(command=item.command, name=item.name, tags=item.tags,
                                                  replicates=item.original.id, stdout=stdout))
            if result.receipt is None or result.exit_code:
                raise LedgerError(f"round {k}: {item.name} failed (exit {result.exit_code}); the sequence stops "
                                  f"after {k - 1} complete round(s)")
            with index.reader(ledger) as con:
                runs.append(load_run(con, result.receipt.id, result.receipt))
        return runs[0], runs[1]

    def report(k: int, headlines: list[Headline]) -> None:
        if progress is not None:
            progress(f"round {k}: " + "; ".join(_state(h) for h in headlines))

    if options.noise_sd is None:
        sd, prior = measured_noise(ledger, a, b)
        if sd is not None:
            options = replace(options, noise_sd=sd, prior_df=prior)
    result = until_verdict(record_round, options, report)
    return replace(result, names=(a.name or a.id[:12], b.name or b.id[:12]))


def _state(h: Headline) -> str:
    if h.ratio is None or h.interval is None:
        return f"{h.name} {h.verdict} ({h.rule})"
    return (f"{h.name} B/A {h.ratio:.3f}x, {100 * (1 - h.alpha):g}% confidence sequence "
            f"{interval_text(h.interval)}, p {h.p_value:.2g}: {h.status}")


__all__ = ["MIN_CAP", "NOISE_ROUNDS", "Options", "Result", "measured_noise", "run_ab", "until_verdict"]
