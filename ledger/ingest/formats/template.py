"""Fast path of line capture: once a format has read a line, the line's own shape becomes a regular
expression (its numbers captured, the rest literal), so the lines of the same shape that follow are read
by one ``fullmatch`` and a few ``float`` calls instead of the format's parser.

A template is built only when every value the format took from the line is one of the line's numbers
(as printed, or scaled by a unit the formats use: ms to s, GiB/GB to bytes; a number with a decimal multiplier
glued to it, ``43.2K``, by that multiplier, or that multiplier over 1000 for milliseconds) and the step too (or the
format numbers its lines); otherwise that shape keeps the format's parser. A template is checked against the
format's parser on its first :data:`CHECK_FIRST` lines, on every :data:`CHECK_EVERY`-th line up to its
:data:`CHECK_DENSE`-th and on every :data:`CHECK_SPARSE`-th after (:func:`checked`): one disagreement drops it
for good (that line keeps the parser's reading).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ledger.ingest.formats.base import RANK, SUFFIXES, Format, Parsed, labelled, scaled
from ledger.ingest.formats.columns import NUM, Shape, prepare

CHECK_FIRST = 8
CHECK_EVERY = 64
CHECK_DENSE = 4096
CHECK_SPARSE = 1024
MAX_TEMPLATES = 8
LEARN_TRIES = 16
LEARN_EVERY = 1024
"""A format whose last :data:`LEARN_TRIES` lines in a row gave no template (values that are not the line's numbers
as printed) is then tried on every :data:`LEARN_EVERY`-th line only, until one gives a template: building one is
the costliest thing done to a line (every number against every value), and a shape that gave none will mostly
give none again."""
_NUM = NUM
"""A number as a template captures it. Unambiguous: digits after a point only (``\\d[\\d,]*\\.?\\d*`` reads the same
numbers, but ``2026`` in as many ways as it has digits, and a line of another shape then made ``fullmatch`` try
every combination of every number's ways: a template of an open-instruct line, its nine numbers, took
195 us to refuse a line that has a tenth; it takes 2.8 us)."""
_TOKEN = re.compile(r"(?<![\w.])(?:(?>[-+]?(?:\d(?:[\d,]*\d)?(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(?!\.?\d)"
                    r"|(?:nan|inf)(?!\w))")
"""A number of a line, whole: not glued to a word or a point before it; a unit may follow (``10.52GiB``,
``893.76ms``: the template keeps the unit as text and the scale reads it), never more digits, nor a point and a
digit (the match is atomic: no shorter reading of ``893.76ms`` or ``1.2.3``); a full stop may end it (``loss
2.5.``). Commas only between digits (``1,234``): the comma after ``Step: 10,`` is the text's, where the columns'
runs of number characters cut the line too."""
_SCALES = (1.0, 1e-3, float(2**30), 1e9)
"""Scales a number of a line may be read at (as printed, ms to s, GiB and GB to bytes)."""


def _scales(line: str, end: int) -> tuple[float, ...]:
    """The scales of the number ending at ``end`` in ``line``: :data:`_SCALES`, or, when a multiplier of
    :data:`.base.SUFFIXES` is glued to it and ends the word (``43.2K |``, not ``1.41GiB``), that multiplier as the
    parsers apply it (:func:`.base.number`: ``x * 1000``; a millisecond field: ``x * (1000 * 1e-3)``)."""
    scale = SUFFIXES.get(line[end:end + 1])
    if scale is None or line[end + 1:end + 2].isalnum():
        return _SCALES
    return scale, scale * 1e-3


@dataclass
class Template:
    """One line shape of one format."""

    format: str
    regex: re.Pattern[str]
    step_group: int | None
    metrics: list[tuple[str, int, float]]
    """(name, group, scale)."""
    pieces: tuple[str, ...] = ()
    """The literal text around the numbers of the line it was built from (one more than the numbers)."""
    source: str = ""
    """The line it was built from."""
    spans: tuple[tuple[int, int], ...] = ()
    """Where the numbers are in that line."""
    constants: tuple[tuple[str, float], ...] = ()
    """Values every line of the shape gives without a number of its own: the rank a launcher's prefix names
    where its digits are part of the literal text (``[rank3]:``; each rank's lines then have a template)."""
    uses: int = 0
    dead: bool = False
    failures: int = 0
    """Blocks it could not read as columns."""
    _block: re.Pattern[str] | None = None
    _shape: Shape | None | bool = False

    def block(self) -> re.Pattern[str]:
        """The template as a pattern over a block of lines (one match per whole line)."""
        if self._block is None:
            self._block = re.compile(f"^(?:{self.regex.pattern})$", re.M)
        return self._block

    def shape(self) -> Shape | None:
        """The template prepared for reading whole blocks as columns (:mod:`.columns`); None when its line
        cannot be cut that way (then :meth:`read_block` reads its lines)."""
        if self._shape is False:
            self._shape = prepare(self.source, self.pieces, self.spans, self.step_group, self.metrics)
        return self._shape if isinstance(self._shape, Shape) else None

    def no_columns(self) -> None:
        """Read this template's blocks by its pattern from now on (a block it could not cut into columns)."""
        self._shape = None

    def read_block(self, text: str, verify: Format) -> tuple[str, list[tuple[int, Parsed]]]:
        """Read every line of ``text`` of this shape; returns the text with those lines emptied (their line
        ends kept) and the readings with their line index in the block, in order. A line on which the parser
        disagrees kills the template and is left in the text for the parser."""
        step_group = self.step_group
        assert step_group is not None
        metrics_of = self.metrics
        found: list[tuple[int, Parsed]] = []
        keep: list[tuple[int, int]] = []
        index, counted = 0, 0
        count = text.count
        for m in self.block().finditer(text):
            groups = m.groups()
            self.uses += 1
            try:
                step = _step(groups[step_group])
                metrics = {name: scaled(_float(groups[g]), scale) for name, g, scale in metrics_of}
            except ValueError:
                continue
            metrics.update(self.constants)
            parsed = Parsed(step=step, metrics=metrics)
            if checked(self.uses) and not agrees(parsed, verify(m.group())):
                self.dead = True
                break
            start = m.start()
            index += count("\n", counted, start)
            counted = start
            found.append((index, parsed))
            keep.append(m.span())
        if not keep:
            return text, found
        parts = []
        pos = 0
        for a, b in keep:
            parts.append(text[pos:a])
            pos = b
        parts.append(text[pos:])
        return "".join(parts), found

    def read(self, line: str) -> Parsed | None:
        """The template's reading of one line; None when the line has another shape."""
        m = self.regex.fullmatch(line)
        if m is None:
            return None
        groups = m.groups()
        try:
            step = None if self.step_group is None else _step(groups[self.step_group])
            metrics = {name: scaled(_float(groups[g]), scale) for name, g, scale in self.metrics}
        except ValueError:
            return None
        metrics.update(self.constants)
        return Parsed(step=step, metrics=metrics, ordinal=self.step_group is None)


def checked(use: int) -> bool:
    """Whether a template's ``use``-th line (counted from 1) is checked against the parser."""
    return use % (CHECK_EVERY if use <= CHECK_DENSE else CHECK_SPARSE) == 0


def checks(uses: int, n: int) -> list[int]:
    """Which of the next ``n`` lines (0-based) of a template that read ``uses`` lines so far are checked."""
    dense = [j for j in range(CHECK_EVERY - 1 - uses % CHECK_EVERY, min(n, CHECK_DENSE - uses), CHECK_EVERY)]
    start = max(uses, CHECK_DENSE)
    return dense + list(range(start - uses + CHECK_SPARSE - 1 - start % CHECK_SPARSE, n, CHECK_SPARSE))


def _step(text: str) -> int:
    """A step number as the parsers read one: digits (thousands separated by commas or not), no sign, no point;
    ValueError otherwise (``step -1`` is no step)."""
    digits = text.replace(",", "")
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not a step number: {text!r}")
    return int(digits)


def _float(text: str) -> float:
    return float(text.replace(",", "")) if "," in text else float(text)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or (a != 0 and abs(a - b) <= 1e-12 * abs(a))


def build(name: str, line: str, parsed: Parsed) -> Template | None:
    """A template of ``line``, which ``name``'s parser read as ``parsed``; None when the line's values do
    not all come from its numbers."""
    if parsed.evals or not parsed.metrics:
        return None
    tokens = list(_TOKEN.finditer(line))
    if not tokens or len(tokens) > 40:
        return None
    values: list[float] = []
    for t in tokens:
        try:
            values.append(_float(t.group()))
        except ValueError:
            values.append(math.nan)
    # Each value must come from exactly one number of the line: in `10:00:00,332 step 332` the step could be
    # either 332, and a template that took the first would read the milliseconds as the step on every later
    # line. Such a line teaches nothing; a later line where the values differ does.
    used: set[int] = set()
    step_group = None
    if parsed.step is not None:
        steps = [i for i, t in enumerate(tokens) if t.group().replace(",", "").isdigit()
                 and int(t.group().replace(",", "")) == parsed.step]
        if len(steps) != 1:
            return None
        step_group = steps[0]
        used.add(step_group)
    metrics: list[tuple[str, int, float]] = []
    constants: tuple[tuple[str, float], ...] = ()
    rank = parsed.metrics.get(RANK)
    if rank is not None:  # the number of the launcher's prefix, else a constant of the literal prefix
        from ledger.ingest.common import rank_prefix_end

        end = rank_prefix_end(line)
        found_rank = [i for i, t in enumerate(tokens) if t.end() <= end and i not in used and values[i] == rank]
        if len(found_rank) == 1:
            used.add(found_rank[0])
            metrics.append((RANK, found_rank[0], 1.0))
        elif not any(t.end() <= end for t in tokens):
            constants = ((RANK, rank),)
        else:
            return None
    scales = [_scales(line, t.end()) for t in tokens]
    for key, value in parsed.metrics.items():
        if key == RANK:
            continue
        found = [(i, s) for i, v in enumerate(values) if i not in used for s in scales[i] if _same(scaled(v, s), value)]
        if len({i for i, _ in found}) != 1:
            return None
        used.add(found[0][0])
        metrics.append((key, found[0][0], found[0][1]))
    parts: list[str] = []
    pieces: list[str] = []
    pos = 0
    for t in tokens:
        pieces.append(line[pos:t.start()])
        parts.append(_literal(pieces[-1]))
        parts.append(f"({_NUM})")
        pos = t.end()
    pieces.append(line[pos:])
    parts.append(_literal(pieces[-1]))
    try:
        regex = re.compile("".join(parts))
    except re.error:
        return None
    return Template(name, regex, step_group, metrics, tuple(pieces), line, tuple(t.span() for t in tokens),
                    constants)


def _literal(text: str) -> str:
    """Literal text, runs of spaces matching any run of one or more spaces (aligned columns change width; a
    number glued to its name, ``loss2.5``, is another shape, which the format's parser reads)."""
    return "".join(r" +" if chunk.isspace() else re.escape(chunk) for chunk in re.split(r"( +)", text) if chunk)


def agrees(a: Parsed, b: Parsed | None) -> bool:
    """The template's reading equals the parser's."""
    if b is None or a.step != b.step or set(a.metrics) != set(b.metrics):
        return False
    return all(_same(a.metrics[k], b.metrics[k]) for k in a.metrics)


class Templates:
    """The templates of one capture, tried before the parsers."""

    def __init__(self, formats: dict[str, Format], enabled: bool = True) -> None:
        self.formats = formats
        self.items: list[Template] = []
        self.enabled = enabled
        self.misses: dict[str, int] = {}
        """Per format: lines in a row that gave no template (:data:`LEARN_TRIES`)."""

    def read(self, line: str) -> tuple[str, Parsed] | None:
        for t in self.items:
            if t.dead:
                continue
            parsed = t.read(line)
            if parsed is None:
                continue
            t.uses += 1
            if t.uses <= CHECK_FIRST or checked(t.uses):
                slow = self.parse(t.format, line)
                if not agrees(parsed, slow):
                    t.dead = True
                    return None
            return t.format, parsed
        return None

    def parse(self, name: str, line: str) -> Parsed | None:
        """What the format's parser reads in the line (as the capture offers it: rank prefix removed)."""
        from ledger.ingest.common import strip_rank

        rank, text = strip_rank(line)
        parsed = self.formats[name](text)
        return None if parsed is None else labelled(parsed, rank)

    def for_blocks(self) -> list[Template]:
        """The checked templates with step numbers, most used first, to read whole blocks with."""
        ready = [t for t in self.items if not t.dead and t.step_group is not None and t.uses >= CHECK_FIRST]
        return sorted(ready, key=lambda t: t.uses, reverse=True)

    def learn(self, name: str, line: str, parsed: Parsed) -> None:
        if not self.enabled or sum(not t.dead for t in self.items) >= MAX_TEMPLATES:
            return
        missed = self.misses.get(name, 0)
        self.misses[name] = missed + 1
        if missed >= LEARN_TRIES and (missed - LEARN_TRIES) % LEARN_EVERY:
            return
        template = build(name, line, parsed)
        if template is not None:
            self.items.append(template)
            self.misses[name] = 0


__all__ = ["Template", "Templates", "agrees", "build", "checked", "checks"]
