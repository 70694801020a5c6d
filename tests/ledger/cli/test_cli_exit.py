"""How `ledger` processes end: the read-only commands (ledger.cli.app.QUICK_EXIT) skip Python's finalization,
after writing all of their output and with their exit status; the others end as Python does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import child_env

ENTRY = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("FINALIZED\\n"))
sys.argv = ["ledger", *sys.argv[1:]]
from ledger.cli import main
main()
"""
"""The real entry point, in a process that says on stderr when Python's finalization runs its exit handlers."""


def _ledger(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ENTRY, *args], env=child_env(LEDGER_DIR=str(tmp_path / "receipts")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_a_read_only_command_writes_all_its_output_and_ends_without_finalization(tmp_path: Path) -> None:
    rows = 50_000  # far more than any buffer: what is still buffered at the end must be written before the exit
    done = _ledger(tmp_path, "query", f"SELECT range AS x FROM range({rows})", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["x"] for r in json.loads(done.stdout)] == list(range(rows))
    assert "FINALIZED" not in done.stderr


def test_a_read_only_commands_error_keeps_its_status_and_message(tmp_path: Path) -> None:
    done = _ledger(tmp_path, "show", "nonexistent")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: no receipt has the id prefix or name 'nonexistent'")
    assert "FINALIZED" not in done.stderr


def test_other_commands_end_as_python_does(tmp_path: Path) -> None:
    done = _ledger(tmp_path, "verify")  # no ledger there: an error, and Python's exit all the same
    assert done.returncode == 2
    assert done.stderr.startswith("Error: no ledger at ") and done.stderr.rstrip().endswith("FINALIZED")
