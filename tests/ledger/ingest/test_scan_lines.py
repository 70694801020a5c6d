"""The capture (ledger.ingest.formats.scan) on output as a launch delivers it, where the chunks fall: an overlong
line (a progress bar redrawn without a newline) whose redraws and last segment arrive in separate reads, with the
segment exactly as long as the capture keeps; a file read through ``feed_file`` with its progress reported to a
listener (``ledger.progress``, as the CLI's bar listens); rows read as columns in many chunks, joined. Every expected
value is written by hand from the printed lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ledger import progress
from ledger.ingest.formats import scan
from ledger.ingest.formats.base import Parsed
from ledger.ingest.formats.scan import MAX_LINE, LineCapture, Rows


def _capture(chunks: list[bytes]) -> LineCapture:
    """Each chunk a read of its own (the output paused after it)."""
    c = LineCapture()
    for chunk in chunks:
        c.feed(chunk)
        c.idle()
    c.close()
    return c


def test_an_overlong_lines_last_segment_is_read_when_it_arrives_in_a_later_read() -> None:
    """Redraws past MAX_LINE bytes, a segment that is a step line, then in the next read ``\\r`` and another step
    line and the newline: only the line's last segment is read (step 2); the earlier segment was redrawn over."""
    bar = b"x" * (MAX_LINE + 10)
    c = _capture([b"step 1 loss 3.0\n" + bar + b"\rstep 7 loss 9.0", b"\rstep 2 loss 2.0\n", b"step 3 loss 1.0\n"])
    best = c.best()
    assert best is not None and best.steps == {1: {"loss": 3.0}, 2: {"loss": 2.0}, 3: {"loss": 1.0}}
    assert (c.lines, c.long_lines) == (3, 0)
    # the same with the segment's `\r` the first byte of each later read
    c = _capture([bar, b"\rstep 7 loss 9.0", b"\rstep 2 loss 2.0", b"\n"])
    assert c.best() is not None and c.best().steps == {2: {"loss": 2.0}}  # type: ignore[union-attr]


