"""Helpers shared by tests (importable: tests/ is on pythonpath)."""

from __future__ import annotations

import json
from pathlib import Path


def ids_in(ledger_dir: Path) -> list[str]:
    return sorted(p.name for p in ledger_dir.iterdir() if len(p.name) == 64) if ledger_dir.exists() else []


def load_receipt(ledger_dir: Path, receipt_id: str) -> dict[str, object]:
    return json.loads((ledger_dir / receipt_id / "receipt.json").read_text())
