"""The DuckDB index: derived from the receipt files, rebuildable at any time, synced incrementally.

It holds one summary row per receipt (``receipts``) and the metric tables themselves (``steps``,
``evals``, ``routing``, ``timing``, ``events``, ``telemetry``, each with a ``receipt_id`` column), because
querying thousands of Parquet files by glob is slow (DESIGN.md). DuckDB allows one writing process per
file: publishers sync only if the lock comes free within a short wait; readers wait a little longer, and
the first reader after a busy period brings the index up to date; a reader that cannot get the lock within
a few seconds reads the files themselves (:func:`reader`). Deleting ``index.duckdb`` loses nothing.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ledger.errors import IndexBusy, LedgerError
from ledger.store.layout import RECEIPT_FILE
from ledger.store.receipts import Ledger
from ledger.store.routing import STEP_SUMMARY_DDL, index_step_summary, parquet_source

if TYPE_CHECKING:  # a reader of an index that is up to date loads no Arrow (`ledger ls` starts fast)
    import pyarrow as pa

INDEX_VERSION = 4
"""Bump when the index layout changes (a column, a table): an index of another version is rebuilt on open,
and one of this version is taken to have every table (:func:`_ensure_schema` writes the version last).
(4: routing as a row per (rank, step, layer) with lists of counts, its per-(step, layer) summary
``routing_steps``, and the ``routing_experts`` view.)"""

ROUTING_EXPERTS_VIEW = """
CREATE OR REPLACE VIEW routing_experts AS
SELECT receipt_id, rank, step, layer, unnest(range(len(tokens)))::INTEGER AS expert, unnest(tokens) AS tokens,
       unnest(dropped) AS dropped, capacity, entropy
FROM routing
"""
"""The routing table as a row per expert (the layout of receipts before index version 4), for ad-hoc queries."""

_RECEIPT_COLUMNS: dict[str, str] = {
    "id": "VARCHAR PRIMARY KEY",
    "name": "VARCHAR",
    "status": "VARCHAR",
    "started_at": "TIMESTAMP",
    "ended_at": "TIMESTAMP",
    "duration_s": "DOUBLE",
    "exit_code": "INTEGER",
    "signal": "VARCHAR",
    "attempt": "INTEGER",
    "attempt_of": "VARCHAR",
    "replicates": "VARCHAR",
    "baseline": "VARCHAR",
    "run_uuid": "VARCHAR",
    "tags": "JSON",
    "command": "VARCHAR",
    "commit": "VARCHAR",
    "dirty": "BOOLEAN",
    "gpu_model": "VARCHAR",
    "gpu_count": "INTEGER",
    "device": "VARCHAR",
    "precision": "VARCHAR",
    "num_experts": "INTEGER",
    "top_k": "INTEGER",
    "seed": "BIGINT",
    "steps": "BIGINT",
    "last_step": "BIGINT",
    "tokens": "BIGINT",
    "final_loss": "DOUBLE",
    "tokens_per_s": "DOUBLE",
    "step_time_s": "DOUBLE",
    "peak_memory_bytes": "BIGINT",
    "energy_j": "DOUBLE",
    "problems": "INTEGER",
    "schema_version": "INTEGER",
    "receipt": "JSON",
}


def _receipt_row(data: dict[str, Any]) -> tuple[Any, ...]:
    stack, workload, summary = data.get("stack", {}), data.get("workload", {}), data.get("summary", {})
    links = data.get("links", {})
    code, hardware = stack.get("code", {}), stack.get("hardware", {})
    row = {
        "id": data["id"],
        "name": data.get("name"),
        "status": data.get("status"),
        "started_at": _utc(data.get("started_at")),
        "ended_at": _utc(data.get("ended_at")),
        "duration_s": data.get("duration_s"),
        "exit_code": data.get("exit_code"),
        "signal": data.get("signal"),
        "attempt": data.get("attempt"),
        "attempt_of": links.get("attempt_of"),
        "replicates": links.get("replicates"),
        "baseline": links.get("baseline"),
        "run_uuid": data.get("run_uuid"),
        "tags": json.dumps(data.get("tags") or {}, sort_keys=True),
        "command": " ".join(data.get("command") or ()),
        "commit": code.get("commit"),
        "dirty": code.get("dirty"),
        "gpu_model": hardware.get("gpu_model"),
        "gpu_count": hardware.get("gpu_count"),
        "device": workload.get("device"),
        "precision": workload.get("precision", {}).get("compute"),
        "num_experts": workload.get("model", {}).get("num_experts"),
        "top_k": workload.get("model", {}).get("top_k"),
        "seed": workload.get("seed"),
        "steps": summary.get("steps"),
        "last_step": summary.get("last_step"),
        "tokens": summary.get("tokens"),
        "final_loss": summary.get("final_loss"),
        "tokens_per_s": summary.get("tokens_per_s"),
        "step_time_s": summary.get("step_time_s"),
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "energy_j": summary.get("energy_j"),
        "problems": len(data.get("problems") or ()),
        "schema_version": data.get("schema_version"),
        "receipt": json.dumps(data, sort_keys=True),
    }
    return tuple(row[c] for c in _RECEIPT_COLUMNS)


def _utc(value: str | None) -> datetime | None:
    """ISO time -> naive UTC datetime (the index stores UTC without a zone; DuckDB would drop offsets)."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc).lower()
    return "lock" in text or "resource temporarily unavailable" in text


