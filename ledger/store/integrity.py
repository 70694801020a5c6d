"""Tamper evidence: verify a receipt against its own digests, and attest it as an in-toto Statement.

A receipt is content-addressed (its id is the sha256 of its canonical JSON) and lists every file with its
sha256, size and, for tables, row count. :func:`verify_receipt` checks all of that; :func:`check_intact`
runs before any command uses a receipt (hashing costs about 50 ms for a million-step receipt).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import DamagedReceipt, InvalidReceipt, LedgerError, SchemaTooNew
from ledger.store.layout import RECEIPT_FILE
from ledger.store.receipts import MAX_DEPTH, Ledger, parse_receipt, read_receipt_json, too_deep
from schemas import Receipt, canonical_json
from schemas.identity import CANONICAL as _CANONICAL

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://stackreceipt.dev/receipt/v2"


def sha256_file(path: os.PathLike[str] | str) -> str:
    """sha256 of a file's bytes (here, not in :mod:`ledger.store.publish`: verifying a receipt, as `show` does,
    loads no Arrow)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def recorded_sha256(path: Path, record: Path) -> str | None:
    """The sha256 of the file at ``path`` as whoever wrote it recorded it in ``record`` (JSON: ``sha256``,
    ``bytes``, ``mtime_ns``: the output tee, :data:`ledger.store.layout.LOG_DIGEST_FILE`), when the file still
    has that size and modification time; None otherwise (the caller reads the file)."""
    try:
        facts = json.loads(record.read_bytes())
        st = path.stat()
        digest = facts["sha256"]
        if (facts["bytes"] == st.st_size and facts["mtime_ns"] == st.st_mtime_ns and isinstance(digest, str)
                and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            return digest
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return None


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
    counted: list[Any] = []  # tables whose rows are counted below (one DuckDB connection for all)
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
            counted.append(artifact)
    findings.extend(_row_findings(receipt_id, directory, counted))
    listed = {a.path for a in receipt.artifacts} | {RECEIPT_FILE}
    for extra in sorted(name for name in entries if name not in listed):
        findings.append(Finding(receipt_id, extra, "not listed in the receipt (added after publishing)"))
    return receipt, findings, raw if current else receipt.model_dump(mode="json")


@dataclass(frozen=True)
class Sealed:
    """A receipt whose seal and files were verified, as the index takes it: its JSON values and their
    compact canonical text (what the index stores)."""

    data: dict[str, Any]
    text: str


Seen = dict[tuple[int, int], tuple[int, str, int, int]]
"""Files verified already, by (device, inode): (size, sha256, mtime, ctime) when verified (:func:`sealed`)."""


def sealed(ledger: Ledger, receipt_id: str, *, directory: Path | None = None, seen: Seen | None = None) -> Sealed:
    """The receipt once its seal and every listed file (presence, size, sha256) hold and no file was added;
    raises :class:`DamagedReceipt` or :class:`InvalidReceipt` otherwise. The tables' row counts are left to
    the caller (the index counts the rows it inserts).

    The indexing path, cheaper than :func:`verified` by what a seal makes redundant: a receipt of the current
    schema version is not validated field by field again. Its id is the sha256 of its canonical JSON, and a
    publisher seals a receipt only once it validated (:func:`ledger.store.publish.build`), so a receipt whose
    digest matches its id holds exactly what a validated receipt held. (A receipt.json edited by hand with
    its digest recomputed is not caught here: every column the index takes from it is typed, so DuckDB
    refuses a wrong type and the receipt is listed as damaged, and every command that reads the receipt
    itself, ``show``, ``compare``, ``verify``, validates it with the model.) A receipt of another version is
    migrated and validated as :func:`verified` does. A receipt.json that holds its receipt's canonical JSON (as
    publishing writes it since 2026-12-02) is checked by hashing its bytes, without encoding the JSON again
    (:func:`_stored_canonical`); one written indented (before) is encoded canonically and hashed.

    ``directory``: the receipt's, when the caller found it already. ``seen``: files verified earlier by the same
    caller (a sync), by inode: a file that is the same inode as one verified already, unchanged since (size,
    mtime and ctime) and listed with the same digest, is not read again. Receipts of one publish group share
    their empty tables' files (hard links, :func:`ledger.store.publish.build`): a rebuild hashes each once."""
    from schemas import SCHEMA_VERSION

    if directory is None:
        directory = ledger.path(receipt_id)
    source = directory / RECEIPT_FILE
    stored = _stored_canonical(source, receipt_id)
    if isinstance(stored, tuple) and stored[0].get("schema_version") == SCHEMA_VERSION:
        raw, text = stored  # its bytes are the sealed canonical text: nothing to encode again
    else:
        raw = stored[0] if isinstance(stored, tuple) else read_receipt_json(source, receipt_id, stored)
        if raw.get("schema_version") != SCHEMA_VERSION:
            checked = verified(ledger, receipt_id, rows=False)
            return Sealed(checked.data, checked.receipt.model_dump_json())
        try:
            blank, text = _canonical_texts(raw)
        except (TypeError, ValueError) as exc:
            raise InvalidReceipt(f"{source}: not a receipt ({type(exc).__name__}: {exc}); run `ledger verify "
                                 f"{receipt_id[:12]}`") from exc
        if raw.get("id") != receipt_id or hashlib.sha256(blank).hexdigest() != receipt_id:
            raise DamagedReceipt(f"{RECEIPT_FILE}: content digest does not match the id: edited after publishing")
    try:
        artifacts = [(str(a["path"]), int(a["bytes"]), str(a["sha256"])) for a in raw["artifacts"]]
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise InvalidReceipt(f"{source}: not a receipt ({type(exc).__name__}: {exc}); run `ledger verify "
                             f"{receipt_id[:12]}`") from exc
    names = set(os.listdir(directory))
    for path, size, digest in artifacts:
        problem = _file_problem(directory, path, size, digest, seen) if path in names else "missing"
        if problem:
            raise DamagedReceipt(f"{path}: {problem}")
    extra = sorted(names - {a[0] for a in artifacts} - {RECEIPT_FILE})
    if extra:
        raise DamagedReceipt(f"{extra[0]}: not listed in the receipt (added after publishing)")
    return Sealed(raw, text)


def _stored_canonical(source: Path, receipt_id: str) -> tuple[dict[str, Any], str] | bytes | None:
    """(the receipt's JSON values, its text) when ``receipt.json`` holds its canonical JSON as publishing writes
    it (:func:`ledger.store.receipts.write_receipt`) and that text with its id blanked is what the id is the sha256
    of; otherwise the file's bytes (a receipt written indented by an older version, or damaged: the caller
    decides which), or None when it cannot be read.

    The check reads the bytes once and hashes them once, with no JSON encoding: the id is the sha256 of exactly one
    text, so bytes that hash to it once ``"id":"<id>"`` (its first occurrence) is blanked are that text, the
    receipt's canonical JSON with its id blanked; the stored id is then checked to be that occurrence (the top
    level's), so the file is the canonical JSON of the sealed receipt, id included, byte for byte."""
    try:
        data = source.read_bytes()
    except OSError:
        return None  # read_receipt_json says what is wrong
    if not data.startswith(b'{"'):  # indented (or not a receipt)
        return data
    body = data[:-1] if data.endswith(b"\n") else data
    blank = body.replace(b'"id":"' + receipt_id.encode() + b'"', b'"id":""', 1)
    if len(blank) == len(body) or hashlib.sha256(blank).hexdigest() != receipt_id:
        return data
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):  # read_receipt_json says what is wrong
        return data
    if isinstance(raw, dict) and too_deep(raw, MAX_DEPTH):
        return data
    if not isinstance(raw, dict) or raw.get("id") != receipt_id:
        return data
    return raw, body.decode()


