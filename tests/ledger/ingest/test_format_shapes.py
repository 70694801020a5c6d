"""What a line says about itself, in the printed shapes of the tools that print it (tests/fixtures/logs, where each
shape comes from in its README): the real step of a progress counter (``iter 20/50``, a tqdm bar's ``20/1352``,
ms-swift's ``'global_step/max_steps': '45/94'``, nanotron's ``iteration: 2 / 1000``) and its total (``@total``), the
epoch, rates under their standard names, numbers with a decimal multiplier (``43.2K``), labels that are no metrics
(``DP=0|PP=0|TP=0``, ``[Rank 0]``), JSON lines, and the columns torchtitan's and nanotron's figures belong to.

Expected values are written from the lines by hand. Steps are checked where a format gives them (``parse_line``) and
as the capture numbers them (``LineCapture(...).rows``: the counter's total and the epoch are taken by step identity,
tests/ledger/ingest/test_identity.py, which makes an epoch's counter steps of the run)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ledger.ingest.formats import hf, jsonl, keyvalue, nanotron, torchtitan
from ledger.ingest.formats.base import EPOCH, TOTAL, Parsed, number
from ledger.ingest.formats.scan import LineCapture

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def lines(name: str) -> list[str]:
    """The file's lines (split at newlines only: a ``\r`` stays in its line)."""
    return (LOGS / name).read_bytes().decode().removesuffix("\n").split("\n")


def capture(data: bytes, chunk: int | None = None, *, fast: bool = True) -> LineCapture:
    out = LineCapture(fast=fast)
    step = chunk or len(data) or 1
    for i in range(0, len(data), step):
        out.feed(data[i:i + step])
    out.close()
    return out


def read(name: str, chunk: int | None = None) -> LineCapture:
    return capture((LOGS / name).read_bytes(), chunk)


def _printed(steps: dict[int, dict[str, float]]) -> dict[int, dict[str, str]]:
    return {step: {k: repr(v) for k, v in metrics.items()} for step, metrics in steps.items()}


# ------------------------------------------------------------------------------------- counters, epochs, rates
def test_a_loops_epoch_counter_and_samples_rate() -> None:
    """``epoch 2 iter 20/50 | loss=2.1 | lr 3.0e-4 | 640.0 samples/sec``, 3 epochs of 5 prints: the step is the
    counter, its total ``@total``, the epoch ``epoch``, the rate ``samples_per_s``. Before, the rate was not read and
    the total was lost."""
    parsed = [keyvalue.parse_line(line) for line in lines("keyvalue_epochs.log")]
    assert all(p is not None for p in parsed)
    assert parsed[6] == Parsed(step=20, metrics={EPOCH: 2.0, TOTAL: 50.0, "loss": 2.1, "lr": 3.0e-4,
                                                 "samples_per_s": 640.0})
    assert [(p.step, p.metrics[EPOCH], p.metrics[TOTAL]) for p in parsed if p] == [
        (10, 1, 50), (20, 1, 50), (30, 1, 50), (40, 1, 50), (50, 1, 50),
        (10, 2, 50), (20, 2, 50), (30, 2, 50), (40, 2, 50), (50, 2, 50),
        (10, 3, 50), (20, 3, 50), (30, 3, 50), (40, 3, 50), (50, 3, 50)]
    assert [p.metrics["samples_per_s"] for p in parsed if p][:5] == [612.5, 630.1, 640.0, 641.7, 639.2]
    rows = read("keyvalue_epochs.log").best()
    assert rows is not None and rows.name == keyvalue.NAME and sorted(rows.steps) == list(range(10, 151, 10))
    assert rows.merged().printed.tolist() == [10, 20, 30, 40, 50] * 3


