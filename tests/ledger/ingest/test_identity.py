"""Step identity (ledger.ingest.formats.identity) on the sequences real launches print: every expected step below
is worked out by hand from the printed lines, never by the code under test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ledger.ingest.formats.identity import Observations, agree, decimals, identify
from ledger.ingest.formats.scan import LineCapture, step_times


def obs(steps: list[int], losses: list[float] | None = None, labels: list[int] | None = None,
        totals: list[float] | None = None, **metrics: list[float]) -> Observations:
    n = len(steps)
    values = {}
    if losses is not None:
        values["loss"] = (np.asarray(losses, float), np.isfinite(np.asarray(losses, float)) | True)
    for name, column in metrics.items():
        arr = np.asarray(column, float)
        values[name] = (arr, ~np.isnan(arr))
    return Observations(np.arange(1, n + 1, dtype=np.int64), np.asarray(steps, np.int64),
                        np.asarray(labels if labels is not None else [-1] * n, np.int64),
                        np.asarray(totals if totals is not None else [math.nan] * n, float), values)


def capture(text: str, fast: bool = True) -> LineCapture:
    c = LineCapture(fast=fast)
    c.feed(text.encode())
    c.close()
    return c


def test_a_counter_that_restarts_each_epoch_gives_three_epochs_of_steps() -> None:
    """The issue's loop: `epoch E iter I/50` printed at I = 10..50, three epochs. 15 steps, not 5: epoch 2's
    iter 20 is step 70 (50 + 20), epoch 3's iter 50 is step 150; the last loss is epoch 3's."""
    text = "".join(f"epoch {e} iter {i}/50 | loss={3.0 - 0.1 * (5 * (e - 1) + i // 10):.2f} | lr 3.0e-4 | "
                   f"640.0 samples/sec\n" for e in (1, 2, 3) for i in (10, 20, 30, 40, 50))
    best = capture(text).best()
    assert best is not None and best.step_count() == 15
    table = best.tables()["steps"].to_pydict()
    assert table["step"] == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150]
    assert table["printed_step"] == [10, 20, 30, 40, 50] * 3
    assert table["epoch"] == [1.0] * 5 + [2.0] * 5 + [3.0] * 5
    assert table["loss"][-1] == 1.5  # epoch 3, iter 50: 3.0 - 0.1 * 15
    ident = best.identity()
    assert (ident["segments"], ident["epochs"], ident["restarts"], ident["merged"]) == (3, 2, 0, 0)


def test_an_epoch_is_as_long_as_the_total_printed_beside_the_counter() -> None:
    """`iter 40/45` last printed, total 45: epoch 2's iter 10 is step 55, not 50."""
    ident = identify(obs([10, 20, 30, 40, 10, 20], [5, 4, 3, 2, 1.5, 1.4], totals=[45] * 6))
    assert ident.step.tolist() == [10, 20, 30, 40, 55, 65] and ident.epochs == 1


def test_a_counter_from_zero_without_a_total_adds_its_spacing() -> None:
    """0, 10, ..., 40 then 0 again: an epoch of 50 (the last counter plus the spacing), so no step is shared."""
    ident = identify(obs([0, 10, 20, 30, 40, 0, 10], [7, 6, 5, 4, 3, 2.5, 2.4]))
    assert ident.step.tolist() == [0, 10, 20, 30, 40, 50, 60]


def test_a_keras_counter_printed_once_per_epoch_is_five_steps_not_one() -> None:
    """`10/10 ... loss` once per epoch (Keras verbose=2, read with --parse): the same counter with another loss is
    the next epoch's step (20, 30, ...), never a repeat to drop."""
    ident = identify(obs([10] * 5, [0.9, 0.7, 0.5, 0.4, 0.35]))
    assert ident.step.tolist() == [10, 20, 30, 40, 50] and ident.epochs == 4 and ident.merged == 0


def test_a_restart_from_a_checkpoint_keeps_both_computations() -> None:
    """1..6, then back to 4 with other losses (resumed from the step-3 checkpoint), on to 8: steps 4-6 are
    computed twice; the later computation is a new generation, in time order after the first."""
    ident = identify(obs([1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4, 6.1, 5.1, 4.1, 3, 2]))
    assert ident.step.tolist() == [1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8]
    assert ident.generation.tolist() == [0] * 6 + [1] * 5
    assert (ident.restarts, ident.epochs, ident.segments, ident.merged) == (1, 0, 2, 0)


