"""Tamper evidence: verify a receipt against its own digests, and attest it as an in-toto Statement.

A receipt is content-addressed (its id is the sha256 of its canonical JSON) and lists every file with its
sha256, size and, for tables, row count. :func:`verify_receipt` checks all of that; :func:`check_intact`
runs before any command uses a receipt (hashing costs about 50 ms for a million-step receipt).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ledger.errors import DamagedReceipt, LedgerError, SchemaTooNew
from ledger.store.layout import RECEIPT_FILE
from ledger.store.publish import sha256_file
from ledger.store.receipts import Ledger, parse_receipt, read_receipt_json
from schemas import Receipt, canonical_json

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://stackreceipt.dev/receipt/v2"


@dataclass(frozen=True)
class Finding:
    """One thing wrong with one file of one receipt."""

    receipt_id: str
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.receipt_id[:12]} {self.path}: {self.problem}"


def verify_receipt(ledger: Ledger, receipt_id: str, *, deep: bool = True) -> list[Finding]:
    """Everything wrong with one receipt: its JSON, its seal, each listed file (presence, size and, when
    ``deep``, sha256 and Parquet row count), and files that it does not list."""
    return _verify(ledger, receipt_id, deep)[1]


@dataclass(frozen=True)
class Verified:
    """A receipt that passed verification, with its JSON."""

    receipt: Receipt
    data: dict[str, Any]
    """The receipt as JSON values: as stored when it needed no migration, else migrated and dumped."""


def verified(ledger: Ledger, receipt_id: str, *, rows: bool = True) -> Verified:
    """The receipt once everything :func:`verify_receipt` checks holds (receipt.json read once); raises
    :class:`DamagedReceipt` with the first finding otherwise. ``rows=False`` leaves the tables' row counts
    to the caller (the index checks a whole batch's Parquet footers in one DuckDB statement)."""
    receipt, findings, data = _verify(ledger, receipt_id, True, rows)
    if findings or receipt is None or data is None:
        raise DamagedReceipt(f"{findings[0].path}: {findings[0].problem}")
    return Verified(receipt, data)


def _verify(
    ledger: Ledger, receipt_id: str, deep: bool, rows: bool = True,
) -> tuple[Receipt | None, list[Finding], dict[str, Any] | None]:
    from schemas import SCHEMA_VERSION, SchemaVersionError, migrate

    directory = ledger.path(receipt_id)
    source = directory / RECEIPT_FILE
    try:
        raw = read_receipt_json(source, receipt_id)
        digest = raw_digest(raw)
        current = raw.get("schema_version") == SCHEMA_VERSION
        try:
            receipt = parse_receipt(migrate(raw), source)
        except SchemaVersionError as exc:
            raise SchemaTooNew(f"{source}: {exc}") from exc
    except LedgerError as exc:
        return None, [Finding(receipt_id, RECEIPT_FILE, str(exc).replace(str(source) + ": ", ""))], None
    findings = []
    if receipt.id != receipt_id or digest != receipt_id:
        findings.append(Finding(receipt_id, RECEIPT_FILE,
                                f"content digest {digest[:12]} does not match the id: edited after publishing"))
    entries = {e.name: e for e in os.scandir(directory)}  # one listing, one stat a file
    for artifact in receipt.artifacts:
        path = directory / artifact.path
        entry = entries.get(artifact.path)
        if entry is None or not entry.is_file():
            findings.append(Finding(receipt_id, artifact.path, "missing"))
            continue
        size = entry.stat().st_size
        if size != artifact.bytes:
            findings.append(Finding(receipt_id, artifact.path, f"size {size} bytes, listed as {artifact.bytes}"))
            continue
        if not deep:
            continue
        if sha256_file(path) != artifact.sha256:
            findings.append(Finding(receipt_id, artifact.path, "sha256 does not match the listed digest"))
            continue
        if artifact.kind == "table" and rows:
            import pyarrow.parquet as pq  # here: `show` of a receipt need not load it

            try:
                table_rows = pq.ParquetFile(path).metadata.num_rows
            except Exception as exc:  # pyarrow raises several types for damaged files
                findings.append(Finding(receipt_id, artifact.path, f"unreadable Parquet: {exc}"))
                continue
            if table_rows != artifact.rows:
                findings.append(Finding(receipt_id, artifact.path, f"{table_rows} rows, listed as {artifact.rows}"))
    listed = {a.path for a in receipt.artifacts} | {RECEIPT_FILE}
    for extra in sorted(name for name in entries if name not in listed):
        findings.append(Finding(receipt_id, extra, "not listed in the receipt (added after publishing)"))
    return receipt, findings, raw if current else receipt.model_dump(mode="json")


def raw_digest(raw: dict[str, Any]) -> str:
    """The content digest of a receipt as stored (before any migration: old receipts keep their ids)."""
    return hashlib.sha256(canonical_json(dict(raw, id=""))).hexdigest()


def check_intact(ledger: Ledger, receipt_id: str) -> Receipt:
    """The receipt, once verified (valid, sealed, every file present with its digest); a damaged one
    raises :class:`DamagedReceipt` naming the file."""
    receipt, findings, _ = _verify(ledger, receipt_id, True)  # receipt.json read and validated once
    if receipt is None:
        receipt = ledger.load(receipt_id)  # raises the error that names the field
    if findings:
        raise DamagedReceipt(
            f"receipt {receipt_id[:12]} is damaged: {findings[0].path}: {findings[0].problem}"
            f"{f' (and {len(findings) - 1} more)' if len(findings) > 1 else ''}; run `ledger verify {receipt_id[:12]}`"
        )
    return receipt


def statement(ledger: Ledger, receipt_id: str) -> dict[str, Any]:
    """An in-toto Statement (v1) for a verified receipt: subjects are the receipt's files with their sha256,
    the predicate its stack and workload. Verify it with any in-toto tool or `sha256sum -c`."""
    findings = verify_receipt(ledger, receipt_id)
    if findings:
        raise DamagedReceipt(f"cannot attest a damaged receipt: {findings[0]}")
    receipt = ledger.load(receipt_id)
    where = ledger.path(receipt_id).relative_to(ledger.root).as_posix()  # names relative to the ledger
    subjects = [{"name": f"{where}/{RECEIPT_FILE}",
                 "digest": {"sha256": sha256_file(ledger.path(receipt_id) / RECEIPT_FILE)}}]
    subjects += [{"name": f"{where}/{a.path}", "digest": {"sha256": a.sha256}} for a in receipt.artifacts]
    dumped = receipt.model_dump(mode="json")
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "receipt_id": receipt_id,
            "name": receipt.name,
            "status": receipt.status,
            "started_at": dumped["started_at"],
            "stack": dumped["stack"],
            "workload": dumped["workload"],
            "summary": dumped["summary"],
        },
    }