def test_an_epoch_counters_lines_read_as_columns_as_the_parser_reads_them() -> None:
    """keyvalue_epochs.log's shape over 12 epochs of 500 lines, values varied: the epoch and the counter's total are
    numbers of the line, so the shape gets a template, which reads them as the parser does."""
    out = [f"epoch {e} iter {i}/500 | loss={3 / (1 + e + i / 500):.4f} | lr {(i % 9 + 1) * 1e-4:.1e} | "
           f"{600 + i % 77 + 0.5} samples/sec" for e in range(1, 13) for i in range(1, 501)]
    data = ("\n".join(out) + "\n").encode()
    fast, slow = capture(data, 1 << 16), capture(data, 1 << 16, fast=False)
    got, want = fast.best(), slow.best()
    assert got is not None and want is not None and got.name == want.name == keyvalue.NAME
    assert len(want.steps) == 6000 and _printed(got.steps) == _printed(want.steps)
    assert want.steps[7] == {EPOCH: 1.0, "loss": 1.4896, "lr": 8e-4, "samples_per_s": 607.5}
    assert want.steps[507] == {EPOCH: 2.0, "loss": 0.9954, "lr": 8e-4, "samples_per_s": 607.5}  # epoch 2's iter 7
    live = [t for t in fast.templates.items if not t.dead]
    assert live and sum(t.uses for t in live) >= 5900, [(t.regex.pattern, t.uses, t.dead) for t in fast.templates.items]


@pytest.mark.parametrize(("index", "step", "metrics"), [
    (0, 5, {TOTAL: 100.0, "loss": 2.5012, "lr": 1.0e-4, "tokens_per_s": 10240.0, "steps_per_s": 1.25}),
    (1, 6, {"loss": 2.4907, "lr": 1.0e-4, "tokens_per_s": 10310.0, "steps_per_s": 1.27}),
    (2, 7, {"loss": 2.4801, "samples_per_s": 81.5, "tokens_per_s": 10355.0}),
    (3, 8, {"loss": 2.4713, "lr": 1.0e-4}),  # `[Rank 0]` and `rank 0` are labels
])
def test_rates_by_their_units_and_rank_labels(index: int, step: int, metrics: dict[str, float]) -> None:
    assert keyvalue.parse_line(lines("keyvalue_rates.log")[index]) == Parsed(step=step, metrics=metrics)


def test_a_rates_unit_wins_over_its_name() -> None:
    """PaddleOCR's ``ips: 9.71838 samples/s`` (the real excerpt in keyvalue.log) is a samples rate."""
    line = next(line for line in lines("keyvalue.log") if "ppocr" in line)
    parsed = keyvalue.parse_line(line)
    assert parsed is not None and parsed.step == 10 and parsed.metrics["samples_per_s"] == 9.71838
    assert "ips" not in parsed.metrics


@pytest.mark.parametrize(("text", "value"), [
    ("43.2K", 43200.0), ("85.8G", 85.8e9), ("11.5K", 11500.0), ("547M", 547e6), ("1.2T", 1.2e12), ("761", 761.0),
    ("-2k", -2000.0), ("1e-05", 1e-05), ("1.41GiB", None), ("5ms", None), ("K", None), ("3.2.1K", None),
])
def test_numbers_with_a_decimal_multiplier(text: str, value: float | None) -> None:
    got = number(text)
    assert got == value if value is None else got == pytest.approx(value, rel=1e-15)


# --------------------------------------------------------------------------------------------------- nanotron
def test_nanotron_reads_its_human_format_and_no_rank_labels() -> None:
    """nanotron's ``tokens_per_sec: 43.2K`` is 43,200 tokens/s, not skipped (before, the first iteration's ``761``
    was the only throughput read, the headline 761 instead of ~55,000); ``DP=0|PP=0|TP=0`` are no metrics."""
    rows = read("nanotron.log").best()
    assert rows is not None and rows.name == nanotron.NAME and sorted(rows.steps) == [1, 2, 3, 4, 5, 6]
    tps = [rows.steps[s]["tokens_per_s"] for s in range(1, 7)]
    assert tps == pytest.approx([761.0, 43200.0, 55100.0, 55300.0, 55500.0, 55800.0], rel=1e-15)
    second = nanotron.parse_line(lines("nanotron.log")[2])
    assert second is not None and second.step == 2
    assert second.metrics == pytest.approx({
        TOTAL: 1000.0, "tokens": 262000.0, "step_time_s": 3.03, "tokens_per_s": 43200.0,
        "tokens_per_sec_per_gpu": 5400.0, "global_batch_size": 64.0, "loss": 10.9, "lr": 6e-06,
        "tflops_per_device": 26.8, "hardware_tflops_per_gpu": 26.8, "grad_norm": 12.7}, rel=1e-15)
    first = rows.steps[1]
    assert first["step_time_s"] == pytest.approx(172.0, rel=1e-15) and first["tokens"] == pytest.approx(131000.0)
    fifth = nanotron.parse_line(lines("nanotron.log")[5])
    assert fifth is not None and fifth.metrics["memory_bytes"] == pytest.approx(41.3e9, rel=1e-15)
    assert fifth.metrics["cuda_memory_allocated"] == pytest.approx(9.72e9, rel=1e-15)
    sixth = rows.steps[6]
    assert sixth["step_time_s"] == pytest.approx(2.35, rel=1e-15) and "eta" not in sixth
    assert sixth["global_batch_size"] == pytest.approx(131000.0, rel=1e-15)
    names = {name for metrics in rows.steps.values() for name in metrics}
    assert not names & {"DP", "PP", "TP", "dp", "pp", "tp"}
    assert keyvalue.parse_line(lines("nanotron.log")[0]) is None  # the start banner is no step


