"""Costs that do not grow with the ledger: receipts in shards (the old flat layout still read, and migrated on
request), the journal of published ids (crash-safe, torn lines harmless), an index sync that lists only what
changed, batched verification that still names a damaged receipt, and publishers that give way to readers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import duckdb
import pytest
from conftest import child_env
from helpers import ids_in

from ledger.store import index, integrity, journal
from ledger.store.integrity import verify_receipt
from ledger.store.publish import publish, publish_many, published_as
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome
from schemas import Receipt, canonical_json, seal


def _stage(ledger: Ledger, i: int, steps: int = 3) -> Path:
    """A staging directory as a run leaves it: the wrapper's facts and one rank's steps (JSON lines)."""
    run_dir = ledger.staging / uuid.uuid4().hex
    (run_dir / "rank-00000").mkdir(parents=True)
    (run_dir / "wrapper.json").write_text(json.dumps({"name": f"r{i}", "run_uuid": run_dir.name}))
    (run_dir / "stack.json").write_text("{}")
    (run_dir / "rank-00000" / "steps.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 1.0 / (s + 1 + i)}) + "\n" for s in range(steps)))
    return run_dir


def _publish(ledger: Ledger, n: int, first: int = 0) -> list[str]:
    ledger.ensure_writable()
    return [publish(ledger, _stage(ledger, first + i), Outcome(status="succeeded", exit_code=0),
                    redact=lambda s: s).id for i in range(n)]


def _indexed(ledger: Ledger) -> list[tuple[str, int]]:
    with index.reader(ledger) as con:
        return con.execute("SELECT r.id, (SELECT count(*) FROM steps s WHERE s.receipt_id = r.id) "
                           "FROM receipts r ORDER BY 1").fetchall()


def test_receipts_go_into_shards_and_the_journal(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 3)
    for rid in ids:
        assert (ledger.root / rid[:2] / rid / "receipt.json").is_file()  # the shard of its first two digits
        assert not (ledger.root / rid).exists()
    assert (ledger.root / "journal").read_text().split() == ids  # in publishing order
    assert ids_in(ledger.root) == sorted(ids) == ledger.ids()
    assert _indexed(ledger) == [(rid, 3) for rid in sorted(ids)]


def test_an_old_flat_ledger_is_read_in_place_then_migrated(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 3)
    for rid in ids:  # the old layout: <root>/<id>/, no journal, no index
        os.rename(ledger.root / rid[:2] / rid, ledger.root / rid)
        os.rmdir(ledger.root / rid[:2])
    (ledger.root / "journal").unlink()
    ledger.index_path.unlink(missing_ok=True)
    assert ledger.ids() == sorted(ids) and ledger.load(ids[0]).id == ids[0]
    assert _indexed(ledger) == [(rid, 3) for rid in sorted(ids)]  # read in place
    new = _publish(ledger, 1, first=10)[0]  # a new receipt goes into its shard beside the old ones
    assert (ledger.root / new[:2] / new).is_dir() and ledger.ids() == sorted([*ids, new])
    assert sorted(ledger.migrate_layout()) == sorted(ids)
    assert not any((ledger.root / rid).exists() for rid in ids)
    assert ids_in(ledger.root) == sorted([*ids, new])
    assert _indexed(ledger) == [(rid, 3) for rid in sorted([*ids, new])]
    assert ledger.migrate_layout() == []  # nothing left to move


def test_sync_lists_only_the_shards_that_changed(tmp_path: Path) -> None:
    """A receipt copied into a shard whose mtime is put back is invisible to a sync (proof that unchanged
    shards are not listed) until its id is in the journal or the shard changes; a full reindex finds it."""
    ledger = Ledger(tmp_path / "receipts")
    other = Ledger(tmp_path / "other")
    ids = _publish(ledger, 1)
    copied = _publish(other, 1, first=5)[0]
    shard = ledger.root / copied[:2]
    shard.mkdir(exist_ok=True)
    old = shard.stat().st_mtime_ns - 10_000_000_000  # older than the racy window: the stamp is trusted
    os.utime(shard, ns=(old, old))
    assert _indexed(ledger) == [(ids[0], 3)]  # stamps the shard as it is now
    os.rename(other.path(copied), shard / copied)  # arrives without a publish...
    os.utime(shard, ns=(old, old))  # ...and without a trace in the shard's mtime
    assert [r[0] for r in _indexed(ledger)] == ids
    journal.append(ledger.root, copied)
    assert sorted(r[0] for r in _indexed(ledger)) == sorted([*ids, copied])
    (ledger.root / ids[0][:2] / ids[0]).rename(tmp_path / "gone")  # a removal changes the shard: noticed
    assert [r[0] for r in _indexed(ledger)] == [copied]
    index.reindex(ledger)
    assert [r[0] for r in _indexed(ledger)] == [copied]


def test_a_torn_journal_line_loses_nothing_after_it(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    first = _publish(ledger, 1)
    with open(ledger.root / "journal", "a") as f:
        f.write("3fa9c0")  # a publisher died in the middle of its line
    later = _publish(ledger, 1, first=1)
    assert journal.read_from(ledger.root, 0)[0] == [*first, *later]
    ids, offset = journal.read_from(ledger.root, 0)
    assert offset == journal.size(ledger.root) and journal.read_from(ledger.root, offset) == ([], offset)


@pytest.mark.slow
def test_a_publisher_killed_before_the_journal_is_completed_by_recover(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    run_dir = _stage(ledger, 0)
    code = ("import sys; from pathlib import Path; from ledger.store.publish import publish; "
            "from ledger.store.staging import Outcome; from ledger.store.receipts import Ledger; "
            "publish(Ledger(sys.argv[1]), Path(sys.argv[2]), Outcome(status='succeeded'), redact=str)")
    proc = subprocess.run([sys.executable, "-c", code, str(ledger.root), str(run_dir)], capture_output=True,
                          env=child_env(LEDGER_FAULT_AT="published"), timeout=120)
    assert proc.returncode == -9, proc.stderr  # killed itself once the receipt was visible
    rid = published_as(run_dir)
    assert rid is not None
    assert ledger.ids() == [rid] and journal.read_from(ledger.root, 0)[0] == []
    from ledger.record.recover import recover

    assert [r.action for r in recover(ledger)] == ["published"]
    assert journal.read_from(ledger.root, 0)[0] == [rid] and not run_dir.exists()
    assert _indexed(ledger) == [(rid, 3)]


def _resealed_with_rows(ledger: Ledger, victim: Receipt, rows: int) -> tuple[Receipt, Path]:
    """``victim`` re-sealed with a wrong row count for its steps file (digest and sizes consistent), its
    directory moved to the new id's place; the caller writes the new receipt.json there."""
    wrong = seal(Receipt.model_validate(dict(victim.model_dump(mode="json"), artifacts=[
        dict(a.model_dump(mode="json"), rows=rows) if a.path == "steps.parquet" else a.model_dump(mode="json")
        for a in victim.artifacts])))
    target = ledger.new_path(wrong.id)
    target.parent.mkdir(exist_ok=True)
    os.rename(ledger.path(victim.id), target)
    return wrong, target


