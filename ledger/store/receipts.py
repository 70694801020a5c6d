"""The ledger directory: published receipts are files, and files are the truth.

A published receipt is a directory ``<root>/<id[:2]>/<id>/`` (or ``<root>/<id>/`` in the old flat layout,
read in place; see :mod:`ledger.store.layout`) holding ``receipt.json`` and the files it lists as
artifacts. It is created by one atomic rename and never modified afterwards.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import DamagedReceipt, InvalidReceipt, LedgerNotWritable, SchemaTooNew
from ledger.store.layout import (
    INDEX,
    RECEIPT_FILE,
    STAGING,
    TMP_PREFIX,
    find_receipt_dir,
    flat_ids,
    receipt_dir,
    shard_ids,
    shards,
)

if TYPE_CHECKING:  # the receipt models load when a receipt is read, not when a ledger is opened
    from schemas import Receipt


class Ledger:
    """A ledger directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def staging(self) -> Path:
        """Where runs in progress write."""
        return self.root / STAGING

    @property
    def index_path(self) -> Path:
        """The derived DuckDB index."""
        return self.root / INDEX

    def ensure_writable(self) -> None:
        """Create the ledger directory if needed and prove that it can be written."""
        if self.staging.is_symlink():
            raise LedgerNotWritable(f"{self.staging} is a symbolic link; ledger never stages runs through one: "
                                    "remove it (it is made again as a directory)")
        try:
            self.staging.mkdir(parents=True, exist_ok=True)
            probe = self.root / f"{TMP_PREFIX}probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise LedgerNotWritable(
                f"ledger directory {self.root} is not writable ({exc.strerror or exc}); "
                "choose another with --ledger DIR or LEDGER_DIR"
            ) from exc

    def ids(self) -> list[str]:
        """Ids of every published receipt, sorted, in either layout (this lists every shard: the index
        and the journal are what keep syncing one receipt from doing so)."""
        found = set(flat_ids(self.root))
        for shard in shards(self.root):
            found.update(shard_ids(self.root, shard))
        return sorted(found)

    def path(self, receipt_id: str) -> Path:
        """Directory of a published receipt, in either layout (its shard when it does not exist)."""
        return find_receipt_dir(self.root, receipt_id)

    def new_path(self, receipt_id: str) -> Path:
        """Where a receipt is published: its shard."""
        return receipt_dir(self.root, receipt_id)

    def migrate_layout(self) -> list[str]:
        """Move receipts of the old flat layout into their shards (one atomic rename each, so readers see
        every receipt throughout); returns the ids moved."""
        moved = []
        for receipt_id in sorted(flat_ids(self.root)):
            target = receipt_dir(self.root, receipt_id)
            target.parent.mkdir(exist_ok=True)
            try:
                os.rename(self.root / receipt_id, target)
            except OSError:
                if not target.is_dir():
                    raise
                continue  # already in its shard (identical content, same id)
            moved.append(receipt_id)
        return moved

    def read_raw(self, receipt_id: str) -> dict[str, Any]:
        """The receipt.json of a published receipt as a dict, migrated to the current schema."""
        path = self.path(receipt_id) / RECEIPT_FILE
        data = read_receipt_json(path, receipt_id)
        from schemas import SchemaVersionError, migrate

        try:
            return migrate(data)
        except SchemaVersionError as exc:
            raise SchemaTooNew(f"{path}: {exc}") from exc

    def load(self, receipt_id: str) -> Receipt:
        """A published receipt, validated; an invalid one raises an error naming the field."""
        data = self.read_raw(receipt_id)
        return parse_receipt(data, self.path(receipt_id) / RECEIPT_FILE)


def read_receipt_json(path: Path, receipt_id: str, data: bytes | None = None) -> dict[str, Any]:
    """A receipt.json as written (not migrated), or an error naming the file: missing (damaged: `ledger
    verify` says more), not JSON, or not a JSON object. ``data``: its bytes, when the caller read them."""
    try:
        data = json.loads(path.read_bytes() if data is None else data)
    except FileNotFoundError as exc:
        raise DamagedReceipt(f"{path} is missing; run `ledger verify {receipt_id[:12]}`") from exc
    except (OSError, ValueError) as exc:
        raise InvalidReceipt(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise InvalidReceipt(f"{path}: nested too deeply to be a receipt (more than {MAX_DEPTH} levels)") from exc
    if not isinstance(data, dict):
        raise InvalidReceipt(f"{path}: expected a JSON object")
    if too_deep(data, MAX_DEPTH):
        raise InvalidReceipt(f"{path}: nested too deeply to be a receipt (more than {MAX_DEPTH} levels)")
    return data


MAX_DEPTH = 64
"""The deepest nesting of objects and lists a receipt.json may hold. A receipt's deepest values (a config file's
arguments) lie far less deep; a deeper document (a hostile one on a remote) is refused before anything recurses
through it (encoding it canonically, validating it) and would exhaust the interpreter's stack."""


def too_deep(data: Any, limit: int) -> bool:
    """Whether JSON values nest more than ``limit`` objects or lists deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def parse_receipt(data: dict[str, Any], source: Path | str) -> Receipt:
    """Validate a receipt dict; the error names the file and the first failing field."""
    from pydantic import ValidationError

    from schemas import Receipt

    try:
        return Receipt.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(root)"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InvalidReceipt(f"{source}: field {field}: {err['msg']}{more}") from exc


def write_receipt(directory: Path, receipt: Receipt | str) -> Path:
    """Write receipt.json into a directory that is not yet published: the receipt's canonical JSON (sorted keys,
    no whitespace, UTF-8: :func:`schemas.canonical_json`), the text whose sha256, with the id blanked, is the id
    (``receipt`` may be that text already). Anyone can check a receipt.json against its id from its bytes, and
    the index verifies it by hashing them (:func:`ledger.store.integrity.sealed`); `ledger show --json`
    prints it indented. Receipts written before 2026-12-02 hold the same JSON indented; both are read alike."""
    from schemas import canonical_json

    path = directory / RECEIPT_FILE
    text = receipt.encode() if isinstance(receipt, str) else canonical_json(receipt.model_dump(mode="json"))
    with open(path, "wb") as f:
        f.write(text + b"\n")
    return path
