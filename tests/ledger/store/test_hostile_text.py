"""User text is data: names and tags with rich markup, terminal escape sequences (OSC 8 hyperlinks),
HTML and path characters are stored, usable as refs, and rendered escaped everywhere; the small CLI
contracts of reading (`query --timeout`, strict `--json`, a missing ledger)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from ledger.report import safe

OSC8 = "\x1b]8;;http://evil.example\x1b\\click me\x1b]8;;\x1b\\"
NAME = "[/x] <script>alert(1)</script> a/b 实验 :fire:"


@pytest.mark.parametrize("text", ["[/x]", "[bold]x[/]", OSC8, "a\rb", "\x9b31m", "a\u202eb", "<script>", "x\ny"])
def test_terminal_rendering_shows_controls_and_never_parses_markup(text: str) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    console.print(safe.terminal(text))
    console.print(f"[bold]{safe.markup(text)}[/bold]")
    out = buffer.getvalue()
    assert not any(c in out for c in "\x1b\x9b\r\u202e")
    assert safe.visible(text).replace("\\\\", "\\") in out.replace("\\\\", "\\")


def test_markdown_and_xml_escape_user_text() -> None:
    assert safe.markdown("<script>|*x*") == "\\<script\\>\\|\\*x\\*"
    assert safe.xml(OSC8 + "<b>&") == "\\x1b]8;;http://evil.example\\x1b\\click me\\x1b]8;;\\x1b\\&lt;b&gt;&amp;"


def test_hostile_names_and_tags_through_the_cli(ledger_cli, ledger_dir, tmp_path) -> None:
    for name in (NAME, "b/2"):
        proc = ledger_cli("record", "--name", name, "--tag", f"link={OSC8}", "--tag", "markup=[/x][bold]",
                          "--telemetry-interval", "0", "--", "python", "-c", "print('hi')")
        assert proc.returncode == 0, proc.stderr
    for args in (("ls",), ("query", "SELECT name, tags FROM receipts"), ("show", NAME)):
        out = ledger_cli(*args)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout and "[/x]" in out.stdout and ":fire:" in out.stdout  # no emoji codes
        if args[0] != "show":  # (show leaves tags out: bookkeeping)
            assert "]8;;http://evil.example" in out.stdout  # shown, as \\x1b or as JSON's \\u001b
    markdown = ledger_cli("compare", NAME, "b/2", "--markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert "<script>" not in markdown.stdout and "\\<script\\>" in markdown.stdout
    page = tmp_path / "r.html"
    assert ledger_cli("report", NAME, "b/2", "--html", str(page)).returncode == 0
    html = page.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)" in html and "\x1b" not in html
    refused = ledger_cli("record", "--name", "two\nlines", "--", "true")
    assert refused.returncode == 2 and "control characters" in refused.stderr


def test_query_timeout_strict_json_and_a_missing_ledger(ledger_cli, ledger_dir, tmp_path) -> None:
    ledger_dir.mkdir()
    slow = ledger_cli("query", "--timeout", "1", "SELECT count(*) FROM range(100000000) a, range(100000000) b")
    assert slow.returncode == 2 and "interrupted after 1 s" in slow.stderr
    out = ledger_cli("query", "--json", "SELECT 'nan'::DOUBLE AS n, '-inf'::DOUBLE AS i, 2.5 AS x")
    assert out.returncode == 0

    def refuse(constant: str) -> None:
        raise AssertionError(f"invalid JSON constant {constant}")

    assert json.loads(out.stdout, parse_constant=refuse) == [{"n": None, "i": None, "x": 2.5}]
    for command in (("ls",), ("serve", "--port", "0")):  # a mistyped ledger is an error, never an empty view
        missing = ledger_cli("--ledger", str(tmp_path / "nonexistent"), *command)
        assert missing.returncode == 2 and "no ledger at" in missing.stderr, command