def test_a_batch_names_a_receipt_whose_rows_disagree_and_indexes_the_others(tmp_path: Path) -> None:
    """A receipt re-sealed with a wrong row count (digest and sizes consistent) is caught by the batch's
    check of the Parquet footers; the rest of its batch is indexed."""
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 4)
    wrong, target = _resealed_with_rows(ledger, ledger.load(ids[1]), 7)
    (target / "receipt.json").write_text(json.dumps(wrong.model_dump(mode="json"), indent=2, sort_keys=True))
    with index.writable(ledger) as con:
        index._drop_all(con)
        index._ensure_schema(con)
        result = index.sync(ledger, con, full=True)
    assert sorted(result.added) == sorted(set(ids) - {ids[1]})
    assert list(result.damaged) == [wrong.id] and "3 rows, listed as 7" in result.damaged[wrong.id]


def test_a_publisher_gives_way_to_a_waiting_reader(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    _publish(ledger, 1)
    assert index.try_sync(ledger) is not None and not index.readers_waiting(ledger)
    with index.reader(ledger) as con:  # a reader holds the gate while it reads
        assert index.readers_waiting(ledger)
        assert index.try_sync(ledger) is None  # the publisher leaves the index to it, without waiting
        assert con.execute("SELECT count(*) FROM receipts").fetchone() == (1,)
    assert not index.readers_waiting(ledger)


def test_publishers_leave_the_index_alone_while_another_publish_is_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Among publishers, neither a publisher's sync nor a reader's catch-up holds the index's lock for long: a
    publisher leaves it alone while another publish is under way, and a reader stops after the round it is in."""
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 3)
    with journal.publishing(ledger.root):  # another publisher's publish under way
        assert index.try_sync(ledger) is None
    with index.writable(ledger) as con:
        assert _count(con) == 0
        monkeypatch.setattr(index, "READER_SYNC_ROUND", 1)
        with journal.publishing(ledger.root):
            assert index._catch_up(ledger, con) == 2  # one round, then it answers
        assert "2 receipts published in the last moments are not in this answer yet" in capsys.readouterr().err
        assert _count(con) == 1
    done = index.try_sync(ledger)  # nobody else publishing: the publisher's own sync
    assert done is not None and len(done.added) == 2 and len(_indexed(ledger)) == len(ids)


def test_a_reader_among_publishers_answers_from_the_index_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """While a publish is under way, a reader indexes nothing, however few receipts it is behind (on a machine
    busy with publishers its CPU share is small): it answers from the index as it is and says how many receipts
    that leaves out; once no publish is under way, the next reader indexes them all."""
    ledger = Ledger(tmp_path / "receipts")
    seen: list[bool] = []
    ledger.ensure_writable()
    publish(ledger, _stage(ledger, 0), Outcome(status="succeeded", exit_code=0), redact=lambda s: s,
            amend=lambda r, _: (seen.append(journal.publishing_now(ledger.root)), r)[1])
    assert seen == [True] and not journal.publishing_now(ledger.root)  # a publish says so while it runs
    assert index.try_sync(ledger) is not None
    with journal.publishing(ledger.root):  # a publish under way, the index current: a plain answer
        with index.reader(ledger) as con:
            assert con.execute("SELECT count(*) FROM receipts").fetchone() == (1,)
        assert "not in this answer" not in capsys.readouterr().err
    later = _publish(ledger, 1, first=1)  # published, not indexed: one receipt behind
    with journal.publishing(ledger.root):  # another publish under way
        for _ in range(2):  # the second reader too: the first wrote nothing
            with index.reader(ledger) as con:
                assert con.execute("SELECT count(*) FROM receipts").fetchone() == (1,)
            assert "1 receipts published in the last moments are not in this answer yet" in capsys.readouterr().err
    assert len(_indexed(ledger)) == 2  # no publish under way: this reader indexed it
    _publish(ledger, 3, first=4)
    assert len(_indexed(ledger)) == 5 and set(later) <= {rid for rid, _ in _indexed(ledger)}
    assert "not in this answer" not in capsys.readouterr().err


def test_a_round_the_journal_fills_lists_no_shard(tmp_path: Path) -> None:
    """A sync with a limit that the journal's receipts alone exceed adds from the journal and lists no shard (under
    a flood every shard changed moments ago: listing them all each round cost time that grew with the ledger);
    the round that can finish lists them and finds a receipt that arrived without a publish (a copy)."""
    ledger, other = Ledger(tmp_path / "receipts"), Ledger(tmp_path / "other")
    _publish(ledger, 1)
    assert index.try_sync(ledger) is not None
    published = _publish(ledger, 3, first=1)
    copied = _publish(other, 1, first=9)[0]
    shutil.copytree(other.path(copied), ledger.new_path(copied))  # arrives without a journal line
    with index.writable(ledger) as con:
        first = index.sync(ledger, con, limit=1)
        assert first.added == [published[-1]] and first.left == 2  # the copy is not seen yet
        with journal.publishing(ledger.root):  # a reader among publishers adds what was published, lists nothing
            assert index._catch_up(ledger, con) == 0 and not index.is_current(ledger, con)
        assert _count(con) == 4  # the three published and the first
        rest = index.sync(ledger, con)
        assert rest.added == [copied] and index.is_current(ledger, con) and _count(con) == 5


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT count(*) FROM receipts").fetchone()
    return int(row[0]) if row else 0


def test_yield_cpu_lowers_the_priority_of_the_calling_process() -> None:
    code = ("import os; from ledger.store.staging import YIELD_NICENESS, yield_cpu; before = os.nice(0); "
            "yield_cpu(); print(os.nice(0) - before, min(19 - before, YIELD_NICENESS))")
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True)
    lowered, expected = out.stdout.split()
    assert lowered == expected and int(expected) > 0


@pytest.mark.slow
def test_a_current_index_is_opened_without_the_write_lock(tmp_path: Path) -> None:
    """Once nothing changed (journal, shards), a reader opens the index read-only: it reads while another
    process holds a read-only connection, which keeps every writer out."""
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 2)
    for rid in ids:  # past the racy window, so the stamps are trusted
        old = (ledger.root / rid[:2]).stat().st_mtime_ns - 10_000_000_000
        os.utime(ledger.root / rid[:2], ns=(old, old))
    assert len(_indexed(ledger)) == 2
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
         "print('open', flush=True); sys.stdin.read()", str(ledger.index_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with pytest.raises(duckdb.IOException):
            duckdb.connect(str(ledger.index_path))  # the write lock is not to be had...
        with index.reader(ledger) as con:  # ...and the reader does not need it
            assert index.is_current(ledger, con)
            assert con.execute("SELECT count(*) FROM receipts").fetchone() == (2,)
    finally:
        holder.communicate("", timeout=60)


def test_a_publishers_sync_is_bounded_and_the_next_one_finds_the_rest(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 5)  # published, none indexed yet
    with index.writable(ledger) as con:
        first = index.sync(ledger, con, limit=2)
        assert ids[-1] in first.added and len(first.added) == 2  # the latest published first
        rest = index.sync(ledger, con)
    assert sorted(first.added + rest.added) == sorted(ids)
    assert _indexed(ledger) == [(rid, 3) for rid in sorted(ids)]


def test_publish_many_publishes_a_group_as_publish_does_and_all_or_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    runs = [(_stage(ledger, i), Outcome(status="succeeded", exit_code=0)) for i in range(3)]
    receipts = publish_many(ledger, runs, redact=lambda s: s)
    ids = [r.id for r in receipts]
    assert [r.name for r in receipts] == ["r0", "r1", "r2"]  # in the order of the runs
    assert journal.read_from(ledger.root, 0)[0] == ids and ledger.ids() == sorted(ids)
    assert not any(run_dir.exists() for run_dir, _ in runs)
    assert all(verify_receipt(ledger, rid) == [] for rid in ids)
    assert _indexed(ledger) == [(rid, 3) for rid in sorted(ids)]

    def refuse(receipt: Receipt, _tables: object) -> Receipt:
        if receipt.name == "r11":
            raise ValueError("this evidence is unreadable")
        return receipt

    group = [(_stage(ledger, i), Outcome(status="succeeded", exit_code=0)) for i in (10, 11, 12)]
    with pytest.raises(ValueError, match="unreadable"):
        publish_many(ledger, group, redact=lambda s: s, amend=refuse)
    assert ledger.ids() == sorted(ids) and journal.read_from(ledger.root, 0)[0] == ids  # none of the group
    assert all(run_dir.is_dir() for run_dir, _ in group)  # every staging directory kept, to publish again
    assert not [p for p in ledger.root.iterdir() if p.name.startswith(".tmp-")]


def test_the_index_takes_a_receipt_by_its_seal_and_refuses_a_forged_one(tmp_path: Path) -> None:
    """The index verifies a receipt of the current schema by its seal and its files' digests, without the
    model: its stored JSON is the canonical JSON of the file; a file added, a byte changed, and a receipt.json
    forged with a wrong type and its digest recomputed are each listed as damaged, the others indexed."""
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 4)
    raw = json.loads((ledger.path(ids[0]) / "receipt.json").read_text())
    assert integrity.sealed(ledger, ids[0]).text.encode() == canonical_json(raw)
    (ledger.path(ids[1]) / "notes.txt").write_text("added later")
    steps = ledger.path(ids[2]) / "steps.parquet"
    data = bytearray(steps.read_bytes())
    data[len(data) // 2] ^= 0xFF
    steps.write_bytes(bytes(data))
    forged = json.loads((ledger.path(ids[3]) / "receipt.json").read_text())
    forged["exit_code"] = "zero"  # not an integer: the model would refuse it
    forged["id"] = hashlib.sha256(canonical_json(dict(forged, id=""))).hexdigest()
    target = ledger.new_path(forged["id"])
    target.parent.mkdir(exist_ok=True)
    os.rename(ledger.path(ids[3]), target)
    (target / "receipt.json").write_text(json.dumps(forged, indent=2, sort_keys=True))
    result = index.reindex(ledger)
    assert result.added == [ids[0]]
    assert "notes.txt: not listed in the receipt" in result.damaged[ids[1]]
    assert "steps.parquet: sha256 does not match" in result.damaged[ids[2]]
    assert set(result.damaged) == {ids[1], ids[2], forged["id"]}
    with index.reader(ledger) as con:
        stored = con.execute("SELECT CAST(receipt AS VARCHAR) FROM receipts WHERE id = ?", [ids[0]]).fetchone()
    assert stored is not None and json.loads(stored[0]) == ledger.load(ids[0]).model_dump(mode="json")


def test_a_reader_catches_up_in_rounds_and_a_quiet_ledger_fully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader syncs a few receipts at a time; with nothing published meanwhile it goes on to the end, however
    long that takes (the time budget only applies while receipts keep arriving)."""
    ledger = Ledger(tmp_path / "receipts")
    ids = _publish(ledger, 3)
    with index.writable(ledger) as con:
        first = index.sync(ledger, con, limit=1)
        assert len(first.added) == 1 and first.left == 2
        monkeypatch.setattr(index, "READER_SYNC_ROUND", 1)
        monkeypatch.setattr(index, "READER_SYNC_BUDGET_S", 0.0)
        assert index._catch_up(ledger, con) == 0
        assert index.is_current(ledger, con)
    assert _indexed(ledger) == [(rid, 3) for rid in sorted(ids)]


