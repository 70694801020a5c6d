from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas import SCHEMA_VERSION, Receipt, SchemaVersionError, migrate

DATA = Path(__file__).parent / "data"


def test_v1_receipt_migrates_to_current() -> None:
    raw = json.loads((DATA / "receipt_v1.json").read_text())
    receipt = Receipt.model_validate(migrate(raw))
    assert receipt.schema_version == SCHEMA_VERSION
    assert receipt.tags == {"sweep": "lr", "owner": "ml"}
    assert receipt.links.baseline == "aaaa" and receipt.links.attempt_of is None
    assert receipt.workload.precision.compute == "bf16"


def test_newer_version_is_refused_with_advice() -> None:
    with pytest.raises(SchemaVersionError, match="newer than this stackreceipt.*upgrade"):
        migrate({"schema_version": SCHEMA_VERSION + 1})


@pytest.mark.parametrize("bad", [None, "2", 0.5, True])
def test_non_integer_version_is_refused(bad: object) -> None:
    with pytest.raises(SchemaVersionError):
        migrate({"schema_version": bad})


def test_unknown_old_version_is_refused() -> None:
    with pytest.raises(SchemaVersionError, match="cannot be migrated"):
        migrate({"schema_version": 0})
