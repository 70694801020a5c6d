"""What a team added to receipts after they were sealed (:mod:`ledger.store.annotation`: notes with author and
time, archive flags), as `ledger show` and `ledger compare` print it, as Markdown, and as the web view shows it."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.text import Text

from ledger.report.safe import markdown, terminal, visible
from ledger.store.annotation import Annotation, describe, is_archived


def render_terminal(records: Sequence[Annotation], console: Console, label: str = "") -> None:
    """Each record as one line (``note 2026-12-02 10:31 alice@node17: ran on a degraded node``); a run that is
    archived says so first."""
    if is_archived(records) and not label:
        console.print(Text("archived", style="bold yellow")
                      + Text(" (hidden from `ledger ls` and the web view; `ledger unarchive` shows it again)"))
    for record in records:
        prefix = Text("note ", style="cyan") if record.kind == "note" else Text(f"{record.kind} ", style="yellow")
        console.print(prefix + terminal((f"{label}: " if label else "") + describe(record)), soft_wrap=True)


def render_compare(notes: Mapping[str, Sequence[Annotation]], labels: Mapping[str, str], console: Console) -> None:
    """`ledger compare`: the notes of the runs compared, under a rule, each with its run's label."""
    shown = {rid: records for rid, records in notes.items() if records}
    if not shown:
        return
    console.rule("notes on these runs")
    for rid, records in shown.items():
        render_terminal(records, console, labels.get(rid, rid[:8]))


def render_markdown(notes: Mapping[str, Sequence[Annotation]], labels: Mapping[str, str]) -> str:
    """`ledger compare --markdown`: a section listing the notes of the runs compared ('' when none)."""
    items = [f"- **{markdown(labels.get(rid, rid[:8]))}**: {markdown(describe(r))}"
             for rid, records in notes.items() for r in records]
    return "### Notes on these runs\n\n" + "\n".join(items) + "\n" if items else ""


def render_html(records: Sequence[Annotation]) -> str:
    """The web view: a list of the records (escaped), the archive state first ('' when none)."""
    if not records:
        return ""
    items = "".join(f'<li class="{html.escape(r.kind)}">{html.escape(visible(describe(r)))}</li>' for r in records)
    state = '<p class="note archived">archived: hidden from the table unless "show archived"</p>' \
        if is_archived(records) else ""
    return f'<section id="notes"><h2>Notes</h2>{state}<ul>{items}</ul></section>'
