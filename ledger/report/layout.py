"""Tables that read cleanly at any terminal width: never a word broken inside a cell.

rich shrinks a table that is wider than the terminal by narrowing its columns, and a column narrower than a word
folds the word (``throughp`` / ``ut``, at 80 columns, the default width of piped output). Here a table is laid out
only when every column can hold its longest word (:func:`fitted`): columns of figures keep their width (their
titles wrap between words), the columns of words (a metric's name, a verdict) share what is left and wrap between
words. When even that does not fit, the caller prints each row as a block instead (:func:`block`): its name and
verdict on one line, its figures as ``label value`` items packed into the lines below, an item never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text
GAP = 2
"""Columns between two columns of a table (rich's padding of one on each side; none at the edges)."""
INDENT = 4
"""The indentation of a block's figures."""


@dataclass(frozen=True)
class Column:
    """A column: its title, how it is justified, and whether its cells are words that may wrap."""

    title: str
    justify: str = "right"
    words: bool = False


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def fitted(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int) -> Table | None:
    """A table of these rows within ``width`` columns in which no word is broken, or None when there is none:
    columns of figures as wide as their widest cell (and their title's longest word), columns of words as wide as
    their widest cell where there is room, never narrower than their longest word."""
    n = len(columns)
    texts = [[_plain(r[i]) for r in rows] for i in range(n)]
    natural = [max([_longest_word(c.title)] + [cell_len(t) for t in texts[i]]) for i, c in enumerate(columns)]
    least = [max([_longest_word(c.title)] + [_longest_word(t) for t in texts[i]]) if c.words else natural[i]
             for i, c in enumerate(columns)]
    room = width - GAP * (n - 1)
    if sum(least) > room:
        return None
    widths = list(least)
    spare = room - sum(widths)
    for i in sorted((i for i, c in enumerate(columns) if c.words), key=lambda i: natural[i] - least[i]):
        grow = min(natural[i] - widths[i], spare)  # the column that needs least first: it ends on one line
        widths[i] += grow
        spare -= grow
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, collapse_padding=False)
    for c, w in zip(columns, widths, strict=True):
        table.add_column(c.title, justify=c.justify, width=w, overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        table.add_row(*(c if isinstance(c, Text) else Text(c) for c in r))  # text, never markup: [x0.9, x1.1]
    return table


def block(console: Console, name: Cell, verdict: Cell, items: Sequence[tuple[str, str]]) -> None:
    """One row as a block: ``name`` and ``verdict`` on a line (the verdict on its own line when both do not fit),
    then ``label value`` items packed into lines of the console's width, each item whole where it fits a line."""
    width = console.width
    name_text = name if isinstance(name, Text) else Text(name)
    verdict_text = verdict if isinstance(verdict, Text) else Text(verdict)
    if verdict_text.plain and cell_len(name_text.plain) + GAP + cell_len(verdict_text.plain) <= width:
        line = name_text.copy()
        line.append(" " * (width - cell_len(name_text.plain) - cell_len(verdict_text.plain)))
        console.print(line + verdict_text, no_wrap=True, overflow="ignore")
    else:
        console.print(name_text)
        if verdict_text.plain:
            console.print(Text(" " * INDENT) + verdict_text)
    lines: list[Text] = []
    current: Text | None = None
    for label, value in items:
        item = Text(f"{label} ", style="dim") + Text(value) if label else Text(value)
        if current is not None and cell_len(current.plain) + GAP + cell_len(item.plain) <= width:
            current.append(" " * GAP)
            current.append_text(item)
            continue
        if current is not None:
            lines.append(current)
        current = Text(" " * INDENT) + item
    if current is not None:
        lines.append(current)
    for line in lines:
        console.print(line)

