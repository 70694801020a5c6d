"""The Hugging Face Trainer's printed dicts and its ``trainer_state.json`` (ledger.ingest.formats.hf), in the forms
the Trainer and the trainers built on it print them: training dicts, eval dicts with their timing entries, the
closing summary, ms-swift's counter and units, values that are no numbers, dicts cut short, text that only looks
like a dict, and a state file as the Trainer writes it or as a user or another process may leave it (no history,
entries without a step, another JSON document). Every expected value is written by hand from the text; the round
trip prints dicts as Python prints them (``str(dict)``, what the Trainer's ``print``/``tqdm.write`` does)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.formats import hf
from ledger.ingest.formats.base import BAD, EPOCH, TOTAL, Parsed

FAST = settings(max_examples=80, deadline=None, derandomize=True, database=None)


def test_a_training_dict_is_an_ordinal_step_with_its_names_mapped() -> None:
    line = "{'loss': 2.3456, 'grad_norm': 1.125, 'learning_rate': 4.5e-05, 'epoch': 0.38}"
    assert hf.parse_line(line) == Parsed(step=None, metrics={"loss": 2.3456, "grad_norm": 1.125, "lr": 4.5e-05,
                                                              EPOCH: 0.38}, ordinal=True)
    # between two redraws of the bar, as tqdm.write leaves it on the line
    bar = " 1%|          | 20/1352 [00:10<11:20,  1.96it/s]\r" + line + "\r 2%|"
    assert hf.parse_line(bar) == hf.parse_line(line)
    # integers are numbers too, booleans are not, and a `step` entry is never a metric
    got = hf.parse_line("{'loss': 3, 'num_input_tokens_seen': 40960, 'is_best': True, 'step': 7, 'flag': None}")
    assert got == Parsed(step=None, metrics={"loss": 3.0, "tokens": 40960.0}, ordinal=True)
    assert isinstance(got.metrics["loss"], float) and isinstance(got.metrics["tokens"], float)
    # a dict inside the dict is no number; text right after the dict (a bar's next redraw) is not the dict's
    assert hf.parse_line("{'loss': 1.5, 'extra': {'a': 1}, 'lr': 0.5}") == Parsed(
        step=None, metrics={"loss": 1.5, "lr": 0.5}, ordinal=True)
    assert hf.parse_line("{'loss': 1.5}| 5/10 [00:01<00:01]") == Parsed(step=None, metrics={"loss": 1.5}, ordinal=True)


def test_printed_values_that_are_strings_are_read_when_they_are_numbers() -> None:
    got = hf.parse_line("{'loss': '2.5', 'lr': '1e-4', 'tokens_seen': '43.2K', 'elapsed_time': '1m 3s', "
                        "'percentage': '47.87%', 'note': 'warm-up', 'grad_norm': nan}")
    assert got is BAD  # `nan` is no Python literal: the dict cannot be read, and is counted as unparsed
    got = hf.parse_line("{'loss': '2.5', 'lr': '1e-4', 'tokens_seen': '43.2K', 'elapsed_time': '1m 3s', "
                        "'percentage': '47.87%', 'note': 'warm-up', 'grad_norm': 'nan'}")
    assert got is not None and got.step is None and got.ordinal
    assert set(got.metrics) == {"loss", "lr", "tokens_seen", "grad_norm"}
    assert (got.metrics["loss"], got.metrics["lr"], got.metrics["tokens_seen"]) == (2.5, 1e-4, 43200.0)
    assert math.isnan(got.metrics["grad_norm"])


def test_an_eval_dict_keeps_quality_and_leaves_its_timing_out() -> None:
    line = ("{'eval_loss': 2.2061, 'eval_accuracy': 0.61, 'eval_runtime': 3.2004, 'eval_samples_per_second': "
            "312.4, 'eval_steps_per_second': 9.8, 'epoch': 1.0}")
    assert hf.parse_line(line) == Parsed(step=None, evals=[("eval", "loss", 2.2061), ("eval", "accuracy", 0.61)])
    # the eval's own name in a nested split, a non-number and a boolean are left out
    assert hf.parse_line("{'eval_loss': 1.5, 'eval_model_preparation_time': 0.0021, 'eval_name': 'wiki', "
                         "'eval_ok': True}") == Parsed(step=None, evals=[("eval", "loss", 1.5),
                                                                           ("eval", "model_preparation_time", 0.0021)])
    # an eval dict of timing only is nothing
    assert hf.parse_line("{'eval_runtime': 3.2, 'eval_samples_per_second': 10.0, 'epoch': 1.0}") is None


def test_the_closing_summary_and_other_dicts_are_not_steps() -> None:
    summary = ("{'train_runtime': 120.5, 'train_samples_per_second': 33.2, 'train_steps_per_second': 1.04, "
               "'train_loss': 2.01, 'epoch': 3.0}")
    assert hf.parse_line(summary) is None
    assert hf.parse_line("{'epoch': 1.0, 'lr': 0.001}") is None  # no loss: a dict, but no step
    assert hf.parse_line("loss 2.5 step 3") is None  # not a dict
    assert hf.parse_line("{\"loss\": 2.5}") is None  # JSON, double quotes: another format's
    assert hf.parse_line("{'loss'") is None  # cut before any complete entry
    assert hf.parse_line("{'loss': 2.5, 'lr") is None or hf.parse_line("{'loss': 2.5, 'lr").metrics == {"loss": 2.5}


def test_a_dict_that_does_not_read_is_counted_as_unparsed() -> None:
    assert hf.parse_line("{'loss': 2.5, 'lr': tensor(0.1)}") is BAD
    assert hf.parse_line("{'loss', 'eval_x'}") is BAD  # a set, not a dict
    assert hf.parse_line("{'loss': 2.5,, 'lr': 1}") is BAD


def test_a_dict_cut_short_keeps_its_complete_entries() -> None:
    assert hf.parse_line("{'eval_loss': 2.2061, 'eval_accuracy': 0.5, 'eval_runt") == Parsed(
        step=None, evals=[("eval", "loss", 2.2061), ("eval", "accuracy", 0.5)])
    assert hf.parse_line("{'loss': 2.5, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epo") == Parsed(
        step=None, metrics={"loss": 2.5, "grad_norm": 1.2, "lr": 1e-05}, ordinal=True)
    # a brace printed before the dict does not close it
    assert hf.parse_line("} {'loss': 2.5, 'lr': 0.1, 'ep") == Parsed(step=None, metrics={"loss": 2.5, "lr": 0.1},
                                                                      ordinal=True)
    # the only `, '` is the dict's own start: nothing complete
    assert hf.parse_line("{'loss': 2.5") is None


def test_ms_swift_prints_the_step_its_total_memory_and_speed() -> None:
    line = ("{'loss': 1.2345, 'grad_norm': 0.75, 'learning_rate': 9.5e-05, 'memory(GiB)': 12.5, "
            "'train_speed(iter/s)': 0.48, 'epoch': 0.5, 'global_step/max_steps': '45/94', 'percentage': '47.87%', "
            "'elapsed_time': '1m 33s', 'remaining_time': '1m 41s'}")
    assert hf.parse_line(line) == Parsed(step=45, metrics={
        "loss": 1.2345, "grad_norm": 0.75, "lr": 9.5e-05, "memory_bytes": 12.5 * 2**30, "steps_per_s": 0.48,
        EPOCH: 0.5, TOTAL: 94.0}, ordinal=False)
    # its eval dicts carry the counter too; spaces around the slash are the counter's
    assert hf.parse_line("{'eval_loss': 1.5, 'eval_runtime': 2.0, 'global_step/max_steps': ' 50 / 94 '}") == Parsed(
        step=50, evals=[("eval", "loss", 1.5)])
    # a counter that is not one is no step
    for counter in ("'45 of 94'", "'45/'", "'x/94'", "'45/94/2'", "'/94'"):
        got = hf.parse_line("{'loss': 1.0, 'global_step/max_steps': " + counter + "}")
        assert got == Parsed(step=None, metrics={"loss": 1.0}, ordinal=True), counter
    # a plain number under that name is no counter: a metric of that name, as printed
    assert hf.parse_line("{'loss': 1.0, 'global_step/max_steps': 45}") == Parsed(
        step=None, metrics={"loss": 1.0, "global_step/max_steps": 45.0}, ordinal=True)


NAMES = st.from_regex(r"[a-z][a-z0-9]{0,8}_(?:acc|f1|score|count)", fullmatch=True)
VALUES = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.integers(-10**12, 10**12))


@FAST
@given(loss=VALUES, others=st.dictionaries(NAMES, VALUES, max_size=5), cut=st.integers(0, 400))
def test_printed_dicts_read_back(loss: float, others: dict[str, float], cut: int) -> None:
    """A dict of a loss and metrics of no known name, printed as Python prints it, reads back value for value (as
    floats); cut anywhere after its first entry, the entries before the last complete one read back."""
    d = {"loss": loss, **others}
    line = str(d)
    expected = {k: float(v) for k, v in d.items()}
    got = hf.parse_line(line)
    assert got == Parsed(step=None, metrics=expected, ordinal=True)
    evald = {f"eval_{k}": v for k, v in d.items()}
    got = hf.parse_line(str(evald))
    assert got == Parsed(step=None, evals=[("eval", k, float(v)) for k, v in d.items()])
    # cut short: the entries before the last `, '` of what is left
    text = line[:-1]
    at = min(len(text), len("{'loss': ") + cut)
    short = text[:at]
    keep = short.rfind(", '")
    got = hf.parse_line(short)
    if keep <= 0:
        assert got is None or got is BAD or got == Parsed(step=None, metrics=expected, ordinal=True)
    else:
        entries = short[:keep].count(", '") + 1
        assert got == Parsed(step=None, metrics=dict(list(expected.items())[:entries]), ordinal=True)


def _state(tmp_path: Path, data: object) -> Path:
    path = tmp_path / hf.STATE_FILE
    path.write_text(json.dumps(data))
    return path


def test_a_trainer_state_gives_each_entry_at_its_own_step(tmp_path: Path) -> None:
    state = {"best_metric": None, "global_step": 20, "log_history": [
        {"loss": 2.5, "grad_norm": 1.5, "learning_rate": 1e-4, "epoch": 0.5, "step": 10},
        {"eval_loss": 2.75, "eval_runtime": 1.25, "eval_samples_per_second": 80.0, "epoch": 0.5, "step": 10},
        {"loss": 2.25, "learning_rate": 5e-5, "epoch": 1.0, "step": 20, "num_input_tokens_seen": 81920},
        {"train_runtime": 30.0, "train_loss": 2.4, "epoch": 1.0, "step": 20, "total_flos": 1.5e15},
    ]}
    assert hf.parse_state(_state(tmp_path, state)) == [
        Parsed(step=10, metrics={"loss": 2.5, "grad_norm": 1.5, "lr": 1e-4, EPOCH: 0.5}),
        Parsed(step=10, evals=[("eval", "loss", 2.75)]),
        Parsed(step=20, metrics={"loss": 2.25, "lr": 5e-5, EPOCH: 1.0, "tokens": 81920.0}),
    ]


def test_a_trainer_state_as_a_user_or_another_process_may_leave_it(tmp_path: Path) -> None:
    """Entries without an integer step (a float, a string, none, a boolean counts as Python's int), entries that are
    no objects, no history, a null history, another JSON document: what can be read is read, nothing else."""
    state = {"log_history": [
        {"loss": 1.0, "step": 3.0}, {"loss": 1.0, "step": "4"}, {"loss": 1.0}, ["loss", 1.0], 7, None,
        {"loss": 0.5, "step": 5, "global_step/max_steps": "9/10"},  # the state's own step wins over a counter
    ]}
    assert hf.parse_state(_state(tmp_path, state)) == [Parsed(step=5, metrics={"loss": 0.5})]
    assert hf.parse_state(_state(tmp_path, {"global_step": 0})) == []
    assert hf.parse_state(_state(tmp_path, {"log_history": None})) == []
    assert hf.parse_state(_state(tmp_path, {"log_history": []})) == []
    assert hf.parse_state(_state(tmp_path, [{"loss": 1.0, "step": 1}])) == []
    assert hf.parse_state(_state(tmp_path, "log_history")) == []
    path = tmp_path / hf.STATE_FILE
    path.write_bytes(b'{"log_history": [{"loss": 1.5, "step": 2, "note": "caf\xe9"}]}')  # Latin-1 in a UTF-8 file
    assert hf.parse_state(path) == [Parsed(step=2, metrics={"loss": 1.5})]
    path.write_text('{"log_history": [{"loss": 1.5, "step": 2}')  # written half: another process still at it
    with pytest.raises(json.JSONDecodeError):
        hf.parse_state(path)
