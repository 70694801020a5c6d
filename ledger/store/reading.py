"""Read-side library functions behind `ledger ls`, `show` and `query`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from ledger.errors import BadInput, QueryRefused
from ledger.store import index
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


def _sort_key(column: str) -> str:
    key = SORT_KEYS.get(column, column)
    if key not in LIST_COLUMNS or key == "tags":
        raise BadInput(f"cannot sort by {column!r}; choose one of: {', '.join(SORT_KEYS)}, or any column of the "
                       "runs table (summary.*, params.*, workload.*, tags.*)")
    return key


def sort_rows(rows: list[dict[str, Any]], column: str, descending: bool = False) -> list[dict[str, Any]]:
    """Rows ordered by ``column`` (a :data:`SORT_KEYS` name, a row key, or, for rows listed with ``fields``, any
    column of the runs table such as ``params.lr``); rows without a value go last. Values that are all numbers
    (``params.*`` hold text) order as numbers."""
    if SORT_KEYS.get(column, column) not in LIST_COLUMNS and rows and all("fields" in r for r in rows):
        from ledger.store.filters import number

        values = [r["fields"].get(column) for r in rows]
        if all(v is None for v in values):
            _sort_key(column)  # a column no run has: say which there are
        numeric = all(v is None or number(str(v)) is not None for v in values)

        def value(r: dict[str, Any]) -> Any:
            v = r["fields"].get(column)
            return number(str(v)) if numeric else str(v)

        present = [r for r in rows if r["fields"].get(column) is not None]
        missing = [r for r in rows if r["fields"].get(column) is None]
        return sorted(present, key=value, reverse=descending) + missing
    key = _sort_key(column)
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


def list_receipts(
    ledger: Ledger, where: str | None = None, sort: str | None = None, descending: bool = False,
    limit: int | None = None, *, archived: bool = True, fields: bool = False,
) -> list[dict[str, Any]]:
    """Summary rows of the receipts (oldest first; ``sort`` by a :data:`SORT_KEYS` column, rows without a
    value last; ``descending`` reverses), optionally filtered by a `--where` expression, the first ``limit``.
    ``archived``: include archived receipts (`ledger ls --all`); every row says ``archived`` and how many
    ``notes`` it has (:mod:`ledger.store.annotation`). ``fields``: each row also holds its run's columns
    (``row["fields"]``, :func:`ledger.store.runs.record`: summary, tags, params, workload).
    Without ``where`` and ``fields`` the index sorts and limits: ``ledger ls --limit 20`` reads 20 rows, whatever
    the ledger's size. The index is derived, so each listed row is checked against its files (the cheap check of
    :func:`ledger.store.agreement.listing_findings`): ``index_problem`` says what disagrees, or None."""
    from ledger.store import annotation
    from ledger.store.agreement import listing_findings

    notes = annotation.everything(ledger.root)
    hidden = set() if archived else {rid for rid, records in notes.items() if annotation.is_archived(records)}
    cols = ", ".join(f'"{c}"' for c in LIST_COLUMNS)
    with index.reader(ledger) as con:
        if where is not None or fields:
            from ledger.store import filters  # `ledger ls` without --where does not load the language

            predicate = filters.parse(where) if where is not None else None
            found = con.execute(f"SELECT {cols}, receipt FROM receipts ORDER BY started_at, id").fetchall()
            data = [_beside(json.loads(row[-1]), notes) for row in found]
            if predicate is not None:
                predicate.check_against(data)
            rows: list[dict[str, Any]] = []
            for row, receipt in zip(found, data, strict=True):
                if receipt["id"] in hidden or (predicate is not None and not predicate(receipt)):
                    continue
                item = _row(row[:-1])
                if fields:
                    from ledger.store.runs import record

                    item["fields"] = record(receipt, receipt["archived"], receipt["notes"])
                rows.append(item)
            if sort is not None:
                rows = sort_rows(rows, sort, descending)
            elif descending:
                rows.reverse()
            rows = rows if limit is None else rows[:limit]
        else:
            if sort is not None:
                key = _sort_key(sort)
                order = f'"{key}" {"DESC" if descending else "ASC"} NULLS LAST, started_at NULLS LAST, id'
            else:
                order = "started_at DESC NULLS FIRST, id DESC" if descending else "started_at NULLS LAST, id"
            skip = sorted(hidden)
            clause = f" WHERE id NOT IN ({', '.join('?' for _ in skip)})" if skip else ""
            found = con.execute(f"SELECT {cols} FROM receipts{clause} ORDER BY {order}"
                                + (" LIMIT ?" if limit is not None else ""),
                                [*skip, *([limit] if limit is not None else [])]).fetchall()
            rows = [_row(row) for row in found]
        problems = listing_findings(ledger, con, [row["id"] for row in rows])
    for item in rows:
        item["index_problem"] = problems.get(item["id"])
        records = notes.get(item["id"], ())
        item["archived"] = annotation.is_archived(records)
        item["notes"] = len(annotation.notes(records))
    return rows


def _beside(receipt: dict[str, Any], notes: dict[str, Any]) -> dict[str, Any]:
    """A receipt's data with what lies beside it: ``archived`` and the number of ``notes``."""
    from ledger.store import annotation

    records = notes.get(receipt.get("id", ""), ())
    receipt["archived"] = annotation.is_archived(records)
    receipt["notes"] = len(annotation.notes(records))
    return receipt


