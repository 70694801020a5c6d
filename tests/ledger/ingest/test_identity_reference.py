"""Step identity (ledger.ingest.formats.identity) against a plain reference: a line-by-line loop written from the
module's rules (its docstring), with no numpy and no vectorised pass, run on every kind of sequence Hypothesis
draws: counters that rise, repeat, restart and go back to the start, several ranks, lines of two shapes, totals
beside the counter, metrics given or not. The precision rule (``decimals``, ``agree``) is checked against Python's
own shortest decimal of a float, and the cases a user meets first are written out by hand."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.formats.identity import Identity, Observations, agree, decimals, identify
from ledger.ingest.formats.scan import LineCapture

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None)


# ---- the reference --------------------------------------------------------------------------------------------


def ref_decimals(v: float) -> int:
    """The digits after the point of Python's shortest repr of ``v`` (the fewest that give ``v`` back), at most
    12; 12 for infinities and NaN."""
    if not math.isfinite(v):
        return 12
    exponent = Decimal(repr(v)).normalize().as_tuple().exponent
    assert isinstance(exponent, int)
    return min(12, max(0, -exponent))


def ref_agree(a: float, b: float, rounded: bool) -> bool:
    """Equal (NaN with NaN too), or, when rounded, closer than half a unit of the last decimal of the less precise
    printing (an exact half is not close)."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    if math.isnan(a) or math.isnan(b):
        return False
    if abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
        return True
    if not rounded:
        return False
    digits = min(ref_decimals(a), ref_decimals(b))
    return abs(a - b) < 0.5 * 10.0 ** -digits * (1 - 1e-9)


@dataclass
class Line:
    """One printed step line: its counter, who printed it, the total beside the counter, its shape, metrics."""

    step: int
    label: int = -1
    total: float = math.nan
    shape: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


def ref_same(a: Line, b: Line) -> bool:
    rounded = a.shape != b.shape
    if "loss" in a.metrics and "loss" in b.metrics:
        return ref_agree(a.metrics["loss"], b.metrics["loss"], rounded)
    return all(ref_agree(a.metrics[k], b.metrics[k], rounded) for k in a.metrics.keys() & b.metrics.keys()
               if not k.startswith("@"))


def ref_epoch_length(segment: list[Line]) -> int:
    totals = [x.total for x in segment if math.isfinite(x.total)]
    if totals:
        return int(totals[-1])
    counters = [x.step for x in segment]
    if min(counters) == 0:
        distinct = sorted(set(counters))
        gaps = [b - a for a, b in zip(distinct, distinct[1:], strict=False)]
        return max(counters) + (int(statistics.median(gaps)) if gaps else 1)
    return max(max(counters), 1)


@dataclass
class Ref:
    rows: list[list[int]]
    """Per row (in the order of its first line): the indexes of its lines."""
    step: list[int]
    generation: list[int]
    merged: int
    differing: int
    segments: int
    restarts: int
    epochs: int


def reference(lines: list[Line]) -> Ref:
    """The module's rules, one line at a time, rank by rank."""
    key: dict[int, tuple[int, int]] = {}  # line -> (generation, step of the run)
    most = {"segments": 0, "restarts": 0, "epochs": 0}
    for label in sorted({x.label for x in lines}):
        mine = [i for i, x in enumerate(lines) if x.label == label]
        offset = generation = segments = restarts = epochs = 0
        segment = [mine[0]]
        seen = {lines[mine[0]].step: mine[0]}
        key[mine[0]] = (0, lines[mine[0]].step)
        for prev, i in zip(mine, mine[1:], strict=False):
            x, step = lines[i], lines[i].step
            first_step = lines[segment[0]].step
            if step > lines[prev].step:  # rising: a new step of the segment
                seen.setdefault(step, i)
            elif step in seen and (ref_same(x, lines[seen[step]])
                                   or (step == lines[prev].step and step > first_step)):
                pass  # the same step again (or per-rank figures printed at once): merged
            else:  # a new segment
                segments += 1
                if step <= first_step:
                    epochs += 1
                    offset += ref_epoch_length([lines[j] for j in segment])
                else:
                    restarts += 1
                    generation += 1
                segment, seen = [], {step: i}
            segment.append(i)
            key[i] = (generation, offset + step)
        most = {"segments": max(most["segments"], segments), "restarts": max(most["restarts"], restarts),
                "epochs": max(most["epochs"], epochs)}
    rows: dict[tuple[int, int], list[int]] = {}
    for i in range(len(lines)):
        rows.setdefault(key[i], []).append(i)
    ordered = sorted(rows.items(), key=lambda kv: kv[1][0])
    differing = 0
    for _, members in ordered:
        head = lines[members[0]]
        for j in members[1:]:
            other = lines[j]
            rounded = other.shape != head.shape
            if any(not ref_agree(other.metrics[k], head.metrics[k], rounded)
                   for k in other.metrics.keys() & head.metrics.keys() if not k.startswith("@")):
                differing += 1
    return Ref(rows=[m for _, m in ordered], step=[k[1] for k, _ in ordered], generation=[k[0] for k, _ in ordered],
               merged=len(lines) - len(ordered), differing=differing, segments=most["segments"] + 1,
               restarts=most["restarts"], epochs=most["epochs"])