def test_the_generic_format_reads_multipliers_and_drops_parallel_ranks_too() -> None:
    parsed = keyvalue.parse_line(lines("nanotron.log")[2])
    assert parsed is not None and parsed.step == 2 and parsed.metrics[TOTAL] == 1000.0
    assert parsed.metrics["tokens_per_s"] == pytest.approx(43200.0, rel=1e-15)
    assert not {"DP", "PP", "TP"} & set(parsed.metrics)


NANOTRON = ("10/17/2025 16:20:54 [INFO|DP=0|PP=1|TP=0]: iteration: {i} / 9000 | consumed_tokens: {tokens} | "
            "time_per_iteration_ms: {ms}K | tokens_per_sec: {tps}K | tokens_per_sec_per_gpu: {gpu}K | "
            "global_batch_size: 131K | lm_loss: {loss} | grad_norm: {grad} | lr: {lr} | "
            "model_tflops_per_gpu: {tflops} | eta: 0:39:07")
"""The shape of nanotron.log's last line (nanotron's newest), its values varied line by line."""


@pytest.mark.parametrize("shape", ["nanotron", "json"])
def test_multiplied_numbers_and_json_lines_read_as_columns_as_the_parser_reads_them(shape: str) -> None:
    """6,000 step lines of one shape, their values varied: read through templates (multipliers scaled as the parser
    scales them: ``55.8K`` tokens/s by 1000, ``2.35K`` milliseconds by 1, ``786K`` tokens by 1000; JSON's numbers as
    printed), they give exactly what the parser gives line by line."""
    out = []
    for i in range(1, 6001):
        if shape == "nanotron":
            out.append(NANOTRON.format(
                i=i, tokens=f"{i % 900 + 100}K", ms=f"2.{i % 90 + 10}", tps=f"5{i % 10}.{i % 7}",
                gpu=f"6.{i % 90 + 10}", loss=f"{9 - i / 1000:.3g}", grad=f"{1 + i % 97 / 10:.3g}",
                lr=f"{(i % 50 + 1) * 1e-6:.3g}", tflops=f"3{i % 10}.{i % 9}"))
        else:
            out.append(f'{{"step": {i}, "loss": {3 / (1 + i / 100):.6f}, "lr": {(i % 50 + 1) * 1e-6:.3g}, '
                       f'"grad_norm": {1 + i % 97 / 10}, "tokens_per_sec": {51000 + i % 997 * 1.5}}}')
    data = ("\n".join(out) + "\n").encode()
    fast, slow = capture(data, 1 << 16), capture(data, 1 << 16, fast=False)
    got, want = fast.best(), slow.best()
    assert got is not None and want is not None and got.name == want.name == (
        nanotron.NAME if shape == "nanotron" else jsonl.NAME)
    assert len(got.steps) == 6000 and _printed(got.steps) == _printed(want.steps)
    assert want.steps[5]["tokens_per_s"] == (55500.0 if shape == "nanotron" else 51007.5)
    live = [t for t in fast.templates.items if t.format == got.name and not t.dead]
    assert live and sum(t.uses for t in live) >= 5900, [(t.regex.pattern, t.uses, t.dead) for t in fast.templates.items]


