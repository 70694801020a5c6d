"""Conformance of the log formats of zero-code capture on real public excerpts (tests/fixtures/logs, sources
in its README): steps, loss, lr and eval values as printed, and no step from a line that is not one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ledger.errors import BadInput
from ledger.ingest.formats import hf, lightning
from ledger.ingest.formats.pattern import compile_pattern, line_format
from ledger.ingest.formats.scan import MAX_LINE, LineCapture, Rows, rows_of

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def _fast_and_slow(data: bytes, chunk: int) -> tuple[LineCapture, LineCapture]:
    """The log read by the capture (templates, columns) and by the formats' parsers line by line
    (``fast=False``), each fed in chunks of ``chunk`` bytes and closed."""
    fast, slow = LineCapture(), LineCapture(fast=False)
    for capture in (fast, slow):
        for i in range(0, len(data), chunk):
            capture.feed(data[i:i + chunk])
        capture.close()
    return fast, slow


def _printed(steps: dict) -> dict:
    """Steps with their values as repr (NaN equal to NaN; every bit of the others compared)."""
    return {step: {k: repr(v) for k, v in metrics.items()} for step, metrics in steps.items()}


def scan(name: str) -> LineCapture:
    capture = LineCapture()
    capture.feed_file(LOGS / name)
    return capture


def test_nanogpt_iter_and_eval_lines() -> None:
    best = scan("nanogpt.log").best()
    assert best is not None and best.name == "nanogpt"
    assert sorted(best.steps) == [0, 10, 20, 30, 40, 230, 240, 3000, 3010]
    assert best.steps[10] == {"loss": 3.2202, "step_time_s": pytest.approx(0.89376), "mfu_pct": 16.68}
    assert "mfu_pct" not in best.steps[0]  # nanoGPT's -100% placeholder: not measured yet
    assert math.isnan(best.steps[3010]["loss"])
    assert best.evals == [(250, "train", "loss", 1.5440), (250, "val", "loss", 1.7220),
                          (3000, "train", "loss", 4.0390), (3000, "val", "loss", 4.0427)]


def test_torchtitan_steps_once_per_step_and_no_step_from_other_lines() -> None:
    capture = scan("torchtitan.log")
    best = capture.best()
    assert best is not None and best.name == "torchtitan"
    assert sorted(best.steps) == [4, 5, 22, 23, 24, 200]  # "Dumping profiler traces at step 200" adds none
    assert best.steps[4] == {"loss": 7.62585, "grad_norm": 26.625, "memory_bytes": 66.91 * 2**30, "tps": 10050,
                             "tflops_per_device": 314.71, "mfu_pct": 13.99}  # the first of two ranks' lines
    assert best.steps[200]["loss"] == 6.1384 and best.steps[200]["tps"] == 5856
    assert capture.others() == [] and not best.unparsed


TITAN_COLOURS = {"step:": "\x1b[31m", "loss:": "\x1b[32m", "grad_norm:": "\x1b[38;2;180;60;0m",
                 "memory:": "\x1b[38;2;54;234;195m", "tps:": "\x1b[34m", "tflops:": "\x1b[36m", "mfu:": "\x1b[35m"}
"""torchtitan's colours (torchtitan/tools/utils.py ``Color``: red, green, orange, turquoise, blue, cyan, magenta, then
``reset`` = ``\x1b[39m``), before each field of its step line as components/metrics.py prints it by default
(``metrics.disable_color_printing`` false)."""


def test_torchtitan_coloured_as_it_prints_by_default_reads_as_plain() -> None:
    """The real excerpt with torchtitan's default colours put back (the excerpts come from pages that dropped
    them), and a line of each other kind of escape sequence (a hyperlink, a cursor move): the same steps, whole or
    fed in pieces that cut sequences apart; read as columns and by the parsers alike. Before, no step was read."""
    plain = (LOGS / "torchtitan.log").read_text()
    lines = []
    for line in plain.splitlines():
        if " - step:" in line:
            for name, code in TITAN_COLOURS.items():
                line = line.replace(f"  {name} ", f"  {code}{name} ").replace(f" - {name} ", f" - {code}{name} ")
            line += "\x1b[39m"
        lines.append(line)
    lines.append("\x1b]8;;https://example.com/run\x07the run's page\x1b]8;;\x07 (not a step)")
    lines.append("\x1b[2K\x1b[1Gstep: 201  loss:  6.1000  memory: 66.91GiB(70.43%)  tps: 5,900  mfu: 1.00%")
    coloured = ("\n".join(lines) + "\n").encode()
    assert coloured.count(b"\x1b[31mstep:") == plain.count(" - step:")
    expected = LineCapture()
    expected.feed((plain + "step: 201  loss:  6.1000  memory: 66.91GiB(70.43%)  tps: 5,900  mfu: 1.00%\n").encode())
    expected.close()
    want = expected.best()
    assert want is not None and 201 in want.steps
    for chunk in (len(coloured), 7, 4096):
        fast, slow = _fast_and_slow(coloured, chunk)
        for capture in (fast, slow):
            best = capture.best()
            assert best is not None and best.name == "torchtitan"
            assert _printed(best.steps) == _printed(want.steps) and not best.unparsed and capture.others() == []


@pytest.mark.parametrize(("name", "log", "marker"), [("nanogpt", "nanogpt.log", "iter "),
                                                     ("torchtitan", "torchtitan.log", " - step:")])
def test_step_lines_with_units_glued_to_numbers_are_read_as_columns(name: str, log: str, marker: str) -> None:
    """nanoGPT's ``time 893.76ms`` and torchtitan's ``memory: 1.41GiB(1.79%)``: the real excerpts' step lines, the
    step numbers renumbered to 6,000 lines, are read through a template (the fast path) and give what the
    format's parser gives line by line. Before, a number glued to its unit was cut short (``893`` of ``893.76ms``)
    or not seen (``1.41GiB``): torchtitan's lines never had a template and nanoGPT's died on their first check,
    and both were read at 3-4 MB/s, one parser call a line."""
    import re

    real = [line for line in (LOGS / log).read_text().splitlines() if marker in line]
    later = [line for line in real if "mfu -100.00%" not in line]  # nanoGPT's placeholder: its first iterations only
    number = re.compile(r"(iter |step: +)(\d+)")
    lines = [number.sub(lambda m, i=i: f"{m.group(1)}{i}", (real if i <= len(real) else later)[i % len(later)],
                        count=1) for i in range(1, 6001)]
    data = ("\n".join(lines) + "\n").encode()
    fast, slow = _fast_and_slow(data, 1 << 16)
    best, want = fast.best(), slow.best()
    assert best is not None and want is not None and best.name == want.name == name
    assert len(best.steps) == 6000 and _printed(best.steps) == _printed(want.steps)
    live = [t for t in fast.templates.items if t.format == name and not t.dead]
    assert live and sum(t.uses for t in live) >= 5900, [(t.regex.pattern, t.uses, t.dead) for t in fast.templates.items]


def test_two_shapes_one_number_apart_are_each_read_by_their_template() -> None:
    """open-instruct's step lines with and without ``, TPS: ...`` (the real excerpt's), alternating over 4,000 lines:
    each shape gets its template and refuses the other's lines, and both read what the parser reads. The template's
    number is written without ambiguity (the columns' ``NUM``): with ``\\d[\\d,]*\\.?\\d*`` a refusal tried every
    way to split each of the line's nine numbers (195 us a line, against 2.8 us), and the log was read at 0.5 MB/s;
    and with the comma after the step taken into the number, its lines could not be read as columns (6.9 MB/s)."""
    import re

    from ledger.ingest.formats import columns, template

    assert template._NUM == columns.NUM
    real = [line for line in (LOGS / "openinstruct.log").read_text().splitlines() if "Step:" in line]
    short = next(line for line in real if "TPS" not in line)
    long = next(line for line in real if "TPS" in line)
    lines = [re.sub(r"Step: \d+", f"Step: {i}", long if i % 2 else short) for i in range(1, 4001)]
    fast, slow = _fast_and_slow(("\n".join(lines) + "\n").encode(), 1 << 16)
    best, want = fast.best(), slow.best()
    assert best is not None and want is not None and len(best.steps) == 4000
    assert _printed(best.steps) == _printed(want.steps) and "tps" in best.steps[3] and "tps" not in best.steps[4]
    live = [t for t in fast.templates.items if not t.dead]
    assert len(live) == 2 and all(t.uses >= 1900 for t in live)
    assert all(t.shape() is not None for t in live)  # read as columns: `Step: 10,`'s comma is the text's


@pytest.mark.parametrize(("text", "tokens"), [
    ("memory: 10.52GiB(13.29%)", ["10.52", "13.29"]),  # a unit may follow
    ("time 893.76ms, mfu 16.68%", ["893.76", "16.68"]),  # never cut short (not 893)
    ("Step: 10, LR: 1.9e-05, tps: 1,234", ["10", "1.9e-05", "1,234"]),  # commas only between digits
    ("version 1.2.3 and v2 x1F lr.5", []),  # no part of a dotted version, nothing glued to a word or a point
    ("loss 2.5. done", ["2.5"]),  # a full stop may end it
    ("info nan inf infinity -3 +.5", ["nan", "inf", "-3", "+.5"]),
])
def test_a_templates_numbers_are_whole(text: str, tokens: list[str]) -> None:
    """The numbers a template is built from (``template._TOKEN``), as its docs define them."""
    from ledger.ingest.formats import template

    assert [m.group() for m in template._TOKEN.finditer(text)] == tokens


def test_a_shape_that_cannot_be_cut_into_columns_is_read_by_its_pattern() -> None:
    """``acc 0.5-0.6`` joins two numbers into one run of number characters, so this template cannot read its lines
    as columns: it reads them by its pattern, block by block (``Template.read_block``), among lines of other shapes
    (a second step shape, a line of another format, lines of no format). What it reads, and what it leaves to the
    parsers, equals the parsers' reading line by line."""
    lines = []
    for i in range(1, 6001):
        if i % 7 == 0:
            lines.append(f"step {i} loss {3 / i:.5f} lr {i % 5}e-4")
        elif i % 11 == 0:
            lines.append(f"iter {i}: loss {2 / i:.4f}, time {900 + i % 9:.2f}ms, mfu 16.{i % 10}0%")
        elif i % 13 == 0:
            lines.append(f"epoch done, saving step-{i} checkpoint")
        else:
            lines.append(f"step {i} loss {3 / i:.4f} acc 0.{i % 9}-0.{i % 7}")
    fast, slow = _fast_and_slow(("\n".join(lines) + "\n").encode(), 1 << 16)
    assert fast.lines == slow.lines == 6000
    for name, rows in fast.rows.items():
        want = slow.rows[name]
        assert _printed(rows.steps) == _printed(want.steps) and rows.unparsed == want.unparsed, name
        assert rows.merged().lines.tolist() == want.merged().lines.tolist(), name  # each row's line number
    read = [t for t in fast.templates.items if "acc" in t.source]
    assert read and read[0].shape() is None and not read[0].dead and read[0].uses >= 4000
    steps = [i for i in range(1, 6001) if i % 7 == 0 or (i % 11 and i % 13)]
    assert sorted(fast.rows["key-value"].steps) == steps and len(fast.rows["nanogpt"].steps) == len(
        [i for i in range(1, 6001) if i % 7 and i % 11 == 0])


def test_a_shape_that_gives_no_template_is_not_tried_on_every_line(monkeypatch) -> None:
    """Lines whose loss equals their step (``step 7 loss 7``: which number is which cannot be told) never give a
    template; after LEARN_TRIES misses in a row, only every LEARN_EVERY-th line is tried (building one compares
    every number with every value: the costliest thing done to a line), and every line is still read."""
    from ledger.ingest.formats import template

    calls = []
    build = template.build
    monkeypatch.setattr(template, "build", lambda *a: calls.append(1) or build(*a))
    capture = LineCapture()
    capture.feed("".join(f"step {i} loss {i}\n" for i in range(1, 5001)).encode())
    capture.close()
    best = capture.best()
    assert best is not None and len(best.steps) == 5000 and best.steps[4321] == {"loss": 4321.0}
    assert not capture.templates.items
    assert len(calls) == template.LEARN_TRIES + -(-(5000 - template.LEARN_TRIES) // template.LEARN_EVERY)


def printed(rows: Rows) -> list[int]:
    """The step counters of the rows as their lines printed them, in the order printed."""
    return rows.merged().printed.tolist()


def test_deepspeed_progress_and_throughput_lines() -> None:
    capture = scan("deepspeed.log")
    best = capture.best()
    assert best is not None and best.name == "deepspeed"
    # step=0 is the engine's initial state; the excerpt's step=1 line comes from another run, after step=100: the
    # counter goes back, a new segment (an epoch), never a repeat to drop
    assert printed(best) == [100, 1] and best.identity()["segments"] == 2
    assert best.steps[100] == {"skipped_steps": 0, "lr": 0.001, "epoch": 0,
                               "RunningAvgSamplesPerSec": 5720.511220447356,
                               "CurrSamplesPerSec": 5370.427656850192, "memory_bytes": 0.12e9}
    assert best.steps[101]["lr"] == 0.00029999999999267505  # step 1 of the next segment, after step 100
    assert capture.others() == []  # OVERFLOW / Iteration: 90 reward lines are not steps of any format


def test_hf_trainer_dict_lines_are_numbered_and_state_file_has_steps() -> None:
    best = scan("hf_trainer.log").best()
    assert best is not None and best.name == "hf-trainer" and best.ordinal
    assert sorted(best.steps) == [1, 2, 3, 4]
    assert best.steps[2] == {"loss": 0.0981, "grad_norm": 2.0199484401564374, "lr": 9.60561826557425e-05,
                             "epoch": 0.4}
    state = rows_of(hf.NAME, hf.parse_state(LOGS / "trainer_state.json"))
    assert not state.ordinal and sorted(state.steps) == [50, 100]
    assert state.steps[100]["loss"] == 1.3879 and state.steps[100]["lr"] == 1.5822784810126583e-05
    assert sorted(state.evals) == [(50, "eval", "accuracy", 0.25503355264663696),
                                   (50, "eval", "loss", 1.3863019943237305),
                                   (100, "eval", "accuracy", 0.26366251707077026),
                                   (100, "eval", "loss", 1.3862756490707397)]


def test_open_instruct_lines() -> None:
    best = scan("openinstruct.log").best()
    assert best is not None and best.name == "open-instruct"
    assert best.steps == {10: {"lr": 1.9e-05, "loss": 1.2345}, 20: {"lr": 1.6e-05, "loss": 1.1021, "tps": 4101.2},
                          30: {"lr": 1.0e-05, "loss": 1.0533, "aux_loss": 0.0123}}


def test_generic_key_value_lines_without_phantoms() -> None:
    capture = scan("keyvalue.log")
    best = capture.best()
    assert best is not None and best.name == "key-value"
    # not "Epoch 5/5", not step.make_ins_seg_labels; the excerpt's three sources each start a segment
    assert printed(best) == [2300, 2400, 2700, 10, 1, 2]
    by_counter = dict(zip(printed(best), best.merged().steps.tolist(), strict=True))
    steps = best.steps
    assert steps[2300] == {"loss": 0.3651, "imps": 26.6, "lr": 0.0343}  # no "Sep 17" from the date, no @total
    assert steps[by_counter[10]]["loss"] == 1.871535 and steps[by_counter[10]]["lr"] == 0.000006
    # `ips: 9.71838 samples/s`
    assert "eta" not in steps[by_counter[10]] and steps[by_counter[10]]["samples_per_s"] == 9.71838
    assert steps[by_counter[1]] == {"loss": 10.2313}
    assert best.merged().steps.tolist()[3] == 3305 + 10  # an epoch is as long as the total printed: 3305
    capture = LineCapture()
    capture.feed(b"step 100 loss 2.1 val_loss 2.3 eval/acc 0.5\nstep 200 val_loss 2.2\n")
    capture.close()
    best = capture.best()
    assert best is not None and best.steps == {100: {"loss": 2.1}}
    assert best.evals == [(100, "val", "loss", 2.3), (100, "eval", "acc", 0.5), (200, "val", "loss", 2.2)]


@pytest.mark.parametrize("prefix", ["INFO train.py:212]", "[trainer.cc:88]", "W1202 10:00:01.5 run_pretrain.py:31:"])
def test_a_logging_prefixs_file_and_line_is_no_metric(prefix: str) -> None:
    capture = LineCapture(fast=False)
    capture.feed(f"{prefix} step 3 loss 2.5 lr 1e-4\n".encode())
    capture.close()
    best = capture.best()
    assert best is not None and best.steps == {3: {"loss": 2.5, "lr": 1e-4}}


@pytest.mark.parametrize("line", [
    "Epoch 3/10", "saving checkpoint at step 1000", "Resuming from iteration 500", "step 10", "lr 0.001 loss 2.3",
    " 42%|████▏     | 250/600 [01:02<01:27,  4.01it/s]", "Evaluating step 3 of 10 ...", "step 7 done in 1.2s",
])
def test_non_step_lines_make_no_step(line: str) -> None:
    capture = LineCapture()
    capture.feed(line.encode() + b"\n")
    capture.close()
    assert capture.best() is None


def test_user_pattern_maps_named_groups() -> None:
    fmt = line_format(compile_pattern(r"it=(?P<step>\d+) L=(?P<loss>\S+) acc=(?P<acc>\S+)"))
    capture = LineCapture({"pattern": fmt}, hint=False)
    capture.feed(b"it=5 L=2.5 acc=0.75\nnoise\nit=6 L=oops acc=1\n")
    capture.close()
    best = capture.best()
    assert best is not None and best.steps == {5: {"loss": 2.5, "acc": 0.75}} and best.unparsed == [3]
    with pytest.raises(BadInput, match="named group for the step"):
        compile_pattern(r"loss (?P<loss>\S+)")
    with pytest.raises(BadInput, match="not a valid regular expression"):
        compile_pattern(r"step (?P<step>\d+")


def test_line_of_any_length_is_skipped_in_bounded_memory() -> None:
    capture = LineCapture()
    chunk = b"x" * (1 << 20)
    capture.feed(b"step 1 loss 2.0\n")
    for _ in range(8):  # an 8 MiB line without a newline, fed in pieces
        capture.feed(chunk)
        assert len(capture._pending) <= MAX_LINE
    capture.feed(b" step 9 loss 1.0\nstep 2 loss 1.5\n")
    capture.close()
    best = capture.best()
    assert best is not None and sorted(best.steps) == [1, 2] and capture.long_lines == 1


@pytest.mark.parametrize("chunk", [1 << 16, 1 << 22])
def test_a_step_line_after_a_progress_bar_on_the_same_stream_is_read(chunk: int) -> None:
    """A script that logs its step lines to stderr while a tqdm bar redraws there (``\\r``, no newline for minutes):
    each step line ends a line made of all the redraws before it, far longer than MAX_LINE. Its last segment (after
    the last ``\\r``) is read, whether the line came in one block or over many (fed in pieces of 64 KiB and 4 MiB);
    a long line without ``\\r`` is still skipped and counted, as is one whose last segment is itself too long, and
    the bytes kept meanwhile stay under MAX_LINE. Before, every such step line was skipped with its redraws."""
    capture = LineCapture()
    bar = "".join(f"\r {i // 200:3d}%|##        | {i}/20000 [00:{i % 60:02d}<03:10, 4.99it/s]" for i in range(20000))
    assert len(bar) > 8 * MAX_LINE
    data = "".join(f"{bar}\rstep {k} loss {3 / k:.4f} lr 1.0e-04\n" for k in range(1, 4))
    data += "x" * (2 * MAX_LINE) + " step 99 loss 9.0\n"  # no \r: skipped
    data += bar + "\r" + "y" * (2 * MAX_LINE) + " step 98 loss 8.0\n"  # its last segment too long: skipped
    data += bar + "\rstep 4 loss 0.5000 lr 1.0e-04"  # the last line, without a newline
    raw = data.encode()
    for i in range(0, len(raw), chunk):
        capture.feed(raw[i:i + chunk])
        assert len(capture._pending) <= MAX_LINE and (capture._tail is None or len(capture._tail) <= MAX_LINE)
    capture.close()
    best = capture.best()
    assert best is not None and sorted(best.steps) == [1, 2, 3, 4]
    assert best.steps[2] == {"loss": 1.5, "lr": 1e-4} and capture.long_lines == 2 and capture.lines == 6


@pytest.mark.parametrize("chunk", [1 << 16, 1 << 22])
def test_a_coloured_step_line_after_a_progress_bar_is_read_as_any_line(chunk: int) -> None:
    """The last segment of an overlong line is read as any other line, escape sequences removed, whether the line
    ended within one block or after many (the second path offered it with its colours, and no format read it)."""
    bar = "".join(f"\r {i // 400:3d}%|##        | {i}/40000 [00:{i % 60:02d}<03:10]" for i in range(40000))
    assert len(bar) > 1 << 20  # more than a block: the line ends in a later one when fed in 64 KiB pieces
    raw = (bar + "\r\x1b[32mstep 1 loss 2.5000\x1b[0m\nstep 2 loss 2.0000\n").encode()
    capture = LineCapture()
    for i in range(0, len(raw), chunk):
        capture.feed(raw[i:i + chunk])
    capture.close()
    best = capture.best()
    assert best is not None and best.steps == {1: {"loss": 2.5}, 2: {"loss": 2.0}}
    assert capture.lines == 2 and capture.long_lines == 0


def test_lightning_metrics_csv(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,lr-AdamW,step,train_loss,val_acc,val_loss\n0,0.01,9,2.31,,\n0,0.01,19,2.02,,\n"
                    "0,,19,,0.41,1.98\n1,0.005,29,1.75,,\n")
    assert lightning.looks_like(path)
    rows = rows_of(lightning.NAME, lightning.parse_csv(path))
    assert rows.steps == {9: {"epoch": 0, "lr": 0.01, "loss": 2.31}, 19: {"epoch": 0, "lr": 0.01, "loss": 2.02},
                          29: {"epoch": 1, "lr": 0.005, "loss": 1.75}}
    assert sorted(rows.evals) == [(19, "val", "acc", 0.41), (19, "val", "loss", 1.98)]


def test_lightning_metrics_csv_of_a_real_run() -> None:
    """A real ``metrics.csv`` (on_step and on_epoch logging: ``_step`` and ``_epoch`` columns, empty cells):
    each row is the step it names; ``train_loss_step`` is the loss, the epoch aggregates stay their own
    metrics at the epoch's last step."""
    path = LOGS / "lightning_metrics.csv"
    assert lightning.looks_like(path)
    rows = rows_of(lightning.NAME, lightning.parse_csv(path))
    assert sorted(rows.steps) == [49, 62, 99, 125, 149]
    assert rows.steps[49] == {"loss": 0.5179452385386695, "epoch": 0, "dynamics_loss_step": 0.0733703225851059,
                              "initial_omega_loss_step": 0.0299767404794693,
                              "initial_theta_loss_step": 0.41459816694259644}
    assert rows.steps[62] == {"epoch": 0, "train_loss_epoch": 0.875815351867729,
                              "dynamics_loss_epoch": 0.26755237579345703,
                              "initial_omega_loss_epoch": 0.039364561438560486,
                              "initial_theta_loss_epoch": 0.5688983798027039}
    assert rows.steps[99]["loss"] == 0.43816835700837986 and rows.steps[99]["epoch"] == 1
    assert rows.steps[149]["loss"] == 0.45186219058727756 and "loss" not in rows.steps[125]
    assert rows.evals == []


def test_lightning_validation_only_rows_are_evals_and_no_steps() -> None:
    rows = rows_of(lightning.NAME, lightning.parse_csv(LOGS / "lightning_val_metrics.csv"))
    assert rows.steps == {}
    assert sorted(rows.evals) == [(1, "val", "loss", 2.2744691371917725), (3, "val", "loss", 2.23516583442688),
                                  (5, "val", "loss", 2.179199695587158), (7, "val", "loss", 2.1267104148864746)]


def _rows(capture: LineCapture) -> tuple[dict, list, list]:
    best = capture.best()
    assert best is not None
    return best.steps, sorted(best.evals), best.unparsed


def test_fast_path_reads_what_the_parsers_read() -> None:
    lines = []
    for step in range(1, 4001):
        lines.append(f"[rank0]: step {step} loss {3 / step:.6f} lr {1e-3 * (step % 7):.3e} grad_norm {step % 13}.5")
        if step % 50 == 0:
            lines.append(f"step {step} loss nan lr 1e-3 grad_norm inf tokens 1,024")  # another shape
            lines.append("Epoch done at step 3")
        if step == 2000:
            lines.append("x" * 100_000)  # an overlong line between blocks
    data = ("\n".join(lines) + "\n").encode()
    fast, slow = _fast_and_slow(data, 70_001)  # chunks that cut lines
    fast_steps, fast_evals, fast_bad = _rows(fast)
    slow_steps, slow_evals, slow_bad = _rows(slow)
    assert len(slow_steps) == 4000 and slow_steps[7] == {"loss": 0.428571, "lr": 0.0, "grad_norm": 7.5}
    def norm(steps: dict) -> list:
        return sorted((step, sorted((k, repr(v)) for k, v in row.items())) for step, row in steps.items())

    assert norm(fast_steps) == norm(slow_steps) and fast_evals == slow_evals and fast_bad == slow_bad
    assert any(t.uses > 1000 for t in fast.templates.items) and fast.lines == slow.lines == len(lines)


def test_columnar_path_reads_what_the_parsers_read() -> None:
    """Lines of a learned shape are read a block at a time as columns (formats/columns.py): a logging prefix
    of numbers nobody reads (a date with dashes, a time with a comma), thousands separators, signs and
    exponents, and lines of the same shape that the columns must leave to the parsers (nan where a number
    was, a piece glued to its number, a step like 1.5) all read exactly as the formats' own parsers read them."""
    lines = []
    for step in range(1, 6001):
        stamp = f"2026-12-01 10:{step // 60 % 60:02d}:{step % 60:02d},{step % 1000:03d} INFO train.py:212]"
        loss = f"{(-1) ** step * 3 / step:.5e}" if step % 7 else f"{3 / step:.5f}"
        lines.append(f"{stamp} step {step} | loss {loss} | lr {1e-4 * (step % 5):.3e} | tokens {step * 1024:,}")
        if step % 500 == 0:
            lines.append(f"{stamp} step {step} | loss nan | lr 1.000e-04 | tokens 1,024")  # nan: not a number run
            lines.append(f"{stamp} step {step}.5 | loss 1.0 | lr 1.000e-04 | tokens 1,024")  # a step the parser refuses
            lines.append(f"{stamp} step {step + 1} | loss2.5 | lr 1.000e-04 | tokens 1,024")  # glued: same shape
    data = ("\n".join(lines) + "\n").encode()
    fast, slow = _fast_and_slow(data, 300_007)
    fast_steps, fast_evals, fast_bad = _rows(fast)
    slow_steps, slow_evals, slow_bad = _rows(slow)
    assert len(slow_steps) == 6001  # the last glued line's step 6001 too
    assert slow_steps[7] == {"loss": 0.42857, "lr": 2e-4, "tokens": 7168}  # train.py:212 is where, not a metric
    assert slow_steps[8]["loss"] == 3.75e-01 and slow_steps[9]["loss"] == -3.33333e-01
    assert fast_steps == slow_steps and fast_evals == slow_evals and fast_bad == slow_bad
    best = fast.best()
    assert best is not None and best._chunks and fast.lines == slow.lines == len(lines)
    assert best.tables()["steps"].equals(slow.best().tables()["steps"])  # type: ignore[union-attr]


def test_rows_from_columns_and_parsers_join_in_file_order() -> None:
    """Rows read as columns and rows read by a parser join in line order, across the joins of many columns; a
    metric a line did not give stays missing (a printed NaN is given); an eval printed without a step belongs to
    the latest step printed before it; tables carry extra metrics as a map and whole-number columns as ints."""
    import numpy as np

    from ledger.ingest.formats import scan
    from ledger.ingest.formats.base import Parsed

    rows = scan.Rows("x")
    rows.add(Parsed(step=2, metrics={"loss": 9.0, "acc": 0.5}), where=1)
    n = scan.COMPACT_ROWS + 5
    lines = np.arange(10, 10 + n, dtype=np.int64)  # lines 10...: steps 4, 5, 6, ...
    rows.add_columns(lines, lines - 6, {"loss": lines.astype(float), "tokens": np.full(n, 4096.0)})
    rows.add_columns(np.array([10**6, 10**6 + 1]), np.array([10**7, 10**7 + 1]),
                     {"loss": np.array([7.5, math.nan]), "tokens": np.array([np.inf, 1.0])})
    rows.add(Parsed(step=None, evals=[("val", "loss", 3.25)]), where=10**6 + 3)  # after step 10**7 + 1's line
    rows.add(Parsed(step=3, metrics={"loss": 0.0, "acc": 0.25}), where=5)  # line 5: before every column line
    assert rows.step_count() == n + 4 and rows.evals == [(10**7 + 1, "val", "loss", 3.25)]
    steps = rows.steps
    assert steps[2] == {"loss": 9.0, "acc": 0.5} and steps[3] == {"loss": 0.0, "acc": 0.25}
    assert steps[4] == {"loss": 10.0, "tokens": 4096.0} and steps[10**7] == {"loss": 7.5, "tokens": math.inf}
    assert math.isnan(steps[10**7 + 1]["loss"]) and steps[10**7 + 1]["tokens"] == 1.0
    table = rows.tables()["steps"].to_pydict()
    assert table["step"][:3] == [2, 3, 4] and table["step"][-2:] == [10**7, 10**7 + 1]
    assert table["tokens"][:3] == [None, None, 4096] and table["tokens"][-2:] == [None, 1]
    assert table["extra"][:3] == [[("acc", 0.5)], [("acc", 0.25)], None]
    assert rows.identity() == {"lines": n + 4, "merged": 0, "differing": 0, "segments": 1, "restarts": 0,
                               "epochs": 0, "planned_steps": None}


def test_custom_metrics_on_every_step_are_each_rows_map_in_their_order() -> None:
    """Every custom metric on every step (the common case, built without searching where each is present): each
    row's map holds them in the order they were first seen."""
    import numpy as np

    from ledger.ingest.formats import scan

    rows = scan.Rows("x")
    lines = np.arange(1, 4, dtype=np.int64)
    rows.add_columns(lines, lines, {"loss": np.array([3.0, 2.0, 1.0]), "acc": np.array([0.1, 0.2, 0.3]),
                                    "ppl": np.array([9.0, 8.0, 7.0])})
    steps_table = rows.tables()["steps"].to_pydict()
    assert steps_table["loss"] == [3.0, 2.0, 1.0]
    assert steps_table["extra"] == [[("acc", 0.1), ("ppl", 9.0)], [("acc", 0.2), ("ppl", 8.0)],
                                    [("acc", 0.3), ("ppl", 7.0)]]


def test_a_restart_keeps_both_computations_and_an_exact_repeat_is_merged() -> None:
    """A log that goes back to step 70,001 with other values (a restart from a checkpoint) keeps both
    computations, the later as rows of a new generation after the first; the same lines printed again at once
    (two ranks printing one line) are one step each. Enough lines for the columnar path and its joins."""
    from ledger.ingest.formats.scan import LineCapture

    def line(step: int, loss: float) -> str:
        return f"step {step} loss {loss:.4f} lr 0.001\n"

    first = [line(s, 1000.0 / s) for s in range(1, 80_001)]
    again = [line(s, 9.0) for s in range(70_001, 75_001)]  # a restart from step 70,000: other values, later
    more = [line(s, 1000.0 / s) for s in range(75_001, 90_001)]
    twice = [x for s in range(1, 30_001) for x in (line(s, 1000.0 / s),) * 2]
    for text, rows, counters in (("".join(first + again + more), 100_000, [*range(1, 80_001), *range(70_001, 90_001)]),
                                 ("".join(twice), 30_000, list(range(1, 30_001)))):
        capture = LineCapture()
        data = text.encode()
        for i in range(0, len(data), 1 << 18):
            capture.feed(data[i:i + (1 << 18)])
        capture.close()
        best = capture.best()
        assert best is not None and best.step_count() == rows
        steps = best.tables()["steps"]
        assert steps.column("step").to_pylist() == counters
        losses = steps.column("loss").to_pylist()
        if rows == 100_000:
            assert losses[72_000 - 1] == round(1000.0 / 72_000, 4)  # the first computation of step 72,000
            assert losses[80_000 + 2_000 - 1] == 9.0  # and the restart's, later
            assert losses[-1] == round(1000.0 / 90_000, 4) and losses[0] == 1000.0
            assert best.identity()["restarts"] == 1 and best.identity()["merged"] == 0
        else:
            assert best.identity()["merged"] == 30_000 and best.identity()["differing"] == 0


def test_lines_read_as_words_give_what_the_parsers_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines whose numbers are whole words (or a word's number between literal text: ``train.py:212]``) are read as
    space-separated values; a block with a line that does not cut into the same words (a run of spaces) is cut
    at number runs instead. Either way the rows are those of the formats' own parsers, line by line
    (``fast=False``). The log's first thousand lines have their milliseconds equal to the step (``10:00:00,332
    ... step 332``): no template may be learned from such a line (it would read the milliseconds as steps)."""
    from ledger import _native
    from ledger.ingest.formats import columns

    monkeypatch.setenv(_native.DISABLE, "1")  # the Python reader's ways (the compiled one: test_native_columns)
    used: list[bool] = []
    words = columns._words
    monkeypatch.setattr(columns, "_words", lambda text, shape: used.append((got := words(text, shape)) is not None)
                        or got)

    lines = []
    for i in range(1, 30_001):
        loss = "nan" if i % 997 == 0 else f"{4.0 / (1 + i / 500):.5f}"
        lines.append(f"2026-12-01 10:00:00,{i % 1000:03d} INFO train.py:212] step {i} | loss {loss} | lr "
                     f"{3e-4 * min(1.0, i / 200):.3e} | tokens/s {51234 + i * 37 % 4096}\n")
    lines[15_000] = lines[15_000].replace("| lr", "|  lr")  # a run of spaces: that block is cut at number runs
    data = "".join(lines).encode()
    fast, slow = _fast_and_slow(data, 1 << 18)
    assert any(used) and not all(used)  # both ways were taken
    got, want = fast.best(), slow.best()
    assert got is not None and want is not None and got.step_count() == want.step_count() == 30_000
    a, b = got.tables()["steps"], want.tables()["steps"]
    assert a.column_names == b.column_names
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        same = [u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v)) for u, v in zip(x, y, strict=True)]
        assert all(same), name
    loss = a.column("loss").to_pylist()
    assert math.isnan(loss[997 - 1]) and loss[0] == round(4.0 / (1 + 1 / 500), 5)
    assert loss[15_000] == round(4.0 / (1 + 15_001 / 500), 5)  # the line with a run of spaces
    assert a.column("tokens_per_s").to_pylist()[-1] == 51234 + 30_000 * 37 % 4096  # `tokens/s`: the rate's column


def test_no_phantom_step_from_a_negative_number_where_the_step_is() -> None:
    """The parser reads no step from ``step -1 ...`` (a warm-up line); neither may the columnar reading (Arrow's
    CSV reader would take -1 as an integer), whichever line of a block it is."""
    lines = [f"step {i} loss {2.0 / i:.6f} tokens {999 + i}\n" for i in range(1, 30_001)]
    for at in (12_345, 20_001, 20_002, 29_999):
        lines[at] = f"step -{at} loss 0.5 tokens 7\n"
    data = "".join(lines).encode()
    fast, slow = _fast_and_slow(data, 1 << 18)
    got, want = fast.best(), slow.best()
    assert got is not None and want is not None
    a, b = got.tables()["steps"], want.tables()["steps"]
    expected = [i for i in range(1, 30_001) if i - 1 not in (12_345, 20_001, 20_002, 29_999)]
    assert a.column("step").to_pylist() == b.column("step").to_pylist() == expected
    assert a.column("tokens").to_pylist() == b.column("tokens").to_pylist()
    assert a.column("loss").to_pylist() == b.column("loss").to_pylist()


def test_other_lines_of_blocks_read_as_columns_are_looked_at_whichever_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a block read as columns, the lines of no template's shape that hold a hint word go to the parsers:
    looked for after the templates (a log of step lines mostly: there the values of a block are read while the
    pattern is matched) or, when most lines of the last block were others, in another thread while the
    templates read theirs. Both ways, the rows are the parsers' own, line by line: evals between steps,
    a step line of another shape, an overlong line and lines without any hint word."""
    from ledger import _native
    from ledger.ingest.formats import columns
    from ledger.ingest.formats import scan as scan_module

    monkeypatch.setenv(_native.DISABLE, "1")  # the Python reader's ways (the compiled one: test_native_columns)

    threads: list[bool] = []
    hints = scan_module._Hints

    class Counted(hints):  # type: ignore[misc, valid-type]
        def __init__(self, block: object) -> None:
            threads.append(True)
            super().__init__(block)  # type: ignore[arg-type]

    monkeypatch.setattr(scan_module, "_Hints", Counted)
    early: list[bool] = []
    ahead = columns._Early

    class Ahead(ahead):  # type: ignore[misc, valid-type]
        def __init__(self, text: object, shape: object) -> None:
            early.append(True)
            super().__init__(text, shape)  # type: ignore[arg-type]

    monkeypatch.setattr(columns, "_Early", Ahead)
    lines = []
    for i in range(1, 12_001):
        lines.append(f"[2026-12-01 10:00:00] [INFO] [data.py:88] prefetching shard {i % 512} of 512\n")
        lines.append(f"step {i} loss {3.0 / i:.6f} lr 1e-3 grad_norm {i % 5 + 0.5}\n")
        lines.append(" 25%|##   | 25/100 [00:05<00:01, 12.3it/s]\r 50%|#####  | 50/100 [00:06<00:01]\n")
        if i % 400 == 0:
            lines.append(f"{{'eval_loss': {2.0 / i:.6f}, 'epoch': {i / 100}}}\n")
            lines.append(f"iter {i}: loss {2.5 / i:.4f}, time 12.5ms\n")  # another format's step line
        if i == 6000:
            lines.append("loss " + "x" * 70_000 + "\n")  # overlong, with a hint word
    mixed = "".join(lines).encode()
    steps_only = "".join(line for line in lines if line.startswith(("step", "{"))).encode() * 4  # 2 blocks and a bit
    for data, concurrent in ((mixed, True), (steps_only, False)):
        threads.clear()
        early.clear()
        fast, slow = _fast_and_slow(data, 1 << 18)
        assert (len(threads) > 1) is concurrent  # (the first block read as columns always looks early)
        assert bool(early) is not concurrent  # step lines mostly: their values read while the pattern matches
        for name, rows in slow.rows.items():
            theirs = fast.rows[name]
            assert theirs.steps == rows.steps and theirs.evals == rows.evals and theirs.unparsed == rows.unparsed
        assert fast.long_lines == slow.long_lines == (1 if concurrent else 0) and fast.lines == slow.lines
        best = fast.best()
        assert best is not None and best.step_count() == 12_000
        assert best.steps[12_000]["loss"] == round(3.0 / 12_000, 6)
        evals = [e for rows in fast.rows.values() for e in rows.evals]
        assert len(evals) == (30 if concurrent else 120)
        assert ("eval", "loss", round(2.0 / 400, 6)) in [e[1:] for e in evals]
        nanogpt = fast.rows["nanogpt"].steps
        assert len(nanogpt) == (30 if concurrent else 0)
        assert not concurrent or nanogpt[400]["loss"] == float(f"{2.5 / 400:.4f}")
