"""User text is data: how names, tags, commands, paths and query results are made safe for each place they
are rendered.

* terminal: every control character (C0, DEL, C1: escape sequences, OSC 8 hyperlinks, carriage returns that
  overwrite a line) and every bidirectional override is shown as a visible escape (``\\x1b``), and rich
  markup in the text is escaped (:func:`rich.markup.escape`) or the text is passed as a ``rich.text.Text``;
* Markdown: the same, then Markdown's and HTML's special characters backslash-escaped;
* HTML and SVG: the same, then :func:`html.escape` (XML forbids most control characters).
"""

from __future__ import annotations

import html
import re

from rich.markup import escape
from rich.text import Text

_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~&])")


def visible(text: object, *, newlines: bool = False) -> str:
    """``text`` with control characters shown as escapes (``\\x1b``, ``\\n``); ``newlines``: keep line
    breaks and tabs (multi-line text printed on its own)."""
    s = str(text)

    def show(m: re.Match[str]) -> str:
        ch = m.group(0)
        if newlines and ch in "\n\t":
            return ch
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or (
            f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")

    return _INVISIBLE.sub(show, s)


def terminal(text: object, style: str = "") -> Text:
    """A rich Text (never parsed as markup) of user text, control characters visible."""
    return Text(visible(text), style=style)


def markup(text: object) -> str:
    """User text to embed in a rich markup string."""
    return escape(visible(text))


def markdown(text: object) -> str:
    """User text for a Markdown document (inline, table cells included)."""
    return _MARKDOWN.sub(r"\\\1", visible(text))


def xml(text: object) -> str:
    """User text for HTML or SVG."""
    return html.escape(visible(text), quote=True)
