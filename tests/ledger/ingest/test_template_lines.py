"""The templates of line capture (:mod:`ledger.ingest.formats.template`), in-process and line by line: what a
template is built from a line and its parser's reading (which number is the step, which the metric, at which
unit), what it reads in later lines of the shape (and refuses in others), when it is checked against its parser
and dropped, and which templates read whole blocks. Every expected value is written by hand from the line."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.ingest.formats import template
from ledger.ingest.formats.base import RANK, Parsed
from ledger.ingest.formats.template import Template, Templates, agrees, build, checked, checks

_LINE = re.compile(r"step (\d+) +loss (\S+)")


def parse(line: str) -> Parsed | None:
    """A reference parser of ``step N loss X`` lines (the format a test's templates check against)."""
    m = _LINE.fullmatch(line)
    return None if m is None else Parsed(step=int(m[1]), metrics={"loss": float(m[2])})


def clipping(line: str) -> Parsed | None:
    """A parser that reads a loss of 100 or more as 100: a template's reading of such a line disagrees."""
    p = parse(line)
    return None if p is None else Parsed(step=p.step, metrics={"loss": min(p.metrics["loss"], 100.0)})


# ------------------------------------------------------------------------------------- the check schedule
# by hand: every 64th use up to the 4096th, then every 1024th (5120, 6144, ...)
SCHEDULE = set(range(64, 4097, 64)) | set(range(5120, 40_000, 1024))


def test_the_uses_that_are_checked() -> None:
    assert [u for u in range(1, 12_000) if checked(u)] == sorted(u for u in SCHEDULE if u < 12_000)
    assert checked(64) and checked(4096) and not checked(4160) and checked(5120) and not checked(4608)


@given(st.integers(0, 20_000), st.integers(0, 9_000))
def test_the_lines_of_a_block_that_are_checked(uses: int, n: int) -> None:
    """Of the next ``n`` lines of a template that read ``uses`` lines, the 0-based indices whose use is checked."""
    assert checks(uses, n) == [j for j in range(n) if uses + j + 1 in SCHEDULE]


@pytest.mark.parametrize(("uses", "n", "want"), [
    (0, 64, [63]), (0, 63, []), (63, 1, [0]), (64, 64, [63]), (4000, 200, [31, 95]),  # 4032, 4096
    (4096, 1024, [1023]), (4095, 2, [0]), (4095, 1026, [0, 1024]), (5000, 200, [119]),  # 5120
    (5120, 1023, []), (10_000, 3000, [239, 1263, 2287]),
])
def test_checked_lines_by_hand(uses: int, n: int, want: list[int]) -> None:
    assert checks(uses, n) == want


# ------------------------------------------------------------------------------------------- building
def test_a_template_of_a_step_line_reads_later_lines_of_its_shape() -> None:
    t = build("f", "step 12 loss 2.5", Parsed(step=12, metrics={"loss": 2.5}))
    assert t is not None and t.format == "f" and t.step_group == 0 and t.metrics == [("loss", 1, 1.0)]
    assert t.pieces == ("step ", " loss ", "") and t.source == "step 12 loss 2.5"
    assert t.spans == ((5, 7), (13, 16)) and t.constants == () and not t.dead and t.uses == 0
    assert t.read("step 300 loss 0.125") == Parsed(step=300, metrics={"loss": 0.125})
    assert t.read("step 300    loss 0.125") == Parsed(step=300, metrics={"loss": 0.125})  # aligned columns
    assert t.read("step 1,234 loss 1,234.5") == Parsed(step=1234, metrics={"loss": 1234.5})
    assert t.read("step 7 loss nan").metrics["loss"] != t.read("step 7 loss nan").metrics["loss"]  # NaN
    assert t.read("step 7 loss -inf") is None  # (the number language has no signed inf)
    for other in ("step 300 loss 0.125 lr 3", "step 300 loss", "Step 300 loss 0.125", "step 300loss 0.125",
                  " step 300 loss 0.125", "step -3 loss 2", "step 3.5 loss 2", "step 3e2 loss 2"):
        assert t.read(other) is None, other


def test_a_line_without_step_numbers_gives_an_ordinal_template() -> None:
    t = build("f", "loss 2.5 acc 0.75", Parsed(step=None, metrics={"loss": 2.5, "acc": 0.75}))
    assert t is not None and t.step_group is None and t.metrics == [("loss", 0, 1.0), ("acc", 1, 1.0)]
    assert t.read("loss 1.5 acc 0.5") == Parsed(step=None, metrics={"loss": 1.5, "acc": 0.5}, ordinal=True)


@pytest.mark.parametrize(("line", "parsed"), [
    ("step 5 loss 2.5", Parsed(step=5, metrics={})),  # no metric: nothing to read
    ("step 5 loss 2.5", Parsed(step=5, metrics={"loss": 2.5}, evals=[(None, "loss", 2.5)])),  # evals
    ("loss high", Parsed(step=None, metrics={"loss": 1.0})),  # no number at all
    ("step 6 loss 2.5", Parsed(step=5, metrics={"loss": 2.5})),  # the step is none of the numbers
    ("step 7 of 7 loss 2.5", Parsed(step=7, metrics={"loss": 2.5})),  # either 7 could be the step
    ("step 7 loss 2.5", Parsed(step=7, metrics={"loss": 2.6})),  # the loss is none of the numbers
    ("step 7 loss 2.5 avg 2.5", Parsed(step=7, metrics={"loss": 2.5})),  # either 2.5 could be the loss
    ("step 7 loss 7", Parsed(step=7, metrics={"loss": 7.0})),  # the 7s: which is the step?
    ("step 7.0 loss 2.5", Parsed(step=7, metrics={"loss": 2.5})),  # a step is printed as digits
    ("step 7 loss 0", Parsed(step=7, metrics={"loss": 1e-300})),  # zero is only zero
    ("step 7 loss 0.3", Parsed(step=7, metrics={"loss": 0.3 * (1 + 1e-9)})),  # beyond rounding
])
def test_a_line_whose_values_are_not_its_numbers_gives_no_template(line: str, parsed: Parsed) -> None:
    assert build("f", line, parsed) is None


def test_a_step_printed_with_thousands_separators_is_the_step() -> None:
    t = build("f", "step 1,234 loss 2.5", Parsed(step=1234, metrics={"loss": 2.5}))
    assert t is not None and t.step_group == 0
    assert t.read("step 12,001 loss 0.5") == Parsed(step=12001, metrics={"loss": 0.5})


def test_the_prefixs_number_once_the_rank_is_no_other_value_and_every_value_is_found() -> None:
    """``3: step 5 loss 3``: the prefix's 3 is the rank's, so the loss is the last 3; a reading that lists the rank
    first still has its loss read."""
    t = build("f", "3: step 5 loss 3", Parsed(step=5, metrics={"loss": 3.0, RANK: 3.0}))
    assert t is not None and sorted(t.metrics) == [(RANK, 0, 1.0), ("loss", 2, 1.0)]
    t = build("f", "3: step 5 loss 2.5", Parsed(step=5, metrics={RANK: 3.0, "loss": 2.5}))
    assert t is not None and t.read("4: step 6 loss 1.5") == Parsed(step=6, metrics={RANK: 4.0, "loss": 1.5})


def test_a_value_equal_to_the_step_number_is_another_number() -> None:
    """The step's number is taken: a loss of 2.0 at step 2 is the other 2."""
    t = build("f", "step 2 loss 2.0 x 5", Parsed(step=2, metrics={"loss": 2.0}))
    assert t is not None and t.step_group == 0 and t.metrics == [("loss", 1, 1.0)]
    assert t.read("step 9 loss 4.0 x 5") == Parsed(step=9, metrics={"loss": 4.0})


def test_values_within_rounding_are_the_lines_numbers() -> None:
    t = build("f", "step 7 loss 0.3", Parsed(step=7, metrics={"loss": 0.3 * (1 + 1e-13)}))
    assert t is not None and t.metrics == [("loss", 1, 1.0)]
    t = build("f", "step 7 loss nan", Parsed(step=7, metrics={"loss": math.nan}))
    assert t is not None and t.metrics == [("loss", 1, 1.0)]


@pytest.mark.parametrize(("line", "value", "scale", "later", "want"), [
    ("step 5 time 893.76ms", 0.89376, 1e-3, "step 6 time 1000.5ms", 1000.5 / 1000),
    ("step 5 mem 10.52GiB", 10.52 * 2**30, float(2**30), "step 6 mem 3GiB", 3 * 2**30),
    ("step 5 mem 10.5GB", 10.5e9, 1e9, "step 6 mem 0.25GB", 0.25e9),
    ("step 5 tok 43.2K | x", 43200.0, 1e3, "step 6 tok 12.5K | x", 12500.0),
    ("step 5 tok 43.2K", 43200.0, 1e3, "step 6 tok 7K", 7000.0),  # the multiplier ends the line
    ("step 5 time 1.5K ms", 1.5, 1.0, "step 6 time 2.5K ms", 2.5),  # thousands of milliseconds
    ("step 5 bw 85.8G/s", 85.8e9, 1e9, "step 6 bw 1.5G/s", 1.5e9),
])
def test_a_number_is_read_at_the_unit_its_value_shows(line: str, value: float, scale: float, later: str,
                                                       want: float) -> None:
    t = build("f", line, Parsed(step=5, metrics={"x": value}))
    assert t is not None and t.metrics == [("x", 1, scale)]
    got = t.read(later)
    assert got is not None and got.step == 6 and got.metrics["x"] == pytest.approx(want, rel=1e-15)


def test_a_multiplier_glued_into_a_word_is_no_multiplier() -> None:
    """``2.0Kb``: the K is part of a word, so the number is read as printed or at the usual units only."""
    assert build("f", "step 5 size 2.0Kb", Parsed(step=5, metrics={"x": 2000.0})) is None
    assert build("f", "step 5 size 2.0Kb free", Parsed(step=5, metrics={"x": 2000.0})) is None
    assert build("f", "step 5 size 2.0K: free", Parsed(step=5, metrics={"x": 2000.0})) is not None
    t = build("f", "step 5 size 2.0Kb", Parsed(step=5, metrics={"x": 2.0}))
    assert t is not None and t.metrics == [("x", 1, 1.0)]


def test_forty_numbers_make_a_template_and_more_do_not() -> None:
    forty = "step 1 loss 2.5 " + " ".join(str(1000 + i) for i in range(38))
    t = build("f", forty, Parsed(step=1, metrics={"loss": 2.5}))
    assert t is not None and len(t.spans) == 40
    assert build("f", forty + " 1038", Parsed(step=1, metrics={"loss": 2.5})) is None


@pytest.mark.parametrize(("line", "rank", "later", "later_rank"), [
    ("0: step 5 loss 2.5", 0, "7: step 6 loss 1.5", 7.0),  # the prefix's number is the rank's
    ("2: step 5 loss 1.0 rank 2", 2, "5: step 6 loss 1.5 rank 9", 5.0),  # the 2 after the prefix is not
])
def test_the_rank_of_a_launchers_prefix_is_read_from_its_number(line: str, rank: int, later: str,
                                                                later_rank: float) -> None:
    t = build("f", line, Parsed(step=5, metrics={"loss": float(line.split()[4]), RANK: float(rank)}))
    assert t is not None and t.constants == () and (RANK, 0, 1.0) in t.metrics
    got = t.read(later)
    assert got is not None and got.step == 6 and got.metrics[RANK] == later_rank and got.metrics["loss"] == 1.5


def test_a_rank_inside_the_prefixs_words_is_a_constant_of_the_shape() -> None:
    t = build("f", "[rank3]: step 5 loss 2.5", Parsed(step=5, metrics={"loss": 2.5, RANK: 3.0}))
    assert t is not None and t.constants == ((RANK, 3.0),) and t.metrics == [("loss", 1, 1.0)]
    assert t.read("[rank3]: step 6 loss 1.5") == Parsed(step=6, metrics={"loss": 1.5, RANK: 3.0})
    assert t.read("[rank4]: step 6 loss 1.5") is None  # another rank: another template


def test_a_prefix_whose_numbers_are_not_the_rank_gives_no_template() -> None:
    """``[1,3]<stdout>:``: the prefix's one number is 13, not rank 3."""
    assert build("f", "[1,3]<stdout>: step 5 loss 2.5", Parsed(step=5, metrics={"loss": 2.5, RANK: 3.0})) is None


# ------------------------------------------------------------------------------------------- agreeing
def test_a_reading_agrees_with_the_parsers_only_when_equal() -> None:
    a = Parsed(step=3, metrics={"loss": 0.3, "lr": math.nan})
    assert agrees(a, Parsed(step=3, metrics={"lr": math.nan, "loss": 0.3 * (1 + 1e-13)}))
    assert not agrees(a, None)
    assert not agrees(a, Parsed(step=4, metrics={"loss": 0.3, "lr": math.nan}))
    assert not agrees(a, Parsed(step=3, metrics={"loss": 0.3}))
    assert not agrees(a, Parsed(step=3, metrics={"loss": 0.3, "lr": math.nan, "acc": 1.0}))
    assert not agrees(a, Parsed(step=3, metrics={"loss": 0.3 * (1 + 1e-9), "lr": math.nan}))
    assert not agrees(a, Parsed(step=3, metrics={"loss": 0.3, "lr": 1.0}))
    assert not agrees(Parsed(step=3, metrics={"loss": 0.0}), Parsed(step=3, metrics={"loss": 1e-300}))
    assert agrees(Parsed(step=None, metrics={"x": -2.0}), Parsed(step=None, metrics={"x": -2.0}))


# ------------------------------------------------------------------------------------ reading a block
def _template(line: str = "step 1 loss 2.5") -> Template:
    t = build("f", line, parse(line))
    assert t is not None
    return t


def test_a_block_gives_the_lines_of_the_shape_with_their_index_and_leaves_the_rest() -> None:
    text = "step 1 loss 2.5\nother line\nstep 2 loss 1.5\n\nstep 3  loss 0.5\nstep 4.5 loss 1\nstep 5 loss 1 x\n"
    t = _template()
    rest, read = t.read_block(text, parse)
    assert read == [(0, Parsed(step=1, metrics={"loss": 2.5})), (2, Parsed(step=2, metrics={"loss": 1.5})),
                    (4, Parsed(step=3, metrics={"loss": 0.5}))]
    assert rest == "\nother line\n\n\n\nstep 4.5 loss 1\nstep 5 loss 1 x\n"
    assert t.uses == 4 and not t.dead  # the line whose step is no step matched the pattern


def test_a_block_without_the_shape_is_left_as_it_is() -> None:
    t = _template()
    text = "iter 1 loss 2.5\nstep x loss 1\n"
    assert t.read_block(text, parse) == (text, [])
    assert t.read_block("", parse) == ("", [])


def test_a_block_line_the_parser_reads_otherwise_at_a_check_ends_the_template_there() -> None:
    """The 64th use is checked: the parser reads its loss of 500 as 100, so the template dies there, and that line
    and every later one stay for the parsers; the lines before are the template's (unchecked ones too)."""
    lines = [f"step {i} loss {500 if i in (10, 64) else i / 4}" for i in range(1, 71)]
    t = _template()
    rest, read = t.read_block("\n".join(lines) + "\n", clipping)
    assert t.dead and t.uses == 64
    assert read == [(i - 1, Parsed(step=i, metrics={"loss": 500.0 if i == 10 else i / 4})) for i in range(1, 64)]
    assert rest == "\n" * 63 + "\n".join(lines[63:]) + "\n"


def test_a_template_that_read_lines_before_is_checked_on_its_schedule() -> None:
    t = _template()
    t.uses = 4094  # the block's 2nd line is the 4096th use: checked
    lines = [f"step {i} loss {500 if i == 2 else 1}" for i in range(1, 4)]
    rest, read = t.read_block("\n".join(lines), clipping)
    assert t.dead and read == [(0, Parsed(step=1, metrics={"loss": 1.0}))]
    assert rest == "\n" + "\n".join(lines[1:])
    t = _template()
    t.uses = 4096  # the next checks: the 5120th use (the block's 1024th line)
    lines = [f"step {i} loss {500 if i in (64, 1024) else 1}" for i in range(1, 1100)]
    rest, read = t.read_block("\n".join(lines), clipping)
    assert t.dead and len(read) == 1023 and read[63] == (63, Parsed(step=64, metrics={"loss": 500.0}))


def test_the_block_pattern_matches_whole_lines_only() -> None:
    t = _template()
    assert t.block().pattern == f"^(?:{t.regex.pattern})$" and t.block() is t.block()
    rest, read = t.read_block("xstep 1 loss 2\nstep 2 loss 3x\nstep 3 loss 4", parse)
    assert read == [(2, Parsed(step=3, metrics={"loss": 4.0}))] and rest == "xstep 1 loss 2\nstep 2 loss 3x\n"


def test_a_shape_of_one_number_a_column_is_cut_into_columns_until_told_otherwise() -> None:
    t = _template()
    assert t.shape() is not None and t.shape() is t.shape()
    t.no_columns()
    assert t.shape() is None


# -------------------------------------------------------------------------------- the templates of a capture
def test_templates_read_the_lines_of_their_shape_checked_on_their_first_uses() -> None:
    """The first CHECK_FIRST (8) uses are all checked: a loss the parser reads otherwise on the 8th drops the
    template (that line is the parser's), on the 9th it is not looked at (the template's reading stands)."""
    for bad, dies in ((8, True), (9, False), (64, True)):
        templates = Templates({"f": clipping})
        templates.learn("f", "step 1 loss 2.5", clipping("step 1 loss 2.5"))
        (t,) = templates.items
        got = []
        for use in range(1, 70):
            loss = 500 if use == bad else use / 8
            got.append(templates.read(f"step {use} loss {loss}"))
            if t.dead:
                break
        assert t.dead == dies and t.uses == (bad if dies else 69)
        assert got[:bad - 1] == [("f", Parsed(step=u, metrics={"loss": u / 8})) for u in range(1, bad)]
        assert got[bad - 1] == (None if dies else ("f", Parsed(step=bad, metrics={"loss": 500.0})))
        if dies:  # a dead template reads nothing more
            assert templates.read("step 2 loss 1") is None and t.uses == bad


def test_templates_refuse_lines_of_no_shape_and_try_each_in_order() -> None:
    templates = Templates({"f": parse, "g": parse})
    assert templates.read("step 1 loss 2") is None
    templates.learn("f", "step 1 loss 2.5", parse("step 1 loss 2.5"))
    templates.learn("g", "step 1  loss 2.5 x 3", Parsed(step=1, metrics={"loss": 2.5}))
    assert templates.read("iter 1 loss 2") is None
    assert templates.read("step 4 loss 2") == ("f", Parsed(step=4, metrics={"loss": 2.0}))
    templates.items[0].dead = True
    assert templates.read("step 4 loss 2") is None and templates.items[0].uses == 1
    assert templates.read("step 4 loss 2 x 3") is None  # the parser does not read it: g's template dies
    assert templates.items[1].dead


def test_the_parser_reads_a_line_without_its_launchers_prefix_and_labels_the_rank() -> None:
    templates = Templates({"f": parse})
    assert templates.parse("f", "[rank2]: step 3 loss 1.0") == Parsed(step=3, metrics={"loss": 1.0, RANK: 2.0})
    assert templates.parse("f", "step 3 loss 1.0") == Parsed(step=3, metrics={"loss": 1.0})
    assert templates.parse("f", "[rank2]: nothing") is None


def test_the_templates_for_blocks_are_the_checked_live_step_templates_most_used_first() -> None:
    templates = Templates({"f": parse})
    made = [_template(f"step 1 loss 2.{i}") for i in range(6)]
    for t, uses in zip(made, (8, 7, 100, 50, 9, 1000), strict=True):
        t.uses = uses
    made[3].dead = True
    made[5].step_group = None  # ordinal: no step to read a block by
    templates.items = made
    assert templates.for_blocks() == [made[2], made[4], made[0]]


def test_a_capture_learns_templates_only_when_enabled_and_up_to_the_limit() -> None:
    line = "step 1 loss 2.5"
    off = Templates({"f": parse}, enabled=False)
    off.learn("f", line, parse(line))
    assert off.items == []
    templates = Templates({"f": parse})
    for i in range(template.MAX_TEMPLATES):
        templates.learn("f", f"step 1 loss 2.5 x{i} 3", Parsed(step=1, metrics={"loss": 2.5}))
    assert len(templates.items) == template.MAX_TEMPLATES == 8
    templates.learn("f", line, parse(line))
    assert len(templates.items) == 8  # eight live: no ninth
    templates.items[0].dead = True
    templates.learn("f", line, parse(line))
    assert len(templates.items) == 9 and templates.items[-1].source == line


def _misses_then(templates: Templates, misses: int) -> bool:
    """``misses`` lines that give no template, then one that would: whether it was learned."""
    for _ in range(misses):
        templates.learn("f", "step 7 loss 7", Parsed(step=7, metrics={"loss": 7.0}))
    before = len(templates.items)
    templates.learn("f", "step 1 loss 2.5", parse("step 1 loss 2.5"))
    return len(templates.items) > before


def test_after_sixteen_misses_in_a_row_only_every_1024th_line_is_tried() -> None:
    assert _misses_then(Templates({"f": parse}), 15)
    assert _misses_then(Templates({"f": parse}), 16)  # the 17th try is still made
    assert not _misses_then(Templates({"f": parse}), 17)
    assert not _misses_then(Templates({"f": parse}), 1039)
    assert _misses_then(Templates({"f": parse}), 1040)  # 1024 after the 17th
    templates = Templates({"f": parse})
    assert _misses_then(templates, 1040) and templates.misses == {"f": 0}  # a template resets the count
    assert _misses_then(templates, 16) and not _misses_then(templates, 17)
    other = Templates({"f": parse, "g": parse})  # misses are counted per format
    for _ in range(40):
        other.learn("g", "step 7 loss 7", Parsed(step=7, metrics={"loss": 7.0}))
    assert _misses_then(other, 0) and other.misses["g"] == 40
