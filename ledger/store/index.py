"""The DuckDB index: derived from the receipt files, rebuildable at any time, synced incrementally.

It holds one summary row per receipt (``receipts``) and the metric tables themselves (``steps``,
``evals``, ``routing``, ``timing``, ``events``, ``telemetry``, each with a ``receipt_id`` column), because
querying thousands of Parquet files by glob is slow (DESIGN.md). DuckDB allows one writing process per
file: publishers sync only if the lock comes free within a short wait; readers wait a little longer, and
the first reader after a busy period brings the index up to date; a reader that cannot get the lock within
a few seconds reads the files themselves (:func:`reader`). Deleting ``index.duckdb`` loses nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ledger.errors import IndexBusy, LedgerError
from ledger.store import journal, layout
from ledger.store.receipts import Ledger
from ledger.store.routing import STEP_SUMMARY_DDL, index_step_summary, parquet_source

if TYPE_CHECKING:  # a reader of an index that is up to date loads no Arrow (`ledger ls` starts fast)
    import pyarrow as pa

    from ledger.store.integrity import Seen

INDEX_VERSION = 6
"""Bump when the index layout changes (a column, a table): an index of another version is rebuilt on open,
and one of this version is taken to have every table (:func:`_ensure_schema` writes the version last).
(3: NVML clocks, temperature and ECC telemetry columns; 4: routing as a row per (rank, step, layer) with lists
of counts, its per-(step, layer) summary ``routing_steps`` and the ``routing_experts`` view; 5: the shard
stamps ``index_dirs`` and the journal offset of the incremental sync; 6: the steps table's ``epoch`` and
``printed_step``.)"""

ROUTING_EXPERTS_VIEW = """
CREATE OR REPLACE VIEW routing_experts AS
SELECT receipt_id, rank, step, layer, unnest(range(len(tokens)))::INTEGER AS expert, unnest(tokens) AS tokens,
       unnest(dropped) AS dropped, capacity, entropy
FROM routing
"""
"""The routing table as a row per expert (the layout of receipts before index version 4), for ad-hoc queries."""

RECEIPT_COLUMNS: dict[str, str] = {
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


def receipt_row(data: dict[str, Any], text: str | None = None) -> tuple[Any, ...]:
    """The receipts table's row of a receipt (``text``: its JSON, when the caller has it already)."""
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
        "receipt": text if text is not None else json.dumps(data, sort_keys=True),
    }
    return tuple(row[c] for c in RECEIPT_COLUMNS)


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


