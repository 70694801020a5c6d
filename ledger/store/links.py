"""Resolving a new run's links (attempt_of, replicates, baseline) before it launches."""

from __future__ import annotations

from typing import Any

from ledger.store.receipts import Ledger
from ledger.store.refs import resolve


def resolve_links(
    ledger: Ledger, *, attempt_of: str | None, replicates: str | None, baseline: str | None
) -> dict[str, Any]:
    """Ids for the given refs (an unknown ref fails before anything runs) and the attempt number.

    All attempts of a logical run point at its first attempt, so ``--attempt-of`` any attempt works."""
    out: dict[str, Any] = {"attempt_of": None, "replicates": None, "baseline": None, "attempt": 1}
    if not (attempt_of or replicates or baseline):
        return out
    from ledger.store import index  # DuckDB: only for a launch that names other receipts

    with index.reader(ledger) as con:
        if replicates:
            out["replicates"] = resolve(con, replicates)
        if baseline:
            out["baseline"] = resolve(con, baseline)
        if attempt_of:
            target = resolve(con, attempt_of)
            root = con.execute("SELECT coalesce(attempt_of, id) FROM receipts WHERE id = ?", [target]).fetchone()
            first = str(root[0]) if root else target
            count = con.execute(
                "SELECT max(attempt) FROM receipts WHERE id = ? OR attempt_of = ?", [first, first]
            ).fetchone()
            out["attempt_of"] = first
            out["attempt"] = int(count[0] or 1) + 1 if count else 2
    return out