def test_a_last_segment_of_exactly_max_line_bytes_is_read_one_byte_more_is_not() -> None:
    segment = b"step 5 loss 1.5 ".ljust(MAX_LINE, b" ")
    assert len(segment) == MAX_LINE
    c = _capture([b"y" * (MAX_LINE + 3), b"\r" + segment + b"\n"])
    assert c.best() is not None and c.best().steps == {5: {"loss": 1.5}}  # type: ignore[union-attr]
    assert (c.lines, c.long_lines) == (1, 0)
    c = _capture([b"y" * (MAX_LINE + 3), b"\r" + segment + b" \n"])
    assert c.best() is None and (c.lines, c.long_lines) == (1, 1)
    c = _capture([b"y" * (MAX_LINE + 3) + b"\r" + segment + b"\n"])  # the whole line in one read
    assert c.best() is not None and c.best().steps == {5: {"loss": 1.5}}  # type: ignore[union-attr]
    assert (c.lines, c.long_lines) == (1, 0)
    c = _capture([b"y" * (MAX_LINE + 3) + b"\r" + segment + b" \n"])
    assert c.best() is None and (c.lines, c.long_lines) == (1, 1)
    # a segment that grows past MAX_LINE over several reads, then a `\r` and a short one: read
    c = _capture([b"y" * (MAX_LINE + 3), b"\r" + b"z" * (MAX_LINE // 2), b"z" * (MAX_LINE // 2 + 5),
                  b"\rstep 6 loss 0.5\n"])
    assert c.best() is not None and c.best().steps == {6: {"loss": 0.5}}  # type: ignore[union-attr]


class _Listener:
    """What the CLI's progress bar is told (``ledger.progress.Listener``)."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def begin(self, label: str, total: float | None, unit: str) -> int:
        self.events.append(("begin", label, total, unit))
        return 7

    def update(self, handle: int, done: float, total: float | None) -> None:
        self.events.append(("update", handle, done, total))

    def end(self, handle: int) -> None:
        self.events.append(("end", handle))


def test_a_file_is_read_block_by_block_with_its_progress(tmp_path: Path) -> None:
    lines = [f"step {k} loss {1 / k:.6f} lr 0.001\n" for k in range(1, 40_001)]
    path = tmp_path / "train.log"
    path.write_text("".join(lines))
    size = path.stat().st_size
    assert size > scan.BLOCK  # two reads
    listener = _Listener()
    c = LineCapture()
    with progress.listening(listener):
        c.feed_file(path)
    blocks = -(-size // scan.BLOCK)
    assert listener.events == [("begin", "reading train.log", size, "bytes")] + [
        ("update", 7, min((i + 1) * scan.BLOCK, size), size) for i in range(blocks)] + [("end", 7)]
    best = c.best()
    assert best is not None and best.step_count() == 40_000 and c.lines == 40_000
    assert best.steps[39_999] == {"loss": float(f"{1 / 39_999:.6f}"), "lr": 0.001}


def test_rows_read_as_columns_in_many_chunks_are_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks joined once enough rows are pending (a small threshold here): a metric only some chunks gave is not
    given on the others' rows."""
    monkeypatch.setattr(scan, "COMPACT_ROWS", 4)
    rows = Rows("x")
    for k in range(6):
        lines = np.arange(10 * k, 10 * k + 3, dtype=np.int64) + 1
        values = {"loss": lines / 10} if k % 2 else {"loss": lines / 10, "acc": lines / 100}
        rows.add_columns(lines, lines + 1000, values)
    steps = rows.steps
    assert sorted(steps) == [1000 + 10 * k + i + 1 for k in range(6) for i in range(3)]
    assert steps[1001] == {"loss": 0.1, "acc": 0.01} and steps[1011] == {"loss": 1.1}
    assert steps[1053] == {"loss": 5.3}
    assert rows.tables()["steps"].column("extra").to_pylist()[:4] == [[("acc", 0.01)], [("acc", 0.02)],
                                                                     [("acc", 0.03)], None]


def test_tokens_from_the_configuration_start_after_step_0() -> None:
    """The configuration's tokens per step make the tokens column (the step of the run times them) where the log
    printed none; a row at step 0 (logged before a step completed, or after the first by a 0-based counter: the log
    does not say which) gets none."""
    rows = Rows("x")
    for k in range(3):
        rows.add(Parsed(step=k, metrics={"loss": 3.0 - k}), k + 1)
    tables, _ = rows.build_tables(tokens_per_step=2048)
    assert tables["steps"].column("tokens").to_pylist() == [None, 2048, 4096]


def test_the_live_trail_gets_the_lines_read_as_columns(tmp_path: Path) -> None:
    """A live capture (a trail: ``live.json``) of a log long enough to be read a block at a time: every step line
    counted, the last ones in full with their line numbers."""
    import json

    from ledger.ingest.formats.trail import Trail

    n = 4000
    data = "".join(f"step {k} loss {k / 1024} lr 0.001\n" for k in range(1, n + 1)).encode()
    assert len(data) > 2 * scan.BLOCK_MIN
    c = LineCapture(trail=Trail(tmp_path / "live.json"))
    c.feed(data)
    c.close()
    assert c.rows["key-value"]._chunks  # read as columns
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["format"] == "key-value" and live["lines"] == n
    assert live["recent"][-1] == [n, n, n / 1024, 0.001, None, None, None, None, None]
    assert [r[0] for r in live["recent"]] == list(range(n - 49, n + 1))


def test_without_hint_words_every_line_a_block_leaves_is_offered() -> None:
    """A user's pattern (``--parse``) reads lines without the usual words; ``hint=False`` offers every line. Lines
    whose loss equals their step give no template (which number is which cannot be told): in a block read as
    columns they are left to the pattern, and read."""
    from ledger.ingest.formats.pattern import compile_pattern, line_format

    fmt = line_format(compile_pattern(r"it (?P<step>\d+) \| L (?P<loss>\S+)"))
    lines = [f"it {k} | L {k if k % 10 == 0 else k / 8}\n" for k in range(1, 12001)]
    data = "".join(lines).encode()
    assert len(data) > 2 * scan.BLOCK_MIN
    c = LineCapture({"pattern": fmt}, hint=False)
    c.feed(data)
    c.close()
    steps = c.rows["pattern"].steps
    assert c.rows["pattern"]._chunks and len(steps) == 12000
    assert all(steps[k] == {"loss": float(k) if k % 10 == 0 else k / 8} for k in steps)


def _dict_after_a_block(block: str, n: int) -> dict[int, dict[str, float]]:
    """``block`` read (as columns), then, in the next read, the Trainer-style dict LlamaFactory prints after the
    step line: no step of its own, so it joins the latest step line."""
    c = LineCapture()
    c.feed(block.encode())
    c.idle()
    c.feed(f"{{'loss': {n / 1024}, 'grad_norm': 0.5}}\n".encode())
    c.close()
    assert c.rows["key-value"]._chunks
    return c.rows["key-value"].steps


def test_a_line_without_a_step_joins_the_last_step_of_a_block_read_as_columns() -> None:
    n = 4000
    # two shapes read as columns, the last line of the block of the shape whose lines are sparse near the end
    block = "".join(f"step {k} loss {k / 1024}\n" if k % 10 == 0 else f"step {k} loss {k / 1024} lr 0.001\n"
                    for k in range(1, n + 1))
    steps = _dict_after_a_block(block, n)
    assert len(steps) == n and steps[n] == {"loss": n / 1024, "grad_norm": 0.5}
    assert [k for k in steps if "grad_norm" in steps[k]] == [n]
    # a step line of another shape, read one by one, just before the block's last line read as columns
    lines = [f"step {k} loss {k / 1024} lr 0.001\n" for k in range(1, n + 1)]
    lines[-2] = f"step {n - 1} loss {(n - 1) / 1024} lr 0.001 gnorm 7\n"
    steps = _dict_after_a_block("".join(lines), n)
    assert steps[n] == {"loss": n / 1024, "lr": 0.001, "grad_norm": 0.5} and steps[n - 1]["grad_norm"] == 7.0


def test_a_template_its_format_disagrees_with_is_dropped_and_the_block_read_to_its_end() -> None:
    """A format of its own (``LineCapture(formats=...)``, as a user's pattern is) that reads ``v`` as the loss, but
    twice ``v`` on steps 3000 to 3063 (64 lines in a row: one of them is a template's check). The template learned on
    the first line reads the block as columns, is dropped at that check, and every line of the block is still
    read: the format's reading outside those steps (inside, a template learned again reads the lines until its own
    check finds it wrong: checks are a sample)."""

    def fmt(line: str) -> Parsed | None:
        words = line.split()
        if len(words) != 4 or words[0] != "step" or words[2] != "v":
            return None
        step, v = int(words[1]), float(words[3])
        return Parsed(step=step, metrics={"loss": 2 * v if 3000 <= step < 3064 else v})

    data = "".join(f"step {k} v {k / 8}\n" for k in range(1, 8001)).encode()
    c = LineCapture({"mine": fmt})
    c.feed(data)
    c.close()
    steps = c.rows["mine"].steps
    assert c.lines == 8000 and len(steps) == 8000 and c.rows["mine"]._chunks
    assert [k for k in steps if not 3000 <= k < 3064 and steps[k] != {"loss": k / 8}] == []
    assert c.templates.items[0].dead


def test_a_step_less_line_inside_a_block_joins_the_step_line_before_it() -> None:
    """The block read as columns holds the dict too (one read): it joins the step printed on the line before it."""
    n = 4000
    lines = [f"step {k} loss {k / 1024} lr 0.001\n" for k in range(1, n + 1)]
    lines.insert(3000, "{'loss': 2.9296875, 'grad_norm': 0.5}\n")  # after step 3000's line
    c = LineCapture()
    c.feed("".join(lines).encode())
    c.close()
    steps = c.rows["key-value"].steps
    assert c.rows["key-value"]._chunks and len(steps) == n
    assert steps[3000] == {"loss": 3000 / 1024, "lr": 0.001, "grad_norm": 0.5}
    assert [k for k in steps if "grad_norm" in steps[k]] == [3000]


def test_an_eval_line_with_its_own_step_does_not_take_the_next_step_less_line() -> None:
    """A training line (nanoGPT's), an eval line of another shape printed with its own step, then a Trainer-style
    dict with no step, its loss that of the training line: the dict is the training step's, not the eval's."""
    c = LineCapture()
    c.feed(b"iter 10: loss 2.0000, time 50.00ms\nstep 20 val_loss 2.3\n"
           b"{'loss': 2.0, 'grad_norm': 0.5, 'learning_rate': 0.0001, 'epoch': 0.5}\n")
    c.close()
    assert c.rows["nanogpt"].steps == {10: {"loss": 2.0, "step_time_s": 0.05, "grad_norm": 0.5, "lr": 0.0001,
                                            "epoch": 0.5}}
    assert c.rows["key-value"].steps == {} and c.rows["key-value"].evals == [(20, "val", "loss", 2.3)]


def test_update_counters_without_a_loss_are_offered_and_read() -> None:
    """``update N`` and ``num_updates N`` lines that print no loss (only a learning rate and a gradient norm) are
    steps the key-value format reads: the capture must offer them, one by one and in a block read as columns."""
    few = b"update 5 lr 0.1 grad_norm 1.2\nnum_updates 6 lr 0.05 grad_norm 0.9\n"
    c = _capture([few])
    assert c.rows["key-value"].steps == {5: {"lr": 0.1, "grad_norm": 1.2}, 6: {"lr": 0.05, "grad_norm": 0.9}}
    many = "".join(f"update {k} lr {k / 4096} grad_norm 0.5\n" for k in range(1, 5001)).encode()
    assert len(many) > 2 * scan.BLOCK_MIN
    c = _capture([many])
    steps = c.rows["key-value"].steps
    assert len(steps) == 5000 and steps[4096] == {"lr": 1.0, "grad_norm": 0.5}


def test_lines_with_bytes_that_are_no_utf8_are_still_read() -> None:
    """A process that writes Latin-1 or binary into its output: the line is read, its odd bytes replaced; in a
    line's redraws too."""
    c = _capture([b"step 1 loss 2.5 caf\xe9\n", b"\r 50%|\xff\xfe| 5/10 \rstep 2 loss 1.5 \xc3\n",
                  b"step 3 loss 0.5\n"])
    assert c.best() is not None and c.best().steps == {  # type: ignore[union-attr]
        1: {"loss": 2.5}, 2: {"loss": 1.5}, 3: {"loss": 0.5}}


def test_the_live_trail_of_lines_read_one_by_one_and_of_a_joined_line(tmp_path: Path) -> None:
    """A short log (read line by line) with a live trail: each step line with its line number and counter, and a
    Trainer-style dict without a step, which joins the step line before it, counted in that step line's format."""
    import json

    from ledger.ingest.formats.trail import Trail

    c = LineCapture(trail=Trail(tmp_path / "live.json"))
    c.feed(b"step 1 loss 2.0 lr 0.1\nstep 2 loss 1.5 lr 0.1\n{'loss': 1.5, 'grad_norm': 0.5}\nstep 3 loss 1.0 lr 0.1\n")
    c.close()
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["format"] == "key-value" and live["lines"] == 4
    assert live["recent"] == [[1, 1, 2.0, 0.1, None, None, None, None, None],
                              [2, 2, 1.5, 0.1, None, None, None, None, None],
                              [3, 2, 1.5, None, None, None, None, None, None],
                              [4, 3, 1.0, 0.1, None, None, None, None, None]]
    assert c.rows["key-value"].steps[2] == {"loss": 1.5, "lr": 0.1, "grad_norm": 0.5}


def test_a_template_wrong_on_the_first_line_of_a_block_reads_none_of_it() -> None:
    """A format of its own that reads ``v`` as the loss up to step 1024 and twice ``v`` after. Lines of 32 bytes:
    the first 1024 (32 KiB) are read one by one, by a template learned on the first and checked against the format
    (agreeing), the rest as a block whose first line is the template's next check, where it is found wrong: no line
    of the block is taken from the template, and no template can be learned again (twice ``v`` is no number of the
    line), so every line after step 1024 is the format's reading."""

    def fmt(line: str) -> Parsed | None:
        words = line.split()
        if len(words) != 4 or words[0] != "step" or words[2] != "v":
            return None
        step, v = int(words[1]), float(words[3])
        return Parsed(step=step, metrics={"loss": v if step <= 1024 else 2 * v})

    lines = [f"step {k:05d} v {k / 8:018.3f}\n" for k in range(1, 4097)]
    assert {len(line) for line in lines} == {32}
    c = LineCapture({"mine": fmt})
    c.feed("".join(lines).encode())
    c.close()
    steps = c.rows["mine"].steps
    assert len(steps) == 4096 and c.lines == 4096
    assert [k for k in steps if steps[k] != {"loss": k / 8 if k <= 1024 else k / 4}] == []
    assert c.templates.items[0].dead


def test_an_overlong_line_ended_by_the_first_byte_of_the_next_read() -> None:
    c = _capture([b"y" * (MAX_LINE + 3), b"\nstep 4 loss 0.5\n"])
    assert c.best() is not None and c.best().steps == {4: {"loss": 0.5}}  # type: ignore[union-attr]
    assert (c.lines, c.long_lines) == (2, 1)


def test_steps_a_table_can_hold_are_kept_and_others_unparsed() -> None:
    rows = Rows("x")
    for line, step in enumerate([-2**63, 2**63 - 1, 2**63, -2**63 - 1], start=1):
        rows.add(Parsed(step=step, metrics={"loss": 1.0}), line)
    assert rows.unparsed == [3, 4] and sorted(rows.steps) == [-2**63, 2**63 - 1]