def test_the_same_line_printed_again_and_a_lagging_rank_are_one_step() -> None:
    """Unlabelled: step 5 printed twice (identical), then step 4 again from a rank that lags (same loss): merged
    into steps 5 and 4, no segment. Labelled ranks lagging behind each other: no segment either."""
    ident = identify(obs([4, 5, 5, 4, 6], [2.0, 1.9, 1.9, 2.0, 1.8]))
    assert ident.step.tolist() == [4, 5, 6] and ident.row.tolist() == [0, 1, 1, 0, 2]
    assert (ident.merged, ident.differing, ident.segments) == (2, 0, 1)
    ranks = identify(obs([1, 2, 1, 3, 2, 3], [3.0, 2.0, 3.0, 1.0, 2.0, 1.0], labels=[0, 0, 1, 0, 1, 1]))
    assert ranks.step.tolist() == [1, 2, 3] and ranks.merged == 3 and ranks.segments == 1


def test_per_rank_figures_are_merged_and_counted_as_differing() -> None:
    """torchtitan's two ranks print step 4 with the same loss and their own tflops (314.71, 314.69): one step, the
    first reading kept, one line counted as differing."""
    ident = identify(obs([4, 4, 5, 5], [7.62585, 7.62585, 7.07623, 7.07623], tflops=[314.71, 314.69, 313.36, 313.36]))
    assert ident.step.tolist() == [4, 5] and (ident.merged, ident.differing) == (2, 1)


def test_two_shapes_of_one_step_agree_to_the_precision_printed() -> None:
    """A callback prints `loss 2.1235` and the trainer `2.123456789`: one step, metrics merged. `2.1240` against
    `2.123456789` is another reading (a restart when the counter went back)."""
    assert agree(np.array([2.1235]), np.array([2.123456789])).tolist() == [True]
    assert agree(np.array([2.1240]), np.array([2.123456789])).tolist() == [False]
    assert agree(np.array([math.nan]), np.array([math.nan])).tolist() == [True]
    # without the printed precision: a float's rounding apart (0.1 + 0.2 and 0.3) and two infinities are one figure,
    # a part in a billion is not
    exact = agree(np.array([0.1 + 0.2, math.inf, 1.0]), np.array([0.3, math.inf, 1.0 + 1e-9]), rounded=False)
    assert exact.tolist() == [True, True, False]
    assert decimals(np.array([2.1235, 3.0, 0.5, 1e-7, math.inf])).tolist() == [4, 0, 1, 7, 12]
    text = ("step 1 loss 2.1235\n{'loss': 2.123456789, 'grad_norm': 1.5, 'learning_rate': 0.001, 'epoch': 0.1}\n"
            "step 2 loss 1.9876\n{'loss': 1.98761, 'grad_norm': 1.25, 'learning_rate': 0.001, 'epoch': 0.2}\n")
    best = capture(text).best()
    assert best is not None and best.step_count() == 2
    # the loss both printed: the more precise printing (the trainer's), not the first
    assert best.steps == {1: {"loss": 2.123456789, "grad_norm": 1.5, "lr": 0.001, "epoch": 0.1},
                          2: {"loss": 1.98761, "grad_norm": 1.25, "lr": 0.001, "epoch": 0.2}}
    assert best.identity()["merged"] == 2


def test_rank_prefixed_lines_are_followed_rank_by_rank_also_by_templates() -> None:
    """Two ranks, `[rank0]:`/`[rank1]:` torchtitan lines, rank 1 a step behind: no counter goes back per rank, so
    no segment; each step is one row. Enough lines for the templates (one per rank) and the columns."""
    def line(rank: int, step: int) -> str:
        return f"[rank{rank}]:[titan] 2026-12-01 10:00:00,000 - root - INFO - step: {step:2}  loss: {10 / step:7.4f}\n"

    order = [line(0, 1)] + [x for s in range(2, 3001) for x in (line(0, s), line(1, s - 1))] + [line(1, 3000)]
    for fast in (True, False):
        best = capture("".join(order), fast=fast).best()
        assert best is not None and best.step_count() == 3000, fast
        assert best.identity()["segments"] == 1 and best.identity()["merged"] == 3000
        assert best.tables()["steps"].column("step").to_pylist() == list(range(1, 3001))


