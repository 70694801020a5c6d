"""A failed run's error (Receipt.failure) in `ledger show`, through the renderer the web view's receipt page also
uses (ledger/report/failure.py); control characters and markup in it shown as text."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import failed_receipt


def test_show_says_why_a_run_failed(ledger_cli, ledger_dir: Path, tmp_path: Path, workload) -> None:
    rid = failed_receipt(ledger_dir, tmp_path, "[bold]gpu3[/bold] \x1b[31m")
    shown = ledger_cli("show", rid[:8], check=True).stdout
    head = shown.split("why it failed: ", 1)[1].splitlines()
    assert head[0] == r"failed: RuntimeError: CUDA out of memory [bold]gpu3[/bold] \x1b[31m (exit code 1)"
    assert [line.strip() for line in head[1:6]] == [
        "Traceback (most recent call last):", 'File "train.py", line 9, in <module>', "loss.backward()",
        r"RuntimeError: CUDA out of memory [bold]gpu3[/bold] \x1b[31m", "(from output.log, line 3)"]
    assert json.loads(ledger_cli("show", rid[:8], "--json", check=True).stdout)["failure"]["first_line"] == 3
    # a run that succeeded says nothing about failing
    ledger_cli("record", "--name", "fine", "--", "python", str(workload(steps=3)), check=True)
    assert "why it failed" not in ledger_cli("show", "fine", check=True).stdout
