"""TensorBoard event files (ledger.ingest.formats.tensorboard) written with tensorboard's own writer, in the forms
trainers write them: scalars (``add_scalar``), TF2 scalars written as tensors of every numeric type, tensors that
are no scalar, tags of every spelling of a split (``eval/loss``, ``val_loss``, ``Loss/val``, ``Eval_Loss``), the
eval's timing and ``hp_metric`` left out, several files of one run merged, more points than tensorboard's default
sampling keeps, and files as another process leaves them (still being written: cut mid-record; empty; not an event
file). Every expected value is written by hand from what was written (float32 values through numpy's own
rounding)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from ledger.errors import BadInput
from ledger.ingest.formats import tensorboard as tb
from ledger.ingest.formats.base import Parsed


def _write(folder: Path, points: list[tuple[int, str, object]]) -> Path:
    """An event file of (step, tag, value) points: a float is a scalar (``simple_value``), a numpy value a tensor."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(folder))
    for step, tag, value in points:
        if type(value) is float:  # np.float64 is a float too: a tensor here
            v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
        else:
            plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
            meta = summary_pb2.SummaryMetadata(plugin_data=plugin)
            v = summary_pb2.Summary.Value(tag=tag, tensor=tensor_util.make_tensor_proto(value), metadata=meta)
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0e9 + step, summary=summary_pb2.Summary(value=[v])))
    writer.close()
    [path] = folder.glob(tb.PREFIX + "*")
    return path


@pytest.mark.parametrize(("tag", "expected"), [
    ("loss", (None, "loss")),
    ("train/loss", (None, "loss")),
    ("Train/Loss", (None, "Loss")),
    ("Loss/train", (None, "Loss")),
    ("training/learning_rate", (None, "learning_rate")),
    ("train", (None, "train")),  # only a train part: kept as it is
    ("//loss//", (None, "loss")),
    ("perf/tokens_per_sec", (None, "perf/tokens_per_sec")),
    ("evaluation/loss", (None, "evaluation/loss")),  # not a split's name
    ("interval/x", (None, "interval/x")),
    ("val-loss", (None, "val-loss")),  # a dash joins no split
    ("eval/loss", ("eval", "loss")),
    ("EVAL/Loss", ("eval", "Loss")),
    ("val_loss", ("val", "loss")),
    ("Loss/val", ("val", "Loss")),
    ("valid/acc", ("val", "acc")),
    ("validation/ppl", ("val", "ppl")),
    ("validation_loss", ("val", "loss")),
    ("test/bleu", ("test", "bleu")),
    ("test_acc_top1", ("test", "acc_top1")),
    ("Eval_Loss", ("eval", "Loss")),
    ("model/val_acc/top1", ("val", "model/acc/top1")),
    ("train/eval/loss", ("eval", "train/loss")),
    ("eval", ("eval", "value")),
    ("hp_metric", None),
    ("eval/runtime", None),
    ("eval_samples_per_second", None),
    ("eval/steps_per_second", None),
    ("train/eval_runtime", None),
    ("test_samples_per_second", None),
])
def test_tags_are_split_into_step_metrics_and_evals(tag: str, expected: tuple[str | None, str] | None) -> None:
    assert tb.classify(tag) == expected


def test_scalars_of_a_run_become_step_rows_and_evals(tmp_path: Path) -> None:
    path = _write(tmp_path / "run", [
        (1, "train/loss", 3.5), (1, "train/learning_rate", 0.25), (1, "perf/tokens_per_sec", 1024.0),
        (2, "train/loss", 3.25), (2, "train/learning_rate", 0.125),
        (2, "eval/loss", 3.75), (2, "eval/accuracy", 0.5), (2, "eval/runtime", 1.5), (2, "hp_metric", 9.0),
        (4, "Loss/val", 2.75),
    ])
    got = tb.parse_events([path])
    assert got[:2] == [Parsed(step=1, metrics={"loss": 3.5, "lr": 0.25, "perf/tokens_per_sec": 1024.0}),
                       Parsed(step=2, metrics={"loss": 3.25, "lr": 0.125})]
    assert [(p.step, sorted(p.evals), p.metrics) for p in got[2:]] == [
        (2, [("eval", "accuracy", 0.5), ("eval", "loss", 3.75)], {}), (4, [("val", "Loss", 2.75)], {})]
    assert all(type(p.step) is int and all(type(v) is float for v in p.metrics.values()) for p in got)


