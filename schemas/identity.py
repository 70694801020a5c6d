"""Canonical JSON and the content id of a receipt."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from schemas.receipt import Receipt

CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""The canonical encoder (sorted keys, no whitespace, non-ASCII as is, no NaN), built once: its ``encode``
gives the text :func:`canonical_json` encodes as UTF-8."""


def canonical_json(data: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, UTF-8."""
    return CANONICAL.encode(data).encode()


def content_id(receipt: Receipt) -> str:
    """sha256 of the canonical JSON of the receipt with its id field blanked."""
    body = receipt.model_dump(mode="json")
    body["id"] = ""
    return hashlib.sha256(canonical_json(body)).hexdigest()


def seal(receipt: Receipt) -> Receipt:
    """Return the receipt with its id set to its content digest."""
    return receipt.model_copy(update={"id": content_id(receipt)})


def is_sealed(receipt: Receipt) -> bool:
    """True when the receipt's id matches its content."""
    return receipt.id == content_id(receipt)
