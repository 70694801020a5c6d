"""The CLI contract: help with an example on every command, one-line errors, exit status 2 for bad input."""

from __future__ import annotations

import json
import shutil

import click
import pytest
from click.testing import CliRunner
from helpers import receipt_dir

from ledger.cli import cli


def _commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, command in sorted(group.commands.items()):
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            out += _commands(command, (*prefix, name))
    return out


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    if not isinstance(command, click.Group):
        assert "--ledger" in result.output


def test_top_level_help_lists_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    for name in ("record", "ls", "show", "query", "reindex", "recover"):
        assert name in result.output


@pytest.fixture
def two_runs(ledger_cli, workload):
    script = workload(steps=4)
    ledger_cli("record", "--name", "alpha", "--tag", "sweep=x", "--", "python", str(script), check=True)
    ledger_cli("record", "--name", "beta", "--", "python", str(script), "--flag", check=True)
    return json.loads(ledger_cli("ls", "--json").stdout)


def test_ls_show_and_where(two_runs, ledger_cli) -> None:
    assert [r["name"] for r in two_runs] == ["alpha", "beta"]
    out = json.loads(ledger_cli("ls", "--json", "--where", "tag.sweep=x").stdout)
    assert [r["name"] for r in out] == ["alpha"]
    out = json.loads(ledger_cli("ls", "--json", "--where", "summary.steps>=4 and name~b*").stdout)
    assert [r["name"] for r in out] == ["beta"]
    text = ledger_cli("ls").stdout
    assert "alpha" in text and "2 receipt(s)" in text
    shown = ledger_cli("show", two_runs[1]["id"][:8])
    assert shown.returncode == 0 and two_runs[1]["id"] in shown.stdout and "artifacts" in shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "nope"], "no receipt has the id prefix or name 'nope'"),
        (["show", "../x"], "no receipt has the id prefix or name '../x'"),  # a name, compared as data
        (["show", "a\nb"], "invalid ref"),
        (["ls", "--where", "bogus.field=1"], "unknown field 'bogus.field'"),
        (["ls", "--where", "name"], "expected KEY OP VALUE"),
        (["query", "DELETE FROM receipts"], "only SELECT statements are allowed"),
        (["query", "SELECT 1; SELECT 2"], "exactly one statement"),
        (["query", "SELECT * FROM read_csv('/etc/passwd')"], "query failed"),
        (["query", "SELEC nonsense"], "does not parse"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(ledger_cli, args, message) -> None:
    proc = ledger_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("Error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_debug_shows_traceback(ledger_cli) -> None:
    proc = ledger_cli("--debug", "show", "nope")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_hand_edited_receipt_names_the_field(two_runs, ledger_cli, ledger_dir) -> None:
    rid = two_runs[0]["id"]
    path = receipt_dir(ledger_dir, rid) / "receipt.json"
    data = json.loads(path.read_text())
    data["workload"]["model"]["layers"] = "many"
    path.write_text(json.dumps(data))
    proc = ledger_cli("show", rid)
    assert proc.returncode == 2
    assert "field workload.model.layers" in proc.stderr and str(path) in proc.stderr
    # the other receipt still works
    assert ledger_cli("show", two_runs[1]["id"]).returncode == 0


def test_newer_schema_is_refused(two_runs, ledger_cli, ledger_dir) -> None:
    rid = two_runs[0]["id"]
    path = receipt_dir(ledger_dir, rid) / "receipt.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    proc = ledger_cli("show", rid)
    assert proc.returncode == 2 and "newer than this stackreceipt" in proc.stderr


def test_index_is_derived(two_runs, ledger_cli, ledger_dir) -> None:
    before = json.loads(ledger_cli("query", "--json", "SELECT count(*) AS n FROM steps").stdout)
    (ledger_dir / "index.duckdb").unlink()
    after = json.loads(ledger_cli("query", "--json", "SELECT count(*) AS n FROM steps").stdout)
    assert before == after == [{"n": 8}]
    (ledger_dir / "index.duckdb").write_bytes(b"this is not a database")
    assert json.loads(ledger_cli("query", "--json", "SELECT count(*) AS n FROM receipts").stdout) == [{"n": 2}]
    proc = ledger_cli("reindex")
    assert proc.returncode == 0 and "indexed 2 receipt(s)" in proc.stdout
    # a receipt removed from disk leaves the index too
    shutil.rmtree(receipt_dir(ledger_dir, two_runs[0]["id"]))
    assert json.loads(ledger_cli("query", "--json", "SELECT count(*) AS n FROM steps").stdout) == [{"n": 4}]
