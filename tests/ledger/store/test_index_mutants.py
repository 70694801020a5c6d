"""The DuckDB index, in this process (mutation testing cannot run the `ledger` CLI): the row a receipt becomes,
column by column, from a receipt written here; what a sync adds, marks damaged and removes as receipt directories
come, are damaged and go; the stamp that says whether anything but ledger wrote the index; an index file that is
not DuckDB, or of an older layout; a reader of a ledger that does not exist, and one whose index another process
holds (a child running DuckDB alone, which imports nothing of ledger)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from ledger.errors import IndexBusy
from ledger.store import index, journal
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome


def _stage(lg: Ledger, i: int, steps: int = 3) -> Path:
    run = lg.staging / uuid.uuid4().hex
    (run / "rank-00000").mkdir(parents=True)
    (run / "wrapper.json").write_text(json.dumps({"name": f"r{i}", "run_uuid": run.name, "tags": {"b": "2", "a": "1"},
                                                  "command": ["python", "train.py", f"--i={i}"],
                                                  "started_at": "2026-05-28T22:00:00+02:00"}))
    (run / "stack.json").write_text("{}")
    (run / "rank-00000" / "steps.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 10.0 - s - i, "tokens": 100 * s}) + "\n" for s in range(1, steps + 1)))
    return run


def _publish(lg: Ledger, n: int, first: int = 0) -> list[str]:
    lg.ensure_writable()
    return [publish(lg, _stage(lg, first + i), Outcome(status="succeeded", exit_code=0), redact=lambda s: s).id
            for i in range(n)]


def _ids(con: duckdb.DuckDBPyConnection, table: str = "receipts") -> list[str]:
    return [r[0] for r in con.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()]


# -- the receipts table's row ---------------------------------------------------------------------------------------

FULL: dict[str, Any] = {
    "id": "ab" * 32, "name": "run", "status": "failed", "started_at": "2026-05-28T22:00:00+02:00",
    "ended_at": "2026-05-28T20:30:00.250000", "duration_s": 1800.25, "exit_code": 3, "signal": "SIGTERM",
    "attempt": 2, "run_uuid": "u1", "tags": {"z": "1", "a": "2"}, "command": ["torchrun", "--nproc", "8", "t.py"],
    "links": {"attempt_of": "c" * 64, "replicates": "d" * 64, "baseline": "e" * 64},
    "stack": {"code": {"commit": "f00d", "dirty": True}, "hardware": {"gpu_model": "H200", "gpu_count": 8}},
    "workload": {"device": "cuda", "precision": {"compute": "bf16"}, "model": {"num_experts": 64, "top_k": 2},
                 "seed": 2**40},
    "summary": {"steps": 10, "last_step": 12, "tokens": 5000, "final_loss": 2.5, "tokens_per_s": 123.5,
                "step_time_s": 0.75, "peak_memory_bytes": 2**35, "energy_j": 99.5},
    "problems": [{"source": "a"}, {"source": "b"}, {"source": "c"}], "schema_version": 6,
}


def test_the_row_of_a_receipt_column_by_column() -> None:
    row = dict(zip(index.RECEIPT_COLUMNS, index.receipt_row(FULL, "TEXT"), strict=True))
    assert row == {
        "id": "ab" * 32, "name": "run", "status": "failed",
        "started_at": datetime(2026, 5, 28, 20, 0), "ended_at": datetime(2026, 5, 28, 20, 30, 0, 250000),
        "duration_s": 1800.25, "exit_code": 3, "signal": "SIGTERM", "attempt": 2,
        "attempt_of": "c" * 64, "replicates": "d" * 64, "baseline": "e" * 64, "run_uuid": "u1",
        "tags": '{"a": "2", "z": "1"}', "command": "torchrun --nproc 8 t.py", "commit": "f00d", "dirty": True,
        "gpu_model": "H200", "gpu_count": 8, "device": "cuda", "precision": "bf16", "num_experts": 64, "top_k": 2,
        "seed": 2**40, "steps": 10, "last_step": 12, "tokens": 5000, "final_loss": 2.5, "tokens_per_s": 123.5,
        "step_time_s": 0.75, "peak_memory_bytes": 2**35, "energy_j": 99.5, "problems": 3, "schema_version": 6,
        "receipt": "TEXT",
    }
    assert dict(zip(index.RECEIPT_COLUMNS, index.receipt_row(FULL), strict=True))["receipt"] == \
        json.dumps(FULL, sort_keys=True)


def test_the_row_of_a_bare_receipt() -> None:
    row = dict(zip(index.RECEIPT_COLUMNS, index.receipt_row({"id": "x"}), strict=True))
    assert row.pop("id") == "x" and row.pop("tags") == "{}" and row.pop("command") == ""
    assert row.pop("problems") == 0 and row.pop("receipt") == '{"id": "x"}'
    assert set(row.values()) == {None}
    nulls = {"id": "x", "tags": None, "command": None, "problems": None, "links": {}, "started_at": "",
             "workload": {"precision": {}, "model": {}}}
    row = dict(zip(index.RECEIPT_COLUMNS, index.receipt_row(nulls), strict=True))
    assert (row["tags"], row["command"], row["problems"], row["started_at"], row["precision"]) == ("{}", "", 0, None,
                                                                                                   None)


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-05-28T22:00:00+02:00", datetime(2026, 5, 28, 20, 0)),
    ("2026-05-28T20:00:00Z", datetime(2026, 5, 28, 20, 0)),
    ("2026-05-28T17:30:00-02:30", datetime(2026, 5, 28, 20, 0)),
    ("2026-05-28T20:00:00", datetime(2026, 5, 28, 20, 0)),
    ("2026-05-29T01:00:00+05:00", datetime(2026, 5, 28, 20, 0)),
    (None, None), ("", None),
])
def test_times_are_stored_as_naive_utc(text: str | None, expected: datetime | None) -> None:
    got = index._utc(text)
    assert got == expected and (got is None or got.tzinfo is None)


# -- a sync ---------------------------------------------------------------------------------------------------------

def test_a_synced_receipt_is_its_row_and_its_tables_rows(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    d = lg.path(rid)
    text = (d / "receipt.json").read_text().rstrip("\n")
    data = json.loads(text)
    with index.writable(lg) as con:
        result = index.sync(lg, con)
        assert (result.added, result.removed, result.damaged, result.left) == ([rid], [], {}, 0)
        row = con.execute("SELECT * FROM receipts").fetchall()
        names = [c[0] for c in con.description]
        assert names == list(index.RECEIPT_COLUMNS)
        got = dict(zip(names, row[0], strict=True))
        assert got["id"] == rid and got["name"] == "r0" and got["status"] == "succeeded" and got["exit_code"] == 0
        assert got["started_at"] == datetime(2026, 5, 28, 20, 0) and got["tags"] == '{"a": "1", "b": "2"}'
        assert got["command"] == "python train.py --i=0" and got["steps"] == 3 and got["final_loss"] == 7.0
        assert got["schema_version"] == data["schema_version"] and json.loads(got["receipt"]) == data
        assert got["receipt"] == text  # the stored canonical text itself
        steps = con.execute("SELECT receipt_id, step, loss, tokens FROM steps ORDER BY step").fetchall()
        table = pq.read_table(d / "steps.parquet").to_pylist()
        assert steps == [(rid, r["step"], r["loss"], r["tokens"]) for r in table]
        assert steps == [(rid, 1, 9.0, 100), (rid, 2, 8.0, 200), (rid, 3, 7.0, 300)]
        assert index.is_current(lg, con)
        again = index.sync(lg, con)
        assert (again.added, again.removed, again.damaged) == ([], [], {})
        assert index.query(con, "SELECT count(*) AS n FROM steps").to_pylist() == [{"n": 3}]
        assert index.query(con, "SELECT ? AS x", [5]).to_pylist() == [{"x": 5}]


def test_damaged_receipts_are_named_kept_out_and_removed_with_their_directory(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 3)
    broken = ids[1]
    (lg.path(broken) / "steps.parquet").unlink()
    with index.writable(lg) as con:
        result = index.sync(lg, con)
        assert sorted(result.added) == sorted(set(ids) - {broken})
        assert result.damaged == {broken: "steps.parquet: missing"}
        assert _ids(con) == sorted(set(ids) - {broken})
        assert con.execute("SELECT id, error FROM damaged").fetchall() == [(broken, "steps.parquet: missing")]
        assert con.execute("SELECT count(*) FROM steps WHERE receipt_id = ?", [broken]).fetchone() == (0,)
        assert index.sync(lg, con).damaged == {}  # known damaged: not checked again by an incremental sync
        # one receipt goes, and the damaged one
        for rid in (ids[0], broken):
            shutil.rmtree(lg.path(rid))
        gone = index.sync(lg, con)
        assert sorted(gone.removed) == sorted([ids[0], broken]) and gone.added == []
        assert _ids(con) == [ids[2]] and _ids(con, "damaged") == []
        assert con.execute("SELECT DISTINCT receipt_id FROM steps").fetchall() == [(ids[2],)]
        assert index.is_current(lg, con)


def test_a_receipt_repaired_is_indexed_by_a_rebuild(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    log = lg.path(rid) / "output.log"
    good = (lg.path(rid) / "steps.parquet").read_bytes()
    (lg.path(rid) / "steps.parquet").write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with index.writable(lg) as con:
        assert index.sync(lg, con).damaged == {rid: "steps.parquet: sha256 does not match the listed digest"}
    (lg.path(rid) / "steps.parquet").write_bytes(good)
    calls: list[tuple[int, int]] = []
    result = index.reindex(lg, progress=lambda done, total: calls.append((done, total)))
    assert result.added == [rid] and result.damaged == {} and calls == [(1, 1)]
    assert not log.exists() or log.is_file()
    with index.reader(lg) as con:
        assert _ids(con) == [rid] and _ids(con, "damaged") == []


def test_many_receipts_are_indexed_by_chunks_in_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 5)
    broken = sorted(ids)[2]
    (lg.path(broken) / "output.log").write_bytes(b"added")
    monkeypatch.setattr(index, "CHUNK", 2)  # three chunks: the threads' path
    calls: list[tuple[int, int]] = []
    result = index.reindex(lg, progress=lambda done, total: calls.append((done, total)))
    assert result.added == [i for i in sorted(ids) if i != broken]  # in order, as one thread gives them
    assert result.damaged == {broken: "output.log: not listed in the receipt (added after publishing)"}
    assert calls == [(2, 5), (4, 5), (5, 5)]
    with index.reader(lg) as con:
        assert _ids(con) == sorted(set(ids) - {broken})
        assert con.execute("SELECT count(*) FROM steps").fetchone() == (12,)


def test_a_sync_with_a_limit_takes_the_latest_published_first(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 5)
    with index.writable(lg) as con:
        first = index.sync(lg, con, limit=2)
        # the two published last, then the rest by id
        assert sorted(first.added) == sorted(ids[-2:]) and first.left == 3
        assert not index.is_current(lg, con)
        second = index.sync(lg, con, limit=10)
        assert sorted(second.added) == sorted(ids[:3]) and second.left == 0
        assert index.is_current(lg, con)


def test_is_current_follows_the_journal_and_the_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lg, other = Ledger(tmp_path / "receipts"), Ledger(tmp_path / "other")
    _publish(lg, 1)
    monkeypatch.setattr(index, "RACY_NS", 0)  # every stamp trusted at once
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert index.is_current(lg, con)
    _publish(lg, 1, first=1)  # the journal grew
    with index.writable(lg) as con:
        assert not index.is_current(lg, con)
        index.sync(lg, con)
        assert index.is_current(lg, con)
        [copied] = _publish(other, 1, first=7)
        shutil.copytree(other.path(copied), lg.new_path(copied))  # a receipt arrives without a publish
        assert not index.is_current(lg, con)
        assert index.sync(lg, con).added == [copied] and index.is_current(lg, con)
        shutil.rmtree(lg.path(copied))  # and goes again: its shard is empty now
        assert not index.is_current(lg, con)
        assert index.sync(lg, con).removed == [copied] and index.is_current(lg, con)


def test_a_shard_changed_too_recently_is_listed_and_still_current_when_it_holds_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "RACY_NS", 10**18)  # "recent" for any machine's pace: no stamp is trusted
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert index._stamps(lg.root) == {rid[:2]: -1}  # changed too recently to be trusted
        assert con.execute("SELECT dir, mtime_ns FROM index_dirs").fetchall() == [(rid[:2], -1)]
        assert index.is_current(lg, con)  # listed: the same ids
        (lg.root / rid[:2] / (rid[:2] + "0" * 62)).mkdir()  # an id the index does not hold, in that shard
        assert not index.is_current(lg, con)


def test_the_stamps_trust_an_old_shard_directory(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    old = 1_700_000_000_000_000_000
    os.utime(lg.root / rid[:2], ns=(old, old))
    assert index._stamps(lg.root) == {rid[:2]: old}


# -- the stamp: whether anything but ledger wrote the index ---------------------------------------------------------

def test_an_index_written_only_by_ledger_is_verified(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    assert index.unverified(lg) is None  # no index yet
    with index.writable(lg) as con:
        index.sync(lg, con)
    assert index.unverified(lg) is None
    stamp = json.loads((lg.root / "index.written").read_text())
    st = os.stat(lg.index_path)
    assert stamp["files"][0] == [st.st_size, st.st_mtime_ns] and stamp["unverified"] is None
    assert datetime.fromisoformat(stamp["written_at"]).tzinfo is not None


def test_an_index_changed_by_another_program_is_unverified_until_verified_whole(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 2)
    with index.writable(lg) as con:
        index.sync(lg, con)
    written_at = json.loads((lg.root / "index.written").read_text())["written_at"]
    con = duckdb.connect(str(lg.index_path))  # a `duckdb` session edits a row
    con.execute("UPDATE receipts SET final_loss = 0.1")
    con.close()
    reason = f"index.duckdb changed after ledger last wrote it ({written_at})"
    assert index.unverified(lg) == reason
    with index.writable(lg) as con:  # a later write by ledger carries the doubt on
        index.sync(lg, con)
    assert index.unverified(lg) == reason
    with index.reader(lg, announce=False) as con:
        index.mark_verified(lg, con)
    assert index.unverified(lg) is None


def test_an_index_without_a_readable_stamp(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
    stamp = lg.root / "index.written"
    for text in ("", "{", "[]", '{"unverified": null}', "3"):
        stamp.write_text(text)
        assert index.unverified(lg) == "its stamp is unreadable", text
    stamp.write_text(json.dumps({"files": [], "unverified": "edited by hand"}))
    assert index.unverified(lg) == "edited by hand"
    stamp.write_text(json.dumps({"files": [], "unverified": None}))
    assert index.unverified(lg) == "index.duckdb changed after ledger last wrote it (at an unknown time)"
    stamp.unlink()
    assert index.unverified(lg) == ("there is no record that ledger wrote it (an index made by an older version, "
                                    "or by hand)")
    with index.writable(lg, fresh=True):  # a rebuild: no longer in doubt
        pass
    assert index.unverified(lg) is None


def test_a_reader_says_once_that_its_index_is_unverified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
    reason = "a reason " + uuid.uuid4().hex  # said once per process: a new one
    (lg.root / "index.written").write_text(json.dumps({"files": [], "unverified": reason}))
    for _ in range(2):
        with index.reader(lg):
            pass
    err = capsys.readouterr().err
    assert err == (f"ledger: the index is unverified: {reason}; its answers may not be what the receipt files say "
                   "(`ledger verify` compares them, `ledger reindex` rebuilds it)\n")
    with index.reader(lg, announce=False):
        pass
    assert capsys.readouterr().err == ""


# -- the index file itself ------------------------------------------------------------------------------------------

def test_an_index_file_that_is_not_duckdb_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    lg.index_path.write_bytes(b"not a database at all" * 100)
    with index.reader(lg) as con:
        assert _ids(con) == [rid]
    [aside] = [p for p in lg.root.iterdir() if p.name.startswith("index.duckdb.corrupt-")]
    assert aside.read_bytes() == b"not a database at all" * 100
    assert int(aside.name.rsplit("-", 1)[1]) > 1_700_000_000


def test_an_index_of_another_layout_version_is_rebuilt(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    con = duckdb.connect(str(lg.index_path))
    con.execute("CREATE TABLE index_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO index_meta VALUES ('version', '5')")
    con.execute("CREATE TABLE receipts (id VARCHAR, old_column INTEGER)")
    con.execute("INSERT INTO receipts VALUES ('stale', 1)")
    con.close()
    with index.reader(lg) as con:
        assert _ids(con) == [rid]
        assert [c[0] for c in con.execute("SELECT * FROM receipts").description] == list(index.RECEIPT_COLUMNS)
        assert con.execute("SELECT value FROM index_meta WHERE key = 'version'").fetchone() == (
            str(index.INDEX_VERSION),)


def test_the_schema_of_a_new_index(tmp_path: Path) -> None:
    con = duckdb.connect(":memory:")
    assert index._version(con) is None
    index._ensure_schema(con)
    assert index._version(con) == str(index.INDEX_VERSION) == "6"
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"index_meta", "receipts", "damaged", "index_dirs", "steps", "evals", "routing", "timing", "events",
            "telemetry", "routing_steps", "routing_experts"} <= tables
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                             "WHERE table_name = 'receipts'").fetchall())
    assert types["started_at"] == "TIMESTAMP" and types["seed"] == "BIGINT" and types["dirty"] == "BOOLEAN"
    assert types["gpu_count"] == "INTEGER" and types["final_loss"] == "DOUBLE"
    steps = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                                       "'steps' ORDER BY ordinal_position").fetchall()]
    assert steps[0] == "receipt_id" and "epoch" in steps and "printed_step" in steps
    con.execute("INSERT INTO receipts (id) VALUES ('kept')")
    index._ensure_schema(con)  # this version's: nothing written
    assert con.execute("SELECT id FROM receipts").fetchall() == [("kept",)]
    con.execute("UPDATE index_meta SET value = '1' WHERE key = 'version'")
    index._ensure_schema(con)  # another version's: made again, empty
    assert con.execute("SELECT id FROM receipts").fetchall() == []
    con.close()


def test_the_receipts_arrow_schema_matches_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    monkeypatch.setattr(index, "_RECEIPTS_ARROW", [])  # built here, not taken from an earlier test's call
    schema = index._receipts_arrow()
    assert schema.names == list(index.RECEIPT_COLUMNS)
    assert schema.field("started_at").type == pa.timestamp("us") and schema.field("seed").type == pa.int64()
    assert schema.field("gpu_count").type == pa.int32() and schema.field("receipt").type == pa.string()
    assert schema.field("dirty").type == pa.bool_() and schema.field("energy_j").type == pa.float64()


def test_a_reader_of_a_ledger_that_does_not_exist(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "none")
    (tmp_path / "x.csv").write_text("a\n1\n")  # a file there is: only the refusal fails the query
    with index.reader(lg) as con:
        assert _ids(con) == [] and index._version(con) == str(index.INDEX_VERSION)
        with pytest.raises(duckdb.Error):  # closed to the file system
            con.execute(f"SELECT * FROM read_csv('{tmp_path / 'x.csv'}')").fetchall()
    assert not lg.root.exists()


@pytest.mark.parametrize(("text", "lock"), [("Could not set lock on file", True),
                                            ("IO Error: Resource temporarily unavailable", True),
                                            ("LOCK held", True), ("no such file", False)])
def test_lock_errors_are_told_from_others(text: str, lock: bool) -> None:
    assert index._is_lock_error(Exception(text)) is lock


HOLDER = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
"""