_WHOLE_READ = 8 << 20
"""Files up to this size are hashed from one read; larger ones in 1 MiB blocks."""


def _file_problem(
    directory: os.PathLike[str], name: str, size: int, digest: str, seen: Seen | None = None,
) -> str | None:
    """What is wrong with one listed file (one open: its size from the open file, then its bytes), or None;
    ``seen``: see :func:`sealed` (a file verified here is added to it)."""
    path = os.path.join(directory, name)
    if seen is not None:
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        if stat.S_ISREG(st.st_mode) and st.st_size == size and \
                seen.get((st.st_dev, st.st_ino)) == (size, digest, st.st_mtime_ns, st.st_ctime_ns):
            return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return "missing"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "missing"
        if st.st_size != size:
            return f"size {st.st_size} bytes, listed as {size}"
        h = hashlib.sha256()
        if size <= _WHOLE_READ:
            h.update(os.read(fd, size + 1))
        else:
            while block := os.read(fd, 1 << 20):
                h.update(block)
    finally:
        os.close(fd)
    if h.hexdigest() != digest:
        return "sha256 does not match the listed digest"
    if seen is not None:
        seen[(st.st_dev, st.st_ino)] = (size, digest, st.st_mtime_ns, st.st_ctime_ns)
    return None


def _canonical_texts(raw: dict[str, Any]) -> tuple[bytes, str]:
    """(the canonical JSON with the id blanked: what the id is the digest of; the canonical JSON itself),
    from one serialisation (:func:`_canonical_parts`)."""
    before, after = _canonical_parts(raw)
    return _join(before, '""', after).encode(), _join(before, _CANONICAL.encode(raw.get("id")), after)


