"""Reading every line of one shape in a block at once, as columns: the fast path of line capture.

A template (:mod:`.template`) knows a line shape: literal pieces around numbers, and which numbers are the
step and the metrics. A block of complete lines is read with no Python object per line:

1. the lines: newline positions by numpy; the lines an Arrow binary array over the block's own bytes;
2. one RE2 match per line (Arrow's ``match_substring_regex``, anchored: the whole line must have the shape;
   a DFA, no captures);
3. the matched lines cut at runs of number characters (:func:`runs`: numpy comparisons, ``diff``,
   ``flatnonzero``); a line of the shape has as many runs as the line the template was built from, and the
   step and metrics are the runs at the same places; those runs are gathered into one Arrow string array
   and parsed by Arrow's cast;
4. a line whose runs do not come out as that count (``nan`` in a number's place, a number glued to a piece
   where the template had a space) is not read here: it stays in the block for the formats' parsers.

:func:`prepare` refuses a shape where a number that is read could be glued to the text around it (a piece
ending in a digit, ``.``, ``+`` or ``-`` before it); such a shape is read line by line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ledger import _native
from ledger.ingest.formats.base import scaled

NUM = r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
"""A number as the templates capture it (the language of :data:`.template._NUM`, written so that RE2 reads
it in one pass)."""
_EDGE_CHARS = frozenset(".+-")
_NL = 10
_COMMA = 44


@dataclass(frozen=True)
class Shape:
    """A template prepared for columnar reading."""

    pattern: str
    """RE2 over one line with its newline: the whole line has the template's shape."""
    count: int
    """Runs of number characters in such a line (:func:`runs`)."""
    step: int
    """Index of the step among those runs."""
    metrics: tuple[tuple[str, int, float], ...]
    """(name, index among the runs, scale)."""
    tokens: tuple[int, tuple[tuple[int, int, int], ...]] | None = None
    """When the line cut at single spaces puts each number that is read inside a word of its own, around it only
    the template's literal text (``step 5 | loss 2.3``, ``train.py:212]``): the line's word count and, for the
    step then each metric (in :attr:`metrics`' order), its word and the characters of literal text before and
    after it in that word. Such lines are read as space-separated values (:func:`_words`); None otherwise."""
    pieces: tuple[bytes, ...] = ()
    """The template's literal pieces as UTF-8 (one more than its numbers), for the compiled reader
    (:func:`_native_read`)."""


def _literal(text: str) -> str:
    """``text`` as RE2 literal text, runs of spaces matching any run of one or more spaces (as the templates
    do)."""
    out: list[str] = []
    for ch in text:
        if ch == " ":
            if not out or out[-1] != " +":
                out.append(" +")
        elif ch.isascii() and not ch.isalnum():
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _apart(before: str, after: str) -> bool:
    """Whether the literal pieces around a number that is read keep it apart from them when the line is cut
    at runs of number characters: the piece before does not end with a digit, ``.``, ``+`` or ``-`` (``lr.5``
    would be 0.5), the piece after does not start with a digit. (Other characters that could join it, ``5-``,
    make runs that are either not numbers or not the count of numbers of the line, and such lines go to the
    parsers.)"""
    end = before[-1:]
    start = after[:1]
    return not ((end and (end.isdigit() or end in _EDGE_CHARS)) or (start and start.isdigit()))


def prepare(source: str, pieces: tuple[str, ...], spans: tuple[tuple[int, int], ...], step_group: int | None,
            metrics: list[tuple[str, int, float]]) -> Shape | None:
    """The columnar form of a template: the line it was built from, its literal ``pieces`` and the ``spans``
    of its numbers in that line, its step's and metrics' number indexes. None when its lines must be read
    one by one (a number that is read could not be cut apart from the text around it)."""
    if step_group is None or len(pieces) != len(spans) + 1 or "\ufffd" in source or "\n" in source:
        return None
    used = [step_group] + [g for _, g, _ in metrics]
    for g in used:
        if not _apart(pieces[g], pieces[g + 1]) or (g and not pieces[g]) or (g + 1 < len(spans) and not pieces[g + 1]):
            return None
    data = np.frombuffer((source + "\n").encode(), np.uint8)
    where: dict[tuple[int, int], int] = {}
    text = source.encode()
    for i, (a, b) in enumerate(zip(*runs(data), strict=True)):
        where[(len(text[:a].decode(errors="replace")), len(text[:b].decode(errors="replace")))] = i
    found = [where.get(spans[g]) for g in used]
    index = [i for i in found if i is not None]
    if len(index) != len(found):
        return None
    body = _literal(pieces[0]) + "".join(f"(?:{NUM})" + _literal(p) for p in pieces[1:])
    return Shape(f"^{body}\\n$", len(where), index[0],
                 tuple((name, i, scale) for (name, _, scale), i in zip(metrics, index[1:], strict=True)),
                 _word_places(source, spans, used), tuple(p.encode("utf-8", "surrogatepass") for p in pieces))