def test_scalars_written_as_tensors_of_every_numeric_type(tmp_path: Path) -> None:
    """TF2's summaries write a scalar as a tensor: float, integer and unsigned ones are read (as floats); a boolean,
    a string or a tensor of more than one value is no scalar."""
    path = _write(tmp_path / "tf2", [
        (5, "loss", np.float32(0.1)), (5, "grad_norm", np.float64(1.0 / 3.0)), (5, "tokens_seen", np.int64(2**40 + 1)),
        (5, "epoch_u", np.uint8(200)), (5, "flag", np.bool_(True)), (5, "name", np.array(b"warm-up")),
        (5, "hist", np.array([1.0, 2.0, 3.0], np.float32)), (5, "eval/loss", np.float16(0.3)),
        (6, "one", np.array([[7]], np.int32)),  # one value in a 1x1 tensor is a scalar
    ])
    got = tb.parse_events([path])
    assert got == [Parsed(step=5, metrics={"loss": float(np.float32(0.1)), "grad_norm": 1.0 / 3.0,
                                           "tokens_seen": float(2**40 + 1), "epoch_u": 200.0}),
                   Parsed(step=6, metrics={"one": 7.0}),
                   Parsed(step=5, evals=[("eval", "loss", float(np.float16(0.3)))])]


def test_every_point_is_read_and_files_of_one_run_are_merged(tmp_path: Path) -> None:
    """More points than tensorboard keeps by default (10 tensors, 10,000 scalars per tag: no sampling here), in two
    files (a run's train and eval writers): one row per step with the metrics of both."""
    steps = range(0, 400, 20)  # 20 points
    a = _write(tmp_path / "train", [(s, "loss", np.float32(s / 8)) for s in steps]
               + [(s, "lr", float(s) / 1024) for s in steps])
    b = _write(tmp_path / "eval", [(s, "grad_norm", float(s) + 0.5) for s in steps]
               + [(s, "val/loss", float(s) / 4) for s in steps if s % 100 == 0])
    got = tb.parse_events([a, b])
    assert got == [Parsed(step=s, metrics={"loss": s / 8, "lr": s / 1024, "grad_norm": s + 0.5}) for s in steps] + [
        Parsed(step=s, evals=[("val", "loss", s / 4)]) for s in (0, 100, 200, 300)]
    # the order of the files does not matter
    assert tb.parse_events([b, a]) == got


def test_a_long_run_keeps_every_scalar(tmp_path: Path) -> None:
    """More scalars of one tag than tensorboard keeps by default (10,000: a run logging its loss every step):
    every one."""
    n = 10_050
    path = _write(tmp_path / "long", [(s, "loss", s / 1024) for s in range(n)])
    got = tb.parse_events([path])
    assert len(got) == n and got[-1] == Parsed(step=n - 1, metrics={"loss": (n - 1) / 1024})


def test_files_another_process_is_writing_or_left_damaged(tmp_path: Path) -> None:
    """Cut mid-record (the writer still at it): the complete records before the cut; empty, or not an event file at
    all: nothing."""
    path = _write(tmp_path / "run", [(s, "loss", s / 2) for s in range(1, 6)])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    assert tb.parse_events([path]) == [Parsed(step=s, metrics={"loss": s / 2}) for s in range(1, 5)]
    path.write_bytes(b"")
    assert tb.parse_events([path]) == []
    path.write_bytes(b"step 1 loss 2.5\n" * 4)
    assert tb.parse_events([path]) == []
    assert tb.parse_events([]) == []


def test_without_the_tensorboard_package_it_says_which_extra_to_install(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The package missing (its module made unimportable, as on an install without the extra)."""
    assert tb.available()
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_accumulator", None)
    assert not tb.available()
    with pytest.raises(BadInput, match=r"^reading TensorBoard events needs the tensorboard package: "
                                         r"pip install 'stackreceipt\[tensorboard\]'$"):
        tb.parse_events([tmp_path / "events.out.tfevents.1"])
