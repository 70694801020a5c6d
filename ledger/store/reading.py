"""Read-side library functions behind `ledger ls`, `show` and `query`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

from ledger.errors import BadInput, QueryRefused
from ledger.store import filters, index
from ledger.store.receipts import Ledger
from ledger.store.refs import resolve

if TYPE_CHECKING:  # `ledger ls` loads neither Arrow nor the receipt models
    import pyarrow as pa

    from schemas import Receipt

LIST_COLUMNS = (
    "id", "name", "status", "started_at", "duration_s", "attempt", "steps", "final_loss", "tokens_per_s",
    "precision", "num_experts", "top_k", "device", "gpu_model", "tags", "problems",
)


SORT_KEYS = {
    "id": "id", "name": "name", "status": "status", "started": "started_at", "time": "duration_s",
    "attempt": "attempt", "steps": "steps", "loss": "final_loss", "tok/s": "tokens_per_s",
    "precision": "precision", "experts": "num_experts", "top_k": "top_k", "device": "device", "gpu": "gpu_model",
    "problems": "problems",
}
"""`ledger ls --sort` names (the table's column titles) -> keys of :func:`list_receipts` rows (also accepted)."""


def sort_rows(rows: list[dict[str, Any]], column: str, descending: bool = False) -> list[dict[str, Any]]:
    """Rows ordered by ``column`` (a :data:`SORT_KEYS` name or a row key); rows without a value go last."""
    key = SORT_KEYS.get(column, column)
    if key not in LIST_COLUMNS or key == "tags":
        raise BadInput(f"cannot sort by {column!r}; choose one of: {', '.join(SORT_KEYS)}")
    present = [r for r in rows if r[key] is not None]
    missing = [r for r in rows if r[key] is None]
    return sorted(present, key=lambda r: r[key], reverse=descending) + missing


def existing(ledger: Ledger) -> Ledger:
    """The ledger, when its directory exists: reading a ledger named explicitly (``--ledger DIR``) that is
    not there is a mistyped path, not an empty ledger."""
    if not ledger.root.is_dir():
        raise BadInput(f"no ledger at {ledger.root}: check --ledger / $LEDGER_DIR (a ledger is created by the "
                       "first `ledger record`)")
    return ledger


def list_receipts(ledger: Ledger, where: str | None = None) -> list[dict[str, Any]]:
    """Summary rows of every receipt (oldest first), optionally filtered by a `--where` expression."""
    predicate = filters.parse(where) if where is not None else None
    cols = ", ".join(f'"{c}"' for c in LIST_COLUMNS)
    from ledger.store.agreement import listing_findings

    with index.reader(ledger) as con:
        rows = con.execute(f"SELECT {cols}, receipt FROM receipts ORDER BY started_at, id").fetchall()
        out = []
        for row in rows:
            if predicate is not None and not predicate(json.loads(row[-1])):
                continue
            item = dict(zip(LIST_COLUMNS, row[:-1], strict=True))
            item["tags"] = json.loads(item["tags"]) if item["tags"] else {}
            item["started_at"] = item["started_at"].isoformat() if item["started_at"] else None
            out.append(item)
        problems = listing_findings(ledger, con, [item["id"] for item in out])
    for item in out:
        item["index_problem"] = problems.get(item["id"])
    return out


def resolve_ref(ledger: Ledger, ref: str) -> str:
    """The id a ref names."""
    with index.reader(ledger) as con:
        return resolve(con, ref)


def show(ledger: Ledger, ref: str) -> Receipt:
    """The receipt a ref names, read from its file (the truth), validated and checked for damage."""
    from ledger.store.integrity import check_intact

    return check_intact(ledger, resolve_ref(ledger, ref))


READ_STATEMENTS = {duckdb.StatementType.SELECT}


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything but one SELECT statement."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryRefused(f"the query does not parse: {str(exc).splitlines()[0]}") from exc
    if len(statements) != 1:
        raise QueryRefused(f"give exactly one statement (got {len(statements)})")
    if statements[0].type not in READ_STATEMENTS:
        raise QueryRefused(f"only SELECT statements are allowed; this is {statements[0].type.name}")


QUERY_TIMEOUT_S = 60.0
"""Default limit of `ledger query` (``--timeout``): DuckDB is interrupted after it."""


def read_only_query(ledger: Ledger, sql: str, timeout: float = QUERY_TIMEOUT_S) -> pa.Table:
    """Run one SELECT over the index on a read-only connection without file-system access; interrupted
    after ``timeout`` seconds."""
    import threading

    with index.reader(ledger) as con:
        check_read_only(con, sql)
        timer = threading.Timer(timeout, con.interrupt)
        timer.start()
        try:
            return con.sql(sql).to_arrow_table()
        except (duckdb.InterruptException, duckdb.Error) as exc:
            interrupted = timer.finished.is_set() and "interrupt" in str(exc).lower()
            if isinstance(exc, duckdb.InterruptException) or interrupted:
                raise QueryRefused(f"query interrupted after {timeout:g} s (raise --timeout or narrow it)") from exc
            raise QueryRefused(f"query failed: {str(exc).splitlines()[0]}") from exc
        finally:
            timer.cancel()
