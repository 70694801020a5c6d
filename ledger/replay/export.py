"""`ledger export`: the index tables as a Hive-partitioned Parquet dataset or as Delta Lake tables, for the
engines a data team already runs (Spark, Trino, Databricks, Athena, DuckDB, polars), written incrementally.

Layout at the destination (a local path or an object-store URL such as ``s3://bucket/prefix``)::

    <dest>/receipts/started_date=YYYY-MM-DD/part-<batch>-<i>.parquet    (parquet)
    <dest>/<table>/started_date=.../...                                  steps, evals, routing, timing,
                                                                         events, telemetry
    <dest>/<table>/_delta_log/ ...                                       (delta: one Delta table per table)

Every table is partitioned by ``started_date`` (the UTC date its receipt started; null when unknown) and
carries ``schema_version``, the receipt schema the rows follow (docs/export.md lists the columns). An export
adds only the receipts the destination's ``receipts`` table does not hold: the metric tables are written
first and the ``receipts`` table last, so a receipt counts as exported once its ``receipts`` row is there.
An export cut short between the two leaves rows of an uncommitted batch in some metric tables; the next
export removes them before it writes (Parquet: the files of that batch, by name; Delta: the rows of the
receipts still to export, found from the tables' commit history), so no row is ever doubled.

Credentials for object stores come from the environment and the AWS configuration (pyarrow's and delta-rs'
own lookups); nothing here stores them.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.errors import BadInput, LedgerError, MissingExtra
from ledger.store import index
from ledger.store.faults import fault
from ledger.store.receipts import Ledger
from schemas.tables import TABLES

FORMATS = ("parquet", "delta")
PARTITION = "started_date"
"""The Hive partition column of every exported table."""
VERSION_COLUMN = "schema_version"
RECEIPTS = "receipts"
BATCH_KEY = "stackreceipt.export_batch"
"""Delta commit metadata: the export batch a commit belongs to."""
REPAIRED_KEY = "stackreceipt.repaired_batches"
"""Delta commit metadata of a repair: the uncommitted batches whose rows it deleted."""
_PART_RE = re.compile(r"part-([0-9a-f]{32})-\d+\.parquet$")


@dataclass
class Exported:
    """What one export wrote."""

    target: str
    format: str
    added: list[str] = field(default_factory=list)
    """Receipt ids exported by this call."""
    rows: dict[str, int] = field(default_factory=dict)
    """Rows written per table by this call."""
    already: int = 0
    """Receipts the destination held already."""
    repaired: int = 0
    """Files or tables of an export cut short that this call cleaned up first."""

    @property
    def message(self) -> str:
        written = ", ".join(f"{name} {n}" for name, n in self.rows.items() if n) or "no rows"
        return (f"exported {len(self.added)} receipt(s) to {self.target} as {self.format} ({written}; "
                f"{self.already} receipt(s) already there)")


def schema_version() -> int:
    """The version of the exported tables' schema: the receipt schema's (they change together)."""
    from schemas.receipt import SCHEMA_VERSION

    return int(SCHEMA_VERSION)


def _uri(target: str) -> str:
    """A URL as given; a local path made absolute (pyarrow and delta-rs want one)."""
    return target.rstrip("/") if "://" in target else str(Path(target).expanduser().resolve())


def _storage_options() -> dict[str, str]:
    """delta-rs reads credentials and the endpoint from the environment itself; an explicit plain-HTTP
    endpoint (a local S3-compatible server) has to be allowed in so many words."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    return {"AWS_ALLOW_HTTP": "true"} if endpoint.startswith("http://") else {}


def _arrow(con: Any, sql: str, params: list[Any]) -> pa.Table:
    table: pa.Table = con.sql(sql, params=params).to_arrow_table()
    return _portable(table)