def test_an_index_held_by_another_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another process holds the index (a child running DuckDB alone): a publisher's sync leaves it, a writer that
    waits gives up with a message, and a reader reads the receipt files themselves."""
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 2)
    with index.writable(lg) as con:
        index.sync(lg, con)
    more = _publish(lg, 1, first=5)
    (tmp_path / "x.csv").write_text("a\n1\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lg.index_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert index.try_sync(lg, timeout=0.3) is None
        with pytest.raises(IndexBusy) as err:
            with index.writable(lg, timeout=1.0):
                pass
        assert str(err.value) == (f"the index {lg.index_path} stayed locked by another process for 1 s; retry, or "
                                  "delete it (it is derived) and run `ledger reindex`")
        from ledger import progress

        shown = _Shown()
        with progress.listening(shown), index.reader(lg, timeout=0.3) as con:
            assert _ids(con) == sorted(ids + more)  # every receipt, the one not yet indexed too
            assert shown.tasks == [("reading receipt files", None, "receipts")] and shown.updates[-1] == (0, 3, 3)
            with pytest.raises(duckdb.Error):
                con.execute(f"SELECT * FROM read_csv('{tmp_path / 'x.csv'}')").fetchall()
            index.mark_verified(lg, con)  # read from the files: the index itself was not checked
        err_text = capsys.readouterr().err
        assert (f"ledger: the index {lg.index_path} is busy (another process writes it); reading the receipt files "
                "directly\n") in err_text
    finally:
        holder.communicate("\n", timeout=30)
    assert index.unverified(lg) is None
    with index.reader(lg) as con:  # free again: the index catches up
        assert _ids(con) == sorted(ids + more)


def test_a_publisher_gives_way_while_it_waits(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    with pytest.raises(IndexBusy) as err:
        index._connect(lg.index_path, 5.0, give_way=lambda: True)
    assert str(err.value) == f"the index {lg.index_path} is left to a reader that waits for it"
    con = index._connect(lg.index_path, 5.0, give_way=lambda: False)
    con.close()


def test_a_rebuild_for_another_layout_version_lists_every_shard_again(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An index of an older layout is dropped whole, its shard stamps too: a receipt that arrived without a journal
    line (a copy, a pull), which only the listing of its shard finds, is in the rebuilt index."""
    monkeypatch.setattr(index, "RACY_NS", 0)  # every stamp trusted at once (not listed again for being recent)
    lg, other = Ledger(tmp_path / "receipts"), Ledger(tmp_path / "other")
    [published] = _publish(lg, 1)
    [copied] = _publish(other, 1, first=3)
    shutil.copytree(other.path(copied), lg.new_path(copied))
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert _ids(con) == sorted([published, copied])
        con.execute("UPDATE index_meta SET value = '5' WHERE key = 'version'")  # as an older ledger left it
    with index.reader(lg) as con:
        assert _ids(con) == sorted([published, copied])