def observations(lines: list[Line], shapes: bool = True) -> Observations:
    n = len(lines)
    names = sorted({k for x in lines for k in x.metrics})
    values = {k: (np.array([x.metrics.get(k, math.nan) for x in lines], np.float64),
                  np.array([k in x.metrics for x in lines], np.bool_)) for k in names}
    return Observations(lines=np.arange(1, n + 1, dtype=np.int64),
                        steps=np.array([x.step for x in lines], np.int64),
                        labels=np.array([x.label for x in lines], np.int64),
                        totals=np.array([x.total for x in lines], np.float64), values=values,
                        shapes=np.array([x.shape for x in lines], np.int64) if shapes else None)


def assert_same(got: Identity, want: Ref, n: int) -> None:
    rows = [np.flatnonzero(got.row == r).tolist() for r in range(got.first.size)]
    assert rows == want.rows
    assert got.first.tolist() == [m[0] for m in want.rows]
    assert got.step.tolist() == want.step and got.generation.tolist() == want.generation
    assert got.row.dtype == np.int64 and got.step.dtype == np.int64 and got.row.size == n
    assert (got.merged, got.differing) == (want.merged, want.differing)
    assert (got.segments, got.restarts, got.epochs) == (want.segments, want.restarts, want.epochs)


# ---- what Hypothesis draws --------------------------------------------------------------------------------------

# few values, so that repeats with the same and with other values are both common; 2.123 and 2.1234 agree when
# printed by two shapes (to 3 decimals), 2.1235 and 2.123 are an exact half apart (another figure)
VALUES = st.sampled_from([1.0, 1.5, 2.123, 2.1234, 2.1235, 2.2, 0.1, 3.0, math.nan])
METRICS = st.dictionaries(st.sampled_from(["loss", "lr", "tflops", "@time"]), VALUES, max_size=3)


@st.composite
def sequences(draw: st.DrawFn) -> list[Line]:
    n = draw(st.integers(1, 24))
    ranks = draw(st.sampled_from([(-1,), (0, 1), (-1, 0)]))
    with_totals = draw(st.booleans())
    steps = draw(st.lists(st.integers(0, 7), min_size=n, max_size=n))
    if draw(st.booleans()):  # mostly rising, with a few steps back: the shape of real logs
        steps = sorted(steps)
        for _ in range(draw(st.integers(0, 3))):
            k = draw(st.integers(0, n - 1))
            steps = steps[:k] + sorted(steps[k:])[::-1][:1] + steps[k:]
        steps = steps[:n]
    return [Line(step=s, label=draw(st.sampled_from(ranks)),
                 total=float(draw(st.sampled_from([8, 10]))) if with_totals and draw(st.booleans()) else math.nan,
                 shape=draw(st.sampled_from([0, 0, 1])), metrics=draw(METRICS)) for s in steps]


@FAST
@given(sequences())
def test_identity_follows_the_rules_line_by_line(lines: list[Line]) -> None:
    assert_same(identify(observations(lines)), reference(lines), len(lines))


@FAST
@given(sequences())
def test_lines_of_one_shape_compare_exactly(lines: list[Line]) -> None:
    """Without shapes (every line the source's own) values agree only when equal."""
    same_shape = [Line(x.step, x.label, x.total, 0, x.metrics) for x in lines]
    assert_same(identify(observations(same_shape, shapes=False)), reference(same_shape), len(lines))


