"""`ledger export` in this process: every table exported and read back (pyarrow for the Parquet dataset, deltalake
for the Delta tables) gives the index's rows, column for column, with the partition date and schema version
computed here from the receipts; a second export adds only the new receipt; an export killed half-way (a forked
child that reaches the ``exporting`` fault) is repaired without doubling a row; a destination written by another
schema version, an unknown format and a destination that cannot be opened are refused in one line; and, with
Hypothesis, the portable types (timestamps as UTC, every column nullable) keep every value of any table."""

from __future__ import annotations

import json
import math
import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ledger
from ledger.errors import BadInput, LedgerError
from ledger.replay.export import _portable, _storage_options, _uri, export
from ledger.store.receipts import Ledger
from schemas.receipt import SCHEMA_VERSION
from schemas.tables import TABLES

EXTRA = ("started_date", "schema_version")
"""The columns an export adds to each metric table."""


def _plain(value: Any) -> Any:
    """A value as compared here: NaN as a marker (NaN != NaN), timestamps as naive UTC."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_plain(row[c]) for c in columns) for row in table.to_pylist()), key=repr)


def _index(root: Path, name: str) -> pa.Table:
    return ledger.open(root).query(f"SELECT * FROM {name}")


def _dates(root: Path) -> dict[str, str | None]:
    """Receipt id -> the UTC date it started, from its receipt.json (None when unknown)."""
    out = {}
    for rid in Ledger(root).ids():
        started = json.loads((Ledger(root).path(rid) / "receipt.json").read_text())["started_at"]
        out[rid] = None if started is None else str(
            datetime.fromisoformat(started.replace("Z", "+00:00")).astimezone(UTC).date())
    return out


def _parquet(dest: Path, name: str) -> pa.Table:
    return ds.dataset(str(dest / name), format="parquet", partitioning="hive").to_table()


def _delta(dest: Path, name: str) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(str(dest / name)).to_pyarrow_table()


def _check_tables(root: Path, dest: Path, fmt: str) -> dict[str, int]:
    """Every exported table against the index; returns the rows per table."""
    read = _parquet if fmt == "parquet" else _delta
    dates = _dates(root)
    counts = {}
    for name in TABLES:
        index = _index(root, name)
        counts[name] = index.num_rows
        if not index.num_rows and fmt == "parquet":
            assert not (dest / name).exists()  # no file for an empty table
            continue
        got = read(dest, name)
        assert got.column_names[:len(index.column_names)] == index.column_names
        assert sorted(got.column_names[len(index.column_names):]) == sorted(EXTRA)
        assert _rows(got, index.column_names) == _rows(index, index.column_names)
        assert {str(v) if v is not None else None for v in got.column("started_date").to_pylist()} == (
            {dates[r] for r in set(got.column("receipt_id").to_pylist())})
        for row in got.select(["receipt_id", "started_date", "schema_version"]).to_pylist():
            assert row["schema_version"] == SCHEMA_VERSION
            assert (None if row["started_date"] is None else str(row["started_date"])) == dates[row["receipt_id"]]
    receipts = read(dest, "receipts")
    index = _index(root, "receipts")
    counts["receipts"] = index.num_rows
    assert sorted(receipts.column("id").to_pylist()) == sorted(index.column("id").to_pylist())
    for row in receipts.to_pylist():
        stored = json.loads((Ledger(root).path(row["id"]) / "receipt.json").read_text())
        assert json.loads(row["receipt"]) == stored  # the receipt as JSON text, every field
        assert json.loads(row["tags"]) == stored["tags"] and row["name"] == stored["name"]
        assert (None if row["started_date"] is None else str(row["started_date"])) == dates[row["id"]]
        assert "schema_version" in receipts.column_names and row["schema_version"] == SCHEMA_VERSION
    for f in receipts.schema:
        if pa.types.is_timestamp(f.type):
            assert f.type.tz == "UTC", f
    return counts


def _message(dest: Path, fmt: str, added: int, rows: dict[str, int], already: int) -> str:
    written = ", ".join(f"{n} {k}" for n, k in rows.items() if k) or "no rows"
    return f"exported {added} receipt(s) to {dest} as {fmt} ({written}; {already} receipt(s) already there)"


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_an_export_reads_back_as_the_index_and_grows_by_the_new_receipts(tmp_path: Path, source: dict[str, str],
                                                                         clone: Any, fmt: str) -> None:
    root = clone(tmp_path / "receipts", "a", "b")
    dest = tmp_path / "out"
    first = export(Ledger(root), str(dest), fmt)
    counts = _check_tables(root, dest, fmt)
    order = [*TABLES, "receipts"]
    assert first.rows == {n: counts[n] for n in order}
    assert counts["steps"] == 12 and counts["receipts"] == 2  # 6 steps each
    assert sorted(first.added) == sorted([source["a"], source["b"]]) and first.already == 0
    assert first.repaired == 0 and first.target == str(dest) and first.format == fmt
    assert first.message == _message(dest, fmt, 2, first.rows, 0)
    if fmt == "delta":  # every table exists with its schema, rows or not
        for name in order:
            assert _delta(dest, name).num_rows == counts[name]
    clone(root, "c")
    second = export(Ledger(root), str(dest), fmt)
    assert second.added == [source["c"]] and second.already == 2 and second.repaired == 0
    counts = _check_tables(root, dest, fmt)
    assert second.rows["steps"] == 6 and second.rows["receipts"] == 1 and counts["steps"] == 18
    assert second.message == _message(dest, fmt, 1, second.rows, 2)
    third = export(Ledger(root), str(dest), fmt)
    assert (third.added, third.already, third.rows, third.repaired) == ([], 3, {}, 0)
    assert third.message == f"exported 0 receipt(s) to {dest} as {fmt} (no rows; 3 receipt(s) already there)"
    _check_tables(root, dest, fmt)


def _download(s3: Any, bucket: str, prefix: str, into: Path) -> list[str]:
    """Every object under ``prefix`` copied to ``into`` (boto3, not the exporter's file system); their keys (the
    empty ``.../`` folder markers pyarrow writes left out)."""
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
                  if not o["Key"].endswith("/"))
    for key in keys:
        (into / key).parent.mkdir(parents=True, exist_ok=True)
        (into / key).write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    return keys


def test_a_parquet_export_to_s3_lands_in_hive_folders_and_grows(tmp_path: Path, s3: Any, source: dict[str, str],
                                                                 clone: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object-store destination (moto's S3 server): each table's objects are
    ``<prefix>/<table>/started_date=<date>/part-<batch>-0.parquet`` (one per table and date), read back they are the
    index's rows, nothing lands on the local disk, and a second export adds only the new receipt."""
    monkeypatch.chdir(tmp_path)
    root = clone(tmp_path / "receipts", "a", "b")
    bucket = s3.bucket()
    first = export(Ledger(root), f"s3://{bucket}/lake/", "parquet")
    assert sorted(first.added) == sorted([source["a"], source["b"]]) and first.already == 0
    dates = _dates(root)
    keys = _download(s3, bucket, "lake/", tmp_path / "copy")
    batch = keys[0].split("/")[-1].split("-")[1]
    expected = {f"lake/{name}/started_date={dates[rid]}/part-{batch}-0.parquet"
                for name in (*TABLES, "receipts")
                for rid in _index(root, name).column("id" if name == "receipts" else "receipt_id").to_pylist()}
    assert keys == sorted(expected) and len(batch) == 32
    _check_tables(root, tmp_path / "copy" / "lake", "parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "receipts"]  # nothing written here
    clone(root, "c")
    second = export(Ledger(root), f"s3://{bucket}/lake", "parquet")
    assert (second.added, second.already, second.repaired) == ([source["c"]], 2, 0)
    assert second.rows["steps"] == 6
    _download(s3, bucket, "lake/", tmp_path / "copy")
    _check_tables(root, tmp_path / "copy" / "lake", "parquet")


def _killed_export(root: Path, dest: Path, fmt: str) -> None:
    """An export killed once its metric tables are written (a forked child: the code under test stays in force)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os.environ["LEDGER_FAULT_AT"] = "exporting"
            export(Ledger(root), str(dest), fmt)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_an_export_killed_half_way_is_repaired_without_doubling_a_row(tmp_path: Path, source: dict[str, str],
                                                                      clone: Any) -> None:
    root = clone(tmp_path / "receipts", "a", "b")
    dest = tmp_path / "out"
    export(Ledger(clone(tmp_path / "first", "d")), str(dest), "parquet")  # a committed batch before (d)
    clone(root, "d")
    _killed_export(root, dest, "parquet")
    assert _parquet(dest, "steps").num_rows == 6 + 12  # d's, then a's and b's of the batch never committed
    assert _parquet(dest, "receipts").column("id").to_pylist() == [source["d"]]
    written = [n for n in TABLES if _index(root, n).num_rows]
    files = sorted(p for n in written for p in (dest / n).rglob("*.parquet"))
    assert len(files) == 2 * len(written)  # per table and date (all four ran on one day): d's batch, a and b's
    done = export(Ledger(root), str(dest), "parquet")
    assert sorted(done.added) == sorted([source["a"], source["b"]]) and done.already == 1
    assert done.repaired == len(written)  # the files of the batch never committed
    assert [p for p in files if p.exists()] == [p for p in files if p.name.split("-")[1] in _committed(dest)]
    _check_tables(root, dest, "parquet")
    again = export(Ledger(root), str(dest), "parquet")  # nothing left to repair or add
    assert (again.added, again.repaired) == ([], 0)
    _check_tables(root, dest, "parquet")


def test_a_delta_export_cut_short_is_repaired_without_doubling_a_row(tmp_path: Path, source: dict[str, str],
                                                                    clone: Any) -> None:
    """The receipts table of the destination was made by another tool (no partition column): the metric tables are
    written, the receipts table refuses its rows; once it is removed, the next export deletes the rows of the batch
    that never committed and writes them again."""
    import shutil

    from deltalake import DeltaTable

    root = clone(tmp_path / "receipts", "a", "b")
    dest = tmp_path / "out"
    DeltaTable.create(str(dest / "receipts"), schema=pa.schema([("id", pa.string()), ("schema_version", pa.int32())]))
    with pytest.raises(LedgerError, match=r"^export to .* failed: .*partition"):
        export(Ledger(root), str(dest), "delta")
    written = [n for n in TABLES if _index(root, n).num_rows]
    assert _delta(dest, "steps").num_rows == 12 and _delta(dest, "receipts").num_rows == 0
    shutil.rmtree(dest / "receipts")
    done = export(Ledger(root), str(dest), "delta")
    assert sorted(done.added) == sorted([source["a"], source["b"]]) and done.already == 0
    assert done.repaired == len(written)  # the tables that got rows of the batch never committed
    _check_tables(root, dest, "delta")
    for name in written:  # the repair is recorded: it names the batch whose rows it deleted
        history = DeltaTable(str(dest / name)).history()
        repairs = [c for c in history if "stackreceipt.repaired_batches" in c]
        batches = [c["stackreceipt.export_batch"] for c in history if "stackreceipt.export_batch" in c]
        assert len(repairs) == 1 and len(batches) == 2
        assert repairs[0]["stackreceipt.repaired_batches"] in batches
    # a second export into a repaired destination adds the next receipt and repairs nothing again
    clone(root, "c")
    again = export(Ledger(root), str(dest), "delta")
    assert (again.added, again.repaired, again.already) == ([source["c"]], 0, 2)
    _check_tables(root, dest, "delta")


def _committed(dest: Path) -> set[str]:
    return {p.name.split("-")[1] for p in (dest / "receipts").rglob("*.parquet")}


def test_a_destination_of_another_schema_version_is_refused(tmp_path: Path, source: dict[str, str],
                                                            clone: Any) -> None:
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    root = clone(tmp_path / "receipts", "a")
    old = tmp_path / "old"
    (old / "receipts" / "started_date=2026-01-01").mkdir(parents=True)
    rows = pa.table({"id": ["0" * 64, "1" * 64], "schema_version": pa.array([SCHEMA_VERSION, 1], pa.int32())})
    pq.write_table(rows, old / "receipts" / "started_date=2026-01-01" / f"part-{'0' * 32}-0.parquet")
    with pytest.raises(BadInput) as info:
        export(Ledger(root), str(old), "parquet")
    assert str(info.value) == (f"{old}/receipts holds receipts exported with schema version 1; this ledger writes "
                               f"version {SCHEMA_VERSION}: export to a new path (docs/export.md lists the changes)")
    write_deltalake(str(tmp_path / "lake" / "receipts"), rows)
    with pytest.raises(BadInput, match=rf"^{tmp_path}/lake/receipts holds receipts exported with schema version 1;"):
        export(Ledger(root), str(tmp_path / "lake"), "delta")
    # null versions and the current one are accepted: the receipts are there already
    ok = tmp_path / "ok" / "receipts" / "started_date=2026-01-01"
    ok.mkdir(parents=True)
    pq.write_table(pa.table({"id": [source["a"], "2" * 64], "schema_version": pa.array([SCHEMA_VERSION, None],
                                                                                      pa.int32())}),
                   ok / f"part-{'1' * 32}-0.parquet")
    done = export(Ledger(root), str(tmp_path / "ok"), "parquet")
    assert done.added == [] and done.already == 2


def test_an_unknown_format_or_a_destination_that_cannot_be_opened(tmp_path: Path, source: dict[str, str],
                                                                  clone: Any) -> None:
    root = clone(tmp_path / "receipts", "a")
    with pytest.raises(BadInput) as info:
        export(Ledger(root), str(tmp_path / "x"), "csv")
    assert str(info.value) == "unknown export format 'csv': use parquet or delta"
    assert not (tmp_path / "x").exists()
    for fmt in ("parquet", "delta"):
        with pytest.raises(LedgerError) as info:
            export(Ledger(root), "nosuchfs://bucket/tables", fmt)
        text = str(info.value)
        assert type(info.value) is LedgerError and "\n" not in text
        assert text.startswith("export to nosuchfs://bucket/tables failed: ") and text.endswith(
            "; the ledger is untouched and the next export repairs a partial one")
        assert len(text) > len("export to nosuchfs://bucket/tables failed: ; the ledger is untouched and the next "
                               "export repairs a partial one")
    # a file where the destination's folder would be
    (tmp_path / "file").write_text("x")
    with pytest.raises(LedgerError, match=r"^export to .*/file failed: \S"):
        export(Ledger(root), str(tmp_path / "file"), "parquet")


def test_destinations_and_endpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _uri("s3://bucket/prefix/") == "s3://bucket/prefix"
    assert _uri("s3://bucket/prefix") == "s3://bucket/prefix"
    assert _uri("lake/") == str(tmp_path / "lake")
    assert _uri("~/lake") == str(tmp_path / "home" / "lake")
    assert _uri("a/../b") == str(tmp_path / "b")
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    assert _storage_options() == {}
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert _storage_options() == {"AWS_ALLOW_HTTP": "true"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com")  # the S3 one wins
    assert _storage_options() == {}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://minio:9000")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://example.com")
    assert _storage_options() == {"AWS_ALLOW_HTTP": "true"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "")
    assert _storage_options() == {}
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "HTTPS://x")
    assert _storage_options() == {}


# --------------------------------------------------------------------------------- portable (Hypothesis)
TIMES = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1))
"""Naive times to the microsecond, the index's resolution."""
COLUMNS = {
    "naive": (pa.timestamp("us"), st.none() | TIMES),
    "zoned": (pa.timestamp("us", tz="Asia/Kolkata"), st.none() | TIMES.map(lambda t: t.replace(tzinfo=UTC))),
    "ints": (pa.int64(), st.none() | st.integers(-2**62, 2**62)),
    "floats": (pa.float64(), st.none() | st.floats(allow_nan=False)),
    "text": (pa.string(), st.none() | st.text(max_size=5)),
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=4, unique=True), st.integers(0, 4),
       st.data())
def test_portable_types_keep_every_value(names: list[str], n: int, data: st.DataObject) -> None:
    fields = [pa.field(c, COLUMNS[c][0], nullable=False, metadata={"doc": c}) for c in names]
    values = {c: [data.draw(COLUMNS[c][1].filter(lambda v: v is not None)) for _ in range(n)] for c in names}
    table = pa.table(values, schema=pa.schema(fields))
    got = _portable(table)
    assert got.schema.metadata == {b"stackreceipt.schema_version": str(SCHEMA_VERSION).encode()}
    assert got.column_names == names and got.num_rows == n
    for c in names:
        f = got.schema.field(c)
        assert f.nullable and f.metadata == {b"doc": c.encode()}
        if c == "naive":  # a naive time in the index is UTC: the same instant, now said to be UTC
            assert f.type == pa.timestamp("us", tz="UTC")
            assert got.column(c).to_pylist() == [t.replace(tzinfo=UTC) for t in values[c]]
        else:  # every other type as it was (a zoned time keeps its zone)
            assert f.type == COLUMNS[c][0]
            assert got.column(c).to_pylist() == table.column(c).to_pylist()