class _Shown:
    """A progress listener (what the CLI's bar is): what each task said."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, float | None, str]] = []
        self.updates: list[tuple[int, float, float | None]] = []
        self.ended: list[int] = []

    def begin(self, label: str, total: float | None, unit: str) -> int:
        self.tasks.append((label, total, unit))
        return len(self.tasks) - 1

    def update(self, handle: int, done: float, total: float | None) -> None:
        self.updates.append((handle, done, total))

    def end(self, handle: int) -> None:
        self.ended.append(handle)


def test_a_reader_catching_up_shows_how_far_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ledger import progress

    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 5)
    monkeypatch.setattr(index, "READER_SYNC_ROUND", 2)
    shown = _Shown()
    with progress.listening(shown), index.reader(lg) as con:
        assert len(_ids(con)) == 5
    assert shown.tasks == [("indexing receipts", None, "receipts")]
    assert shown.updates == [(0, 2, 5), (0, 4, 5), (0, 5, 5)] and shown.ended == [0]


def test_a_receipt_in_the_old_flat_layout_makes_the_index_not_current(tmp_path: Path) -> None:
    lg, other = Ledger(tmp_path / "receipts"), Ledger(tmp_path / "other")
    _publish(lg, 1)
    [flat] = _publish(other, 1, first=4)
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert index.is_current(lg, con)
        shutil.copytree(other.path(flat), lg.root / flat)  # <root>/<id>/, as ledgers before the shards kept them
        assert not index.is_current(lg, con)
        assert index.sync(lg, con).added == [flat] and flat in _ids(con)


# -- issue 38, second round: what the first full mutation run of index.py left -------------------------------------

def test_a_read_only_index_refuses_outside_files_and_a_writer_of_this_process(tmp_path: Path) -> None:
    """A reader of an up-to-date index opens it read-only, closed to the file system (a query cannot read a file
    beside it); while it is open, this process cannot open the index for writing, and is told why."""
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
    (tmp_path / "x.csv").write_text("a\n1\n")
    assert duckdb.connect().execute(f"SELECT a FROM read_csv('{tmp_path / 'x.csv'}')").fetchall() == [(1,)]
    with index.reader(lg) as con:
        assert con not in index._IN_MEMORY
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"SELECT * FROM read_csv('{tmp_path / 'x.csv'}')").fetchall()
        with pytest.raises(IndexBusy) as err:
            index._connect(lg.index_path, 1.0)
    assert str(err.value) == (f"the index {lg.index_path} is open read-only in this process; close the other reader "
                              "first")


def test_routing_rows_and_their_step_summary_are_indexed(tmp_path: Path) -> None:
    """A run that logged routing: its rows (counts as lists) and the per-step summary of each layer are in the
    index under the receipt's id."""
    from ledger.record.inprocess import recording

    lg = Ledger(tmp_path / "receipts")
    with recording(lg, name="moe") as rec:
        rec.run.log_step(1, loss=2.0, tokens=8)
        rec.run.log_routing(1, 0, [5, 3], dropped=[1, 0], capacity=4, entropy=0.75)
        rec.run.log_routing(2, 0, [4, 4])
    assert rec.receipt is not None
    rid = rec.receipt.id
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert con.execute("SELECT receipt_id, step, layer, tokens, dropped, capacity FROM routing ORDER BY step"
                           ).fetchall() == [(rid, 1, 0, [5, 3], [1, 0], 4), (rid, 2, 0, [4, 4], None, None)]
        assert con.execute("SELECT receipt_id, step, layer, experts, n_sum, n_max FROM routing_steps ORDER BY step"
                           ).fetchall() == [(rid, 1, 0, 2, 8, 5), (rid, 2, 0, 2, 8, 4)]


