"""`ledger record` starts the launch before it loads what only publishing needs, and the launch gets the
environment the user gave, not the settings the `ledger` process made for itself (ledger.process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import child_env

HEAVY = ("pyarrow", "numpy", "pydantic", "schemas.receipt", "duckdb")
"""What a launch must not wait for: loaded while it runs, for publishing."""


def test_the_launch_starts_before_pyarrow_numpy_and_the_receipt_models_load(tmp_path: Path) -> None:
    """The real `ledger` entry point in a process that notes, when the launch is started, which of
    :data:`HEAVY` it has loaded; and, at its end, that it published (the heavy modules did load, later)."""
    script = textwrap.dedent(f"""
        import json, subprocess, sys
        seen = []
        original = subprocess.Popen.__init__
        def spy(self, args, *a, **k):
            if list(args)[:1] == [sys.executable] and not seen:
                seen.append(sorted(m for m in {HEAVY!r} if m in sys.modules))
            original(self, args, *a, **k)
        subprocess.Popen.__init__ = spy
        sys.argv = ["ledger", "record", "--", sys.executable, "-c", "print('step 1 loss 2.5')"]
        from ledger.cli import main
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        print(json.dumps({{"at_launch": seen, "after": sorted(m for m in {HEAVY!r} if m in sys.modules),
                          "code": code}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(LEDGER_DIR=str(tmp_path / "receipts")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["code"] == 0 and "ledger: recorded " in proc.stderr
    assert facts["at_launch"] == [[]]
    assert {"pyarrow", "numpy", "pydantic", "schemas.receipt"} <= set(facts["after"])


def _printed_env(tmp_path: Path, **env: str) -> str:
    code = "import os; print('PLUGINS=' + str(os.environ.get('PYDANTIC_DISABLE_PLUGINS')))"
    proc = subprocess.run([str(Path(sys.executable).with_name("ledger")), "record", "--", sys.executable, "-c", code],
                          env=child_env(LEDGER_DIR=str(tmp_path / "receipts"), **env), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("PLUGINS="))


def test_the_launch_does_not_inherit_what_ledger_set_for_itself(tmp_path: Path) -> None:
    env = child_env()
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    assert "PYDANTIC_DISABLE_PLUGINS" not in env  # the test's own environment leaves it unset
    assert _printed_env(tmp_path) == "PLUGINS=None"


def test_a_users_own_setting_reaches_the_launch(tmp_path: Path) -> None:
    assert _printed_env(tmp_path, PYDANTIC_DISABLE_PLUGINS="logfire") == "PLUGINS=logfire"