def _connect(
    path: Path, timeout: float, read_only: bool = False, give_way: Callable[[], bool] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the index, retrying while another process holds it, for ``timeout`` at most; ``give_way``
    (a publisher's) stops the wait as soon as a reader waits for the index too."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if give_way is not None and give_way():  # before each try too: a free lock is a reader's first
            raise IndexBusy(f"the index {path} is left to a reader that waits for it")
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
            delay = min(delay * 2, 0.25 if give_way is not None else 0.1)  # a reader looks again sooner
        except duckdb.ConnectionException as exc:  # this process holds it read-only (another reader is open)
            raise IndexBusy(f"the index {path} is open read-only in this process; close the other reader "
                            "first") from exc


@contextmanager
def _reader_waiting(ledger: Ledger) -> Iterator[None]:
    """Announce a reader for the duration of the block (:func:`ledger.store.journal.hold` of ``index.readers``):
    publishers then leave the index to it instead of competing for its lock."""
    with journal.hold(ledger.root / layout.READERS_GATE):
        yield


def readers_waiting(ledger: Ledger) -> bool:
    """Whether a reader waits for, or reads, the index right now."""
    return journal.held(ledger.root / layout.READERS_GATE, create=True)


def _version(con: duckdb.DuckDBPyConnection) -> str | None:
    """The layout version an index was built with (None for a new or unfinished one)."""
    try:
        row = con.execute("SELECT value FROM index_meta WHERE key = 'version'").fetchone()
    except duckdb.CatalogException:
        return None
    return str(row[0]) if row is not None else None


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the index's tables, unless it already has this version's (then nothing is written: the version
    row is written last, so an index that has it has every table)."""
    version = _version(con)
    if version == str(INDEX_VERSION):
        return
    if version is not None:
        _drop_all(con)
    _create_schema(con)


def _create_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create every table of the index that does not exist, the version row last."""
    import pyarrow as pa

    from ledger.store.merge import empty
    from schemas.tables import TABLES

    con.execute("CREATE TABLE IF NOT EXISTS index_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    columns = ", ".join(f'"{k}" {v}' for k, v in RECEIPT_COLUMNS.items())
    con.execute(f"CREATE TABLE IF NOT EXISTS receipts ({columns})")
    con.execute("CREATE TABLE IF NOT EXISTS damaged (id VARCHAR PRIMARY KEY, error VARCHAR)")
    con.execute("CREATE TABLE IF NOT EXISTS index_dirs (dir VARCHAR PRIMARY KEY, mtime_ns BIGINT)")
    for name, schema in TABLES.items():
        con.register("_empty", empty(pa.schema([pa.field("receipt_id", pa.string())] + list(schema))))
        con.execute(f"CREATE TABLE IF NOT EXISTS {name} AS SELECT * FROM _empty")
        con.unregister("_empty")
    con.execute(ROUTING_EXPERTS_VIEW)
    con.execute(STEP_SUMMARY_DDL)
    con.execute("INSERT OR REPLACE INTO index_meta VALUES ('version', ?)", [str(INDEX_VERSION)])  # last: complete


def _drop_all(con: duckdb.DuckDBPyConnection) -> None:
    from schemas.tables import TABLES

    con.execute("DROP VIEW IF EXISTS routing_experts")
    con.execute("DROP TABLE IF EXISTS routing_steps")
    for name in ("index_meta", "receipts", "damaged", "index_dirs", *TABLES):
        con.execute(f"DROP TABLE IF EXISTS {name}")


@dataclass
class SyncResult:
    """What one sync changed."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)
    left: int = 0
    """Receipts found and left for the next sync (a sync with a ``limit``)."""


PUBLISHER_SYNC_LIMIT = 16
"""A publisher's sync adds at most this many receipts (its own first): under many writers the backlog is
shared out instead of one publisher holding the lock while readers wait."""
RACY_NS = 2_000_000_000
"""A shard directory changed this recently may change again within the same mtime tick: its stamp is not
trusted, and the next sync lists it again (git's "racily clean" rule)."""
CHUNK = 256
"""Receipts verified and inserted together, in one transaction (:func:`_add`): a statement costs DuckDB about
2 ms however few files it reads (10,000 receipts: 1.28-1.36 ms of CPU a receipt in chunks of 256, 1.39-1.64 in
chunks of 128, on the loaded 2-core machine)."""
VERIFIERS = 2
"""Threads that verify receipts while DuckDB inserts (their Python holds the GIL between reads and hashes: more
threads than cores only take turns)."""


def sync(
    ledger: Ledger,
    con: duckdb.DuckDBPyConnection,
    progress: Callable[[int, int], None] | None = None,
    *,
    full: bool = False,
    limit: int | None = None,
    shards: bool = True,
) -> SyncResult:
    """Bring the index up to date with the receipt directories: add the new ones, drop the vanished.
    ``limit``: add at most this many (the latest published first) and leave the rest, and the journal offset
    and shard stamps, to the next sync: a publisher holds the index's lock for a bounded time.

    Its cost does not grow with the ledger: it reads the journal from where the last sync stopped (what
    was published since), stats the shard directories and lists only those whose mtime changed (receipts
    copied or pulled in, or removed); a sync with a ``limit`` that the journal alone already fills lists no
    shard, nor does one told not to (``shards=False``: it adds what was published and leaves the index not
    up to date). A full reconcile (every id listed) happens when asked (``full``), when the ledger still holds
    receipts of the old flat layout, and when the journal was replaced."""
    root = ledger.root
    result = SyncResult()
    meta = _meta(con)
    offset = int(meta.get("journal_offset") or 0)
    stamps = _dir_stamps(con)
    new_stamps = _stamps(root)
    # the journal first: a receipt published after this read is in a shard stamped after it, or next time
    journal_ids, new_offset = journal.read_from(root, offset)
    full = full or journal.size(root) < offset or bool(layout.flat_ids(root))
    if full:
        on_disk = set(ledger.ids())
        known = _known(con)
        candidates = on_disk - known
        gone = known - on_disk
    else:
        published = set(journal_ids) - _known_of(con, set(journal_ids))
        if limit is not None and len(published) > limit:
            # a round that cannot finish: the journal's receipts only. Listing the shards is left to the round
            # that can finish: under a flood of publishes every shard changed moments ago, and listing them all
            # (every id of the ledger) each round cost readers and publishers time that grew with the ledger
            return _add_some(ledger, con, published, journal_ids, limit, result, progress)
        if not shards:
            _add(ledger, con, sorted(published), result, progress)
            return result  # the published receipts are in; offset and stamps stay for a sync that lists shards
        changed = [s for s in new_stamps if stamps.get(s) != new_stamps[s] or new_stamps[s] < 0]
        vanished = [s for s in stamps if s not in new_stamps]
        candidates, gone = published, set()
        known_in = _known_in(con, changed + vanished)  # one pass over the index's ids, however many shards
        for shard in changed + vanished:
            listed = set(layout.shard_ids(root, shard)) if shard in new_stamps else set()
            known = known_in[shard]
            candidates |= listed - known
            gone |= known - listed
    for receipt_id in sorted(gone):
        if not ledger.path(receipt_id).is_dir():
            _delete(con, receipt_id)
            result.removed.append(receipt_id)
    if limit is not None and len(candidates) > limit:
        return _add_some(ledger, con, candidates, journal_ids, limit, result, progress)
    _add(ledger, con, sorted(candidates), result, progress)
    changed_stamps = {k: v for k, v in new_stamps.items() if stamps.get(k) != v}
    gone_stamps = [k for k in stamps if k not in new_stamps]
    if changed_stamps or gone_stamps or new_offset != offset:
        con.execute("BEGIN TRANSACTION")
        if gone_stamps:
            con.execute("DELETE FROM index_dirs WHERE list_contains(?::VARCHAR[], dir)", [gone_stamps])
        if changed_stamps:
            con.execute("INSERT OR REPLACE INTO index_dirs SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[])",
                        [list(changed_stamps), list(changed_stamps.values())])
        con.execute("INSERT OR REPLACE INTO index_meta VALUES ('journal_offset', ?)", [str(new_offset)])
        con.execute("COMMIT")
    return result


def _add_some(
    ledger: Ledger, con: duckdb.DuckDBPyConnection, candidates: set[str], journal_ids: list[str], limit: int,
    result: SyncResult, progress: Callable[[int, int], None] | None,
) -> SyncResult:
    """Add ``limit`` of the candidates, the latest published first (a publisher's own), and leave the rest, the
    journal offset and the shard stamps to the next sync (the index is not up to date)."""
    latest = [i for i in reversed(journal_ids) if i in candidates][:limit]
    todo = sorted(set(latest) | set(sorted(candidates)[: max(0, limit - len(latest))]))
    result.left = len(candidates) - len(todo)
    _add(ledger, con, todo, result, progress)
    return result


def _stamps(root: Path) -> dict[str, int]:
    """Each shard directory's mtime (-1 when too recent to be trusted)."""
    now = time.time_ns()
    stamps = {}
    for shard in layout.shards(root):
        mtime = _mtime(root / shard)
        if mtime is not None:
            stamps[shard] = mtime if now - mtime > RACY_NS else -1
    return stamps


def is_current(ledger: Ledger, con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the index holds every receipt on disk, decided (almost) without listing a receipt: nothing
    appended to the journal since its last sync, no receipt in the old flat layout, and every shard directory
    either unchanged since that sync or, when it changed or changed too recently for its stamp to be trusted
    (a receipt published within the last 2 s), listing exactly the ids the index holds for it."""
    try:
        meta = _meta(con)
        stamps = _dir_stamps(con)
    except duckdb.Error:  # an index of another version
        return False
    if meta.get("version") != str(INDEX_VERSION) or int(meta.get("journal_offset") or 0) != journal.size(ledger.root):
        return False
    if layout.flat_ids(ledger.root):
        return False
    current = _stamps(ledger.root)
    if set(current) != set(stamps):
        return False
    moved = [shard for shard, stamp in current.items() if stamp < 0 or stamps[shard] != stamp]
    if not moved:
        return True
    known_in = _known_in(con, moved)  # a shard changed since, or too recently to trust its stamp: listed
    return all(set(layout.shard_ids(ledger.root, shard)) == known_in[shard] for shard in moved)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The index's ``index_meta`` (its layout version, the journal offset of its last sync)."""
    return dict(con.execute("SELECT key, value FROM index_meta").fetchall())


def _dir_stamps(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Each shard directory's mtime as the index's last sync saw it (``index_dirs``)."""
    return dict(con.execute("SELECT dir, mtime_ns FROM index_dirs").fetchall())


def _known(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Every id in the index (indexed or known damaged)."""
    return {r[0] for r in con.execute("SELECT id FROM receipts UNION ALL SELECT id FROM damaged").fetchall()}


def _known_in(con: duckdb.DuckDBPyConnection, shards: list[str]) -> dict[str, set[str]]:
    """Ids in the index (indexed or known damaged) of each of ``shards``, read in one pass over the ids
    (not a query per shard: a sync after many publishes finds many shards changed)."""
    out: dict[str, set[str]] = {shard: set() for shard in shards}
    if not shards:
        return out
    width = layout.SHARD_CHARS
    rows = con.execute(
        "SELECT id FROM receipts WHERE list_contains($1::VARCHAR[], left(id, $2)) "
        "UNION ALL SELECT id FROM damaged WHERE list_contains($1::VARCHAR[], left(id, $2))", [shards, width]
    ).fetchall()
    for (receipt_id,) in rows:
        out[receipt_id[:width]].add(receipt_id)
    return out


def _known_of(con: duckdb.DuckDBPyConnection, ids: set[str]) -> set[str]:
    """Those of ``ids`` the index already knows (indexed or damaged)."""
    if not ids:
        return set()
    rows = con.execute(  # each table probed by the candidates (its id index), not joined as a whole
        "SELECT id FROM receipts WHERE id IN (SELECT unnest($1::VARCHAR[])) "
        "UNION ALL SELECT id FROM damaged WHERE id IN (SELECT unnest($1::VARCHAR[]))", [sorted(ids)]
    ).fetchall()
    return {r[0] for r in rows}


@dataclass
class _Ready:
    receipt_id: str
    row: tuple[Any, ...] | None = None
    tables: dict[str, tuple[str, int]] = field(default_factory=dict)
    """table name -> (Parquet file, rows listed in the receipt), for the tables with rows"""
    error: str | None = None


def _prepare(ledger: Ledger, receipt_id: str, seen: Seen | None = None) -> _Ready:
    """Verify one receipt (seal, digests and sizes here: :func:`ledger.store.integrity.sealed`; row counts by
    the batch: only verified data enters the index) and make its row. ``seen``: the files this sync verified
    already (a file shared by receipts is hashed once)."""
    from ledger.store.integrity import sealed
    from schemas.tables import TABLES

    try:
        directory = ledger.path(receipt_id)
        checked = sealed(ledger, receipt_id, directory=directory, seen=seen)
        tables = {}
        where = str(directory)
        for a in checked.data.get("artifacts") or ():
            name = str(a["path"])[: -len(".parquet")]
            if a.get("kind") == "table" and a.get("rows") and name in TABLES:
                tables[name] = (os.path.join(where, a["path"]), int(a["rows"]))
        return _Ready(receipt_id, receipt_row(checked.data, checked.text), tables)
    except (LedgerError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        return _Ready(receipt_id, error=str(exc).splitlines()[0])


def _add(
    ledger: Ledger, con: duckdb.DuckDBPyConnection, todo: list[str], result: SyncResult,
    progress: Callable[[int, int], None] | None,
) -> None:
    """Add receipts, :data:`CHUNK` at a time, each chunk in one transaction: verified, then its rows inserted
    with one statement per table. Many receipts (a reindex, a reader catching up) are shared out to
    :data:`VERIFIERS` threads, each with its own connection to the index (a cursor: DuckDB lets the
    connections of one process append to the same tables in concurrent transactions), so that on two cores
    one thread's reading and inserting (DuckDB releases the GIL) runs beside the other's verifying (Python).
    A chunk that fails to insert is retried one receipt at a time so that a damaged receipt is named and the
    others still enter. (Until 2026-12-02 the calling thread inserted every batch of 512 while threads
    verified the next one a receipt a task: its reading of the Parquet files, the largest part, ran alone.)"""
    if not todo:
        return
    seen: Seen = {}
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    if len(chunks) == 1:  # a publisher's or a reader's few: no thread, no cursor
        _add_chunk(ledger, con, chunks[0], seen, result)
        if progress:
            progress(len(todo), len(todo))
        return
    import threading
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()
    cursors: list[duckdb.DuckDBPyConnection] = []
    done = 0
    lock = threading.Lock()

    def add(chunk: list[str]) -> SyncResult:
        cursor = getattr(local, "cursor", None)
        if cursor is None:
            with lock:
                cursor = local.cursor = con.cursor()
                cursors.append(cursor)
        part = SyncResult()
        _add_chunk(ledger, cursor, chunk, seen, part)
        return part

    try:
        with ThreadPoolExecutor(max_workers=VERIFIERS) as pool:
            for part in pool.map(add, chunks):  # in order: the results as a single thread gives them
                result.added.extend(part.added)
                result.damaged.update(part.damaged)
                done += len(part.added) + len(part.damaged)
                if progress:
                    progress(done, len(todo))
    finally:
        for cursor in cursors:
            cursor.close()


def _add_chunk(ledger: Ledger, con: duckdb.DuckDBPyConnection, ids: list[str], seen: Seen, result: SyncResult) -> None:
    """Verify receipts and insert the good ones in one transaction, the others marked damaged; when the
    transaction fails, each receipt is retried alone, so that the one at fault is named."""
    ready = [_prepare(ledger, rid, seen) for rid in ids]
    for r in ready:
        if r.error is not None:
            _mark_damaged(con, r.receipt_id, r.error, result)
    good = [r for r in ready if r.error is None]
    try:
        _insert_batch(con, good)
        result.added.extend(r.receipt_id for r in good)
    except (duckdb.Error, LedgerError, ValueError, TypeError):  # Arrow's errors of a mistyped value too
        for r in good:
            try:
                _insert_batch(con, [r])
                result.added.append(r.receipt_id)
            except (duckdb.Error, LedgerError, ValueError, TypeError) as exc:
                _mark_damaged(con, r.receipt_id, str(exc).splitlines()[0], result)


def _mark_damaged(con: duckdb.DuckDBPyConnection, receipt_id: str, error: str, result: SyncResult) -> None:
    con.execute("INSERT OR REPLACE INTO damaged VALUES (?, ?)", [receipt_id, error])
    result.damaged[receipt_id] = error


def _insert_batch(con: duckdb.DuckDBPyConnection, ready: list[_Ready]) -> None:
    """One transaction: the receipts' rows in one statement, each metric table of all of them in one
    ``read_parquet`` over their files (each file opened once: its rows counted in a temporary table and
    checked against the receipt before they go into the index)."""
    if not ready:
        return
    import pyarrow as pa

    from schemas.tables import TABLES

    con.execute("BEGIN TRANSACTION")
    try:
        rows = [r.row or () for r in ready]
        columns = {c: [row[i] for row in rows] for i, c in enumerate(RECEIPT_COLUMNS)}
        con.register("_batch_rows", pa.table(columns, schema=_receipts_arrow()))
        con.execute("INSERT INTO receipts BY NAME SELECT * FROM _batch_rows")
        con.unregister("_batch_rows")
        for name in TABLES:
            batch = [(r.receipt_id, *r.tables[name]) for r in ready if name in r.tables]
            if not batch:
                continue
            if name == "routing":  # a file at a time (old receipts hold long rows), then its step summary
                found = dict(con.execute("SELECT file_name, num_rows FROM parquet_file_metadata(?)",
                                         [[b[1] for b in batch]]).fetchall())
                for receipt_id, path, listed in batch:
                    if found.get(path) != listed:
                        raise LedgerError(f"routing.parquet of {receipt_id[:12]}: {found.get(path)} rows, "
                                          f"listed as {listed}")
                    con.execute(f"INSERT INTO routing BY NAME SELECT ? AS receipt_id, * FROM "
                                f"{parquet_source(Path(path))}", [receipt_id, path])
                    index_step_summary(con, receipt_id)
                continue
            paths = pa.table({"receipt_id": [b[0] for b in batch], "filename": [b[1] for b in batch]})
            con.register("_batch_files", paths)
            con.execute(
                "CREATE OR REPLACE TEMP TABLE _batch_table AS SELECT f.receipt_id, p.* EXCLUDE (filename) "
                "FROM read_parquet(?, filename = true, union_by_name = true) p JOIN _batch_files f USING (filename)",
                [[b[1] for b in batch]],
            )
            con.unregister("_batch_files")
            counts = dict(con.execute("SELECT receipt_id, count(*) FROM _batch_table GROUP BY ALL").fetchall())
            for receipt_id, path, listed in batch:
                if counts.get(receipt_id, 0) != listed:
                    raise LedgerError(f"{Path(path).name} of {receipt_id[:12]}: {counts.get(receipt_id, 0)} rows, "
                                      f"listed as {listed}")
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _batch_table")
            con.execute("DROP TABLE _batch_table")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


_RECEIPTS_ARROW: list[Any] = []


def _receipts_arrow() -> pa.Schema:
    """The Arrow schema of the receipts table's rows as :func:`receipt_row` makes them (built once)."""
    if not _RECEIPTS_ARROW:
        import pyarrow as pa

        types = {"VARCHAR": pa.string(), "TIMESTAMP": pa.timestamp("us"), "DOUBLE": pa.float64(),
                 "INTEGER": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_(), "JSON": pa.string()}
        _RECEIPTS_ARROW.append(pa.schema([(c, types[t.split()[0]]) for c, t in RECEIPT_COLUMNS.items()]))
    return _RECEIPTS_ARROW[0]


def _delete(con: duckdb.DuckDBPyConnection, receipt_id: str) -> None:
    from schemas.tables import TABLES

    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM receipts WHERE id = ?", [receipt_id])
    con.execute("DELETE FROM damaged WHERE id = ?", [receipt_id])
    for name in (*TABLES, "routing_steps"):
        con.execute(f"DELETE FROM {name} WHERE receipt_id = ?", [receipt_id])
    con.execute("COMMIT")


@contextmanager
def writable(
    ledger: Ledger, timeout: float = 30.0, give_way: Callable[[], bool] | None = None, *, schema: bool = True,
    fresh: bool = False,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection to the index with its schema in place (waits for the lock); ``schema=False``:
    as it is (a rebuild replaces it). ``fresh``: the caller rebuilds the index from the files (``reindex``), so
    it is no longer unverified once closed. Whether the index changed since ledger last wrote it is looked at
    once the lock is held, and carried into the stamp written on close (:func:`unverified`)."""
    ledger.root.mkdir(parents=True, exist_ok=True)
    existed = ledger.index_path.exists()
    try:
        con = _connect(ledger.index_path, timeout, give_way=give_way)
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.IOException) and _is_lock_error(exc):
            raise
        _quarantine(ledger.index_path)  # not a DuckDB file any more: it is derived, rebuild it
        con = _connect(ledger.index_path, timeout, give_way=give_way)
        existed = False
    doubt = None if fresh or not existed else unverified(ledger)
    try:
        if schema:
            _ensure_schema(con)
        yield con
    finally:
        with _stamp(ledger, exclusive=True) as fd:  # readers compare the file with the stamp under this lock
            con.close()
            if fd is not None:
                _write_stamp(fd, ledger, doubt)


@contextmanager
def _stamp(ledger: Ledger, *, exclusive: bool) -> Iterator[int | None]:
    """The index's stamp file (:data:`ledger.store.layout.INDEX_STAMP`), ``flock``'ed for the block: exclusively by
    a writer closing the index and writing the stamp, shared by a reader comparing them; None when it cannot be
    opened (none yet, or a ledger this process cannot write). A symbolic link is never followed."""
    flags = (os.O_RDWR | os.O_CREAT if exclusive else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(ledger.root / layout.INDEX_STAMP, flags, 0o644)
    except OSError:
        yield None
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


def _file_state(ledger: Ledger) -> list[list[int] | None]:
    """(size, modification time) of the index file and of its write-ahead log (None: absent)."""
    out: list[list[int] | None] = []
    for path in (ledger.index_path, ledger.index_path.with_name(ledger.index_path.name + ".wal")):
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append([st.st_size, st.st_mtime_ns])
    return out


def _write_stamp(fd: int, ledger: Ledger, doubt: str | None) -> None:
    data = json.dumps({"files": _file_state(ledger), "unverified": doubt,
                       "written_at": datetime.now(UTC).isoformat(timespec="seconds")}).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # a full disk: the next reader finds the stamp torn or old and says the index is unverified


def unverified(ledger: Ledger) -> str | None:
    """Why the index's answers are unverified, or None when nothing but ledger wrote it since it was last
    rebuilt or verified whole. The index is a cache of verified receipts; every write of ledger's stamps the
    file's size and modification time (:data:`ledger.store.layout.INDEX_STAMP`), so an index edited by anything
    else (a `duckdb` session, a copy over it) no longer matches, and stays unverified, through later syncs, until
    ``ledger verify`` of the whole ledger finds nothing (:func:`mark_verified`) or ``ledger reindex`` rebuilds it.
    Readers say so (:func:`reader`); ``verify``, ``compare`` and ``ls`` also check what they show."""
    with _stamp(ledger, exclusive=False) as fd:
        if fd is None:
            return ("there is no record that ledger wrote it (an index made by an older version, or by hand)"
                    if ledger.index_path.exists() else None)
        try:
            stamp = json.loads(os.pread(fd, 1 << 16, 0))
            files, doubt = stamp["files"], stamp.get("unverified")
        except (OSError, ValueError, TypeError, KeyError):
            return "its stamp is unreadable"
        if doubt:
            return str(doubt)
        if files != _file_state(ledger):
            when = stamp.get("written_at") or "at an unknown time"
            return f"index.duckdb changed after ledger last wrote it ({when})"
    return None


def mark_verified(ledger: Ledger, con: duckdb.DuckDBPyConnection) -> None:
    """Record that the index, as it is now, was found true to the files (``ledger verify`` of the whole ledger,
    called while its reader ``con`` is open: no writer can change the file meanwhile). Nothing when ``con`` was
    read from the files instead (the index was busy): then the index itself was not what was checked."""
    if con in _IN_MEMORY:
        return
    with _stamp(ledger, exclusive=True) as fd:
        if fd is not None:
            _write_stamp(fd, ledger, None)


_SAID: set[str] = set()


def _say_unverified(ledger: Ledger) -> None:
    """Say on stderr, once per process, that the index this reader answers from is unverified and why."""
    reason = unverified(ledger)
    if reason is not None and reason not in _SAID:
        _SAID.add(reason)
        sys.stderr.write(f"ledger: the index is unverified: {reason}; its answers may not be what the receipt files "
                         "say (`ledger verify` compares them, `ledger reindex` rebuilds it)\n")


def _quarantine(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.replace(p.with_name(p.name + f".corrupt-{int(time.time())}"))


def try_sync(ledger: Ledger, timeout: float = 2.0) -> SyncResult | None:
    """Sync if the index lock comes free within ``timeout``; otherwise leave it to the next reader. A
    publisher gives way at once to a reader that waits (the reader syncs what it needs itself), and leaves the
    index alone while another publish is under way (:func:`ledger.store.journal.publishing_now`): among many
    publishers on a busy machine, one that held the index's lock for its sync did so at a low CPU share (its
    priority lowered, :func:`ledger.store.staging.yield_cpu`) while readers waited for that lock; the publisher
    that finds no other publish under way, and the readers after a burst, index what the burst published."""
    if readers_waiting(ledger) or journal.publishing_now(ledger.root):
        return None
    try:
        with writable(ledger, timeout, give_way=lambda: readers_waiting(ledger)) as con:
            if readers_waiting(ledger):  # one came while this publisher connected: it goes first
                return None
            return sync(ledger, con, limit=PUBLISHER_SYNC_LIMIT)
    except IndexBusy:
        return None


def reindex(ledger: Ledger, progress: Callable[[int, int], None] | None = None) -> SyncResult:
    """Rebuild the index from the receipt files.

    The write-ahead log is checkpointed once, when the rebuild closes the index, instead of at DuckDB's default
    16 MB: each checkpoint compressed again the tables' last, growing row group, so its cost grew with the ledger
    (the receipts table alone, 100,000 rows inserted 512 at a time: 37 s of CPU with the default, 25 s at 256 MB,
    18 s at 1 GB; a whole reindex of 101,723 generated receipts, back to back on a shared machine: 199.5 s of CPU
    against 209.2 s); the log meanwhile holds what the rebuild inserted."""
    with writable(ledger, schema=False, fresh=True) as con:
        con.execute("SET threads = 1")  # many small files: DuckDB's threads cost more than they read; the
        con.execute(f"SET wal_autocheckpoint = '{REINDEX_CHECKPOINT}'")  # receipts of the next batch are
        con.execute("BEGIN TRANSACTION")  # verified meanwhile in Python's. The old tables dropped and the new
        _drop_all(con)                    # made in one transaction: one commit (a new index had its schema
        _create_schema(con)               # made, dropped and made again, a commit a statement: 0.5 s)
        con.execute("COMMIT")
        return sync(ledger, con, progress, full=True)


REINDEX_CHECKPOINT = "1GB"
"""The write-ahead log's size at which a rebuild checkpoints the index (:func:`reindex`)."""


READER_LOCK_WAIT_S = 2.0
"""How long a reader waits for the index lock, twice at most (to sync, then to open the synced index)."""
READER_FALLBACK_MAX = 500
"""Up to this many published receipts, a reader that cannot get the index reads the files instead; above it,
it waits for the index (up to :data:`READER_LONG_WAIT_S`): verifying every file would take longer."""
READER_LONG_WAIT_S = 60.0
READER_SYNC_ROUND = 64
"""A reader brings the index up to date this many receipts at a time (:func:`_catch_up`)."""
READER_SYNC_BUDGET_S = 2.0
"""While receipts keep being published, a reader stops catching up after this long and answers from the index as
far as it got (saying how many it left); a quiet ledger is always brought fully up to date."""


@contextmanager
def reader(
    ledger: Ledger, timeout: float = READER_LOCK_WAIT_S, *, announce: bool = True,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A synced, read-only connection (no writes, no access to files outside the index).

    DuckDB lets one process write a file and no process read it meanwhile. A reader announces itself
    (publishers then stop competing for the lock, :func:`try_sync`), opens the index read-only when it is
    already current (:func:`is_current`: no receipt listed), else waits ``timeout`` for the lock to sync,
    then again to open; when the index stays busy longer (a ``reindex``, another reader's long query), it
    reads the receipt files themselves into an in-memory index (every receipt verified, as a sync does),
    says so on stderr and never waits more than twice ``timeout`` — in a ledger of up to
    :data:`READER_FALLBACK_MAX` receipts; a larger one waits for the index instead.

    While receipts are being published (:func:`ledger.store.journal.publishing_now`), a reader that can open
    the index read-only indexes nothing and takes no write lock, however few receipts it is behind: on a
    machine busy with publishers its share of the CPU is small (measured among 32 writers on 2 cores: a
    reader that indexed one round of 64 itself took 14 s, one that did not 2.5-3.7 s), so it answers from the
    index as it is, at once, and says on stderr how many published receipts that answer leaves out (the
    publishers' own syncs and the first reader after them index those). Receipts that arrive without a
    publish (a copy, ``dvc pull``) are then found by the first reader after the publishers.

    An index changed by anything but ledger since its last rebuild or whole verify is said to be unverified, on
    stderr once per process (:func:`unverified`; ``announce=False``: the caller says it its own way)."""
    if not ledger.root.is_dir():
        con = duckdb.connect(":memory:", config={"enable_external_access": False})
        _ensure_schema(con)
        try:
            yield con
        finally:
            con.close()
        return
    with _reader_waiting(ledger):  # held while reading too: publishers do not queue behind a read
        con = _open_current(ledger, timeout)
        if announce and con not in _IN_MEMORY:
            _say_unverified(ledger)
        try:
            yield con
        finally:
            con.close()


def _open_current(ledger: Ledger, timeout: float) -> duckdb.DuckDBPyConnection:
    if ledger.index_path.exists():
        flood = journal.publishing_now(ledger.root)  # publishers give way to this reader within one sync
        try:  # among publishers, the read-only open is all this reader waits for (twice ``timeout`` at most)
            con = _connect(ledger.index_path, 2 * timeout if flood else min(timeout, 0.5), read_only=True)
        except (IndexBusy, duckdb.Error):
            con = None
        if con is not None:
            if journal.publishing_now(ledger.root):
                left = _not_indexed(ledger, con)  # the journal past the index's offset, nothing listed
                if left is not None:
                    if left:
                        import sys

                        sys.stderr.write(f"ledger: {left} receipts published in the last moments are not in this "
                                         "answer yet (receipts are being published; the publishers and the next "
                                         "reader index them)\n")
                    return con
            elif is_current(ledger, con):
                return con
            con.close()
    try:
        with writable(ledger, timeout) as con:
            _catch_up(ledger, con)
        return _connect(ledger.index_path, timeout, read_only=True)
    except IndexBusy:
        if journal.size(ledger.root) // 65 <= READER_FALLBACK_MAX:  # 65 bytes a journal line
            return _from_files(ledger)
    # a large ledger: reading every file would take far longer than the writer in the way
    with writable(ledger, READER_LONG_WAIT_S) as con:
        _catch_up(ledger, con)
    return _connect(ledger.index_path, READER_LONG_WAIT_S, read_only=True)


def _not_indexed(ledger: Ledger, con: duckdb.DuckDBPyConnection) -> int | None:
    """How many receipts the journal lists past the index's offset that the index does not hold (publishers'
    own syncs index some without moving the offset); None for an index of another version."""
    try:
        meta = _meta(con)
    except duckdb.Error:
        return None
    if meta.get("version") != str(INDEX_VERSION):
        return None
    ids = set(journal.read_from(ledger.root, int(meta.get("journal_offset") or 0))[0])
    return len(ids - _known_of(con, ids))


def _catch_up(ledger: Ledger, con: duckdb.DuckDBPyConnection) -> int:
    """Sync for a reader, :data:`READER_SYNC_ROUND` receipts at a time, until the index is up to date, or, when
    publishers keep adding receipts faster than this reader indexes them (many writers on few cores), until
    :data:`READER_SYNC_BUDGET_S` has passed: then it says on stderr how many receipts this answer leaves out
    (the next reader or publisher indexes them) and returns that number. A reader thus never waits on the
    backlog of a flood of publishes, and one after the flood sees every receipt. Once a publish is under way it
    stops after the round it is in (the reader among publishers, :func:`reader`). A long catch-up (an index of an
    older version rebuilt, a pull of many receipts) is a :mod:`ledger.progress` task: a bar on a terminal."""
    from ledger import progress

    deadline = time.monotonic() + READER_SYNC_BUDGET_S
    published = journal.size(ledger.root)
    with progress.task("indexing receipts", unit="receipts") as advance:
        return _catch_up_rounds(ledger, con, deadline, published, advance)


def _catch_up_rounds(ledger: Ledger, con: duckdb.DuckDBPyConnection, deadline: float, published: int,
                     advance: Callable[..., None]) -> int:
    import sys

    done = 0
    while True:
        # while publishes are under way every shard changed moments ago: listing them all (every id of the
        # ledger) is left to a reader after them; this one adds what the journal says was published
        result = sync(ledger, con, limit=READER_SYNC_ROUND, shards=not journal.publishing_now(ledger.root))
        left = result.left
        done += len(result.added)
        advance(done, done + left)
        if not left:
            return 0
        if journal.publishing_now(ledger.root):
            sys.stderr.write(f"ledger: {left} receipts published in the last moments are not in this answer yet "
                             "(receipts are being published; the publishers and the next reader index them)\n")
            return left
        if time.monotonic() > deadline and journal.size(ledger.root) > published:
            sys.stderr.write(f"ledger: {left} receipts published in the last moments are not in this answer yet "
                             "(receipts keep arriving; the index is catching up)\n")
            return left


def _from_files(ledger: Ledger) -> duckdb.DuckDBPyConnection:
    """An in-memory index of the ledger built from its files, then closed to the file system."""
    import sys

    sys.stderr.write(f"ledger: the index {ledger.index_path} is busy (another process writes it); reading the "
                     "receipt files directly\n")
    from ledger import progress

    con = duckdb.connect(":memory:")
    _ensure_schema(con)
    with progress.task("reading receipt files", unit="receipts") as advance:
        sync(ledger, con, advance)
    con.execute("SET enable_external_access = false")
    _IN_MEMORY.add(con)
    return con


_IN_MEMORY: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()
"""Connections of :func:`_from_files`: built from the verified files, never unverified."""


def query(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> pa.Table:
    """Run one statement and return its result as an Arrow table."""
    return con.sql(sql, params=params or None).to_arrow_table()  # an execute()'s result copies (DuckDB 2 warns)