def test_a_table_whose_rows_differ_from_its_receipt_is_named_and_nothing_is_inserted(tmp_path: Path) -> None:
    """The rows a receipt lists for a table are checked against the file before they enter the index: a routing
    file or a steps file with other counts is named, with both counts, and the whole batch is rolled back."""
    from dataclasses import replace

    from ledger.errors import LedgerError
    from ledger.record.inprocess import recording
    from schemas.tables import STEPS

    lg = Ledger(tmp_path / "receipts")
    with recording(lg, name="moe") as rec:
        rec.run.log_step(1, loss=2.0, tokens=8)
        rec.run.log_step(2, loss=1.5, tokens=16)
        rec.run.log_routing(1, 0, [5, 3])
    assert rec.receipt is not None
    rid = rec.receipt.id
    ready = index._prepare(lg, rid)
    assert ready.error is None and ready.tables["routing"][1] == 1 and ready.tables["steps"][1] == 2
    empty = tmp_path / "steps.parquet"
    pq.write_table(STEPS.empty_table(), empty)
    cases = (({"routing": (ready.tables["routing"][0], 5)}, f"routing.parquet of {rid[:12]}: 1 rows, listed as 5"),
             ({"steps": (ready.tables["steps"][0], 3)}, f"steps.parquet of {rid[:12]}: 2 rows, listed as 3"),
             ({"steps": (str(empty), 2)}, f"steps.parquet of {rid[:12]}: 0 rows, listed as 2"))
    with index.writable(lg) as con:
        index.sync(lg, con)
        index._delete(con, rid)
        for tables, message in cases:
            with pytest.raises(LedgerError) as err:
                index._insert_batch(con, [replace(ready, tables={**ready.tables, **tables})])
            assert str(err.value) == message
            assert _ids(con) == [] and con.execute("SELECT count(*) FROM routing").fetchone() == (0,)


