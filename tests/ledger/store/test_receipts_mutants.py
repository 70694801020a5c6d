"""The ledger directory read in this process (mutation testing cannot run the `ledger` CLI): ids in both layouts,
the migration, and the one-line error for each way a receipt.json can be damaged, on real directories."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ledger.errors import DamagedReceipt, InvalidReceipt, LedgerNotWritable, SchemaTooNew
from ledger.store.publish import publish
from ledger.store.receipts import Ledger, parse_receipt, read_receipt_json, write_receipt
from ledger.store.staging import Outcome
from schemas import Receipt

A, B = "ab" + "0" * 62, "cd" + "1" * 62


def _published(tmp_path: Path) -> tuple[Ledger, Receipt]:
    lg = Ledger(tmp_path / "ledger")
    run = lg.staging / "run"
    run.mkdir(parents=True)
    return lg, publish(lg, run, Outcome("succeeded"), redact=str)


def test_paths_of_a_ledger(tmp_path: Path) -> None:
    lg = Ledger(str(tmp_path))
    assert lg.root == tmp_path and lg.staging == tmp_path / ".staging" and lg.index_path == tmp_path / "index.duckdb"
    assert lg.new_path(A) == tmp_path / "ab" / A and lg.path(A) == tmp_path / "ab" / A  # neither: its shard
    (tmp_path / A).mkdir()
    assert lg.path(A) == tmp_path / A


def test_ids_in_both_layouts_and_nothing_else(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    assert lg.ids() == []
    (tmp_path / B).mkdir()  # old flat layout
    (tmp_path / "ab" / A).mkdir(parents=True)
    (tmp_path / "ab" / B).mkdir()  # in the wrong shard: not listed
    (tmp_path / "ab" / "x").mkdir()
    (tmp_path / ("ef" + "2" * 62)).write_text("a file, not a receipt")
    (tmp_path / ".staging" / A).mkdir(parents=True)
    assert lg.ids() == [A, B]


def test_migration_moves_flat_receipts_into_their_shards(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    (tmp_path / B).mkdir()
    (tmp_path / B / "receipt.json").write_text("{}")
    (tmp_path / A).mkdir()
    assert lg.migrate_layout() == [A, B]
    assert (tmp_path / "cd" / B / "receipt.json").read_text() == "{}" and not (tmp_path / B).exists()
    assert lg.ids() == [A, B] and lg.migrate_layout() == []
    (tmp_path / A).mkdir()  # the same receipt again in the flat layout, already in its shard (non-empty)
    (tmp_path / "ab" / A / "f").write_text("x")
    assert lg.migrate_layout() == [] and (tmp_path / A).is_dir()
    c = "ff" + "1" * 62  # a receipt after it in the flat layout is still moved
    (tmp_path / c).mkdir()
    assert lg.migrate_layout() == [c] and (tmp_path / A).is_dir() and (tmp_path / "ff" / c).is_dir()


def test_a_migration_that_cannot_rename_raises(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    (tmp_path / A).mkdir()
    (tmp_path / "ab").write_text("a file where the shard should be")
    with pytest.raises(OSError):
        lg.migrate_layout()


def test_a_ledger_that_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(LedgerNotWritable) as exc:
        Ledger(blocker).ensure_writable()
    assert str(exc.value) == (f"ledger directory {blocker} is not writable (Not a directory); choose another with "
                              "--ledger DIR or LEDGER_DIR")
    lg = Ledger(tmp_path / "new" / "ledger")
    lg.ensure_writable()
    assert sorted(p.name for p in lg.root.iterdir()) == [".staging"]


def test_each_damaged_receipt_json_has_its_message(tmp_path: Path) -> None:
    lg, r = _published(tmp_path)
    path = lg.path(r.id) / "receipt.json"
    good = path.read_text()
    assert lg.read_raw(r.id) == json.loads(good) and lg.load(r.id) == r
    path.unlink()
    with pytest.raises(DamagedReceipt) as exc:
        lg.load(r.id)
    assert str(exc.value) == f"{path} is missing; run `ledger verify {r.id[:12]}`"
    path.write_text("{")
    with pytest.raises(InvalidReceipt, match=r"^" + str(path) + r": not valid JSON \(Expecting"):
        lg.read_raw(r.id)
    path.write_text("[1]")
    with pytest.raises(InvalidReceipt) as exc2:
        lg.read_raw(r.id)
    assert str(exc2.value) == f"{path}: expected a JSON object"
    path.write_text(json.dumps({**json.loads(good), "schema_version": 99}))
    with pytest.raises(SchemaTooNew, match=f"^{path}: "):
        lg.read_raw(r.id)
    path.write_text(json.dumps({**json.loads(good), "status": "exploded"}))
    with pytest.raises(InvalidReceipt) as one:
        lg.load(r.id)
    with pytest.raises(ValidationError) as direct:  # pydantic's own words for the one error
        Receipt.model_validate(json.loads(path.read_text()))
    assert direct.value.error_count() == 1
    assert str(one.value) == f"{path}: field status: {direct.value.errors()[0]['msg']}"  # no "(and N more)"
    summary = json.loads(good)["summary"]
    path.write_text(json.dumps({**json.loads(good), "summary": {**summary, "steps": "many"}}))
    with pytest.raises(InvalidReceipt) as nested:  # a nested field is named by its dotted path
        lg.load(r.id)
    assert str(nested.value).startswith(f"{path}: field summary.steps: ")
    path.write_text(json.dumps({**json.loads(good), "status": "exploded", "attempt": "x", "exit_code": "y"}))
    with pytest.raises(InvalidReceipt, match=r"\(and 2 more\)$"):
        lg.load(r.id)
    with pytest.raises(DamagedReceipt, match=r"run `ledger verify 0123456789ab`$"):
        read_receipt_json(tmp_path / "none.json", "0123456789abcdef")


def test_a_receipt_of_the_wrong_shape_names_the_root(tmp_path: Path) -> None:
    with pytest.raises(InvalidReceipt) as exc:
        parse_receipt({"unknown": 1, "status": "x"}, "src.json")  # type: ignore[arg-type]
    message = str(exc.value)
    assert message.startswith("src.json: field ") and message.endswith(" more)")
    with pytest.raises(InvalidReceipt, match="^src.json: field \\(root\\): "):
        parse_receipt([], "src.json")  # type: ignore[arg-type]


def test_receipt_json_is_written_as_the_text_its_id_digests(tmp_path: Path) -> None:
    """receipt.json holds the canonical JSON (sorted keys, no whitespace, UTF-8) and one newline: its bytes with
    the id blanked hash to the id, with nothing but sha256 and the standard library's encoder."""
    lg, r = _published(tmp_path)
    published = (lg.path(r.id) / "receipt.json").read_bytes()
    text = json.dumps(r.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert published == text.encode() + b"\n"
    blank = published[:-1].replace(f'"id":"{r.id}"'.encode(), b'"id":""')
    assert hashlib.sha256(blank).hexdigest() == r.id
    path = write_receipt(tmp_path, r)
    assert path == tmp_path / "receipt.json" and path.read_bytes() == published