def seal_json(data: dict[str, Any]) -> tuple[str, str]:
    """(the id, the canonical JSON) of a receipt's JSON values sealed, whatever id they hold: the id is the sha256
    of their canonical JSON with the id blanked, as :func:`schemas.seal` makes it, from one serialisation (the
    publisher's receipt.json, :func:`ledger.store.receipts.write_receipt`)."""
    before, after = _canonical_parts(data)
    receipt_id = hashlib.sha256(_join(before, '""', after).encode()).hexdigest()
    return receipt_id, _join(before, f'"{receipt_id}"', after)


def _canonical_parts(raw: dict[str, Any]) -> tuple[str, str]:
    """The canonical JSON of the keys sorted before ``id`` and of those after it, each without its braces."""
    before = _CANONICAL.encode({k: v for k, v in raw.items() if k < "id"})[1:-1]
    after = _CANONICAL.encode({k: v for k, v in raw.items() if k > "id"})[1:-1]
    return before, after


def _join(before: str, id_text: str, after: str) -> str:
    return "{" + ",".join(part for part in (before, f'"id":{id_text}', after) if part) + "}"


def _row_findings(receipt_id: str, directory: os.PathLike[str], tables: list[Any]) -> list[Finding]:
    """Tables whose Parquet footer holds another row count than the receipt lists, or none readable: read
    with DuckDB (which a command that verifies a receipt has loaded already; Arrow need not be), one file at
    a time so that an unreadable one is named."""
    if not tables:
        return []
    import duckdb

    findings = []
    con = duckdb.connect(":memory:")
    try:
        for artifact in tables:
            try:
                row = con.execute("SELECT num_rows FROM parquet_file_metadata(?)",
                                  [os.path.join(directory, artifact.path)]).fetchone()
            except duckdb.Error as exc:
                findings.append(Finding(receipt_id, artifact.path, f"unreadable Parquet: {str(exc).splitlines()[0]}"))
                continue
            found = row[0] if row else None
            if found != artifact.rows:
                findings.append(Finding(receipt_id, artifact.path, f"{found} rows, listed as {artifact.rows}"))
    finally:
        con.close()
    return findings


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