# --------------------------------------------------------------------------------------------------- torchtitan
def test_torchtitan_tflops_fill_the_per_device_column() -> None:
    parsed = torchtitan.parse_line(lines("torchtitan.log")[0].split("]:", 1)[1])
    assert parsed is not None and parsed.metrics["tflops_per_device"] == 18.36 and "tflops" not in parsed.metrics
    rows = read("torchtitan.log").best()
    assert rows is not None
    table = rows.tables()["steps"].to_pydict()
    # in the order printed: the [rank0]: lines of two runs (22-24, 200), then the unlabelled ones of a third (4, 4,
    # 5: two ranks print step 4, one step): each printer's counter rises, so no segment and no offset
    assert table["step"] == [22, 23, 24, 200, 4, 5] and set(table["printed_step"]) == {None}
    assert table["tflops_per_device"] == [18.36, 20.12, 19.86, 339.16, 314.71, 313.36]
    assert all(("tflops", v) not in (extra or []) for extra in table["extra"] for v in [None])
    assert all(dict(extra).get("tps") for extra in table["extra"])  # tokens/s per device: stays as printed


# ---------------------------------------------------------------------------------------------------- JSON lines
def test_json_lines_on_stdout_and_stderr() -> None:
    """``{"step": 1, "loss": 3.0}`` printed by a script (and by rank 1 through torchrun's prefix): steps, evals at
    their step, ``NaN``/``Infinity`` as Python's json writes them; an event with a step is no step. Before, none."""
    rows = read("jsonl.log").best()
    assert rows is not None and rows.name == jsonl.NAME and sorted(rows.steps) == [1, 2, 3, 4]
    assert rows.steps[1] == {"loss": 3.0, "lr": 0.0001}
    assert rows.steps[2] == {"loss": 2.75, "lr": 0.0002, "grad_norm": 1.5, "tokens_per_s": 51200.0}
    assert math.isnan(rows.steps[4]["loss"]) and rows.steps[4]["grad_norm"] == math.inf
    assert rows.evals == [(3, "eval", "loss", 2.625), (3, "eval", "accuracy", 0.5)]


def test_json_lines_after_a_logging_prefix_with_numbers_as_strings() -> None:
    """fairseq's (and metaseq's) ``--log-format json``: ``| INFO | train_inner | {...}``, values as strings, the step
    in ``num_updates``; the valid line's step in ``valid_num_updates``, its throughput figures no evals."""
    rows = read("fairseq_json.log").best()
    assert rows is not None and rows.name == jsonl.NAME and sorted(rows.steps) == [1, 2]
    assert rows.steps[2] == {EPOCH: 1.0, "update": 0.002, "loss": 15.864, "ppl": 59660.5, "wps": 739601.0,
                             "ups": 0.71, "wpb": 1048580.0, "bsz": 512.0, "lr": 5.60224e-07, "grad_norm": 16.783,
                             "clip": 100.0, "train_wall": 1.0, "wall": 75.0}
    assert rows.evals == [(2, "val", "loss", 15.2), (2, "val", "ppl", 37640.5)]


@pytest.mark.parametrize(("index", "expected"), [
    (0, Parsed(step=3, metrics={"loss": 2.9, "lr": 0.0001, "train/global_step": 3.0, "_runtime": 12.5,
                                "_timestamp": 1700000000.25})),  # W&B history: `_step` first
    (1, Parsed(step=4, metrics={"loss": 2.8, "grad_norm": 1.1, "train/samples_per_second": 84.5},
               evals=[("val", "loss", 2.95)])),  # nested objects flattened with `/`; `rank` a label
    (2, Parsed(step=5, metrics={"loss": 2.7, "lr": 9.5e-05, EPOCH: 0.05, "percentage": 5.0, TOTAL: 100.0})),
    (3, Parsed(step=6, metrics={"loss": 2.6, "lr": 9.4e-05, "memory_bytes": 17.42 * 2**30, "steps_per_s": 0.2425,
                                EPOCH: 0.06, TOTAL: 100.0})),  # ms-swift's logging.jsonl
])
def test_json_shapes(index: int, expected: Parsed) -> None:
    assert jsonl.parse_line(lines("jsonl_shapes.log")[index]) == expected