def test_an_empty_ledger_is_current_before_its_first_sync(tmp_path: Path) -> None:
    """Nothing published, an index just made (no journal offset recorded yet): it holds all there is."""
    lg = Ledger(tmp_path / "receipts")
    lg.ensure_writable()
    with index.writable(lg) as con:
        assert "journal_offset" not in index._meta(con)
        assert index.is_current(lg, con)


def test_syncs_with_a_limit_report_their_progress_from_the_journal_and_from_a_full_listing(tmp_path: Path) -> None:
    """A bounded sync tells its listener how far it got, whether the journal gave the receipts or a full listing
    of the ledger did; it adds the latest published first and leaves the rest."""
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 5)
    for kwargs in ({}, {"full": True}):
        told: list[tuple[int, int]] = []
        with index.writable(lg) as con:
            con.execute("DELETE FROM receipts")
            con.execute("DELETE FROM steps")
            con.execute("DELETE FROM index_meta WHERE key = 'journal_offset'")
            result = index.sync(lg, con, lambda done, total, told=told: told.append((done, total)), limit=2,
                                **kwargs)
            assert sorted(result.added) == sorted(ids[-2:]) and result.left == 3, kwargs
            assert told and told[-1] == (2, 2), kwargs
            assert _ids(con) == sorted(ids[-2:])