def _word_places(source: str, spans: tuple[tuple[int, int], ...], used: list[int]
                 ) -> tuple[int, tuple[tuple[int, int, int], ...]] | None:
    """:attr:`Shape.tokens` of the template built from ``source`` (its numbers at ``spans``, those read at
    ``used``); None when a number read shares its word with another number, or a character would upset a reader
    of delimited values."""
    if any(ch in source for ch in "\t\r\"'"):
        return None
    words = source.split(" ")
    bounds: list[tuple[int, int]] = []
    pos = 0
    for text in words:
        bounds.append((pos, pos + len(text)))
        pos += len(text) + 1
    places: list[tuple[int, int, int]] = []
    for g in used:
        a, b = spans[g]
        word = next((i for i, (ws, we) in enumerate(bounds) if ws <= a and b <= we), None)
        if word is None:
            return None
        ws, we = bounds[word]
        if (g and spans[g - 1][1] > ws) or (g + 1 < len(spans) and spans[g + 1][0] < we):
            return None  # another number in the same word: its width varies
        places.append((word, a - ws, we - b))
    return len(words), tuple(places)


@dataclass
class Block:
    """A block of complete lines (each ending with a newline) as the readers share it: where each line starts,
    and the lines as an Arrow binary array over the block's own bytes (no copy)."""

    data: bytes
    offsets: npt.NDArray[np.int64]
    """Where each line starts and, last, the block's length."""
    lines: Any
    """``pyarrow.LargeBinaryArray`` of the lines, newlines included."""

    @classmethod
    def of(cls, data: bytes) -> Block:
        import pyarrow as pa

        ends = line_ends(data)
        offsets = np.empty(len(ends) + 1, np.int64)
        offsets[0] = 0
        offsets[1:] = ends + 1
        lines = pa.Array.from_buffers(pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return cls(data, offsets, lines)

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    def line(self, i: int) -> bytes:
        """Line ``i`` without its newline."""
        return self.data[int(self.offsets[i]):int(self.offsets[i + 1]) - 1]

    def mark_read(self, unread: npt.NDArray[np.bool_] | None, read: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """``unread`` (None: every line) without the lines at ``read``."""
        out = np.ones(self.count, bool) if unread is None else unread
        out[read] = False
        return out

    def left(self, unread: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.int64]:
        """Indexes of the unread lines."""
        return np.arange(self.count) if unread is None else np.flatnonzero(unread)

    def hinted(self, pattern: str, unread: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.int64]:
        """Indexes of the unread lines in which RE2 ``pattern`` matches (one pass over those lines, in C++)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        index = self.left(unread)
        if not len(index):
            return index
        lines = self.lines if unread is None else self.lines.filter(pa.array(unread))
        found = pc.match_substring_regex(lines, pattern).to_numpy(zero_copy_only=False)
        hit: npt.NDArray[np.int64] = index[found]
        return hit

    def emptied(self, unread: npt.NDArray[np.bool_] | None) -> bytes:
        """The block with the lines already read emptied (their newlines kept, so line numbers still count)."""
        if unread is None:
            return self.data
        return _empty_lines(self.data, self.offsets, np.flatnonzero(~unread))


@dataclass
class Read:
    """What :func:`read` found in a block."""

    lines: npt.NDArray[np.int64]
    """Index (0-based, in the block) of each line read."""
    steps: npt.NDArray[np.int64]
    values: dict[str, npt.NDArray[np.float64]]
    """Each metric's values, aligned with ``lines``."""

    def head(self, n: int) -> Read:
        """Only the first ``n`` lines read."""
        return Read(self.lines[:n], self.steps[:n], {k: v[:n] for k, v in self.values.items()})


def line_ends(data: bytes) -> npt.NDArray[np.int64]:
    """Positions of the newlines of ``data``."""
    return np.flatnonzero(np.frombuffer(data, np.uint8) == _NL)


def read(shape: Shape, block: Block, unread: npt.NDArray[np.bool_] | None = None, *,
         ahead: bool = False) -> Read | None:
    """Read the lines of ``block`` (only the ``unread`` ones when given) that have ``shape``. None when a number
    of such a line does not parse (the caller then reads the block line by line).

    ``ahead``: the whole block is likely of this shape (the last one was): its values are read in another
    thread while the pattern is matched (Arrow leaves the interpreter lock), and kept when every line matched
    (the same call on the same bytes as after the match); otherwise dropped."""
    import pyarrow as pa
    import pyarrow.compute as pc

    compiled = _native.columns()
    if compiled is not None and shape.pieces:
        fast = _native_read(compiled, shape, block, unread)
        if fast is not None:
            return fast
    whole = np.frombuffer(block.data, np.uint8)
    early = _Early(whole, shape) if ahead and unread is None and shape.tokens is not None else None
    nothing = Read(np.empty(0, np.int64), np.empty(0, np.int64), {})
    try:
        matched = pc.match_substring_regex(block.lines, shape.pattern).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a pattern RE2 refuses
        return None
    finally:
        got = early.result() if early is not None else None
    if unread is not None:
        matched &= unread
    index = np.flatnonzero(matched)
    if not len(index):
        return nothing
    if len(index) == block.count:
        text = whole
    else:  # the matched lines' bytes, gathered by Arrow
        got = None
        chosen = block.lines.filter(pa.array(matched))
        offsets = np.frombuffer(chosen.buffers()[1], np.int64, len(chosen) + 1, chosen.offset * 8)
        text = np.frombuffer(chosen.buffers()[2], np.uint8, int(offsets[-1] - offsets[0]), int(offsets[0]))
    if got is None and shape.tokens is not None:
        got = _words(text, shape)
    if got is None:
        got = _numbers(text, len(index), shape)
    if got is None:
        return None
    good, steps, values = got
    index = index[good]
    if not len(index):
        return nothing
    return Read(index, steps, values)


def _native_read(compiled: Any, shape: Shape, block: Block, unread: npt.NDArray[np.bool_] | None) -> Read | None:
    """:func:`read` by the compiled reader (``ledger/_native/columns.c``: the lines, steps and values of the number
    runs' reading, :func:`_numbers`, in one pass over the block, without the interpreter lock); None when it cannot
    tell (the Python reader then decides: a step past int64, a line that is hard to match). Where the reading of
    whole words (:func:`_words`) would also read a line with ``nan`` or ``inf`` in a number's place, it leaves it
    to the formats' parsers, which read it the same."""
    count = block.count
    metrics = tuple(i for _, i, _ in shape.metrics)
    lines = np.empty(count, np.int64)
    steps = np.empty(count, np.int64)
    matrix = np.empty((count, len(metrics)), np.float64)
    mask = None if unread is None else np.ascontiguousarray(unread, np.bool_).view(np.uint8)
    n = compiled.read_shape(block.data, mask, shape.pieces, shape.count, shape.step, metrics, lines, steps, matrix)
    if n < 0:
        return None
    if n == 0:
        return Read(np.empty(0, np.int64), np.empty(0, np.int64), {})
    values = {name: scaled(matrix[:n, i], scale)
              for i, (name, _, scale) in enumerate(shape.metrics)}
    return Read(lines[:n], steps[:n], values)


class _Early:
    """:func:`_words` of a whole block, in a thread of its own."""

    def __init__(self, text: npt.NDArray[np.uint8], shape: Shape) -> None:
        import threading

        self.text, self.shape = text, shape
        self.got: Any = None
        self.thread = threading.Thread(target=self._run, name="ledger-columns", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.got = _words(self.text, self.shape)
        except Exception:  # read again after the match, in the caller's thread
            self.got = None

    def result(self) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], dict[str, npt.NDArray[np.float64]]] | None:
        self.thread.join()
        got: tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], dict[str, npt.NDArray[np.float64]]] | None = self.got
        return got


