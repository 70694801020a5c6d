"""The index is derived, so it is checked, not trusted: does ``index.duckdb`` say what the files say?

For one receipt: its row in ``receipts`` equals its ``receipt.json``, and each metric table holds the rows of
its Parquet file — same count, same per-column sums of DuckDB's ``hash`` (a cheap fingerprint of the values:
a changed, added or removed row changes it). For the ledger: each receipt the index lists as damaged really
is, and every receipt on disk is in the index. ``compare`` and ``report`` run :func:`check_involved` on the
receipts they read (files and index, two receipts: cheap); ``ledger verify`` runs :func:`index_findings` on all.

A file's side of the check depends on its bytes only, and the bytes of an intact receipt are those its
``sha256`` names (:func:`ledger.store.integrity.verify_receipt` checks that first). So the file side is
computed once per file and kept in ``.cache/fingerprints/``, keyed by the sha256, the table's columns and
DuckDB's version (whose ``hash`` it is): a 58 x 256 routing table of 10,000 steps is 148 million values to
hash, and a second compare of the same receipts hashes only the index's side. The index's side is never
cached: it is what is being checked.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ledger.errors import DamagedReceipt, LedgerError
from ledger.store.layout import CACHE, INDEX
from ledger.store.receipts import Ledger, parse_receipt

if TYPE_CHECKING:  # `ledger ls` runs listing_findings and must not load Arrow or the models
    from ledger.store.integrity import Finding


def _fingerprint(con: duckdb.DuckDBPyConnection, source: str, params: list[object],
                 columns: list[str]) -> tuple[object, ...]:
    sums = ", ".join(f'sum(hash("{c}")::HUGEINT)' for c in columns)
    row = con.execute(f"SELECT count(*), {sums} FROM {source}", params).fetchone()
    return tuple(row or ())


FINGERPRINTS = "fingerprints"
"""The cache directory of file fingerprints, under the ledger's ``.cache``."""