def test_a_shard_directory_removed_whole_leaves_the_index_with_its_receipts_and_its_stamp(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "receipts")
    [rid] = _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
        assert [r[0] for r in con.execute("SELECT dir FROM index_dirs").fetchall()] == [rid[:2]]
        shutil.rmtree(lg.root / rid[:2])
        assert index.sync(lg, con).removed == [rid]
        assert _ids(con) == [] and con.execute("SELECT * FROM index_dirs").fetchall() == []
        assert index.is_current(lg, con)


def test_a_write_left_in_the_write_ahead_log_makes_the_index_unverified(tmp_path: Path) -> None:
    """Another program writes the index and leaves its change in the write-ahead log (no checkpoint): the index
    file itself is as ledger left it, the log beside it is not."""
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 1)
    with index.writable(lg) as con:
        index.sync(lg, con)
    assert index.unverified(lg) is None
    size = lg.index_path.stat().st_size
    other = duckdb.connect(str(lg.index_path))
    other.execute("PRAGMA disable_checkpoint_on_shutdown")
    other.execute("SET checkpoint_threshold = '1GB'")
    other.execute("INSERT INTO damaged VALUES ('ff', 'planted')")
    other.close()
    assert lg.index_path.stat().st_size == size and lg.index_path.with_name("index.duckdb.wal").exists()
    assert (index.unverified(lg) or "").startswith("index.duckdb changed after ledger last wrote it (")


