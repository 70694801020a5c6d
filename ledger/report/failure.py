"""Why a run failed (:class:`schemas.Failure`: the exception line and the traceback's last lines, redacted), for
every place that shows a failed run: `ledger show` (terminal) and the web view's receipt page (HTML). One place
decides what is said, so the two never differ: :func:`lines` gives the text, the renderers only escape it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ledger.report.safe import terminal, visible

if TYPE_CHECKING:
    from schemas import Receipt

TITLE = "why it failed"


def heading(r: Receipt) -> str | None:
    """One line about how the run ended badly (None for a run that succeeded or was imported without a
    failure): the exception when the output held one, else the exit code or signal."""
    f = r.failure
    if r.status in ("succeeded", "imported") and f is None:
        return None
    how = f"exit code {r.exit_code}" if r.exit_code is not None else "no exit code"
    if r.signal:
        how += f", {r.signal}"
    if f is not None and f.exception:
        return f"{r.status}: {f.exception} ({how})"
    return f"{r.status} ({how})"


def lines(r: Receipt) -> list[str]:
    """The lines to show under the heading: the traceback's (or the output's) last lines, then where they come
    from; a sentence saying so when the receipt holds none."""
    f = r.failure
    if f is None or not f.lines:
        return ["the receipt holds no error output (the run printed none, or was recorded before receipts kept it)"]
    where = f"from {f.log or 'output.log'}" + (f", line {f.first_line}" if f.first_line else "")
    return [*f.lines, f"({where})"]


def render_terminal(r: Receipt, console: Console) -> None:
    """`ledger show`: the heading in red, the lines dim; nothing for a run that did not fail."""
    head = heading(r)
    if head is None:
        return
    console.print(Text(f"{TITLE}: ", style="bold red") + terminal(head))
    body = lines(r)
    for line in body[:-1]:
        console.print(Text("  ") + terminal(line, style="dim"), soft_wrap=True)
    console.print(Text("  ") + terminal(body[-1], style="dim italic"), soft_wrap=True)


def render_html(r: Receipt) -> str:
    """The web view's receipt page: a section with the heading and the lines in a ``<pre>`` (escaped); empty
    for a run that did not fail."""
    import html

    head = heading(r)
    if head is None:
        return ""
    body = "\n".join(visible(line) for line in lines(r))
    return (f'<section id="failure" class="failure"><h2>{html.escape(TITLE)}</h2>'
            f'<p class="error">{html.escape(visible(head))}</p><pre>{html.escape(body)}</pre></section>')
