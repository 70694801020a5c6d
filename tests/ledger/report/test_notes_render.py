"""The team's notes as `ledger show` and `ledger compare` print them, as Markdown and as the web view shows them
(ledger/report/notes.py), in process: every line written out by hand from the records, colours read as ANSI codes,
user text with markup, control characters and HTML shown as text."""

from __future__ import annotations

import io

from rich.console import Console

from ledger.report import notes
from ledger.store.annotation import Annotation

A = "ab" + "0" * 62
B = "cd" + "1" * 62


def _rec(kind: str, text: str, at: str = "2026-12-02T10:31:00.000000+00:00", rid: str = A,
         author: str = "alice@node17") -> Annotation:
    return Annotation(rid, kind, text, author, at)  # type: ignore[arg-type]


def _console(width: int = 60, colour: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=colour, color_system="standard" if colour else None,
                   emoji=False, highlight=False), out


def test_show_prints_one_line_per_record_and_says_archived_first() -> None:
    console, out = _console(width=100)
    records = [_rec("note", "ran on a degraded node"), _rec("archive", "mistyped", "2026-12-02T11:00:00+00:00")]
    notes.render_terminal(records, console)
    assert out.getvalue().splitlines() == [
        "archived (hidden from `ledger ls` and the web view; `ledger unarchive` shows it again)",
        "note 2026-12-02 10:31 alice@node17: ran on a degraded node",
        "archive 2026-12-02 11:00 alice@node17: archived (mistyped)"]
    console, out = _console()
    notes.render_terminal([*records, _rec("unarchive", "", "2026-12-02T12:00:00+00:00")], console)
    assert out.getvalue().splitlines()[0] == "note 2026-12-02 10:31 alice@node17: ran on a degraded node"
    assert out.getvalue().splitlines()[-1] == "unarchive 2026-12-02 12:00 alice@node17: unarchived"
    console, out = _console()
    notes.render_terminal([], console)
    assert out.getvalue() == ""


def test_colours_of_the_kinds_and_the_archived_banner() -> None:
    console, out = _console(width=100, colour=True)
    notes.render_terminal([_rec("note", "n"), _rec("archive", "", "2026-12-02T11:00:00+00:00")], console)
    assert out.getvalue().splitlines() == [  # each line in its kind's colour (SGR 36 cyan, 33 yellow, 1 bold)
        "\x1b[1;33marchived (hidden from `ledger ls` and the web view; `ledger unarchive` shows it again)\x1b[0m",
        "\x1b[36mnote 2026-12-02 10:31 alice@node17: n\x1b[0m",
        "\x1b[33marchive 2026-12-02 11:00 alice@node17: archived\x1b[0m"]


def test_user_text_is_shown_as_typed_never_as_markup_and_never_wrapped() -> None:
    console, out = _console(width=40)
    text = "[bold]not bold[/bold] \x1b[31m " + "long " * 20
    notes.render_terminal([_rec("note", text, author="[red]x[/red]")], console)
    # one line however narrow the terminal
    assert out.getvalue().rstrip(" \n") == "note 2026-12-02 10:31 [red]x[/red]: [bold]not bold[/bold] \\x1b[31m " \
        + ("long " * 20).rstrip()
    assert out.getvalue().count("\n") == 1


def test_compare_prints_each_runs_notes_under_its_label_or_its_short_id() -> None:
    console, out = _console(width=50)
    notes.render_compare({A: [_rec("note", "slow node")], B: [_rec("note", "fine", rid=B)], "e" * 64: []},
                         {A: "base"}, console)
    lines = out.getvalue().splitlines()
    assert lines[0].strip("─") == " notes on these runs " and len(lines[0]) == 50  # a rule across the terminal
    assert lines[1:] == ["note base: 2026-12-02 10:31 alice@node17: slow node",
                         f"note {B[:8]}: 2026-12-02 10:31 alice@node17: fine"]
    console, out = _console()
    notes.render_terminal([_rec("archive", "")], console, "base")  # a labelled run: no banner
    assert out.getvalue() == "archive base: 2026-12-02 10:31 alice@node17: archived\n"


def test_compare_without_notes_prints_nothing() -> None:
    console, out = _console()
    notes.render_compare({A: [], B: []}, {A: "a", B: "b"}, console)
    notes.render_compare({}, {}, console)
    assert out.getvalue() == ""


def test_markdown_lists_every_record_escaped() -> None:
    text = notes.render_markdown({A: [_rec("note", "lr *too* high"), _rec("archive", "", rid=A)],
                                  B: [_rec("note", "ok", rid=B)]}, {A: "base_1"})
    assert text == ("### Notes on these runs\n\n"
                    "- **base\\_1**: 2026-12-02 10:31 alice@node17: lr \\*too\\* high\n"
                    "- **base\\_1**: 2026-12-02 10:31 alice@node17: archived\n"
                    f"- **{B[:8]}**: 2026-12-02 10:31 alice@node17: ok\n")
    assert notes.render_markdown({A: []}, {A: "base"}) == ""
    assert notes.render_markdown({}, {}) == ""


def test_html_lists_the_records_escaped_with_the_archive_state_first() -> None:
    html = notes.render_html([_rec("note", "<script>alert(1)</script> & \x1b[2J"),
                              _rec("archive", "typo", "2026-12-02T11:00:00+00:00")])
    assert html == ('<section id="notes"><h2>Notes</h2>'
                    '<p class="note archived">archived: hidden from the table unless "show archived"</p><ul>'
                    '<li class="note">2026-12-02 10:31 alice@node17: &lt;script&gt;alert(1)&lt;/script&gt; &amp; '
                    '\\x1b[2J</li>'
                    '<li class="archive">2026-12-02 11:00 alice@node17: archived (typo)</li></ul></section>')
    plain = notes.render_html([_rec("note", 'say "hi"')])
    assert plain == ('<section id="notes"><h2>Notes</h2><ul><li class="note">2026-12-02 10:31 alice@node17: '
                     "say &quot;hi&quot;</li></ul></section>")
    assert notes.render_html([]) == ""