def runs(text: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Where the numbers of ``text`` (ending with a newline) are: runs of digits, ``.``, ``+``, ``-``, an
    ``e``/``E`` between a digit (or point) and a digit (or signed digit), a comma between two digits; only
    runs with a digit in their first three characters (``-.5``) count (a lone dot or dash is no number)."""
    size = len(text)
    isdigit = (text - np.uint8(48)) < 10  # byte arithmetic wraps: one vector pass per test, no lookup table
    isnum = isdigit | (text == 46)
    isnum |= text == 43
    isnum |= text == 45
    exp = np.flatnonzero((text | np.uint8(32)) == 101)  # e or E
    exp = exp[(exp > 0) & (exp < size - 2)]  # a newline always ends the text: + 2 is inside
    if len(exp):
        after = text[exp + 1]
        isnum[exp[(isdigit[exp - 1] | (text[exp - 1] == 46))
                  & (isdigit[exp + 1] | (((after == 43) | (after == 45)) & isdigit[exp + 2]))]] = True
    comma = np.flatnonzero(text == _COMMA)
    comma = comma[(comma > 0) & (comma < size - 1)]
    if len(comma):
        isnum[comma[isdigit[comma - 1] & isdigit[comma + 1]]] = True
    edges = np.diff(isnum.view(np.int8))  # the text ends with a newline: its last character is no number
    starts = np.flatnonzero(edges == 1) + 1
    stops = np.flatnonzero(edges == -1) + 1
    if isnum[0]:
        starts = np.concatenate(([0], starts))
    width = stops - starts
    has = isdigit[starts] | ((width > 1) & isdigit[np.minimum(starts + 1, size - 1)])
    has |= (width > 2) & isdigit[np.minimum(starts + 2, size - 1)]
    return starts[has], stops[has]


def _numbers(text: npt.NDArray[np.uint8], lines: int, shape: Shape) -> tuple[
        npt.NDArray[np.bool_], npt.NDArray[np.int64], dict[str, npt.NDArray[np.float64]]] | None:
    """The step and metrics of each of the ``lines`` lines of ``text`` (each ending with a newline), cut at
    runs of number characters that hold a digit; returns which lines gave exactly the shape's count of
    numbers, and their values. None when a number does not parse."""
    import pyarrow as pa
    import pyarrow.compute as pc

    starts, stops = runs(text)
    line_starts = np.zeros(lines, np.int64)
    line_starts[1:] = np.flatnonzero(text == _NL)[:-1] + 1
    per_line = np.diff(np.searchsorted(starts, line_starts), append=len(starts))
    k = shape.count
    good = per_line == k
    if not good.all():
        keep = np.repeat(good, per_line)
        starts, stops = starts[keep], stops[keep]
    if not len(starts):
        return good, np.empty(0, np.int64), {}
    starts, stops = starts.reshape(-1, k), stops.reshape(-1, k)
    used = [g for _, g, _ in shape.metrics]
    try:
        step_text = _strings(text, starts[:, shape.step], stops[:, shape.step])
        integral = pc.ascii_is_decimal(step_text).to_numpy(zero_copy_only=False)  # 1.5 or 1e3: the parsers'
        if not integral.all():
            good[np.flatnonzero(good)[~integral]] = False
            starts, stops, step_text = starts[integral], stops[integral], step_text.filter(pa.array(integral))
            if not len(starts):
                return good, np.empty(0, np.int64), {}
        steps = pc.cast(step_text, pa.int64()).to_numpy(zero_copy_only=False)
        numbers = pc.cast(_strings(text, starts[:, used].ravel(), stops[:, used].ravel()), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    matrix = numbers.to_numpy(zero_copy_only=False).reshape(-1, len(used))
    values = {name: scaled(matrix[:, i], scale)
              for i, (name, _, scale) in enumerate(shape.metrics)}
    return good, steps.astype(np.int64), values


def _words(text: npt.NDArray[np.uint8], shape: Shape) -> tuple[
        npt.NDArray[np.bool_], npt.NDArray[np.int64], dict[str, npt.NDArray[np.float64]]] | None:
    """The step and metrics of lines of a shape whose numbers are whole words (:attr:`Shape.tokens`), read as
    space-separated values by Arrow's CSV reader (one pass in C++, numbers converted as read). None when a
    line does not cut into the shape's word count (runs of spaces where the template has one) or a number
    does not convert as the column's type (``1,024``, a step ``1.5``): the caller then cuts at number runs."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as csv

    assert shape.tokens is not None
    count, places = shape.tokens
    whole = {word for word, before, after in places if not before and not after}
    types = {f"w{word}": pa.string() for word, _, _ in places}
    types.update({f"w{word}": pa.float64() for word in whole})
    types[f"w{places[0][0]}"] = pa.string()  # the step: digits only (`-0`, `+5` are no step), checked below
    try:
        table = csv.read_csv(
            pa.BufferReader(pa.py_buffer(text)),
            read_options=csv.ReadOptions(column_names=[f"w{i}" for i in range(count)], use_threads=False,
                                         block_size=max(len(text) + 1, 1 << 20)),
            parse_options=csv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False,
                                           escape_char=False, newlines_in_values=False),
            convert_options=csv.ConvertOptions(include_columns=list(types), column_types=types, null_values=[],
                                               strings_can_be_null=False, quoted_strings_can_be_null=False))
        numbers = []
        for i, (word, before, after) in enumerate(places):
            column = table.column(f"w{word}")
            if before or after:  # the literal text around the number in its word is cut off
                column = pc.utf8_slice_codeunits(column, start=before, stop=-after if after else None)
            if i == 0 and not pc.all(pc.ascii_is_decimal(column)).as_py():
                return None  # a signed or fractional step: the runs' reading leaves such lines to the parsers
            numbers.append(pc.cast(column, pa.int64() if i == 0 else pa.float64()).to_numpy())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    values = {name: scaled(column, scale)
              for (name, _, scale), column in zip(shape.metrics, numbers[1:], strict=True)}
    return np.ones(len(numbers[0]), bool), numbers[0].astype(np.int64), values