def _connect(path: Path, timeout: float, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            if read_only:
                return duckdb.connect(str(path), read_only=True, config={"enable_external_access": False})
            return duckdb.connect(str(path))
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                raise IndexBusy(
                    f"the index {path} stayed locked by another process for {timeout:.0f} s; retry, "
                    "or delete it (it is derived) and run `ledger reindex`"
                ) from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.25)


def _version(con: duckdb.DuckDBPyConnection) -> str | None:
    """The layout version an index was built with (None for a new or unfinished one)."""
    try:
        row = con.execute("SELECT value FROM index_meta WHERE key = 'version'").fetchone()
    except duckdb.CatalogException:
        return None
    return str(row[0]) if row is not None else None


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the index's tables, unless it already has this version's (then nothing is written)."""
    version = _version(con)
    if version == str(INDEX_VERSION):
        return
    import pyarrow as pa

    from schemas.tables import TABLES

    if version is not None:
        _drop_all(con)
    con.execute("CREATE TABLE IF NOT EXISTS index_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    columns = ", ".join(f'"{k}" {v}' for k, v in _RECEIPT_COLUMNS.items())
    con.execute(f"CREATE TABLE IF NOT EXISTS receipts ({columns})")
    con.execute("CREATE TABLE IF NOT EXISTS damaged (id VARCHAR PRIMARY KEY, error VARCHAR)")
    for name, schema in TABLES.items():
        empty = pa.schema([pa.field("receipt_id", pa.string())] + list(schema)).empty_table()
        con.register("_empty", empty)
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS SELECT * FROM _empty")
        con.unregister("_empty")
    con.execute(ROUTING_EXPERTS_VIEW)
    con.execute(STEP_SUMMARY_DDL)
    con.execute("INSERT OR REPLACE INTO index_meta VALUES ('version', ?)", [str(INDEX_VERSION)])  # last: complete


def _drop_all(con: duckdb.DuckDBPyConnection) -> None:
    from schemas.tables import TABLES

    con.execute("DROP VIEW IF EXISTS routing_experts")
    con.execute("DROP TABLE IF EXISTS routing_steps")
    for name in ("index_meta", "receipts", "damaged", *TABLES):
        con.execute(f"DROP TABLE IF EXISTS {name}")


@dataclass
class SyncResult:
    """What one sync changed."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)


def sync(
    ledger: Ledger,
    con: duckdb.DuckDBPyConnection,
    progress: Callable[[int, int], None] | None = None,
) -> SyncResult:
    """Bring the index up to date with the receipt directories: add the new ones, drop the vanished.
    (Verifying and validating a receipt loads the schemas and the publishing code: only when there is one.)"""
    result = SyncResult()
    on_disk = set(ledger.ids())
    indexed = {r[0] for r in con.execute("SELECT id FROM receipts").fetchall()}
    known_damaged = {r[0] for r in con.execute("SELECT id FROM damaged").fetchall()}
    for gone in sorted((indexed | known_damaged) - on_disk):
        _delete(con, gone)
        result.removed.append(gone)
    todo = sorted(on_disk - indexed - known_damaged)
    for i, receipt_id in enumerate(todo):
        from ledger.store.integrity import verify_receipt
        from ledger.store.receipts import parse_receipt

        try:
            findings = verify_receipt(ledger, receipt_id)  # only verified data enters the index
            if findings:
                raise LedgerError(f"{findings[0].path}: {findings[0].problem}")
            data = ledger.read_raw(receipt_id)
            receipt = parse_receipt(data, ledger.path(receipt_id) / RECEIPT_FILE)
            data = receipt.model_dump(mode="json")
            _insert(ledger, con, receipt_id, data)
            result.added.append(receipt_id)
        except (LedgerError, duckdb.Error, OSError) as exc:
            con.execute("INSERT OR REPLACE INTO damaged VALUES (?, ?)", [receipt_id, str(exc).splitlines()[0]])
            result.damaged[receipt_id] = str(exc).splitlines()[0]
        if progress:
            progress(i + 1, len(todo))
    return result


def _delete(con: duckdb.DuckDBPyConnection, receipt_id: str) -> None:
    from schemas.tables import TABLES

    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM receipts WHERE id = ?", [receipt_id])
    con.execute("DELETE FROM damaged WHERE id = ?", [receipt_id])
    for name in (*TABLES, "routing_steps"):
        con.execute(f"DELETE FROM {name} WHERE receipt_id = ?", [receipt_id])
    con.execute("COMMIT")