def _cached_fingerprint(ledger: Ledger, sha256: str, con: duckdb.DuckDBPyConnection, source: str, path: Path,
                        columns: list[str], store: bool = True) -> tuple[object, ...]:
    """:func:`_fingerprint` of one table file whose bytes hash to ``sha256`` (verified by the caller), from
    the cache when it holds it; computed and stored otherwise. A cache that cannot be read or written
    (read-only ledger, a torn file) is recomputed, never trusted or fatal."""
    shape = hashlib.sha256(f"{source}|{','.join(columns)}".encode()).hexdigest()[:16]
    key = f"{sha256}-{shape}-duckdb-{duckdb.__version__}.json"
    cache = ledger.root / CACHE / FINGERPRINTS / key
    try:
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(stored, list) and len(stored) == len(columns) + 1:
            return tuple(stored)
    except (OSError, ValueError):
        pass
    fingerprint = _fingerprint(con, source, [str(path)], columns)
    if not store:  # a reader that writes nothing (the web view)
        return fingerprint
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{key}.{uuid.uuid4().hex}")
        tmp.write_text(json.dumps(list(fingerprint)), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass
    return fingerprint


_DUCKDB_TYPES = {"double": "DOUBLE", "int64": "BIGINT", "int32": "INTEGER", "bool": "BOOLEAN", "string": "VARCHAR"}


def _file_source(files: duckdb.DuckDBPyConnection, path: Path, schema: object) -> str:
    """A table file as a source of today's columns: a column added to the table since the file was written is
    null there, as the index holds it (:func:`ledger.ingest.common.conform`)."""
    have = {r[0] for r in files.execute("SELECT name FROM parquet_schema(?)", [str(path)]).fetchall()}
    names = list(getattr(schema, "names", []))
    if all(n in have for n in names):
        return "read_parquet(?)"
    types = {f.name: str(f.type) for f in schema}  # type: ignore[attr-defined]
    cols = ", ".join(f'"{n}"' if n in have else f'CAST(NULL AS {_DUCKDB_TYPES.get(types[n], "VARCHAR")}) AS "{n}"'
                     for n in names)
    return f"(SELECT {cols} FROM read_parquet(?))"


def receipt_findings(ledger: Ledger, con: duckdb.DuckDBPyConnection, receipt_id: str, *,
                     store: bool = True) -> list[Finding]:
    """Where the index disagrees with one intact receipt's files (its summary row, each metric table). The
    files must have been verified against their digests (:func:`ledger.store.integrity.verify_receipt`): the
    file side of each table is taken from the cache by the digest the receipt records (and, unless ``store`` is
    False, stored there when it was not)."""
    from ledger.store.integrity import Finding
    from ledger.store.routing import parquet_source
    from schemas.tables import TABLES

    findings = []
    try:
        receipt = parse_receipt(ledger.read_raw(receipt_id), ledger.path(receipt_id) / "receipt.json")
    except LedgerError:
        return []  # the files themselves are damaged: verify_receipt says so
    row = con.execute("SELECT receipt FROM receipts WHERE id = ?", [receipt_id]).fetchone()
    damaged = con.execute("SELECT error FROM damaged WHERE id = ?", [receipt_id]).fetchone()
    if damaged:
        findings.append(Finding(receipt_id, INDEX, f"listed as damaged ({damaged[0]}) but its files are intact; "
                                "run `ledger reindex`"))
    if row is None:
        missing = [] if damaged else [Finding(receipt_id, INDEX, "missing from the index; run `ledger reindex`")]
        return findings + missing
    if json.loads(row[0]) != receipt.model_dump(mode="json"):
        findings.append(Finding(receipt_id, INDEX, "its receipts row differs from receipt.json; run `ledger reindex`"))
    columns = row_differences(indexed_rows(con, [receipt_id])[receipt_id], _source(ledger, receipt_id, receipt))
    if columns:
        findings.append(Finding(receipt_id, INDEX, "its receipts row differs from receipt.json in "
                                f"{', '.join(columns)}; run `ledger reindex`"))
    files = duckdb.connect(":memory:")
    try:
        tables = {a.path[: -len(".parquet")]: a for a in receipt.artifacts if a.kind == "table"}
        for name, schema in TABLES.items():
            columns = list(schema.names)
            indexed = _fingerprint(con, f"{name} WHERE receipt_id = ?", [receipt_id], columns)
            artifact = tables.get(name)
            if artifact is None or not artifact.rows:
                truth: tuple[object, ...] = (0, *([None] * len(columns)))
            else:
                path = ledger.path(receipt_id) / artifact.path
                source = parquet_source(path) if name == "routing" else _file_source(files, path, schema)
                truth = _cached_fingerprint(ledger, artifact.sha256, files, source, path, columns, store)
            if indexed != truth:
                findings.append(Finding(receipt_id, INDEX, f"table {name}: {indexed[0]} rows in the index, "
                                        f"{truth[0]} in {name}.parquet"
                                        + ("" if indexed[0] != truth[0] else ", values differ")
                                        + "; run `ledger reindex`"))
    finally:
        files.close()
    return findings


def _source(ledger: Ledger, receipt_id: str, receipt: object) -> dict[str, Any]:
    """The JSON values the index made a receipt's row from: the file's own when it needs no migration, else the
    migrated receipt's (as :func:`ledger.store.integrity.sealed` gives them to the index)."""
    from schemas import SCHEMA_VERSION

    raw = ledger.read_raw(receipt_id)
    if raw.get("schema_version") == SCHEMA_VERSION:
        return raw
    dumped: dict[str, Any] = receipt.model_dump(mode="json")  # type: ignore[attr-defined]
    return dumped


def indexed_rows(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The index's ``receipts`` rows of ``ids`` (those it holds), each as column -> value, in one query."""
    from ledger.store.index import RECEIPT_COLUMNS

    names = list(RECEIPT_COLUMNS)
    columns = ", ".join(f'"{c}"' for c in names)
    found = con.execute(f"SELECT {columns} FROM receipts WHERE list_contains(?, id)", [ids]).fetchall()
    return {row[0]: dict(zip(names, row, strict=True)) for row in found}


def row_differences(indexed: dict[str, Any], source: dict[str, Any]) -> list[str]:
    """The columns of a receipt's row in the index (:func:`indexed_rows`) whose values are not those its
    receipt's JSON ``source`` gives (:func:`ledger.store.index.receipt_row`): an edited ``final_loss``,
    ``tokens_per_s`` or ``name``. The ``receipt`` column (the whole JSON) is compared as JSON by the callers."""
    from ledger.store.index import RECEIPT_COLUMNS, receipt_row

    expected = dict(zip(RECEIPT_COLUMNS, receipt_row(source), strict=True))
    return [c for c in RECEIPT_COLUMNS if c != "receipt" and not _same(indexed.get(c), expected[c])]


def _same(indexed: object, expected: object) -> bool:
    if isinstance(indexed, float) and isinstance(expected, float | int) and not isinstance(expected, bool):
        return indexed == expected or (math.isnan(indexed) and math.isnan(float(expected)))
    if isinstance(indexed, str) and isinstance(expected, str) and indexed[:1] in "{[" and indexed != expected:
        try:  # JSON columns (tags): the same values, whatever the spacing DuckDB keeps
            return bool(json.loads(indexed) == json.loads(expected))
        except ValueError:
            return False
    return indexed == expected


def index_findings(ledger: Ledger, con: duckdb.DuckDBPyConnection, ids: Iterable[str]) -> list[Finding]:
    """Where the index disagrees with the files, over ``ids`` (intact receipts only) and the damaged list."""
    from ledger.store.integrity import Finding, verify_receipt

    findings = []
    for receipt_id in ids:
        if not verify_receipt(ledger, receipt_id):
            findings.extend(receipt_findings(ledger, con, receipt_id))
    on_disk = set(ledger.ids())
    for (receipt_id,) in con.execute("SELECT id FROM receipts ORDER BY id").fetchall():
        if receipt_id not in on_disk:
            findings.append(Finding(receipt_id, INDEX, "indexed but not on disk; run `ledger reindex`"))
    from schemas.tables import TABLES

    for name in (*TABLES, "routing_steps"):  # rows of a receipt the index does not hold (planted)
        for (receipt_id, n) in con.execute(f"SELECT receipt_id, count(*) FROM {name} WHERE receipt_id NOT IN "
                                           "(SELECT id FROM receipts) GROUP BY ALL ORDER BY 1").fetchall():
            findings.append(Finding(str(receipt_id), INDEX, f"table {name}: {n} rows of a receipt the index does "
                                    "not hold; run `ledger reindex`"))
    return findings


def listing_findings(ledger: Ledger, con: duckdb.DuckDBPyConnection, ids: Iterable[str]) -> dict[str, str]:
    """The cheap check of `ledger ls`, for the receipts it lists: those whose ``receipt.json`` is gone or no
    longer says what their index row says (the whole receipt, and each column the row holds: an edited
    ``final_loss`` in the index is found here), or one of whose files is gone or has another size than the
    receipt records (a changed byte of the same size is found by the digests of ``ledger verify``).
    Returns id -> what disagrees."""
    wanted = list(dict.fromkeys(ids))
    rows = indexed_rows(con, wanted)
    out: dict[str, str] = {}
    for receipt_id in wanted:
        if receipt_id not in rows:
            continue
        indexed = json.loads(rows[receipt_id]["receipt"])
        try:
            raw = ledger.read_raw(receipt_id)
        except LedgerError as exc:
            out[receipt_id] = str(exc).split(";")[0]
            continue
        source = raw
        if raw != indexed:  # an older schema's file is migrated and validated before it is compared
            try:
                source = parse_receipt(raw, ledger.path(receipt_id) / "receipt.json").model_dump(mode="json")
            except LedgerError:
                source = {}
            if source != indexed:
                out[receipt_id] = "receipt.json differs from its row in the index"
                continue
        columns = row_differences(rows[receipt_id], source)
        if columns:
            out[receipt_id] = f"its row in the index differs from receipt.json in {', '.join(columns)}"
            continue
        base = str(ledger.path(receipt_id))  # found once per receipt, not once per file
        for artifact in indexed.get("artifacts") or ():
            try:
                size = os.stat(os.path.join(base, artifact["path"])).st_size
            except OSError:
                out[receipt_id] = f"{artifact['path']} is gone"
                break
            if size != artifact.get("bytes"):
                out[receipt_id] = f"{artifact['path']} has changed ({size} bytes; the receipt says {artifact['bytes']})"
                break
    return out


def check_involved(ledger: Ledger, con: duckdb.DuckDBPyConnection, ids: Iterable[str], *, store: bool = True) -> None:
    """Before an analysis uses receipts: their files verify and the index holds exactly their data; else
    :class:`DamagedReceipt` naming what disagrees. ``store=False``: the file fingerprints computed are not kept
    in the cache (a reader that writes nothing, ``ledger serve``)."""
    from ledger.store.integrity import verify_receipt

    for receipt_id in dict.fromkeys(ids):
        findings = verify_receipt(ledger, receipt_id) or receipt_findings(ledger, con, receipt_id, store=store)
        if findings:
            f = findings[0]
            raise DamagedReceipt(f"receipt {receipt_id[:12]}: {f.path}: {f.problem}"
                                 f"{f' (and {len(findings) - 1} more)' if len(findings) > 1 else ''}; "
                                 f"run `ledger verify {receipt_id[:12]}`")
