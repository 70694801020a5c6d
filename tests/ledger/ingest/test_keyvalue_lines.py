"""Generic step lines (ledger.ingest.formats.keyvalue) in the forms people print them: ``key=value``,
``key: value`` and ``key value`` pairs, every name of a step counter, counters against a total, labels of a
process's place, logging prefixes, evals of each split, rates by their unit with or without a name, decimal
multipliers, ``nan`` and ``inf``, and the lines that must never be steps (a checkpoint message, an epoch banner, a
line saying one name twice). Every expected value is written by hand from the line; the round trip prints lines
from drawn names and values and expects Python's own reading of the printed numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.formats import keyvalue
from ledger.ingest.formats.base import BAD, EPOCH, TOTAL, Parsed

FAST = settings(max_examples=120, deadline=None, derandomize=True, database=None)


@pytest.mark.parametrize(("line", "expected"), [
    ("step 10 loss 2.345 lr 0.001", Parsed(step=10, metrics={"loss": 2.345, "lr": 0.001})),
    ("step=10 loss=2.345 lr=1e-3 grad_norm=0.9",
     Parsed(step=10, metrics={"loss": 2.345, "lr": 1e-3, "grad_norm": 0.9})),
    ("Step 1: loss=10.2313", Parsed(step=1, metrics={"loss": 10.2313})),
    ("STEP 7 LOSS 1.5 Learning_Rate 2e-4", Parsed(step=7, metrics={"loss": 1.5, "lr": 2e-4})),
    ("global_step=5 loss=1.25", Parsed(step=5, metrics={"loss": 1.25})),
    ("iteration 6 loss 1.25", Parsed(step=6, metrics={"loss": 1.25})),
    ("iter: 7, loss: 1.25", Parsed(step=7, metrics={"loss": 1.25})),
    ("update 8 | loss 1.25", Parsed(step=8, metrics={"loss": 1.25})),
    ("num_updates=9;loss=1.25", Parsed(step=9, metrics={"loss": 1.25})),
    ("it 10 loss 1.25", Parsed(step=10, metrics={"loss": 1.25})),
    ("step 1,000 loss 2", Parsed(step=1000, metrics={"loss": 2.0})),
    ("step 5 ppl 12.5 acc 0.5", Parsed(step=5, metrics={"ppl": 12.5, "acc": 0.5})),
    ("step 5 perplexity 3", Parsed(step=5, metrics={"perplexity": 3.0})),
    ("step 5 gnorm 0.5 learning_rate 1e-4", Parsed(step=5, metrics={"grad_norm": 0.5, "lr": 1e-4})),
    ("step 5 grad_norm 7", Parsed(step=5, metrics={"grad_norm": 7.0})),
    ("step 5 lm_loss 3.5 aux_loss 0.01 z_loss 1e-3", Parsed(step=5, metrics={"loss": 3.5, "aux_loss": 0.01,
                                                                            "z_loss": 1e-3})),
    # a counter against its total, the epoch, its own total dropped
    ("iter 20/50 loss 2", Parsed(step=20, metrics={TOTAL: 50.0, "loss": 2.0})),
    ("step: 2300/ 3305 loss: 1.5", Parsed(step=2300, metrics={TOTAL: 3305.0, "loss": 1.5})),
    ("step 1,200/10,000 loss 1.5", Parsed(step=1200, metrics={TOTAL: 10000.0, "loss": 1.5})),
    ("epoch 2/3 step 5 loss 1", Parsed(step=5, metrics={EPOCH: 2.0, "loss": 1.0})),
    # labels of a process's place are no metrics; a logging prefix's source line is no metric
    ("[Rank 0] step 5 loss 1", Parsed(step=5, metrics={"loss": 1.0})),
    ("DP=0|PP=1|TP=2 step 5 loss 1 rank=3 local_rank 1", Parsed(step=5, metrics={"loss": 1.0})),
    ("I1201 10:00:00.1 train.py:212] step 5 loss 1", Parsed(step=5, metrics={"loss": 1.0})),
    ("[trainer.cc:88] step: 5 loss: 1", Parsed(step=5, metrics={"loss": 1.0})),
    ("model.layers.0:3 step 5 loss 1", Parsed(step=5, metrics={"model.layers.0": 3.0, "loss": 1.0})),
    # `step: N` or `step=N`: only pairs written alike; `step N`: any
    ("step: 3 loss: 1.2 at Tue Sep 17 2024", Parsed(step=3, metrics={"loss": 1.2})),
    ("step=3 loss=1.2 took 17 s", Parsed(step=3, metrics={"loss": 1.2})),
    ("step: 3 took 17 loss: 1.2 lr: 0.5", Parsed(step=3, metrics={"loss": 1.2, "lr": 0.5})),
    ("step 3 loss 1.2 took 17 s", Parsed(step=3, metrics={"loss": 1.2, "took": 17.0})),
    ("step 3 loss=1.2 took 17 s", Parsed(step=3, metrics={"loss": 1.2, "took": 17.0})),
    # evals of each split at the line's step
    ("step 100 loss 2.1 val_loss 2.3 eval/acc 0.5 test_ppl 9 valid_bleu 30 validation/f1 0.75",
     Parsed(step=100, metrics={"loss": 2.1}, evals=[("val", "loss", 2.3), ("eval", "acc", 0.5), ("test", "ppl", 9.0),
                                                    ("val", "bleu", 30.0), ("val", "f1", 0.75)])),
    ("step 100 VAL_loss 2.3", Parsed(step=100, evals=[("val", "loss", 2.3)])),
    ("step 100 Eval/Loss 2.3", Parsed(step=100, evals=[("eval", "Loss", 2.3)])),
    # rates, by their unit, named or not
    ("step 5 loss 1 | 640.0 samples/sec", Parsed(step=5, metrics={"loss": 1.0, "samples_per_s": 640.0})),
    ("step 5 loss 1 ips: 9.7 samples/s", Parsed(step=5, metrics={"loss": 1.0, "samples_per_s": 9.7})),
    ("step 5 loss 1 throughput 12,345 tokens/s", Parsed(step=5, metrics={"loss": 1.0, "tokens_per_s": 12345.0})),
    ("step 5 loss 1 | 12,345 tok/s | 3.5 iter/s", Parsed(step=5, metrics={"loss": 1.0, "tokens_per_s": 12345.0,
                                                                          "steps_per_s": 3.5})),
    ("step 5 loss 1 speed 1.96it/s", Parsed(step=5, metrics={"loss": 1.0, "steps_per_s": 1.96})),
    ("step 5 loss 1 (2.5 steps / second)", Parsed(step=5, metrics={"loss": 1.0, "steps_per_s": 2.5})),
    ("step 5 loss 1 tok/s 5000 samples_per_sec=64", Parsed(step=5, metrics={"loss": 1.0, "tokens_per_s": 5000.0,
                                                                             "samples_per_s": 64.0})),
    ("step 5 loss 1 samples_per_sec=10 | 640 samples/sec", Parsed(step=5, metrics={"loss": 1.0,
                                                                                   "samples_per_s": 10.0})),
    ("step 5 loss 1 time 2.5 s/it", Parsed(step=5, metrics={"loss": 1.0, "time": 2.5})),
    ("step 5 loss 1 ips: 9.7 samples/s | 3.5 it/s", Parsed(step=5, metrics={"loss": 1.0, "samples_per_s": 9.7,
                                                                           "steps_per_s": 3.5})),
    ("step 5 loss 1 | 7 sample/s", Parsed(step=5, metrics={"loss": 1.0, "samples_per_s": 7.0})),
    # a rate's name before its own number: the value before it is not that rate (before, `loss 1.5 it/s 2.5` lost
    # its step and `lr 0.1 tokens/s 12000` read 0.1 as the rate)
    ("step 5 loss 1.5 it/s 2.5", Parsed(step=5, metrics={"loss": 1.5, "steps_per_s": 2.5})),
    ("step 5 lr 0.1 tokens/s 12000 loss 2", Parsed(step=5, metrics={"lr": 0.1, "tokens_per_s": 12000.0,
                                                                     "loss": 2.0})),
    ("step 5 loss 1 samples/sec -.5", Parsed(step=5, metrics={"loss": 1.0, "samples_per_s": -0.5})),
    # decimal multipliers, signs, exponents
    ("step 5 loss 1 tokens 43.2K mem 1.5G", Parsed(step=5, metrics={"loss": 1.0, "tokens": 43200.0, "mem": 1.5e9})),
    ("step 5 loss -0.5 delta +2 lr .5 x 5. y 1E+3", Parsed(step=5, metrics={"loss": -0.5, "delta": 2.0, "lr": 0.5,
                                                                           "x": 5.0, "y": 1000.0})),
])
def test_lines_people_print(line: str, expected: Parsed) -> None:
    assert keyvalue.parse_line(line) == expected


def test_nan_and_inf_are_values_and_one_name_twice_alike_is_one_value() -> None:
    got = keyvalue.parse_line("step 5 loss nan lr inf")
    assert got is not None and got.step == 5 and math.isnan(got.metrics["loss"]) and got.metrics["lr"] == math.inf
    got = keyvalue.parse_line("step 5 loss nan loss nan")  # the same NaN printed twice: not ambiguous
    assert got is not None and set(got.metrics) == {"loss"} and math.isnan(got.metrics["loss"])
    assert keyvalue.parse_line("step 5 loss 1.2 loss 1.2") == Parsed(step=5, metrics={"loss": 1.2})
    assert keyvalue.parse_line("step 5 loss 1.2 Loss 1.20") == Parsed(step=5, metrics={"loss": 1.2})


@pytest.mark.parametrize("line", [
    "step 5 train loss 1.2, val loss 1.4",  # two losses: ambiguous
    "step 5 loss nan loss 1.2",
    "step 5 loss 1.2 loss nan",
    "step 5 acc 0.5 loss 1 acc 0.75",  # a training line that says another name twice
])
def test_a_line_saying_one_name_twice_is_unparsed(line: str) -> None:
    assert keyvalue.parse_line(line) is BAD


@pytest.mark.parametrize("line", [
    "saving checkpoint at step 1000",
    "Epoch 5/5",
    "  3%|          | 20/1352 [00:10<11:20,  1.96it/s]",
    "step 5 acc 0.9",  # no training metric
    "step 5 acc 0.9 acc 0.8",  # ambiguous, but not a training line: nothing
    "loss 2.5 lr 0.1",  # no step
    "step 1.5 loss 2",  # a step is a whole number
    "step -3 loss 2",
    "step nan loss 2",
    "step 3e2 loss 2",
    "step5 loss 2",
    "mystep 5 loss 2 lr 1",
    "step 5",
    "",
    "step 5 loss2",
    "step 5 loss 2x",  # a value glued to text is none
    "step 5 rank 0 tp 1",
])
def test_lines_that_are_no_steps(line: str) -> None:
    assert keyvalue.parse_line(line) is None


def test_the_step_is_the_first_counter_and_later_counters_are_metrics() -> None:
    assert keyvalue.parse_line("step 5 iter 7 loss 1") == Parsed(step=5, metrics={"iter": 7.0, "loss": 1.0})


NAMES = st.from_regex(r"[a-z]{1,6}_(?:acc|score|count|ms)", fullmatch=True)
NUMBERS = st.one_of(
    st.floats(-1e12, 1e12, allow_nan=False).map(repr),
    st.floats(-1e6, 1e6, allow_nan=False).flatmap(lambda f: st.sampled_from([f"{f:.4f}", f"{f:.3e}", f"{f:g}"])),
    st.integers(-10**9, 10**9).map(str),
    st.integers(0, 10**9).map(lambda i: f"{i:,}"),
)


@FAST
@given(step=st.integers(0, 10**12), loss=NUMBERS, others=st.dictionaries(NAMES, NUMBERS, max_size=4),
       style=st.sampled_from(["{k}={v}", "{k}: {v}", "{k} {v}", "{k}:{v}", "{k} = {v}"]),
       sep=st.sampled_from([" ", " | ", ", ", "; ", "  "]), comma=st.booleans())
def test_printed_lines_read_back(step: int, loss: str, others: dict[str, str], style: str, sep: str,
                                 comma: bool) -> None:
    """A step, a loss and metrics of no known name, printed in one style of pairs: the step as an integer (with
    thousands separators when printed with them), every value as Python reads the printed number (without its
    separators)."""
    printed_step = f"{step:,}" if comma else str(step)
    pairs = {"loss": loss, **others}
    line = sep.join([style.format(k="step", v=printed_step)] + [style.format(k=k, v=v) for k, v in pairs.items()])
    assert keyvalue.parse_line(line) == Parsed(step=step, metrics={k: float(v.replace(",", "")) for k, v in
                                                                   pairs.items()})