def test_a_reader_that_cannot_catch_up_with_arriving_receipts_says_how_many_it_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Its budget spent and the journal grown since it began: it answers with the rounds it did and says so."""
    monkeypatch.setattr(index, "READER_SYNC_ROUND", 1)
    lg = Ledger(tmp_path / "receipts")
    _publish(lg, 3)
    told: list[tuple[int, int]] = []
    with index.writable(lg) as con:
        left = index._catch_up_rounds(lg, con, time.monotonic() - 1, 0, lambda d, t: told.append((d, t)))
        assert left == 2 and len(_ids(con)) == 1 and told == [(1, 3)]
    assert capsys.readouterr().err == ("ledger: 2 receipts published in the last moments are not in this answer yet "
                                       "(receipts keep arriving; the index is catching up)\n")


def test_a_large_ledger_waits_for_a_busy_index_instead_of_reading_every_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Above READER_FALLBACK_MAX receipts (65 bytes a journal line) a reader whose index another process holds
    waits for it, then catches up and answers from the index; at or below it reads the files (the test above)."""
    lg = Ledger(tmp_path / "receipts")
    ids = _publish(lg, 2)
    assert journal.size(lg.root) == 130  # two lines of 65 bytes: 2 "receipts" by the reader's estimate
    monkeypatch.setattr(index, "READER_FALLBACK_MAX", 1)
    monkeypatch.setattr(index, "READER_LONG_WAIT_S", 60.0)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lg.index_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]})
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    release = threading.Timer(3.0, holder.communicate, args=("\n",), kwargs={"timeout": 30})
    release.start()
    try:
        with index.reader(lg, timeout=0.2) as con:
            assert con not in index._IN_MEMORY and _ids(con) == sorted(ids)
    finally:
        release.join()
    assert "reading the receipt files directly" not in capsys.readouterr().err
