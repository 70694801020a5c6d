"""Helpers shared by tests (importable: tests/ is on pythonpath)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any


def ids_in(ledger_dir: Path) -> list[str]:
    """Ids of the receipt directories in a ledger, in either layout (``<id[:2]>/<id>`` or the old ``<id>``),
    found by listing here, independently of the code under test."""
    if not ledger_dir.exists():
        return []
    flat = {p.name for p in ledger_dir.iterdir() if len(p.name) == 64}
    sharded = {p.name for s in ledger_dir.iterdir() if len(s.name) == 2 and s.is_dir() for p in s.iterdir()
               if len(p.name) == 64}
    return sorted(flat | sharded)


def receipt_dir(ledger_dir: Path, receipt_id: str) -> Path:
    """A receipt's directory in a ledger: its shard, else the old flat place."""
    sharded = ledger_dir / receipt_id[:2] / receipt_id
    return sharded if sharded.is_dir() else ledger_dir / receipt_id


def load_receipt(ledger_dir: Path, receipt_id: str) -> dict[str, object]:
    return json.loads((receipt_dir(ledger_dir, receipt_id) / "receipt.json").read_text())


class LedgerAt:
    """The real `ledger` CLI bound to the ledger under ``root/receipts``, run from ``root``."""

    def __init__(self, root: Path, timeout: float = 180) -> None:
        self.root = root
        self.dir = root / "receipts"
        self.timeout = timeout

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        from conftest import BIN, child_env

        proc = subprocess.run([str(BIN / "ledger"), "--ledger", str(self.dir), *args], env=child_env(),
                              cwd=self.root, capture_output=True, text=True, timeout=self.timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"ledger {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").stdout)