def _portable(table: pa.Table) -> pa.Table:
    """Types every engine reads alike: JSON as strings, naive timestamps (UTC in the index) as UTC."""
    fields = []
    for f in table.schema:
        kind = f.type
        if pa.types.is_timestamp(kind) and kind.tz is None:
            kind = pa.timestamp("us", tz="UTC")
        fields.append(pa.field(f.name, kind, nullable=True, metadata=f.metadata))
    schema = pa.schema(fields, metadata={"stackreceipt.schema_version": str(schema_version())})
    return table.cast(schema)


def read_batch(ledger: Ledger, todo: list[str]) -> dict[str, pa.Table]:
    """The index rows of the receipts in ``todo``, per table, with the partition and version columns."""
    version = schema_version()
    out: dict[str, pa.Table] = {}
    with index.reader(ledger) as con:
        date = f"CAST(r.started_at AS DATE) AS {PARTITION}"
        for name in TABLES:
            out[name] = _arrow(con, f"SELECT t.*, {date}, CAST(? AS INTEGER) AS {VERSION_COLUMN} FROM {name} t "
                                    "JOIN receipts r ON r.id = t.receipt_id WHERE list_contains(?, t.receipt_id) "
                                    "ORDER BY t.receipt_id", [version, todo])
        out[RECEIPTS] = _arrow(con, "SELECT * EXCLUDE (tags, receipt), CAST(tags AS VARCHAR) AS tags, "
                                    f"CAST(receipt AS VARCHAR) AS receipt, {date} FROM receipts r "
                                    "WHERE list_contains(?, r.id) ORDER BY r.id", [todo])
    return out


def indexed_ids(ledger: Ledger) -> list[str]:
    with index.reader(ledger) as con:
        return [r[0] for r in con.execute("SELECT id FROM receipts ORDER BY id").fetchall()]


