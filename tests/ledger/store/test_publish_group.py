"""What a group publish (:func:`ledger.store.publish.publish_many`) writes to make bulk publishing cheap: the empty
tables of a group's receipts are one file, hard-linked (no inode allocated per receipt), and a small table is
written uncompressed; every receipt still verifies on its own, and damage to a shared file is found in every
receipt that lists it, also by a rebuild that hashes a shared file only once."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ledger.store import index
from ledger.store.integrity import verify_receipt
from ledger.store.publish import publish, publish_many
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome
from schemas.tables import TABLES


def _stage(ledger: Ledger, i: int) -> Path:
    run_dir = ledger.staging / uuid.uuid4().hex
    (run_dir / "rank-00000").mkdir(parents=True)
    (run_dir / "wrapper.json").write_text(json.dumps({"name": f"r{i}", "run_uuid": run_dir.name}))
    (run_dir / "rank-00000" / "steps.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1 + i)}) + "\n" for s in range(1, 6)))
    return run_dir


def test_a_groups_empty_tables_are_one_file_and_damage_to_it_is_found_in_every_receipt(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    ok = Outcome(status="succeeded", exit_code=0)
    ids = [r.id for r in publish_many(ledger, [(_stage(ledger, i), ok) for i in range(3)], redact=lambda s: s)]
    alone = publish(ledger, _stage(ledger, 9), ok, redact=lambda s: s).id  # a group of one links nothing
    empty = [name for name in TABLES if name != "steps"]
    for name in empty:
        inodes = {os.stat(ledger.path(rid) / f"{name}.parquet").st_ino for rid in ids}
        assert len(inodes) == 1 and os.stat(ledger.path(ids[0]) / f"{name}.parquet").st_nlink == 3
        assert os.stat(ledger.path(alone) / f"{name}.parquet").st_nlink == 1
    steps = {os.stat(ledger.path(rid) / "steps.parquet").st_ino for rid in ids}
    assert len(steps) == 3  # tables with rows are each receipt's own
    assert all(verify_receipt(ledger, rid) == [] for rid in [*ids, alone])

    # 5 rows: written uncompressed, and read back exactly
    path = ledger.path(ids[1]) / "steps.parquet"
    codecs = {c for (c,) in duckdb.connect().execute("SELECT DISTINCT compression FROM parquet_metadata(?)",
                                                      [str(path)]).fetchall()}
    assert codecs == {"UNCOMPRESSED"}
    assert pq.read_table(path).column("loss").to_pylist() == [1.0 / (s + 2) for s in range(1, 6)]

    result = index.reindex(ledger)
    assert sorted(result.added) == sorted([*ids, alone]) and not result.damaged

    shared = ledger.path(ids[0]) / "evals.parquet"  # same size, other bytes: only the digest tells
    data = bytearray(shared.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(shared, "r+b") as f:
        f.write(bytes(data))
    for rid in ids:
        assert [(f.path, f.problem) for f in verify_receipt(ledger, rid)] == [
            ("evals.parquet", "sha256 does not match the listed digest")]
    result = index.reindex(ledger)  # each receipt is checked, though the rebuild hashes a shared file once
    assert sorted(result.damaged) == sorted(ids) and result.added == [alone]
    assert all("evals.parquet" in error for error in result.damaged.values())