def _row(row: tuple[Any, ...]) -> dict[str, Any]:
    item = dict(zip(LIST_COLUMNS, row, strict=True))
    item["tags"] = json.loads(item["tags"]) if item["tags"] else {}
    item["started_at"] = item["started_at"].isoformat() if item["started_at"] else None
    return item


def resolve_ref(ledger: Ledger, ref: str) -> str:
    """The id a ref names."""
    with index.reader(ledger) as con:
        return resolve(con, ref)


def show(ledger: Ledger, ref: str) -> Receipt:
    """The receipt a ref names, read from its file (the truth), validated and checked for damage."""
    from ledger.store.integrity import check_intact

    return check_intact(ledger, resolve_ref(ledger, ref))


T = TypeVar("T")
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
    return _read_only(ledger, sql, timeout, lambda rel: rel.to_arrow_table())


PLAIN_TYPES = frozenset({
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT", "FLOAT",
    "DOUBLE", "VARCHAR", "DATE", "TIMESTAMP",
})
"""Column types whose Python values DuckDB gives exactly as Arrow's ``to_pylist`` does (lists of them too)."""


def read_only_rows(
    ledger: Ledger, sql: str, timeout: float = QUERY_TIMEOUT_S,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """:func:`read_only_query`'s answer as column names and rows of Python values (`ledger query`). A result of
    plain columns (:data:`PLAIN_TYPES`: a count, names, times, metrics) is fetched without Arrow, whose import
    costs about 0.3 s; any other goes through Arrow, so every value is what the Python API's table holds."""

    def fetch(rel: duckdb.DuckDBPyRelation) -> tuple[list[str], list[tuple[Any, ...]]]:
        if all(str(t).removesuffix("[]") in PLAIN_TYPES for t in rel.types):
            return list(rel.columns), rel.fetchall()
        table = rel.to_arrow_table()
        return list(table.column_names), list(zip(*(c.to_pylist() for c in table.columns), strict=True))

    return _read_only(ledger, sql, timeout, fetch)


def _read_only(ledger: Ledger, sql: str, timeout: float, fetch: Callable[[duckdb.DuckDBPyRelation], T]) -> T:
    import threading

    with index.reader(ledger) as con:
        check_read_only(con, sql)
        timer = threading.Timer(timeout, con.interrupt)
        timer.start()
        try:
            return fetch(con.sql(sql))
        except (duckdb.InterruptException, duckdb.Error) as exc:
            interrupted = timer.finished.is_set() and "interrupt" in str(exc).lower()
            if isinstance(exc, duckdb.InterruptException) or interrupted:
                raise QueryRefused(f"query interrupted after {timeout:g} s (raise --timeout or narrow it)") from exc
            raise QueryRefused(f"query failed: {str(exc).splitlines()[0]}") from exc
        finally:
            timer.cancel()