def export(ledger: Ledger, target: str, fmt: str = "parquet") -> Exported:
    """Write the receipts the destination does not hold yet (and their metric rows)."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown export format {fmt!r}: use parquet or delta")
    uri = _uri(target)
    result = Exported(target=target, format=fmt)
    try:
        writer: _Writer = _Delta(uri) if fmt == "delta" else _Parquet(uri)  # may look the bucket up already
        done = writer.exported()
        todo = [i for i in indexed_ids(ledger) if i not in done]
        result.already = len(done)
        if not todo:
            return result
        result.repaired = writer.repair(todo)
        tables = read_batch(ledger, todo)
        batch = uuid.uuid4().hex
        for name in (*TABLES, RECEIPTS):  # the receipts table last: its rows commit the batch
            if name == RECEIPTS:
                fault("exporting")
            if tables[name].num_rows or writer.wants_empty(name):
                writer.write(name, tables[name], batch)
            result.rows[name] = tables[name].num_rows
    except LedgerError:
        raise
    except ImportError as exc:
        raise MissingExtra(str(exc.name or "deltalake"), "export") from exc
    except Exception as exc:  # pyarrow, delta-rs and the object store raise their own types
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LedgerError(f"export to {target} failed: {detail}; the ledger is untouched and the next export "
                          "repairs a partial one") from exc
    result.added = todo
    return result


class _Writer:
    def exported(self) -> set[str]:
        raise NotImplementedError

    def wants_empty(self, name: str) -> bool:
        """Whether an empty table is written (so that the table exists, with its schema, before any row)."""
        return False

    def repair(self, todo: list[str]) -> int:
        raise NotImplementedError

    def write(self, name: str, table: pa.Table, batch: str) -> None:
        raise NotImplementedError


def _check_version(versions: pa.ChunkedArray, where: str) -> None:
    found = {v for v in versions.to_pylist() if v is not None} - {schema_version()}
    if found:
        raise BadInput(f"{where} holds receipts exported with schema version {sorted(found)[0]}; this ledger "
                       f"writes version {schema_version()}: export to a new path (docs/export.md lists the changes)")


class _Parquet(_Writer):
    """A Hive-partitioned Parquet dataset per table; one file per partition and export batch."""

    def __init__(self, uri: str) -> None:
        import pyarrow.fs as pafs

        self.fs, self.root = pafs.FileSystem.from_uri(uri)
        self.root = self.root.rstrip("/")

    def _files(self, name: str) -> list[str]:
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{name}", recursive=True, allow_not_found=True))
        return [i.path for i in infos if i.type == pafs.FileType.File and _PART_RE.search(i.path)]

    def exported(self) -> set[str]:
        import pyarrow.dataset as ds

        files = self._files(RECEIPTS)
        if not files:
            return set()
        table = ds.dataset(files, format="parquet", filesystem=self.fs).to_table(columns=["id", VERSION_COLUMN])
        _check_version(table.column(VERSION_COLUMN), f"{self.root}/{RECEIPTS}")
        return set(table.column("id").to_pylist())

    def repair(self, todo: list[str]) -> int:
        committed = {m.group(1) for f in self._files(RECEIPTS) if (m := _PART_RE.search(f))}
        stale = [f for name in TABLES for f in self._files(name)
                 if (m := _PART_RE.search(f)) and m.group(1) not in committed]
        for path in stale:
            self.fs.delete_file(path)
        return len(stale)

    def write(self, name: str, table: pa.Table, batch: str) -> None:
        import pyarrow.dataset as ds

        ds.write_dataset(table, f"{self.root}/{name}", filesystem=self.fs, format="parquet",
                         partitioning=[PARTITION], partitioning_flavor="hive",
                         basename_template=f"part-{batch}-{{i}}.parquet",
                         existing_data_behavior="overwrite_or_ignore")


class _Delta(_Writer):
    """One Delta Lake table per table (delta-rs: no Spark), partitioned by ``started_date``."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.options = _storage_options()

    def _table(self, name: str) -> Any:
        from deltalake import DeltaTable

        location = f"{self.uri}/{name}"
        if not DeltaTable.is_deltatable(location, storage_options=self.options):
            return None
        return DeltaTable(location, storage_options=self.options)

    def exported(self) -> set[str]:
        table = self._table(RECEIPTS)
        if table is None:
            return set()
        rows = table.to_pyarrow_table(columns=["id", VERSION_COLUMN])
        _check_version(rows.column(VERSION_COLUMN), f"{self.uri}/{RECEIPTS}")
        return set(rows.column("id").to_pylist())

    def wants_empty(self, name: str) -> bool:
        return self._table(name) is None

    @staticmethod
    def _batches(table: Any, key: str = BATCH_KEY) -> set[str]:
        return {b for c in table.history() if key in c for b in str(c[key]).split(",")}

    def repair(self, todo: list[str]) -> int:
        from deltalake import CommitProperties

        receipts = self._table(RECEIPTS)
        committed = self._batches(receipts) if receipts is not None else set()
        repaired = 0
        for name in TABLES:
            table = self._table(name)
            if table is None:
                continue
            stale = self._batches(table) - committed - self._batches(table, REPAIRED_KEY)
            if not stale:
                continue
            # rows of a batch whose receipts rows never came: exactly the rows of receipts still to export
            quoted = ", ".join(f"'{i}'" for i in todo)  # ids are 64 hex characters (checked by the index)
            table.delete(f"receipt_id IN ({quoted})",
                         commit_properties=CommitProperties(custom_metadata={REPAIRED_KEY: ",".join(sorted(stale))}))
            repaired += 1
        return repaired

    def write(self, name: str, table: pa.Table, batch: str) -> None:
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        from schemas.receipt import SCHEMA_VERSION

        location = f"{self.uri}/{name}"
        description = f"stackreceipt {name}, receipt schema version {SCHEMA_VERSION}"
        if not table.num_rows:  # the table exists, with its schema, before its first row
            DeltaTable.create(location, schema=table.schema, partition_by=[PARTITION], mode="ignore", name=name,
                              description=description, storage_options=self.options)
            return
        write_deltalake(location, table, mode="append", partition_by=[PARTITION], storage_options=self.options,
                        name=name, description=description,
                        commit_properties=CommitProperties(custom_metadata={BATCH_KEY: batch}))