def _commas(text: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64],
            stops: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
    """Commas in each span (None: no comma in ``text``)."""
    at = np.flatnonzero(text == _COMMA)
    if not len(at):
        return None
    counts: npt.NDArray[np.int64] = np.searchsorted(at, stops) - np.searchsorted(at, starts)
    return counts


def _spans(text: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64],
           stops: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
    """The bytes of the spans ``starts[i]:stops[i]`` (in order, not overlapping: :func:`_strings` sorts them),
    concatenated."""
    gaps = starts - np.concatenate(([0], stops[:-1]))
    sizes = np.empty(2 * len(starts), np.int64)
    sizes[0::2] = gaps
    sizes[1::2] = stops - starts
    inside = np.zeros(2 * len(starts), bool)
    inside[1::2] = True
    chars: npt.NDArray[np.uint8] = text[: stops[-1] if len(stops) else 0][np.repeat(inside, sizes)]
    return chars


def _strings(text: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], stops: npt.NDArray[np.int64]) -> Any:
    """The spans of ``text`` as an Arrow string array, commas removed (``1,024`` is 1024)."""
    import pyarrow as pa

    order = None
    if len(starts) > 1 and (np.diff(starts) < 0).any():
        order = np.argsort(starts, kind="stable")
        starts, stops = starts[order], stops[order]
    lengths = stops - starts
    chars = _spans(text, starts, stops)
    commas = _commas(text, starts, stops)
    if commas is not None:
        lengths = lengths - commas
        chars = chars[chars != _COMMA]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = pa.Array.from_buffers(pa.large_string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(chars)])
    if order is not None:
        out = out.take(pa.array(np.argsort(order, kind="stable")))
    return out


def _empty_lines(data: bytes, offsets: npt.NDArray[np.int64], index: npt.NDArray[np.int64]) -> bytes:
    """``data`` with the lines at ``index`` emptied (their newlines kept)."""
    keep_line = np.ones(len(offsets) - 1, bool)
    keep_line[index] = False
    keep = np.repeat(keep_line, np.diff(offsets))
    keep[offsets[1:] - 1] = True
    return bytes(np.frombuffer(data, np.uint8)[keep].tobytes())


__all__ = ["NUM", "Block", "Read", "Shape", "line_ends", "prepare", "read"]