def test_threads_index_many_receipts_by_chunks_and_name_the_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many receipts are shared out to threads, a chunk each, each chunk in its own transaction through its own
    cursor (chunks of 2 here, so that 8 receipts take that path): every good receipt is indexed with all its
    rows, including one whose receipt.json is indented as published before 2026-12-02, and each damaged one
    is named, its chunk's other receipt indexed: a byte changed in a steps file, a value changed in a
    receipt.json written canonically, a receipt re-sealed with a wrong row count."""
    monkeypatch.setattr(index, "CHUNK", 2)
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    runs = [(_stage(ledger, i, steps=2 + i), Outcome(status="succeeded", exit_code=0)) for i in range(8)]
    receipts = publish_many(ledger, runs, redact=lambda s: s)
    ids = [r.id for r in receipts]
    steps_of = {r.id: 2 + i for i, r in enumerate(receipts)}
    old = ledger.path(ids[0]) / "receipt.json"  # the layout before: indented, its id unchanged
    old.write_text(json.dumps(json.loads(old.read_bytes()), indent=2, sort_keys=True) + "\n")
    flipped = ledger.path(ids[1]) / "steps.parquet"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    edited = ledger.path(ids[2]) / "receipt.json"
    text = edited.read_bytes()
    assert text.startswith(b'{"artifacts":') and b'"name":"r2"' in text  # canonical, as published
    edited.write_bytes(text.replace(b'"name":"r2"', b'"name":"r9"'))
    wrong, target = _resealed_with_rows(ledger, receipts[3], 9)
    (target / "receipt.json").write_bytes(canonical_json(wrong.model_dump(mode="json")))
    result = index.reindex(ledger)
    good = sorted([ids[0], *ids[4:]])
    assert result.added == good and set(result.damaged) == {ids[1], ids[2], wrong.id}
    assert "steps.parquet: sha256 does not match" in result.damaged[ids[1]]
    assert "content digest does not match the id" in result.damaged[ids[2]]
    assert f"{5} rows, listed as 9" in result.damaged[wrong.id]
    assert _indexed(ledger) == [(rid, steps_of[rid]) for rid in good]
    with index.reader(ledger) as con:
        assert con.execute("SELECT count(*) FROM damaged").fetchone() == (3,)
