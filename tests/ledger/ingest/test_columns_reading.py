"""The Python column reader (ledger.ingest.formats.columns, with ``LEDGER_NO_EXT=1``: what runs where the compiled
reader is not built) on blocks of lines as a log holds them: lines of the shape with numbers in every printed form
(thousands separators, signs, exponents, a point first or last), lines of other shapes between them, ``nan`` in a
number's place, runs of spaces where the template had one, steps that are no steps (signed, fractional, past
int64), metrics in another order than printed, milliseconds scaled, lines already read by another template.

Expected values are written by hand from the lines, or, in the Hypothesis tests, by an independent reading: the
number runs by a per-character loop over the docstring's definition, a block's lines by Python's ``re`` over the
line's shape and ``int``/``float`` of the printed numbers."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import _native
from ledger.ingest.formats import columns
from ledger.ingest.formats.columns import NUM, Block, Shape, line_ends, prepare, read, runs

FAST = settings(max_examples=80, deadline=None, derandomize=True, database=None)


@pytest.fixture(autouse=True)
def _python_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_native.DISABLE, "1")


def _texts(data: bytes) -> list[bytes]:
    starts, stops = runs(np.frombuffer(data, np.uint8))
    return [data[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]


def test_number_runs_by_hand() -> None:
    data = b"step 12 loss -.5 lr 1e-3 x 1,024 y 1.5E+3 z e5 w . v - u 3-4 t --5 s ---5 r ,5 q 1,,2 p 1e\n"
    assert _texts(data) == [b"12", b"-.5", b"1e-3", b"1,024", b"1.5E+3", b"5", b"3-4", b"--5", b"5", b"1", b"2",
                            b"1"]
    assert _texts(b"5 x 7.\n") == [b"5", b"7."]  # a run at the very start; a point may end one
    assert _texts(b"1e5\n") == [b"1e5"] and _texts(b"e5 .E-3\n") == [b"5"]  # an exponent at the start; no digit in 3
    assert _texts(b"+.5e+10 .e5 5e+ 12,345,678 9,\n") == [b"+.5e+10", b".e5", b"5", b"12,345,678", b"9"]
    assert _texts(b"\n") == [] and _texts(b"no numbers\n") == []


def _reference_runs(data: bytes) -> list[tuple[int, int]]:
    """Runs of number characters, character by character, as the docstring of :func:`.columns.runs` defines
    them."""
    digit = set(b"0123456789")
    n = len(data)
    isnum = []
    for i, c in enumerate(data):
        if c in digit or c in b".+-":
            isnum.append(True)
        elif c in b"eE":
            before = i > 0 and (data[i - 1] in digit or data[i - 1] == ord("."))
            signed = i + 2 < n and data[i + 1] in b"+-" and data[i + 2] in digit
            after = i + 1 < n and (data[i + 1] in digit or signed)
            isnum.append(before and after)
        elif c == ord(","):
            isnum.append(0 < i < n - 1 and data[i - 1] in digit and data[i + 1] in digit)
        else:
            isnum.append(False)
    out, i = [], 0
    while i < n:
        if not isnum[i]:
            i += 1
            continue
        j = i
        while j < n and isnum[j]:
            j += 1
        if any(c in digit for c in data[i:min(j, i + 3)]):
            out.append((i, j))
        i = j
    return out


@FAST
@given(st.binary(max_size=80).map(lambda b: bytes(c for c in b if c != 10))
       | st.text("0123456789.,+-eE x", max_size=60).map(str.encode))
def test_number_runs_are_the_definitions(data: bytes) -> None:
    text = data + b"\n"
    starts, stops = runs(np.frombuffer(text, np.uint8))
    assert list(zip(starts.tolist(), stops.tolist(), strict=True)) == _reference_runs(text)


def test_literal_text_as_re2() -> None:
    assert columns._literal("step  | loss: (é)") == "step +\\x7c +loss\\x3a +\\x28é\\x29"
    assert columns._literal(" a1_") == " +a1\\x5f"
    assert columns._literal("") == ""


def _shape(source: str, pieces: tuple[str, ...], spans: tuple[tuple[int, int], ...], step: int,
           metrics: list[tuple[str, int, float]]) -> Shape:
    for (a, _), before in zip(spans, pieces, strict=False):  # the pieces and spans describe the source
        assert source[a - len(before):a] == before
    shape = prepare(source, pieces, spans, step, metrics)
    assert shape is not None
    return shape


SOURCE = "step 12 | loss 2.5 | lr 0.001"
PIECES = ("step ", " | loss ", " | lr ", "")
SPANS = ((5, 7), (15, 18), (24, 29))


def test_a_template_prepared_as_columns() -> None:
    shape = _shape(SOURCE, PIECES, SPANS, 0, [("loss", 1, 1.0), ("lr", 2, 1.0)])
    assert shape == Shape(
        pattern=f"^step +(?:{NUM}) +\\x7c +loss +(?:{NUM}) +\\x7c +lr +(?:{NUM})\\n$", count=3, step=0,
        metrics=(("loss", 1, 1.0), ("lr", 2, 1.0)), tokens=(8, ((1, 0, 0), (4, 0, 0), (7, 0, 0))),
        pieces=(b"step ", b" | loss ", b" | lr ", b""))
    # text before a number inside its word, and after it (a unit), numbers that are not read, a character of two
    # bytes before them (the runs count bytes, the spans characters)
    source = "[rank3]: \u00e9poque 10:00:01 step=40 | 893.5ms | 7"
    spans = tuple(m.span() for m in re.finditer(r"\d+(?:\.\d+)?", source))
    pieces = tuple(source[a:b] for a, b in zip((0,) + tuple(e for _, e in spans), tuple(s for s, _ in spans)
                                                + (len(source),), strict=True))
    assert pieces == ("[rank", "]: \u00e9poque ", ":", ":", " step=", " | ", "ms | ", "")
    shape = _shape(source, pieces, spans, 4, [("step_time_s", 5, 1e-3)])
    assert (shape.count, shape.step, shape.metrics) == (7, 4, (("step_time_s", 5, 1e-3),))
    assert shape.tokens == (8, ((3, 5, 0), (5, 0, 2)))  # `step=40` and `893.5ms`, words 3 and 5
    assert _read(shape, "[rank3]: \u00e9poque 10:00:02 step=41 | 1,250ms | 9\n".encode()) == (
        [0], [41], {"step_time_s": [1.25]})


@pytest.mark.parametrize(("source", "pieces", "spans", "step", "metrics"), [
    (SOURCE, PIECES, SPANS, None, [("loss", 1, 1.0)]),  # no step
    (SOURCE, PIECES[:3], SPANS, 0, [("loss", 1, 1.0)]),  # not one piece more than the numbers
    (SOURCE + " \ufffd", PIECES[:3] + (" \ufffd",), SPANS, 0, [("loss", 1, 1.0)]),  # an undecodable byte
    (SOURCE + " \n", PIECES[:3] + (" \n",), SPANS, 0, [("loss", 1, 1.0)]),  # two lines are no line's shape
    ("step 3 lr-5", ("step ", " lr-", ""), ((5, 6), (10, 11)), 0, [("lr", 1, 1.0)]),  # `-` glued before
    ("step 3 lr.5", ("step ", " lr.", ""), ((5, 6), (10, 11)), 0, [("lr", 1, 1.0)]),  # `.` glued before
    ("step 3 lr+5", ("step ", " lr+", ""), ((5, 6), (10, 11)), 0, [("lr", 1, 1.0)]),
    ("step 12", ("step ", "", ""), ((5, 6), (6, 7)), 1, []),  # a number right after another
    ("step 12", ("step ", "", ""), ((5, 6), (6, 7)), 0, []),  # a number right before another
    # right after a number no run holds (`nan`): in a line `x 15` the runs would read 15 as the step
    ("x nan5", ("x ", "", ""), ((2, 5), (5, 6)), 1, []),
    ("step 3 loss 1.5", ("step ", " loss ", ".5"), ((5, 6), (12, 13)), 0, [("loss", 1, 1.0)]),  # runs see 1.5
])
def test_shapes_read_line_by_line(source: str, pieces: tuple[str, ...], spans: tuple[tuple[int, int], ...],
                                  step: int | None, metrics: list[tuple[str, int, float]]) -> None:
    assert prepare(source, pieces, spans, step, metrics) is None


def test_word_places_refuse_what_a_reader_of_delimited_values_cannot_cut() -> None:
    for odd in ("\t", "\r", '"', "'"):
        source = f"step 12 | loss 2.5 {odd}"
        shape = prepare(source, ("step ", " | loss ", f" {odd}"), ((5, 7), (15, 18)), 0, [("loss", 1, 1.0)])
        assert shape is not None and shape.tokens is None, odd
    # two numbers in one word: the word's width varies
    shape = prepare("step 12 loss 2.5/3", ("step ", " loss ", "/", ""), ((5, 7), (13, 16), (17, 18)), 0,
                    [("loss", 1, 1.0)])
    assert shape is not None and shape.tokens is None
    shape = prepare("step 12 loss 3/2.5", ("step ", " loss ", "/", ""), ((5, 7), (13, 14), (15, 18)), 0,
                    [("loss", 2, 1.0)])
    assert shape is not None and shape.tokens is None
    # a number read across a space (the line cut at single spaces splits it): no word holds it
    assert columns._word_places("a 1 b", ((2, 5),), [0]) is None


def test_blocks_share_their_lines() -> None:
    data = b"a\nbb\n\nccc\n"
    block = Block.of(data)
    assert block.count == 4 and block.offsets.tolist() == [0, 2, 5, 6, 10]
    assert [block.line(i) for i in range(4)] == [b"a", b"bb", b"", b"ccc"]
    assert block.lines.to_pylist() == [b"a\n", b"bb\n", b"\n", b"ccc\n"]
    assert line_ends(data).tolist() == [1, 4, 5, 9]
    assert block.left(None).tolist() == [0, 1, 2, 3]
    unread = block.mark_read(None, np.array([1], np.int64))
    assert unread.tolist() == [True, False, True, True] and block.left(unread).tolist() == [0, 2, 3]
    assert block.emptied(None) == data and block.emptied(unread) == b"a\n\n\nccc\n"
    assert block.emptied(block.mark_read(unread.copy(), np.array([0, 3], np.int64))) == b"\n\n\n\n"
    assert block.hinted("c|a", None).tolist() == [0, 3] and block.hinted("c|a|b", unread).tolist() == [0, 3]
    assert block.hinted("b", unread).tolist() == []
    assert block.hinted("a", block.mark_read(None, np.arange(4))).tolist() == []
    assert Block.of(b"").count == 0


def _read(shape: Shape, data: bytes, unread: list[bool] | None = None, **kw: bool) -> tuple[list, list, dict]:
    got = read(shape, Block.of(data), None if unread is None else np.array(unread, bool), **kw)
    assert got is not None
    return got.lines.tolist(), got.steps.tolist(), {k: v.tolist() for k, v in got.values.items()}


SHAPE = Shape  # for the type of the fixtures below


@pytest.fixture()
def shape() -> Shape:
    return _shape(SOURCE, PIECES, SPANS, 0, [("loss", 1, 1.0), ("lr", 2, 1.0)])


BLOCK = (b"step 1 | loss 2.5 | lr 0.001\n"
         b"prefetching shard 3\n"
         b"step 2 | loss -.5 | lr 1e-3\n"
         b"step 3 | loss nan | lr 0.001\n"  # nan in a number's place: the parsers' line
         b"step  4 |  loss 1,024.5 | lr 5.\n"  # runs of spaces, a thousands separator, a point last
         b"step 5 | loss 2.5 | lr 0.001 | extra\n"  # another shape
         b"step 1,006 | loss +3 | lr 1E+3\n"
         b"step -7 | loss 1 | lr 1\n"  # a signed step is no step
         b"step 8.5 | loss 1 | lr 1\n"  # nor a fractional one
         b"step 9 | loss 1.5e-3 | lr 0\n")


def test_a_block_read_by_hand(shape: Shape) -> None:
    expected = ([0, 2, 4, 6, 9], [1, 2, 4, 1006, 9],
                {"loss": [2.5, -0.5, 1024.5, 3.0, 1.5e-3], "lr": [0.001, 1e-3, 5.0, 1000.0, 0.0]})
    assert _read(shape, BLOCK) == expected
    assert _read(replace(shape, tokens=None), BLOCK) == expected  # by number runs only
    assert _read(shape, BLOCK, ahead=True) == expected  # its words read in another thread
    assert _read(shape, BLOCK, [True, True, False, True, True, True, True, True, True, False]) == (
        [0, 4, 6], [1, 4, 1006], {"loss": [2.5, 1024.5, 3.0], "lr": [0.001, 5.0, 1000.0]})
    lines, steps, values = _read(shape, BLOCK, [False] * 10)
    assert (lines, steps) == ([], [])
    assert _read(shape, b"other 1\nlines 2\n") == ([], [], {})


def test_a_block_of_clean_lines_read_as_words_and_as_runs(shape: Shape) -> None:
    """Every line of the shape, single spaces (the words' reading takes the whole block)."""
    data = b"".join(f"step {i} | loss {i / 4} | lr {i * 1e-5:.2e}\n".encode() for i in range(1, 51))
    expected = (list(range(50)), list(range(1, 51)),
                {"loss": [i / 4 for i in range(1, 51)], "lr": [float(f"{i * 1e-5:.2e}") for i in range(1, 51)]})
    for s in (shape, replace(shape, tokens=None)):
        for ahead in (False, True):
            got = _read(s, data, ahead=ahead)
            assert got == expected
    got = read(shape, Block.of(data))
    assert got is not None and got.steps.dtype == np.int64 and got.values["loss"].dtype == np.float64
    head = got.head(3)
    assert head.lines.tolist() == [0, 1, 2] and head.steps.tolist() == [1, 2, 3] and head.values["lr"].tolist() == [
        1e-05, 2e-05, 3e-05]


def test_nan_in_a_numbers_place_is_read_as_words_or_left_by_the_runs(shape: Shape) -> None:
    """Read as words (single spaces throughout), ``nan`` and ``inf`` are numbers, as the parsers read them; cut at
    number runs, such a line has a run too few and is left to the parsers."""
    data = b"step 1 | loss 2.5 | lr 0.5\nstep 2 | loss nan | lr inf\n"
    lines, steps, values = _read(shape, data)
    assert (lines, steps, values["loss"][0], values["lr"]) == ([0, 1], [1, 2], 2.5, [0.5, float("inf")])
    assert values["loss"][1] != values["loss"][1]
    assert _read(replace(shape, tokens=None), data) == ([0], [1], {"loss": [2.5], "lr": [0.5]})


def test_nan_inside_a_word_with_literal_text_is_read_as_words() -> None:
    """``loss=nan`` and ``nanms``: the words' reading cuts the literal text off the number's word (before it, after
    it) and reads ``nan`` as the parsers do; cut at number runs, that line is left to the parsers."""
    source = "step 3 | loss=2.5 | time 893.5ms"
    shape = _shape(source, ("step ", " | loss=", " | time ", "ms"), ((5, 6), (14, 17), (25, 30)), 0,
                   [("loss", 1, 1.0), ("step_time_s", 2, 1e-3)])
    assert shape.tokens == (7, ((1, 0, 0), (3, 5, 0), (6, 0, 2)))  # `loss=2.5`, word 3; `893.5ms`, word 6
    data = b"step 1 | loss=0.5 | time 5.5ms\nstep 2 | loss=nan | time nanms\n"
    lines, steps, values = _read(shape, data)
    assert (lines, steps, values["loss"][0], values["step_time_s"][0]) == ([0, 1], [1, 2], 0.5, 5.5 / 1000)
    assert np.isnan(values["loss"][1]) and np.isnan(values["step_time_s"][1])
    assert _read(replace(shape, tokens=None), data) == ([0], [1], {"loss": [0.5], "step_time_s": [5.5 / 1000]})


def test_a_template_with_a_run_of_spaces_is_read_as_words() -> None:
    """Two spaces between two words of the template's line: cut at single spaces, an empty word between them, in
    the template's words as in each line's (so ``nan`` is still read as words)."""
    shape = _shape("step 3  loss 2.5", ("step ", "  loss ", ""), ((5, 6), (13, 16)), 0, [("loss", 1, 1.0)])
    assert shape.tokens == (5, ((1, 0, 0), (4, 0, 0)))  # step, 3, "", loss, 2.5
    lines, steps, values = _read(shape, b"step 1  loss 0.5\nstep 2  loss nan\n")
    assert (lines, steps, values["loss"][0]) == ([0, 1], [1, 2], 0.5) and np.isnan(values["loss"][1])


def test_a_step_past_int64_refuses_the_block(shape: Shape) -> None:
    data = b"step 1 | loss 2.5 | lr 1\nstep 9223372036854775808 | loss 1 | lr 1\n"
    assert read(shape, Block.of(data)) is None
    assert read(replace(shape, tokens=None), Block.of(data)) is None
    assert _read(shape, b"step 9223372036854775807 | loss 1 | lr 1\n") == ([0], [2**63 - 1], {"loss": [1.0],
                                                                                             "lr": [1.0]})


def test_metrics_in_another_order_than_printed_and_scaled() -> None:
    """The template lists lr before loss (the order its parser gave them); a field in milliseconds is read in
    seconds, by the division the parsers use (893.5 / 1000, not 893.5 * 1e-3)."""
    source = "step 3 | loss 2.5 | lr 0.5 | time 893.5ms"
    pieces = ("step ", " | loss ", " | lr ", " | time ", "ms")
    spans = ((5, 6), (14, 17), (23, 26), (34, 39))
    shape = _shape(source, pieces, spans, 0, [("lr", 2, 1.0), ("step_time_s", 3, 1e-3), ("loss", 1, 1.0)])
    data = (b"step 1 | loss 2,002.5 | lr 0.25 | time 893.5ms\n"
            b"step 2 | loss 1.5 | lr 0.125 | time 1,000ms\n"
            b"step 3 | loss 1.25 | lr 0.0625 | time 7ms\n")
    expected = ([0, 1, 2], [1, 2, 3], {"lr": [0.25, 0.125, 0.0625], "step_time_s": [893.5 / 1000, 1.0, 0.007],
                                       "loss": [2002.5, 1.5, 1.25]})
    assert _read(shape, data) == expected
    assert _read(replace(shape, tokens=None), data) == expected
    # one line of another shape among them: the matched lines' bytes gathered, still in order
    assert _read(replace(shape, tokens=None), b"x\n" + data) == ([1, 2, 3], [1, 2, 3], expected[2])


def test_a_pattern_re2_refuses_hands_the_block_back(shape: Shape) -> None:
    assert read(replace(shape, pattern="^step (?<=x)\\n$"), Block.of(b"step 1 | loss 1 | lr 1\n")) is None


# ----------------------------------------------------------------------------------------------- Hypothesis
STEPS = st.one_of(st.integers(0, 10**15).map(str), st.integers(0, 10**9).map(lambda i: f"{i:,}"))
VALUES = st.one_of(
    st.floats(-1e6, 1e6).flatmap(lambda f: st.sampled_from([f"{f:.{p}f}" for p in range(0, 9)]
                                                           + [f"{f:.{p}e}" for p in range(0, 9)] + [repr(f)])),
    st.floats(1e-30, 1e30).map(repr),
    st.integers(0, 10**12).map(lambda i: f"{i:,}"),
)
OTHER = st.sampled_from(["prefetching shard 3", "step 5 | loss 1 | lr 1 | x",
                         "", "step -1 | loss 1 | lr 1", "loss 1 | lr 2", "step 5 | loss 1 |  lr 1e"])
_LINE = re.compile(r"step +(\S+) +\| +loss +(\S+) +\| +lr +(\S+)")


@FAST
@given(lines=st.lists(st.one_of(st.tuples(STEPS, VALUES, VALUES, st.sampled_from([" ", "  "])), OTHER),
                      min_size=1, max_size=30),
       words=st.booleans(), ahead=st.booleans(), unread=st.lists(st.booleans(), min_size=30, max_size=30) | st.none())
def test_a_block_reads_what_the_lines_print(lines: list, words: bool, ahead: bool, unread: list[bool] | None) -> None:
    shape = _shape(SOURCE, PIECES, SPANS, 0, [("loss", 1, 1.0), ("lr", 2, 1.0)])
    if not words:
        shape = replace(shape, tokens=None)
    text = [line if isinstance(line, str) else f"step {line[0]}{line[3]}| loss {line[1]} | lr {line[2]}"
            for line in lines]
    mask = None if unread is None else unread[:len(text)]
    want: tuple[list, list, dict] = ([], [], {"loss": [], "lr": []})
    for i, line in enumerate(text):
        m = _LINE.fullmatch(line)
        if m is None or (mask is not None and not mask[i]) or not m.group(1).replace(",", "").isdigit():
            continue
        try:
            values = [float(m.group(k).replace(",", "")) for k in (2, 3)]
        except ValueError:
            continue
        want[0].append(i)
        want[1].append(int(m.group(1).replace(",", "")))
        want[2]["loss"].append(values[0])
        want[2]["lr"].append(values[1])
    got = read(shape, Block.of("".join(t + "\n" for t in text).encode()),
               None if mask is None else np.array(mask, bool), ahead=ahead)
    assert got is not None
    assert (got.lines.tolist(), got.steps.tolist()) == (want[0], want[1])
    if want[0]:
        assert {k: v.tolist() for k, v in got.values.items()} == want[2]


class _Twin:
    """The compiled reader's interface (``read_shape``, ``ledger/_native/columns.c``) written here in plain Python
    for a shape whose numbers are all read (a line of the shape: each number's run at its place), so that the glue
    around it (:func:`.columns._native_read`: the rows it filled, the scales, a refusal) runs where the extension is
    not built (the mutation tree); ``refuse``: it cannot tell, as for a step past int64."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse

    def read_shape(self, data: bytes, mask: np.ndarray | None, pieces: tuple[bytes, ...], count: int, step: int,
                   metrics: tuple[int, ...], lines: np.ndarray, steps: np.ndarray, matrix: np.ndarray) -> int:
        if self.refuse:
            return -1
        number = rb"([-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
        body = re.escape(pieces[0]) + b"".join(number + re.escape(p) for p in pieces[1:])
        pattern = re.compile(body.replace(b"\\ ", b" +"))
        n = 0
        for i, line in enumerate(data.split(b"\n")[:-1]):
            m = pattern.fullmatch(line)
            if m is None or (mask is not None and not mask[i]) or len(m.groups()) != count:
                continue
            lines[n], steps[n] = i, int(m.group(step + 1).replace(b",", b""))
            for j, g in enumerate(metrics):
                matrix[n, j] = float(m.group(g + 1).replace(b",", b""))
            n += 1
        return n


def test_the_compiled_readers_rows_are_taken_as_it_filled_them() -> None:
    """What the compiled reader fills is what :func:`.columns.read` returns: the first ``n`` rows, each metric
    scaled by the shape's scale (ms to s by division), none when it read nothing, the Python reader's reading when
    it cannot tell."""
    source = "step 3 | loss 2.5 | time 893.5ms"
    pieces = ("step ", " | loss ", " | time ", "ms")
    shape = _shape(source, pieces, ((5, 6), (14, 17), (25, 30)), 0, [("loss", 1, 1.0), ("step_time_s", 2, 1e-3)])
    data = b"step 1 | loss 2.25 | time 893.5ms\nnoise\nstep 2 | loss 1,000.5 | time 7ms\n"
    got = columns._native_read(_Twin(), shape, Block.of(data), None)
    assert got is not None and got.lines.tolist() == [0, 2] and got.steps.tolist() == [1, 2]
    assert {k: v.tolist() for k, v in got.values.items()} == {"loss": [2.25, 1000.5],
                                                              "step_time_s": [893.5 / 1000, 0.007]}
    got = columns._native_read(_Twin(), shape, Block.of(data), np.array([True, True, False]))
    assert got is not None and got.lines.tolist() == [0] and got.values["step_time_s"].tolist() == [0.8935]
    empty = columns._native_read(_Twin(), shape, Block.of(b"noise\n"), None)
    assert empty is not None and (empty.lines.tolist(), empty.steps.tolist(), empty.values) == ([], [], {})
    assert empty.lines.dtype == np.int64 and empty.steps.dtype == np.int64
    assert columns._native_read(_Twin(refuse=True), shape, Block.of(data), None) is None
