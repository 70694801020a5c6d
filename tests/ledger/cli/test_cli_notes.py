"""`ledger note`, `archive`, `unarchive`: append-only records beside a sealed receipt, with author and time,
shown by `show` and `compare`; archived runs hidden from `ls` unless --all; the receipt itself never changes."""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest

WRAPPED = """
for step in range(1, 9):
    print(f"step {step} loss {4.0 / step:.3f}", flush=True)
"""


def _digests(root: Path) -> dict[str, str]:
    """Every file of the ledger's receipt directories, with its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.glob("??/*/*") if p.is_file()}


@pytest.fixture
def two_runs(ledger_cli, workload, tmp_path: Path) -> dict[str, str]:
    """An SDK run ('good') and a wrapped run that only prints lines ('typo'); name -> id."""
    ledger_cli("record", "--name", "good", "--", "python", str(workload(steps=10)), check=True)
    (tmp_path / "wrapped.py").write_text(textwrap.dedent(WRAPPED))
    ledger_cli("record", "--name", "typo", "--", "python", "wrapped.py", "--lr", "3e-3", check=True)
    return {r["name"]: r["id"] for r in json.loads(ledger_cli("ls", "--json").stdout)}


def test_notes_and_archive_flags_beside_the_sealed_receipt(ledger_cli, ledger_dir: Path, two_runs) -> None:
    sealed = _digests(ledger_dir)
    said = ledger_cli("note", "good", "ran on a degraded node (ECC errors on gpu3)", env={"LEDGER_AUTHOR": "alice"},
                      check=True).stdout
    assert re.fullmatch(rf"noted on {two_runs['good'][:12]} by alice at \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", said)
    ledger_cli("note", two_runs["typo"][:8], "wrong --lr", "--author", "bob", check=True)
    assert ledger_cli("archive", "typo", "--reason", "mistyped launch", check=True).stdout == \
        f"archived {two_runs['typo'][:12]}\n"

    listed = ledger_cli("ls").stdout
    assert "good" in listed and "typo" not in listed and "1 receipt(s)" in listed
    everything = ledger_cli("ls", "--all", "--columns", "name,status,notes").stdout
    assert re.search(r"typo\s+succeeded \(archived\)\s+1", everything)
    assert re.search(r"good\s+succeeded\s+1", everything)
    rows = json.loads(ledger_cli("ls", "--all", "--json", "--where", "archived=true").stdout)
    assert [(r["name"], r["archived"], r["notes"]) for r in rows] == [("typo", True, 1)]
    assert json.loads(ledger_cli("ls", "--json", "--where", "notes>=1").stdout)[0]["name"] == "good"

    shown = ledger_cli("show", "typo").stdout
    assert "archived (hidden from `ledger ls`" in shown
    assert re.search(r"note \d{4}-\d\d-\d\d \d\d:\d\d bob: wrong --lr", shown)
    assert re.search(r"archive \d{4}-\d\d-\d\d \d\d:\d\d \S+: archived \(mistyped launch\)", shown)
    compared = ledger_cli("compare", "good", "typo", "--allow-task-change").stdout
    notes = compared.split("notes on these runs", 1)[1]
    assert "good (" in notes and "alice: ran on a degraded node (ECC errors on gpu3)" in notes
    assert "bob: wrong --lr" in notes
    data = json.loads(ledger_cli("compare", "good", "typo", "--allow-task-change", "--json").stdout)
    assert [n["text"] for n in data["annotations"][two_runs["good"]]] == ["ran on a degraded node (ECC errors on gpu3)"]
    markdown = ledger_cli("compare", "good", "typo", "--allow-task-change", "--markdown").stdout
    assert "### Notes on these runs" in markdown and "bob: wrong --lr" in markdown

    ledger_cli("unarchive", "typo", check=True)
    assert "typo" in ledger_cli("ls").stdout
    assert _digests(ledger_dir) == sealed  # no receipt file was touched
    assert "2 receipt(s) checked, 0 damaged" in ledger_cli("verify").stdout
    records = list((ledger_dir / "annotations").rglob("*.json"))
    assert len(records) == 4  # two notes, archive, unarchive: appended, never rewritten
    assert all(hashlib.sha256(p.read_bytes()).hexdigest() == p.stem for p in records)


@pytest.mark.parametrize(("args", "message"), [
    (["note", "nope", "x"], "no receipt has the id prefix or name 'nope'"),
    (["note", "good", "  "], "empty note"),
    (["archive"], "Missing argument 'REF...'"),
])
def test_bad_input_is_one_line(ledger_cli, two_runs, args: list[str], message: str) -> None:
    proc = ledger_cli(*args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("Error: ") == 1
