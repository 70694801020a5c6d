"""The tables of a published receipt and the helpers that write them, in this process (mutation testing cannot run
the `ledger` CLI): the codec chosen per Parquet column, the files' encodings, statistics and row groups read back
with pyarrow, an empty table's bytes and their hard links within a group, strings in tables redacted, the seed among
a launch's arguments, the failure at the end of output.log, a group published all or nothing, and the marks.
Expected values are written here by hand or read back with pyarrow and hashlib."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger.errors import LedgerNotWritable
from ledger.redact import REDACTED, Redactor
from ledger.store import publish as P
from ledger.store.receipts import Ledger, too_deep
from ledger.store.staging import Outcome, write_wrapper_facts
from schemas import Receipt
from schemas.tables import EXTRA, EXTRA_CODED, TABLES

SECRET = "s3cr3t-Value-77"
ENDED = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC)
ID = "ab" * 32


def redact(text: str) -> str:
    return Redactor({"MY_SECRET": SECRET}).text(text)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _staging(lg: Ledger, dirname: str, **wrapper: Any) -> Path:
    run = lg.staging / dirname
    run.mkdir(parents=True)
    write_wrapper_facts(run, wrapper)
    return run


def _columns(path: Path | pa.Buffer) -> dict[str, Any]:
    """Each leaf column of the first row group, by its path."""
    meta = pq.ParquetFile(pa.BufferReader(path) if isinstance(path, pa.Buffer) else path).metadata
    rg = meta.row_group(0)
    return {rg.column(j).path_in_schema: rg.column(j) for j in range(rg.num_columns)}


# --- the codec per column -------------------------------------------------------------------------------------


def test_a_table_without_a_map_is_all_zstd_and_one_with_maps_names_every_leaf() -> None:
    assert P._compression(pa.schema([("step", pa.int64()), ("counts", pa.list_(pa.int64()))])) == "zstd"
    schema = pa.schema([("step", pa.int64()), ("counts", pa.list_(pa.int64())), ("extra", EXTRA),
                        ("coded", EXTRA_CODED), ("phase", pa.string())])
    assert P._compression(schema) == {
        "step": "zstd", "counts.list.element": "zstd", "extra.key_value.key": "lz4_raw",
        "extra.key_value.value": "zstd", "coded.key_value.key": "zstd", "coded.key_value.value": "zstd",
        "phase": "zstd"}
    # a nested column other than a list or a MAP: one codec for all
    nested = pa.schema([("extra", EXTRA), ("s", pa.struct([("a", pa.int64())])), ("step", pa.int64())])
    assert P._compression(nested) == "zstd"
    assert P._coded_keys(EXTRA_CODED) is True and P._coded_keys(EXTRA) is False


def _steps(n: int, *, coded: bool = False) -> pa.Table:
    keys = pa.array([f"metric/{i % 3}" for i in range(n)])
    if coded:
        keys = keys.dictionary_encode()
    extra = pa.MapArray.from_arrays(pa.array(list(range(n + 1)), pa.int32()), keys,
                                    pa.array([float(i) for i in range(n)]))
    return pa.table({"step": pa.array(range(n), pa.int64()), "phase": pa.array(["train"] * n), "extra": extra})


def test_write_parquet_compresses_a_large_table_per_column_and_leaves_a_small_one_raw(tmp_path: Path) -> None:
    big = _steps(2000)
    assert big.nbytes > P.UNCOMPRESSED_BYTES
    P.write_parquet(big, tmp_path / "big.parquet")
    cols = _columns(tmp_path / "big.parquet")
    # the names' LZ4_RAW is LZ4 in pyarrow's metadata
    assert {k: c.compression for k, c in cols.items()} == {
        "step": "ZSTD", "phase": "ZSTD", "extra.key_value.key": "LZ4", "extra.key_value.value": "ZSTD"}
    # statistics on every column but the MAP's; a dictionary on every column but the MAP's
    assert {k: c.is_stats_set for k, c in cols.items()} == {
        "step": True, "phase": True, "extra.key_value.key": False, "extra.key_value.value": False}
    assert {k: c.has_dictionary_page for k, c in cols.items()} == {
        "step": True, "phase": True, "extra.key_value.key": False, "extra.key_value.value": False}
    assert pq.read_table(tmp_path / "big.parquet").equals(big)
    small = _steps(3)
    assert small.nbytes <= P.UNCOMPRESSED_BYTES
    P.write_parquet(small, tmp_path / "small.parquet")
    assert {c.compression for c in _columns(tmp_path / "small.parquet").values()} == {"UNCOMPRESSED"}
    assert pq.read_table(tmp_path / "small.parquet").equals(small)


def test_coded_names_keep_their_dictionary_and_zstd(tmp_path: Path) -> None:
    table = _steps(2000, coded=True)
    P.write_parquet(table, tmp_path / "c.parquet")
    cols = _columns(tmp_path / "c.parquet")
    key = cols["extra.key_value.key"]
    assert key.compression == "ZSTD" and key.has_dictionary_page and not key.is_stats_set
    assert pq.read_table(tmp_path / "c.parquet").column("extra").to_pylist() == table.column("extra").to_pylist()


def test_lists_of_integers_are_delta_packed_in_row_groups_of_65536(tmp_path: Path) -> None:
    n = P.LIST_ROW_GROUP + 100
    table = pa.table({"layer": pa.array([1] * n, pa.int32()), "counts": pa.array([[i, i + 1] for i in range(n)])})
    P.write_parquet(table, tmp_path / "r.parquet")
    meta = pq.ParquetFile(tmp_path / "r.parquet").metadata
    assert [meta.row_group(k).num_rows for k in range(meta.num_row_groups)] == [65536, 100]
    cols = _columns(tmp_path / "r.parquet")
    assert "DELTA_BINARY_PACKED" in cols["counts.list.element"].encodings
    assert not cols["counts.list.element"].has_dictionary_page and cols["layer"].has_dictionary_page
    assert pq.read_table(tmp_path / "r.parquet").equals(table)
    # without a list column, one row group
    flat = pa.table({"step": pa.array(range(n), pa.int64())})
    P.write_parquet(flat, tmp_path / "f.parquet")
    assert pq.ParquetFile(tmp_path / "f.parquet").metadata.num_row_groups == 1


# --- empty tables, written once and linked ----------------------------------------------------------------------


def test_an_empty_tables_bytes_are_made_once_and_are_what_write_parquet_writes(monkeypatch: Any) -> None:
    monkeypatch.setattr(P, "_EMPTY_PARQUET", {})
    schema = TABLES["steps"]
    data, digest = P._empty_parquet(schema)
    assert isinstance(data, bytes) and digest == hashlib.sha256(data).hexdigest()
    back = pq.read_table(pa.BufferReader(data))
    assert back.num_rows == 0 and back.schema.equals(schema)
    sink = pa.BufferOutputStream()
    P.write_parquet(schema.empty_table(), sink)
    assert sink.getvalue().to_pybytes() == data
    assert P._empty_parquet(schema) is P._empty_parquet(schema)
    assert list(P._EMPTY_PARQUET) == [schema.serialize().to_pybytes()]
    other = P._empty_parquet(TABLES["events"])
    assert other[0] != data and len(P._EMPTY_PARQUET) == 2


def test_write_table_links_an_empty_table_to_the_groups_first_and_writes_a_full_one(
    tmp_path: Path, monkeypatch: Any,
) -> None:
    schema = TABLES["events"]
    empties: dict[str, Path] = {}
    first, second, alone = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    d1 = P._write_table(schema.empty_table(), first, "events", empties)
    assert empties == {"events": first}
    d2 = P._write_table(schema.empty_table(), second, "events", empties)
    assert empties == {"events": first}  # the first stays the one linked to
    assert first.stat().st_ino == second.stat().st_ino and first.stat().st_nlink == 2
    data = first.read_bytes()
    assert d1 == d2 == (hashlib.sha256(data).hexdigest(), len(data))
    d3 = P._write_table(schema.empty_table(), alone, "events", None)  # no group: a file of its own
    assert d3 == d1 and alone.stat().st_ino != first.stat().st_ino and alone.read_bytes() == data
    # a link refused: the bytes are written
    monkeypatch.setattr(P.os, "link", lambda *a: (_ for _ in ()).throw(OSError("no links")))
    d4 = P._write_table(schema.empty_table(), tmp_path / "d.parquet", "events", empties)
    assert d4 == d1 and (tmp_path / "d.parquet").read_bytes() == data
    assert (tmp_path / "d.parquet").stat().st_ino != first.stat().st_ino


def test_write_table_of_rows_in_memory_or_through_its_file(tmp_path: Path, monkeypatch: Any) -> None:
    table = _steps(50)
    path = tmp_path / "s.parquet"
    digest, size = P._write_table(table, path, "steps", {})
    data = path.read_bytes()
    assert (digest, size) == (hashlib.sha256(data).hexdigest(), len(data)) and pq.read_table(path).equals(table)
    monkeypatch.setattr(P, "IN_MEMORY_TABLE", 0)  # a large table: written to its file, hashed from it
    monkeypatch.setattr(P, "_write_new", None)  # never used for it
    digest, size = P._write_table(table, tmp_path / "l.parquet", "steps", {})
    big = (tmp_path / "l.parquet").read_bytes()
    assert (digest, size) == (hashlib.sha256(big).hexdigest(), len(big))


def test_write_new_creates_a_file_once_with_every_byte(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "n"
    writes: list[int] = []
    real = os.write

    def short(fd: int, view: Any) -> int:  # the kernel writes at most 3 bytes at a time
        writes.append(len(view))
        return real(fd, bytes(view[:3]))

    monkeypatch.setattr(P.os, "write", short)
    P._write_new(path, b"0123456789")
    assert path.read_bytes() == b"0123456789" and writes == [10, 7, 4, 1]
    monkeypatch.undo()
    with pytest.raises(FileExistsError):
        P._write_new(path, b"x")
    assert path.read_bytes() == b"0123456789"
    P._write_new(tmp_path / "buf", pa.py_buffer(b"abc"))
    assert (tmp_path / "buf").read_bytes() == b"abc"
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "buf").stat().st_mode & 0o777 == 0o666 & ~umask


# --- strings in tables ------------------------------------------------------------------------------------------


def test_every_string_column_and_metric_name_is_redacted() -> None:
    extra = pa.array([[(f"loss {SECRET}", 1.0), ("lr", 2.0)], None, [("lr", 3.0)]], EXTRA)
    table = pa.table({"detail": pa.array([f"at {SECRET}", None, "ok"]), "n": pa.array([1, 2, 3]),
                      "extra": extra})
    out = P._redact_strings(table, redact)
    assert out.column("detail").to_pylist() == [f"at {REDACTED}", None, "ok"]
    assert out.column("n").to_pylist() == [1, 2, 3]
    assert out.column("extra").to_pylist() == [[(f"loss {REDACTED}", 1.0), ("lr", 2.0)], None, [("lr", 3.0)]]
    assert out.schema.equals(table.schema)
    clean = pa.table({"detail": pa.array(["a", None]), "extra": pa.array([[("lr", 1.0)], None], EXTRA)})
    assert P._redact_strings(clean, redact) is clean  # nothing to change: the same table
    # a MAP with nothing to redact does not end the walk: the columns after it are redacted
    after = pa.table({"extra": pa.array([[("lr", 1.0)]], EXTRA),
                      "coded": pa.MapArray.from_arrays(pa.array([0, 1], pa.int32()),
                                                       pa.array(["lr"]).dictionary_encode(), pa.array([1.0])),
                      "detail": pa.array([SECRET])})
    assert P._redact_strings(after, redact).column("detail").to_pylist() == [REDACTED]


def test_coded_names_are_decoded_only_when_one_is_redacted() -> None:
    keys = pa.array(["lr", f"k {SECRET}", "lr"]).dictionary_encode()
    secret = pa.table({"extra": pa.MapArray.from_arrays(pa.array([0, 2, 3], pa.int32()), keys,
                                                        pa.array([1.0, 2.0, 3.0]))})
    out = P._redact_strings(secret, redact)
    assert out.schema.field("extra").type == EXTRA
    assert out.column("extra").to_pylist() == [[("lr", 1.0), (f"k {REDACTED}", 2.0)], [("lr", 3.0)]]
    clean_keys = pa.array(["lr", "loss"]).dictionary_encode()
    clean = pa.table({"extra": pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()), clean_keys,
                                                       pa.array([1.0, 2.0]))})
    same = P._redact_strings(clean, redact)
    assert same.schema.field("extra").type == EXTRA_CODED and same.column("extra").equals(clean.column("extra"))


def test_a_published_receipts_tables_hold_no_secret(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = _staging(lg, "r", run_uuid="u1", started_at="2026-12-01T10:00:00+00:00", attempt=2)
    r0 = run / "rank-00000"
    _jsonl(r0 / "steps.jsonl", [{"step": 1, "loss": 2.0, "extra": {f"m {SECRET}": 1.0}}])
    _jsonl(r0 / "evals.jsonl", [{"step": 1, "split": "val", "source": f"s {SECRET}", "metric": "acc", "value": 1.0}])
    _jsonl(r0 / "events.jsonl", [{"time": 1.0, "kind": "init", "step": None, "attempt": 1, "detail": SECRET}])
    r = P.publish(lg, run, Outcome("succeeded", exit_code=0, ended_at=ENDED), redact=redact)
    d = lg.path(r.id)
    assert pq.read_table(d / "steps.parquet").column("extra").to_pylist() == [[(f"m {REDACTED}", 1.0)]]
    assert pq.read_table(d / "evals.parquet").column("source").to_pylist() == [f"s {REDACTED}"]
    events = pq.read_table(d / "events.parquet")
    assert events.column("detail").to_pylist() == [REDACTED]
    assert events.column("attempt").to_pylist() == [2]  # the wrapper's attempt, not the SDK's
    for name in TABLES:
        assert SECRET.encode() not in (d / f"{name}.parquet").read_bytes()


# --- the seed among the arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"--seed": "42", "lr": "0.1"}, (42, {"lr": "0.1"})),
    ({"train.yaml:training.seed": "7", "x": "1"}, (7, {"x": "1"})),
    ({"cfg:seed": "7"}, (7, {})),
    ({"--RANDOM_SEED": " 5 "}, (5, {})),
    ({"--seed": "-3"}, (-3, {})),
    ({"--seed": "1", "cfg:training.seed": "1", "a": "b"}, (1, {"a": "b"})),
    ({"--seed": "1", "random_seed": "2"}, (None, {"--seed": "1", "random_seed": "2"})),
    ({"--seed": "abc"}, (None, {"--seed": "abc"})),
    ({"--seed": "1.5"}, (None, {"--seed": "1.5"})),
    ({"--seeds": "1", "myseed": "2", "seed.x": "3"}, (None, {"--seeds": "1", "myseed": "2", "seed.x": "3"})),
    ({"Xseed": "1", "-seed-": "2"}, (None, {"Xseed": "1", "-seed-": "2"})),
    ({}, (None, {})),
])
def test_the_seed_of_a_launch(arguments: dict[str, str], expected: Any) -> None:
    assert P._seed_of(arguments) == expected


def test_a_launchs_arguments_give_the_workload_its_seed_redacted(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = _staging(lg, "a")
    (run / "arguments.json").write_text(json.dumps({"--seed": "11", "--token": SECRET, "--lr": 0.5}))
    problems: list[Any] = []
    w = P._workload(run, problems, redact)
    assert w.seed == 11 and w.arguments == {"--token": REDACTED, "--lr": "0.5"} and problems == []
    (run / "arguments.json").write_text("[1]")
    assert P._workload(run, problems, redact) == P.Workload()
    (run / "arguments.json").write_text("{}")
    assert P._workload(run, problems, redact) == P.Workload()
    (run / "arguments.json").write_text("{bad")
    assert P._workload(run, problems, redact) == P.Workload() and len(problems) == 2  # not an object; not JSON
    # a workload the training process reported wins over the arguments
    (run / "arguments.json").write_text(json.dumps({"--seed": "11"}))
    (run / "rank-00000").mkdir()
    (run / "rank-00000" / "workload.json").write_text(json.dumps({"seed": 3}))
    assert P._workload(run, [], redact).seed == 3


# --- the failure ------------------------------------------------------------------------------------------------


def test_the_failure_at_the_end_of_the_log_redacted_for_a_failed_or_interrupted_run(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("start\nTraceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                   f"ValueError: bad {SECRET}\n")
    for status in ("failed", "interrupted"):
        f = P._failure(log, Outcome(status, exit_code=1), redact)
        assert f is not None
        assert f.exception == f"ValueError: bad {REDACTED}"
        assert f.lines == ("Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
                           f"ValueError: bad {REDACTED}")
        assert f.first_line == 2
    assert P._failure(log, Outcome("succeeded", exit_code=0), redact) is None
    assert P._failure(tmp_path / "missing.log", Outcome("failed", exit_code=1), redact) is None
    log.write_text("just\nKilled\n")  # no traceback: the last lines, no exception
    f = P._failure(log, Outcome("failed", exit_code=1), redact)
    assert f is not None and f.exception is None and f.lines == ("just", "Killed")


def test_a_published_failed_run_carries_its_failure_and_its_log(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = _staging(lg, "f")
    (run / "output.log").write_text("Traceback (most recent call last):\nValueError: broken\n")
    r = P.publish(lg, run, Outcome("failed", exit_code=1, ended_at=ENDED), redact=redact)
    assert r.failure is not None and r.failure.exception == "ValueError: broken"
    log = lg.path(r.id) / "output.log"
    data = log.read_bytes()
    (art,) = [a for a in r.artifacts if a.path == "output.log"]
    assert (art.kind, art.sha256, art.bytes) == ("log", hashlib.sha256(data).hexdigest(), len(data))


# --- build: the receipt's fields from the staging files ---------------------------------------------------------


def test_a_bare_staging_directory_gives_the_defaults(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = lg.staging / "bare"
    run.mkdir(parents=True)
    before = datetime.now(UTC)
    r = P.publish(lg, run, Outcome("succeeded", exit_code=0), redact=redact)
    assert r.run_uuid == "bare" and r.name is None and r.tags == {} and r.command == () and r.attempt == 1
    assert r.started_at is None and r.duration_s is None and r.ended_at >= before and r.failure is None
    assert r.workload == P.Workload() and r.capture is None
    assert [a.path for a in r.artifacts] == [f"{n}.parquet" for n in TABLES]
    assert all(a.kind == "table" and a.rows == 0 for a in r.artifacts)
    for a in r.artifacts:
        data = (lg.path(r.id) / a.path).read_bytes()
        assert (a.sha256, a.bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    assert ("stack.json", "the stack was not captured (the wrapper ended first)") in [
        (p.source, p.message) for p in r.problems]
    assert (r.summary.energy_j, r.summary.energy_method) == (None, "not measured")


def test_build_reads_the_wrapper_facts_and_the_recorded_log_digest(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = _staging(lg, "w", run_uuid="uu", name="nm", tags={"a": "b"}, command=["python", "t.py"], attempt=4,
                   started_at="2026-12-01T10:00:00+00:00", links={"attempt_of": "x" * 64, "baseline": None})
    log = run / "output.log"
    log.write_text("hello\n")
    st = log.stat()
    (run / "output.log.sha256").write_text(json.dumps({"sha256": "f" * 64, "bytes": st.st_size,
                                                        "mtime_ns": st.st_mtime_ns}))
    r = P.publish(lg, run, Outcome("succeeded", exit_code=0, ended_at=ENDED), redact=redact)
    assert (r.run_uuid, r.name, r.tags, r.command, r.attempt) == ("uu", "nm", {"a": "b"}, ("python", "t.py"), 4)
    assert r.duration_s == 30.0 and r.links.attempt_of == "x" * 64 and r.links.baseline is None
    (art,) = [a for a in r.artifacts if a.kind == "log"]
    assert art.sha256 == "f" * 64 and art.bytes == 6  # as the tee recorded it


# --- a group ----------------------------------------------------------------------------------------------------


def test_a_group_shares_its_empty_tables_and_marks_every_run(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    runs = [_staging(lg, f"g{i}", run_uuid=f"u{i}") for i in range(3)]
    _jsonl(runs[0] / "rank-00000" / "steps.jsonl", [{"step": 1, "loss": 1.0}])
    receipts = P.publish_many(lg, [(r, Outcome("succeeded", exit_code=0, ended_at=ENDED)) for r in runs], redact=redact)
    assert [r.run_uuid for r in receipts] == ["u0", "u1", "u2"]
    assert len({r.id for r in receipts}) == 3 and not any(r.exists() for r in runs)
    for name in TABLES:
        inodes = {(lg.path(r.id) / f"{name}.parquet").stat().st_ino for r in receipts}
        assert len(inodes) == (2 if name == "steps" else 1), name
    for r in receipts:
        on_disk = Receipt.model_validate(json.loads((lg.path(r.id) / "receipt.json").read_text()))
        assert on_disk == r
    assert sorted(lg.ids()) == sorted(r.id for r in receipts)
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]


def test_a_group_is_published_all_or_nothing(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    runs = [_staging(lg, f"g{i}", run_uuid=f"u{i}") for i in range(2)]

    def bad(receipt: Receipt, tables: dict[str, pa.Table]) -> Receipt:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        P.publish_many(lg, [P.Staged(runs[0], Outcome("succeeded", exit_code=0)),
                            P.Staged(runs[1], Outcome("succeeded", exit_code=0), bad)], redact=redact)
    assert all(r.is_dir() for r in runs) and lg.ids() == []
    assert not [p for p in lg.root.iterdir() if p.name.startswith(".tmp-")]
    assert all(P.published_as(r) is None for r in runs)
    # published again, without the bad amend: both are
    receipts = P.publish_many(lg, [(r, Outcome("succeeded", exit_code=0, ended_at=ENDED)) for r in runs], redact=redact)
    assert [lg.path(r.id).is_dir() for r in receipts] == [True, True]


def test_marks_and_directory_flushes_of_a_group(tmp_path: Path, monkeypatch: Any) -> None:
    dirs = [tmp_path / f"d{i}" for i in range(4)]
    for d in dirs:
        d.mkdir()
    P._mark_all([(d, f"{i:064x}") for i, d in enumerate(dirs)])
    assert [P.published_as(d) for d in dirs] == [f"{i:064x}" for i in range(4)]
    P._mark_all([(dirs[0], ID)])
    assert P.published_as(dirs[0]) == ID
    P._mark_all([])
    flushed: list[Path] = []
    monkeypatch.setattr(P, "_fsync_dir", flushed.append)
    P._fsync_dirs(dirs)
    assert sorted(flushed) == sorted(dirs)
    flushed.clear()
    P._fsync_dirs(dirs[:2])
    assert flushed == dirs[:2]
    monkeypatch.undo()
    P._fsync_dir(tmp_path / "missing")  # nothing to flush: no error


def test_the_flushing_threads_are_started_once(monkeypatch: Any) -> None:
    monkeypatch.setattr(P, "_FLUSHERS", [])
    pool = P._flushers()
    assert P._flushers() is pool and P._FLUSHERS == [pool]
    assert pool._max_workers == 16 and pool._thread_name_prefix == "ledger-flush"
    assert list(pool.map(lambda x: x * 2, [1, 2, 3])) == [2, 4, 6]


def test_published_as_reads_the_lock_then_the_old_mark(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    assert P.published_as(run) is None
    (run / "lock").write_text(f"\n{ID}\n")
    assert P.published_as(run) == ID
    (run / "lock").write_text("")
    assert P.published_as(run) is None
    (run / P.PUBLISHED_MARK).write_text(ID.replace("a", "c"))
    assert P.published_as(run) == ID.replace("a", "c")
    (run / "lock").write_text(ID.upper())  # not an id: the old mark
    assert P.published_as(run) == ID.replace("a", "c")
    (run / P.PUBLISHED_MARK).write_text("x" * 300)
    assert P.published_as(run) is None
    (run / "lock").write_text(ID + "0")  # 65 characters: not an id
    assert P.published_as(run) is None


# --- receipts ---------------------------------------------------------------------------------------------------


def test_too_deep_counts_objects_and_lists() -> None:
    assert too_deep([[1]], 2) is False and too_deep([[[1]]], 2) is True
    assert too_deep({"a": {"b": 1}}, 2) is False and too_deep({"a": {"b": {}}}, 2) is True
    assert too_deep(5, 0) is False and too_deep([], 0) is True and too_deep([], 1) is False
    assert too_deep([1, [2, [3]]], 3) is False and too_deep([1, [2, [3, []]]], 3) is True


def test_ensure_writable_makes_staging_and_leaves_no_probe(tmp_path: Path) -> None:
    lg = Ledger(tmp_path / "l")
    lg.ensure_writable()
    lg.ensure_writable()  # again: the staging directory exists already
    assert lg.staging.is_dir() and sorted(p.name for p in lg.root.iterdir()) == [lg.staging.name]
    other = Ledger(tmp_path / "m")
    other.root.mkdir()
    other.staging.symlink_to(tmp_path)
    with pytest.raises(LedgerNotWritable, match=r"symbolic link; ledger never stages runs through one: remove it "
                                                r"\(it is made again as a directory\)"):
        other.ensure_writable()
    blocked = Ledger(tmp_path / "f")
    blocked.root.write_text("a file")
    with pytest.raises(LedgerNotWritable, match="not writable"):
        blocked.ensure_writable()


# --- notes, the workload and the stack read without a list of the ranks ----------------------------------------


def test_notes_that_cannot_be_read_and_a_long_unreadable_note(tmp_path: Path) -> None:
    run = tmp_path / "r"
    (run / "problems.jsonl").mkdir(parents=True)
    assert [(p.source, p.message) for p in P._read_problems(run)] == [
        ("problems.jsonl", "the notes could not be read (Is a directory)")]
    (run / "problems.jsonl").rmdir()
    (run / "problems.jsonl").write_text("x" * 250 + "\n")
    assert [(p.source, p.message) for p in P._read_problems(run)] == [
        ("problems.jsonl", "unreadable note: " + "x" * 200)]


def test_the_workload_and_the_stack_list_the_ranks_when_not_given(tmp_path: Path) -> None:
    run = tmp_path / "r"
    r0 = run / "rank-00000"
    r0.mkdir(parents=True)
    (r0 / "workload.json").write_text(json.dumps({"seed": 5}))
    assert P._reported_workload(run, [], redact).seed == 5
    problems: list[Any] = []
    (r0 / "workload.json").write_text(json.dumps({"batch": {"global_batch": "many"}}))
    assert P._reported_workload(run, problems, redact) == P.Workload()
    assert len(problems) == 1 and problems[0].source == "rank-00000/workload.json"
    assert problems[0].message.startswith("field batch.global_batch: ")
    calls: list[Any] = []

    def merge(stack: Any, facts: dict[int, dict[str, Any]]) -> tuple[Any, list[str]]:
        calls.append(facts)
        return stack, ["merged"]

    P._stack(run, [], redact, merge)
    assert calls == []  # no rank wrote runtime facts: nothing to merge
    (r0 / "runtime.json").write_text(json.dumps({"torch": "2.13"}))
    problems = []
    P._stack(run, problems, redact, merge)
    assert calls == [{0: {"torch": "2.13"}}] and ("runtime.json", "merged") in [(p.source, p.message)
                                                                                for p in problems]


def test_a_log_is_copied_where_links_are_refused_and_a_mark_replaces_the_locks_content(
    tmp_path: Path, monkeypatch: Any,
) -> None:
    src, dst = tmp_path / "a.log", tmp_path / "b.log"
    src.write_bytes(b"line\n")

    def refuse(*args: Any) -> None:
        raise OSError("no links here")

    monkeypatch.setattr(P.os, "link", refuse)
    assert P._link_or_copy(src, dst) == dst
    assert dst.read_bytes() == b"line\n" and dst.stat().st_ino != src.stat().st_ino
    monkeypatch.undo()
    run = tmp_path / "r"
    run.mkdir()
    (run / "lock").write_text("x" * 100)  # longer than an id: the mark truncates it
    P._mark_all([(run, ID)])
    assert (run / "lock").read_text() == ID
    (run / "lock").unlink()
    (run / "lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        P._mark_all([(run, ID)])  # never written through a link
    assert not (tmp_path / "elsewhere").exists()
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    P._mark_all([(fresh, ID)])  # no lock file yet: created readable by all, writable by its owner
    umask = os.umask(0)
    os.umask(umask)
    assert (fresh / "lock").stat().st_mode & 0o777 == 0o644 & ~umask


def test_an_empty_sdk_error_log_says_why_it_may_be_empty(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    run = _staging(lg, "e")
    (run / "rank-00000").mkdir()
    (run / "rank-00000" / "sdk_errors.log").write_text("\n  \n")
    r = P.publish(lg, run, Outcome("succeeded", exit_code=0, ended_at=ENDED), redact=redact)
    assert ("rank-00000/sdk_errors.log", "the SDK failed to write some rows and could not say why (its error log is "
            "empty: the disk was full, or not writable)") in [(p.source, p.message) for p in r.problems]


def test_a_group_with_a_run_published_already_publishes_the_others(tmp_path: Path) -> None:
    lg = Ledger(tmp_path)
    first = P.publish(lg, _staging(lg, "a", run_uuid="ua"), Outcome("succeeded", exit_code=0, ended_at=ENDED),
                      redact=redact)
    again = lg.staging / "a"  # a publisher died after the rename: recover finds the mark
    again.mkdir()
    (again / "lock").write_text(first.id)
    new = _staging(lg, "b", run_uuid="ub")
    out = P.publish_many(lg, [(again, Outcome("succeeded", exit_code=0)),
                              (new, Outcome("succeeded", exit_code=0, ended_at=ENDED))], redact=redact)
    assert out[0] == first and out[1].run_uuid == "ub" and lg.path(out[1].id).is_dir()
    assert not again.exists() and not new.exists() and sorted(lg.ids()) == sorted([first.id, out[1].id])


def test_a_table_of_exactly_the_limit_is_written_uncompressed(tmp_path: Path) -> None:
    table = pa.table({"step": pa.array(range(512), pa.int64())})
    assert table.nbytes == 4096 == P.UNCOMPRESSED_BYTES  # 512 values of 8 bytes, no validity bitmap
    P.write_parquet(table, tmp_path / "t.parquet")
    assert _columns(tmp_path / "t.parquet")["step"].compression == "UNCOMPRESSED"
    bigger = pa.table({"step": pa.array(range(513), pa.int64())})
    P.write_parquet(bigger, tmp_path / "u.parquet")
    assert _columns(tmp_path / "u.parquet")["step"].compression == "ZSTD"


def test_a_receipt_json_nested_past_64_levels_is_refused_by_name(tmp_path: Path) -> None:
    from ledger.errors import InvalidReceipt
    from ledger.store.receipts import read_receipt_json

    path = tmp_path / "receipt.json"
    path.write_text(json.dumps({"a": "x", "deep": json.loads("[" * 63 + "]" * 63)}))
    assert read_receipt_json(path, ID)["a"] == "x"  # 64 levels: the object and 63 lists
    path.write_text(json.dumps({"deep": json.loads("[" * 64 + "]" * 64)}))
    with pytest.raises(InvalidReceipt, match=r"receipt.json: nested too deeply to be a receipt \(more than 64 lev"):
        read_receipt_json(path, ID)