# ------------------------------------------------------------------------------------- Hugging Face and its kin
@pytest.mark.parametrize("chunk", [None, 7, 4096])
def test_hf_trainer_dicts_take_the_bars_counter(chunk: int | None) -> None:
    """The Trainer writes its dict with ``tqdm.write`` between two redraws of its bar: the dict's step is the bar's
    counter on its line (10, 20... of 1352), not its print order (1, 2...: steps off by 10x before). An eval dict cut
    by a redraw of the bar keeps ``eval_loss``, written before the cut (before, it was dropped whole)."""
    rows = read("hf_tqdm.log", chunk).best()
    assert rows is not None and rows.name == hf.NAME
    assert sorted(rows.steps) == [10, 20, 30, 40, 50, 60]
    assert rows.steps[20] == {"loss": 2.1043, "grad_norm": 1.6406, "lr": 4.8e-05, EPOCH: 0.01}
    assert rows.identity()["planned_steps"] == 1352
    assert rows.evals == [(20, "eval", "loss", 2.2061), (40, "eval", "loss", 2.1177)]


def test_a_dict_cut_short_keeps_its_complete_entries() -> None:
    assert hf.parse_line("{'eval_loss': 2.2061, 'eval_runtime': 3.2004, 'eval_sam") == Parsed(
        step=None, evals=[("eval", "loss", 2.2061)])
    assert hf.parse_line("{'eval_loss': 2.2061") is None  # 2.2061 may be cut too: nothing complete
    assert hf.parse_line("{'loss': 2.5, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epo") == Parsed(
        step=None, metrics={"loss": 2.5, "grad_norm": 1.2, "lr": 1e-05}, ordinal=True)
    assert hf.parse_line("{'loss': 2.5, 'elapsed_time': '1 day, 2:0") == Parsed(  # a cut inside a string: after it
        step=None, metrics={"loss": 2.5}, ordinal=True)


def test_dicts_without_a_bar_are_numbered_as_before() -> None:
    rows = read("hf_trainer.log").best()
    assert rows is not None and rows.ordinal and sorted(rows.steps) == [1, 2, 3, 4]


def test_llamafactory_prints_each_step_twice_at_the_same_step() -> None:
    """LlamaFactory's callback line (on its bar's line) and the Trainer's dict after it are one step, the bar's
    counter: 3 steps, not 6, and the eval at step 10 (before: 6 steps numbered by print order, the eval at the 4th)."""
    rows = read("llamafactory.log").best()
    assert rows is not None and rows.name == hf.NAME and sorted(rows.steps) == [5, 10, 15]
    assert rows.evals == [(10, "eval", "loss", 1.3811)]
    assert {"throughput", "grad_norm", "tokens"} <= set(rows.steps[10])  # the callback's and the Trainer's
    assert rows.identity()["merged"] == 3
    assert rows.identity()["planned_steps"] == 30 and rows.steps[10]["tokens"] == 98208.0
    capture = read("llamafactory.log")
    assert not [t.source for t in capture.templates.items if "%|" in t.source]  # no shape learned from a bar's line
    callback = lines("llamafactory.log")[0].split("\r")[-1]
    assert hf.parse_line(callback) == Parsed(step=None, metrics={"loss": 1.4229, "lr": 4.9978e-05, EPOCH: 0.17,
                                                                 "throughput": 1828.21}, ordinal=True)


def test_ms_swift_global_step_memory_and_speed() -> None:
    """ms-swift's ``'global_step/max_steps': '45/94'`` is the step and its total, for its evals too; ``memory(GiB)``
    is ``memory_bytes``, ``train_speed(iter/s)`` is ``steps_per_s``. Before, steps were numbered 1, 2, 3."""
    parsed = hf.parse_line(lines("ms_swift.log")[1])
    assert parsed == Parsed(step=45, metrics={"loss": 1.83471298, "grad_norm": 2.61530304, "lr": 9.98e-05,
                                              "memory_bytes": 17.42 * 2**30, "steps_per_s": 0.241857, EPOCH: 0.48,
                                              TOTAL: 94.0})
    rows = read("ms_swift.log").best()
    assert rows is not None and not rows.ordinal and sorted(rows.steps) == [45, 50, 55]
    assert rows.evals == [(50, "eval", "loss", 1.69302917)]