@FAST
@given(st.integers(-10**9, 10**9), st.integers(0, 9))
def test_decimals_is_the_fewest_digits_that_give_the_value_back(m: int, k: int) -> None:
    v = m / 10**k
    want = len(str(abs(m)).rjust(k + 1, "0")[-k:].rstrip("0")) if k else 0  # the digits of m / 10^k after the point
    assert ref_decimals(v) == want
    got = decimals(np.array([v, -v]))
    assert got.dtype == np.int64 and got.tolist() == [want, want]


@FAST
@given(VALUES, VALUES, st.booleans())
def test_agree_is_equality_to_the_precision_printed(a: float, b: float, rounded: bool) -> None:
    got = agree(np.array([a]), np.array([b]), rounded)
    assert got.dtype == np.bool_ and got.tolist() == [ref_agree(a, b, rounded)]


# ---- by hand -----------------------------------------------------------------------------------------------------


def test_nothing_printed_is_no_step() -> None:
    got = identify(Observations(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                                np.zeros(0, np.float64), {}))
    for arr in (got.row, got.first, got.step, got.printed, got.generation):
        assert isinstance(arr, np.ndarray) and arr.size == 0 and arr.dtype == np.int64
    assert (got.merged, got.differing, got.segments, got.restarts, got.epochs) == (0, 0, 1, 0, 0)
    assert not got.offset


def test_a_line_printed_twice_in_the_second_epoch_stays_in_the_second_epoch() -> None:
    """`epoch 2 iter 2/3` printed twice (same loss): one step, step 5 (3 + 2), not epoch 1's step 2. Before this
    test, the repeat joined epoch 1's step 2 and was counted as a differing reading of it."""
    text = "".join(f"epoch {e} iter {i}/3 | loss={loss:.2f} | lr 0.001\n"
                   for e, i, loss in [(1, 1, 5), (1, 2, 4), (1, 3, 3), (2, 1, 2.5), (2, 2, 2.4), (2, 2, 2.4),
                                      (2, 3, 2.3)])
    capture = LineCapture(fast=True)
    capture.feed(text.encode())
    capture.close()
    best = capture.best()
    assert best is not None
    assert best.identity() == {"lines": 7, "merged": 1, "differing": 0, "segments": 2, "restarts": 0, "epochs": 1,
                               "planned_steps": None}
    table = best.tables()["steps"].to_pydict()
    assert table["step"] == [1, 2, 3, 4, 5, 6] and table["loss"] == [5.0, 4.0, 3.0, 2.5, 2.4, 2.3]
    ident = identify(observations([Line(s, metrics={"loss": v}) for s, v in
                                   [(1, 5.0), (2, 4.0), (3, 3.0), (1, 2.5), (2, 2.4), (2, 2.4), (3, 2.3)]]))
    assert ident.row.tolist() == [0, 1, 2, 3, 4, 4, 5] and ident.step.tolist() == [1, 2, 3, 4, 5, 6]


def test_a_line_that_gives_fewer_metrics_is_the_same_step() -> None:
    """Step 3 printed again by a line that gives only the learning rate (same value): no loss to compare, the only
    metric both give agrees, so it is step 3 again, not a restart."""
    lines = [Line(1, metrics={"lr": 0.1, "tflops": 2.0}), Line(2, metrics={"lr": 0.1, "tflops": 2.2}),
             Line(3, metrics={"lr": 0.1, "tflops": 3.0}), Line(3, metrics={"lr": 0.1})]
    ident = identify(observations(lines))
    assert ident.row.tolist() == [0, 1, 2, 2] and (ident.merged, ident.restarts, ident.segments) == (1, 0, 1)


def test_a_restart_then_a_late_repeat_compares_with_the_new_computation() -> None:
    """1..5, restart at 2 (other losses) on to 6, then step 5 printed again with the *new* computation's loss: the
    same step of generation 1, not another restart."""
    losses = {1: 9.0, 2: 8.0, 3: 7.0, 4: 6.0, 5: 5.0}
    again = {2: 8.5, 3: 7.5, 4: 6.5, 5: 5.5, 6: 4.5}
    lines = [Line(s, metrics={"loss": v}) for s, v in losses.items()]
    lines += [Line(s, metrics={"loss": v}) for s, v in again.items()] + [Line(5, metrics={"loss": 5.5})]
    ident = identify(observations(lines))
    assert ident.step.tolist() == [1, 2, 3, 4, 5, 2, 3, 4, 5, 6]
    assert ident.generation.tolist() == [0] * 5 + [1] * 5
    assert ident.row.tolist()[-1] == 8 and (ident.restarts, ident.segments, ident.merged) == (1, 2, 1)