def test_evals_land_on_the_step_of_the_run_across_epochs() -> None:
    """An eval dict printed after epoch 2's iter 50 belongs to step 100, not 50."""
    text = "".join(f"epoch {e} iter {i}/50 | loss={1 + 1 / (e * i):.4f}\n" for e in (1, 2) for i in (25, 50))
    text += "{'eval_loss': 1.25, 'epoch': 2.0}\n"
    best = capture(text).best()
    assert best is not None and best.tables()["steps"].column("step").to_pylist() == [25, 50, 75, 100]
    assert best.evals == [(100, "eval", "loss", 1.25)]


def test_step_times_divide_the_time_between_arrivals_over_the_steps_between() -> None:
    """Rows at steps 10, 20, 30 arriving at 0, 5, 11 s: 0.5 and 0.6 s a step. Steps 40 and 50 arrive together (a
    buffered pipe) at 31 s: 20 s over 20 steps, 1.0 s each. Across a restart: no figure."""
    steps = np.array([10, 20, 30, 40, 50, 40, 50])
    times = np.array([100.0, 105.0, 111.0, 131.0, 131.0, 200.0, 210.0])
    gen = np.array([0, 0, 0, 0, 0, 1, 1])
    got = step_times(steps, times, gen)
    assert np.isnan(got[0]) and got[1:5].tolist() == [0.5, 0.6, 1.0, 1.0]
    assert np.isnan(got[5]) and got[6] == 1.0


@pytest.mark.parametrize("pieces", [1, 7])
def test_the_same_steps_whether_read_by_parsers_or_templates(pieces: int) -> None:
    """Identity decides on the lines, not on how they were read: the parsers alone (fast=False) and the templates
    with their columns give the same table for 3 epochs of 2,000 printed steps, fed whole or in pieces."""
    text = "".join(f"epoch {e} | iter {i} | loss {5 / (e * 2000 + i):.6f} | lr 0.001\n"
                   for e in (1, 2, 3) for i in range(1, 2001)).encode()
    tables = []
    for fast in (True, False):
        c = LineCapture(fast=fast)
        size = len(text) // pieces + 1
        for k in range(0, len(text), size):
            c.feed(text[k:k + size])
        c.close()
        best = c.best()
        assert best is not None
        tables.append(best.tables()["steps"])
    assert tables[0].equals(tables[1])
    assert tables[0].column("step").to_pylist() == list(range(1, 6001))


def test_a_keras_log_read_with_parse_is_five_epochs_not_one_step() -> None:
    """The issue's `--parse` case on Keras's shape (tests/fixtures/logs/keras.log): the counter `10/10` printed
    once per epoch, 5 epochs. Before, they were 1 step (the later ones dropped as repeats); now 5, at 10..50, the
    last loss epoch 5's."""
    from pathlib import Path

    from ledger.ingest.worker import live_capture

    text = (Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "keras.log").read_bytes()
    c = live_capture(r"(?P<step>\d+)/\d+ \[=+\] - \S+ \S+ - loss: (?P<loss>[\d.]+) - accuracy: (?P<accuracy>[\d.]+)")
    c.feed(text)
    c.close()
    rows = c.best()
    assert rows is not None and rows.step_count() == 5
    table = rows.tables()["steps"].to_pydict()
    assert table["step"] == [10, 20, 30, 40, 50] and table["printed_step"] == [10] * 5
    assert table["loss"] == [0.9123, 0.6431, 0.5012, 0.4410, 0.4105]
    assert rows.identity()["epochs"] == 4


def test_lines_that_arrived_together_are_spread_over_the_time_since_the_arrival_before() -> None:
    """A launch that buffers its output: steps 60..100 arrive in one read at 8.2 s, the one before (50) at 7.4 s.
    Their times are spread by step: 7.56, 7.72, 7.88, 8.04, 8.2 s (so goodput and the curves see the work where it
    was done); a row alone, the first and a restart's keep their arrival."""
    from ledger.ingest.formats.scan import spread_arrivals

    steps = np.array([10, 50, 60, 70, 80, 90, 100, 60, 70])
    times = np.array([5.0, 7.4, 8.2, 8.2, 8.2, 8.2, 8.2, 9.0, 9.0])
    gen = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1])
    got = spread_arrivals(steps, times, gen)
    assert got[:2].tolist() == [5.0, 7.4] and got[2:7] == pytest.approx([7.56, 7.72, 7.88, 8.04, 8.2])
    assert got[7:].tolist() == [9.0, 9.0]  # a restart's first arrival: nothing before it to spread from
