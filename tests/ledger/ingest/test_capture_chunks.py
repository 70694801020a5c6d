"""The live capture's reading of output (ledger.ingest.formats.scan.LineCapture and Rows) as a launch delivers it:
in chunks cut anywhere (mid-line, mid-escape, mid-UTF-8 character, between ``\\r`` and ``\\n``), with pauses,
with progress bars redrawn on one line, colours, lines longer than the capture reads, a last line without a line
end. What it reads must not depend on how the bytes were cut (Hypothesis cuts them), and must be what the lines
say: every step, value and eval below is written by hand from the printed text. The tables built with the
output's clock and the configuration's tokens per step are checked against figures worked out here."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.ingest.formats.base import Parsed
from ledger.ingest.formats.scan import BLOCK, MAX_LINE, LineCapture, Rows, rows_of, step_times

FAST = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def capture(chunks: list[bytes], pauses: bool = False, **kwargs: object) -> LineCapture:
    c = LineCapture(**kwargs)  # type: ignore[arg-type]
    for chunk in chunks:
        c.feed(chunk)
        if pauses:
            c.idle()
    c.close()
    return c


def summary(c: LineCapture) -> tuple[object, ...]:
    best = c.best()
    tables = best.tables() if best is not None else None
    return (best.name if best else None, tables["steps"].to_pylist() if tables else None,
            tables["evals"].to_pylist() if tables else None, c.lines, c.long_lines, c.ended_without_newline,
            best.identity() if best else None)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({min(max(p, 0), len(data)) for p in points})
    out, start = [], 0
    for b in bounds:
        out.append(data[start:b])
        start = b
    out.append(data[start:])
    return out


# a log of the shapes a wrapped launch prints, each line written out here with what it says
LINES = st.sampled_from([
    "step {n} loss {x:.4f} lr 0.001",
    "\x1b[32mstep {n}\x1b[0m loss {x:.4f} lr 0.001",
    "  0%|          | 0/10 [00:00<?, ?it/s]\r 50%|#####     | 5/10 [00:01<00:01]\rstep {n} loss {x:.4f} lr 0.001",
    "{{'eval_loss': {x:.3f}, 'epoch': 1.0}}",
    "saving checkpoint to /ckpt/{n} (caf\u00e9 \u2713)",
    "warning: no hint word here",
    "",
])


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    shapes = draw(st.lists(LINES, min_size=1, max_size=25))
    text = "".join(shape.format(n=k + 1, x=3.0 - 0.01 * k) + "\n" for k, shape in enumerate(shapes))
    if draw(st.booleans()):
        text = text[:-1]  # the last line without its line end
    return text.encode()


@FAST
@given(logs(), st.lists(st.integers(0, 4000), max_size=12), st.booleans())
def test_what_is_read_does_not_depend_on_where_the_output_was_cut(data: bytes, points: list[int],
                                                                    pauses: bool) -> None:
    whole = summary(capture([data]))
    assert summary(capture(cut(data, points), pauses)) == whole
    assert summary(capture([data[i:i + 1] for i in range(len(data))])) == whole  # a byte at a time
    assert summary(capture([data], fast=False)) == whole  # parsers alone


def test_the_lines_say_their_steps_values_and_evals() -> None:
    text = ("starting\n"
            "step 1 loss 2.5000 lr 0.001\n"
            "\x1b[31mstep 2\x1b[0m loss 2.2500 lr 0.001\n"  # coloured
            "  0%|          | 0/3 [00:00<?]\r 67%|######    | 2/3 [00:01<00:01]\rstep 3 loss 2.0000 lr 0.001\n"
            "{'eval_loss': 1.875, 'epoch': 1.0}\n"
            "no hint word: 9 9 9\n"
            "step 4 loss 1.7500 lr 0.0005")  # no line end
    c = capture([text.encode()])
    best = c.best()
    assert best is not None and best.name == "key-value"
    assert best.steps == {1: {"loss": 2.5, "lr": 0.001}, 2: {"loss": 2.25, "lr": 0.001},
                          3: {"loss": 2.0, "lr": 0.001}, 4: {"loss": 1.75, "lr": 0.0005}}
    assert best.evals == [(3, "eval", "loss", 1.875)]  # an eval without a step: the step printed before it
    assert (c.lines, c.long_lines, c.ended_without_newline) == (7, 0, True)
    assert best.columns() == ["loss", "lr"] and best.step_count() == 4


def test_a_bar_redrawn_past_the_longest_line_then_a_step_on_the_same_line() -> None:
    """A progress bar redrawn for more than MAX_LINE bytes without a newline, then a step line on the same
    physical line: only its last segment is read (it fits), fed whole, in 1000-byte chunks, or with the output
    pausing between them; a line that long (about the loss, so one the formats would read) without a ``\\r`` is
    counted and skipped, and so is one whose last segment does not fit."""
    bar = "".join(f"\r{k:6d}/999999 [" for k in range(MAX_LINE // 14 + 10))
    assert len(bar) > MAX_LINE
    text = (f"step 1 loss 3.0\n{bar}\rstep 2 loss 2.0\n" + "loss " + "x" * MAX_LINE + "\n"
            + "\rloss " + "y" * MAX_LINE + "\nstep 3 loss 1.0\n").encode()
    chunked = [text[i:i + 1000] for i in range(0, len(text), 1000)]
    for chunks, pauses in (([text], False), (chunked, False), (chunked, True)):
        c = capture(chunks, pauses)
        best = c.best()
        assert best is not None and best.steps == {1: {"loss": 3.0}, 2: {"loss": 2.0}, 3: {"loss": 1.0}}
        assert (c.lines, c.long_lines) == (5, 2)
    ending = capture([b"step 1 loss 3.0\n" + b"z" * (MAX_LINE + 1)])  # an overlong last line without a line end
    assert (ending.lines, ending.long_lines, ending.ended_without_newline) == (2, 1, True)
    tail = capture([b"step 1 loss 3.0\n" + b"z" * (MAX_LINE + 1) + b"\rstep 2 loss 2.0"])
    best = tail.best()
    assert best is not None and best.steps == {1: {"loss": 3.0}, 2: {"loss": 2.0}} and tail.long_lines == 0


def test_a_line_exactly_as_long_as_the_longest_read() -> None:
    pad = " " * (MAX_LINE - len("step 5 loss 1.5 "))
    line = f"step 5 loss 1.5 {pad}"
    assert len(line) == MAX_LINE
    c = capture([f"{line}\n".encode()])
    best = c.best()
    assert best is not None and best.steps == {5: {"loss": 1.5}} and c.long_lines == 0
    over = capture([f"{line} \n".encode()])
    assert over.best() is None and over.long_lines == 1 and over.lines == 1


def test_a_long_log_in_blocks_reads_what_a_short_one_reads() -> None:
    """More than one BLOCK of step lines (read as columns by the templates), fed in odd chunks, read with the
    parsers only, and with hint words switched off: the same steps."""
    text = "".join(f"step {k} loss {3.0 - k * 1e-5:.6f} lr 0.001 | tokens {k * 512}\n" for k in range(1, 24001))
    data = text.encode()
    assert len(data) > BLOCK
    runs = [capture([data]), capture(cut(data, [1, 65537, 700001, 1048577])), capture([data], fast=False),
            capture([data], hint=False)]
    tables = [r.best().tables()["steps"] for r in runs]  # type: ignore[union-attr]
    for t in tables[1:]:
        assert t.equals(tables[0])
    steps = tables[0].to_pydict()
    assert steps["step"] == list(range(1, 24001)) and steps["tokens"][-1] == 24000 * 512
    assert steps["loss"][99] == pytest.approx(3.0 - 100e-5)


# ------------------------------------------------------------------------------------------ rows into tables
def p(step: int | None, **metrics: float) -> Parsed:
    return Parsed(step=step, metrics=metrics)


def test_tables_with_the_outputs_clock_and_the_tokens_of_a_step() -> None:
    """Steps 10, 20, 30 arriving at 100, 105, 111 s, step 40 at an unknown time; 512 tokens a step."""
    rows = rows_of("x", [p(10, loss=3.0), p(20, loss=2.0), p(30, loss=1.5, grad_norm=0.5), p(40, loss=1.0)])
    tables, derived = rows.build_tables(np.array([100.0, 105.0, 111.0, math.nan]), tokens_per_step=512)
    t = tables["steps"].to_pydict()
    assert t["step"] == [10, 20, 30, 40] and t["rank"] == [0, 0, 0, 0]
    assert t["time"] == [100.0, 105.0, 111.0, None]
    assert t["step_time_s"][0] is None and t["step_time_s"][1:3] == [0.5, 0.6] and t["step_time_s"][3] is None
    assert t["tokens"] == [5120, 10240, 15360, 20480] and t["grad_norm"] == [None, None, 0.5, None]
    assert derived.columns == {
        "time": "when the line arrived (output timing); lines that arrived together (a launch that buffers its output) "
                "spread over the time since the arrival before, by their steps",
        "step_time_s": "time between the lines of two steps, divided by the steps between them (output timing)"}
    assert tables["steps"].schema.field("tokens").type == pa.int64()
    plain, nothing = rows.build_tables()
    assert "time" not in plain["steps"].column_names or plain["steps"].column("time").null_count == 4
    assert nothing.columns == {}
    printed = rows_of("x", [p(1, loss=2.0, step_time_s=0.25, tokens=100), p(2, loss=1.0, step_time_s=0.5, tokens=200)])
    kept, how = printed.build_tables(np.array([1.0, 9.0]), tokens_per_step=512)
    assert kept["steps"].column("step_time_s").to_pylist() == [0.25, 0.5]  # as printed, never derived over it
    assert kept["steps"].column("tokens").to_pylist() == [100, 200] and "step_time_s" not in how.columns
    none = rows_of("x", [p(1, loss=2.0)]).build_tables(np.array([math.nan]), tokens_per_step=0)
    assert none[1].columns == {} and none[0]["steps"].column("tokens").null_count == 1


def test_custom_metrics_and_epochs_go_where_they_belong() -> None:
    rows = rows_of("x", [p(1, loss=2.0, moe_aux=0.5, epoch=0.5), p(2, loss=1.5), p(3, loss=1.0, moe_aux=0.25, z=1.0)])
    t = rows.tables()["steps"].to_pydict()
    assert t["extra"] == [[("moe_aux", 0.5)], None, [("moe_aux", 0.25), ("z", 1.0)]]
    assert t["epoch"] == [0.5, None, None]
    every = rows_of("x", [p(1, a=1.0, b=2.0), p(2, a=3.0, b=4.0)]).tables()["steps"].to_pydict()
    assert every["extra"] == [[("a", 1.0), ("b", 2.0)], [("a", 3.0), ("b", 4.0)]]
    ints = rows_of("x", [p(1, loss=1.0, memory_bytes=8.0 * 2**30), p(2, loss=1.0, memory_bytes=math.nan, tokens=64.0)])
    it = ints.tables()["steps"]
    assert it.column("memory_bytes").to_pylist() == [8 * 2**30, None] and it.column("tokens").to_pylist() == [None, 64]
    assert it.schema.field("memory_bytes").type == pa.int64()


def test_lines_without_a_step_number_are_numbered_and_evals_placed() -> None:
    rows = Rows("x")
    rows.add(Parsed(step=None, metrics={}, evals=(("val", "loss", 9.0),)), 1)  # before any step: step 0
    rows.add(p(None, loss=3.0), 2)
    rows.add(p(None, loss=2.0), 3)
    rows.add(Parsed(step=None, metrics={}, evals=(("val", "loss", 1.9),)), 4)
    assert rows.ordinal and rows.steps == {1: {"loss": 3.0}, 2: {"loss": 2.0}}
    assert rows.evals == [(0, "val", "loss", 9.0), (2, "val", "loss", 1.9)] and rows.last_step == 2
    frozen = rows.frozen()
    assert frozen.steps == rows.steps and frozen.evals == rows.evals and frozen.step_count() == 2
    assert Rows("empty").step_count() == 0 and Rows("empty").evals == [] and Rows("empty").columns() == []


def test_an_eval_that_prints_its_own_counter_in_a_later_epoch() -> None:
    """Epoch 1 prints steps 1..3 (total 3), epoch 2 steps 1..3 again: an eval at printed step 2 of epoch 2 is step
    5 of the run; one printed at step 2 before any step line keeps its 2."""
    rows = Rows("x")
    rows.add(Parsed(step=2, metrics={}, evals=(("val", "acc", 0.1),)), 1)
    for k, (s, loss) in enumerate([(1, 3.0), (2, 2.5), (3, 2.0), (1, 1.9), (2, 1.8), (3, 1.7)], start=2):
        rows.add(Parsed(step=s, metrics={"loss": loss, "@total": 3.0}), k)
        if k == 6:
            rows.add(Parsed(step=2, metrics={}, evals=(("val", "acc", 0.9),)), k)
    assert rows.evals == [(2, "val", "acc", 0.1), (5, "val", "acc", 0.9)]
    assert rows.identity()["epochs"] == 1 and rows.identity()["planned_steps"] is None
    assert list(rows.steps) == [1, 2, 3, 4, 5, 6]


def test_step_times_between_arrivals() -> None:
    steps = np.array([1, 2, 3, 4, 5, 6, 7])
    gen = np.zeros(7, np.int64)
    got = step_times(steps, np.array([10.0, 12.0, 12.0, 13.0, math.nan, 20.0, 19.0]), gen)
    # 2 then 3 arrive together at 12: 2 s over 2 steps; 4 at 13: 1 s; 5 unknown; 6 after an unknown: none; 7 earlier
    assert np.isnan(got[0]) and got[1:4].tolist() == [1.0, 1.0, 1.0] and np.isnan(got[4:]).all()
    back = step_times(np.array([1, 2, 2]), np.array([1.0, 2.0, 3.0]), np.array([0, 0, 0]))
    assert back[1] == 1.0 and np.isnan(back[2])  # the counter did not rise
    assert step_times(np.array([1]), np.array([1.0]), np.array([0])).tolist()[0] != 0.0