def _insert(ledger: Ledger, con: duckdb.DuckDBPyConnection, receipt_id: str, data: dict[str, Any]) -> None:
    if data.get("id") != receipt_id:
        raise LedgerError(f"receipt.json of {receipt_id} carries id {data.get('id')!r}")
    from schemas.tables import TABLES

    root = ledger.path(receipt_id)
    tables = {a["path"][: -len(".parquet")]: a for a in data.get("artifacts", ()) if a["kind"] == "table"}
    con.execute("BEGIN TRANSACTION")
    try:
        placeholders = ", ".join("?" for _ in _RECEIPT_COLUMNS)
        con.execute(f"INSERT INTO receipts VALUES ({placeholders})", list(_receipt_row(data)))
        for name in TABLES:
            artifact = tables.get(name)
            if artifact is None or not artifact.get("rows"):
                continue
            path = root / artifact["path"]
            if not path.exists():
                raise LedgerError(f"{path} is missing")
            source = parquet_source(path) if name == "routing" else "read_parquet(?)"  # old receipts: long rows
            con.execute(f"INSERT INTO {name} BY NAME SELECT ? AS receipt_id, * FROM {source}", [receipt_id, str(path)])
            if name == "routing":  # its per-(step, layer) summary, computed once (analyses read only that)
                index_step_summary(con, receipt_id)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


@contextmanager
def writable(ledger: Ledger, timeout: float = 30.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection to the index with its schema in place (waits for the lock)."""
    ledger.root.mkdir(parents=True, exist_ok=True)
    try:
        con = _connect(ledger.index_path, timeout)
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.IOException) and _is_lock_error(exc):
            raise
        _quarantine(ledger.index_path)  # not a DuckDB file any more: it is derived, rebuild it
        con = _connect(ledger.index_path, timeout)
    try:
        _ensure_schema(con)
        yield con
    finally:
        con.close()


def _quarantine(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.replace(p.with_name(p.name + f".corrupt-{int(time.time())}"))


def try_sync(ledger: Ledger, timeout: float = 2.0) -> SyncResult | None:
    """Sync if the index lock comes free within ``timeout``; otherwise leave it to the next reader."""
    try:
        with writable(ledger, timeout) as con:
            return sync(ledger, con)
    except IndexBusy:
        return None


def reindex(ledger: Ledger, progress: Callable[[int, int], None] | None = None) -> SyncResult:
    """Rebuild the index from the receipt files."""
    with writable(ledger) as con:
        _drop_all(con)
        _ensure_schema(con)
        return sync(ledger, con, progress)


READER_LOCK_WAIT_S = 2.0
"""How long a reader waits for the index lock, twice at most (to sync, then to open the synced index)."""


@contextmanager
def reader(ledger: Ledger, timeout: float = READER_LOCK_WAIT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """A synced, read-only connection (no writes, no access to files outside the index).

    DuckDB lets one process write a file and no process read it meanwhile. A reader waits ``timeout`` for
    the lock (to sync, then again to open); when writers keep it busy longer, it reads the receipt files
    themselves into an in-memory index (every receipt verified, as a sync does), says so on stderr and
    never waits more than twice ``timeout``."""
    if ledger.root.is_dir():
        con = _current(ledger)
        if con is None:
            try:
                with writable(ledger, timeout) as con:
                    sync(ledger, con)
                con = _connect(ledger.index_path, timeout, read_only=True)
            except IndexBusy:
                con = _from_files(ledger)
    else:
        con = duckdb.connect(":memory:", config={"enable_external_access": False})
        _ensure_schema(con)
    try:
        yield con
    finally:
        con.close()


def _current(ledger: Ledger) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection to the index when it is of this version and holds exactly the receipt
    directories on disk (indexed or known damaged): nothing to sync, so no write lock is taken (the common
    case of every read). None when it must be synced, or a writer holds it (:func:`reader` then waits)."""
    if not ledger.index_path.exists():
        return None
    try:
        con = duckdb.connect(str(ledger.index_path), read_only=True, config={"enable_external_access": False})
    except duckdb.Error:
        return None
    try:
        if _version(con) == str(INDEX_VERSION):
            known = {r[0] for r in con.execute("SELECT id FROM receipts UNION ALL SELECT id FROM damaged").fetchall()}
            if known == set(ledger.ids()):
                return con
    except duckdb.Error:
        pass
    con.close()
    return None


def _from_files(ledger: Ledger) -> duckdb.DuckDBPyConnection:
    """An in-memory index of the ledger built from its files, then closed to the file system."""
    import sys

    sys.stderr.write(f"ledger: the index {ledger.index_path} is busy (another process writes it); reading the "
                     "receipt files directly\n")
    con = duckdb.connect(":memory:")
    _ensure_schema(con)
    sync(ledger, con)
    con.execute("SET enable_external_access = false")
    return con


def query(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> pa.Table:
    """Run one statement and return its result as an Arrow table."""
    return con.execute(sql, params or []).to_arrow_table()
