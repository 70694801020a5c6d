"""`ledger export`: the index tables as a Hive-partitioned Parquet dataset and as Delta Lake tables, locally and
on S3 (moto's server). Read back with deltalake, DuckDB and polars, they give the rows `ledger query` gives; a
second export adds only the new receipt; an export killed half-way is repaired without doubling a row."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest
from conftest import BIN, ROOT, child_env

import ledger
from ledger.errors import BadInput
from ledger.replay.export import export, schema_version
from ledger.store.receipts import Ledger

STEPS = "SELECT receipt_id, step, loss, tokens FROM steps ORDER BY receipt_id, step"
ROUTING = "SELECT receipt_id, step, layer, tokens FROM routing ORDER BY receipt_id, step, layer"


def _ledger(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "ledger"), *args], cwd=cwd, env=child_env(**(env or {})), capture_output=True,
                          text=True, timeout=300)


def _query(root: Path, sql: str, cli: bool = False) -> list[tuple[Any, ...]]:
    """What `ledger query` answers (the command, or the same call in process), as tuples."""
    if not cli:
        table = ledger.open(root).query(sql)
        return list(zip(*(c.to_pylist() for c in table.columns), strict=True))
    proc = _ledger("query", "--json", sql, "--ledger", str(root), cwd=root.parent)
    assert proc.returncode == 0, proc.stderr
    columns = [c.strip() for c in sql.split("SELECT", 1)[1].split(" FROM ", 1)[0].split(",")]
    return [tuple(row[c] for c in columns) for row in json.loads(proc.stdout)]


def _rows(table: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


@pytest.mark.slow
def test_export_parquet_and_delta_match_query_and_grow_incrementally(tmp_path: Path, source: dict[str, str],
                                                                     clone: Any) -> None:
    import polars as pl
    from deltalake import DeltaTable

    root = clone(tmp_path / "receipts", "a", "b")
    steps, routing = _query(root, STEPS, cli=True), _query(root, ROUTING)
    assert steps == _query(root, STEPS)
    assert {r[0] for r in steps} == {source["a"], source["b"]} and len(steps) == 12

    lake, dataset = tmp_path / "lake", tmp_path / "dataset"
    first = export(Ledger(root), str(lake), "delta")
    assert sorted(first.added) == sorted([source["a"], source["b"]]) and first.rows["steps"] == 12
    assert export(Ledger(root), str(dataset), "parquet").rows["routing"] == len(routing)

    delta_steps = DeltaTable(str(lake / "steps")).to_pyarrow_table()
    assert _rows(delta_steps, ["receipt_id", "step", "loss", "tokens"]) == steps
    assert set(delta_steps.column("schema_version").to_pylist()) == {schema_version()}
    # DuckDB over the Delta table's Arrow dataset, and over the Hive-partitioned Parquet files directly
    arrow_steps = DeltaTable(str(lake / "steps")).to_pyarrow_dataset()  # noqa: F841 (DuckDB reads it by name)
    assert duckdb.sql(STEPS.replace("FROM steps", "FROM arrow_steps")).fetchall() == steps
    on_disk = duckdb.sql(f"SELECT receipt_id, step, loss, tokens, started_date FROM read_parquet("
                         f"'{dataset}/steps/**/*.parquet', hive_partitioning = true) ORDER BY receipt_id, step")
    assert [r[:4] for r in on_disk.fetchall()] == steps
    started = _query(root, "SELECT id, started FROM (SELECT id, CAST(started_at AS DATE) AS started FROM receipts) "
                           "ORDER BY id")
    assert {(r[0], str(r[4])) for r in on_disk.fetchall()} == {(i, str(d)) for i, d in started}
    assert sorted(pl.read_delta(str(lake / "routing")).select(["receipt_id", "step", "layer", "tokens"])
                  .rows()) == routing
    receipts = DeltaTable(str(lake / "receipts")).to_pyarrow_table()
    assert _rows(receipts, ["id", "name"]) == _query(root, "SELECT id, name FROM receipts ORDER BY id")
    assert json.loads(receipts.column("receipt")[0].as_py())["id"] == receipts.column("id")[0].as_py()
    documented = (ROOT / "docs" / "export.md").read_text()  # every exported table and column is documented
    for table in ("receipts", "steps", "evals", "routing", "timing", "events", "telemetry"):
        columns = DeltaTable(str(lake / table)).to_pyarrow_table().column_names
        assert f"### `{table}`" in documented
        assert [c for c in columns if f"`{c}`" not in documented] == []

    # one more receipt: the second export adds it and nothing else
    clone(root, "c")
    delta_version = DeltaTable(str(lake / "steps")).version()
    second = export(Ledger(root), str(lake), "delta")
    assert second.added == [source["c"]] and second.already == 2 and second.rows["steps"] == 6
    table = DeltaTable(str(lake / "steps"))
    assert table.version() == delta_version + 1
    assert table.history(1)[0]["operationMetrics"]["num_added_rows"] == 6
    assert _rows(table.to_pyarrow_table(), ["receipt_id", "step", "loss", "tokens"]) == _query(root, STEPS)
    again = export(Ledger(root), str(dataset), "parquet")
    assert again.added == [source["c"]]
    files = ds.dataset(str(dataset / "steps"), format="parquet", partitioning="hive").files
    assert len({Path(f).name.split("-")[1] for f in files}) == 2  # two batches, the first one untouched
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{dataset}/steps/**/*.parquet')").fetchall() == [(18,)]
    assert export(Ledger(root), str(lake), "delta").added == []


@pytest.mark.slow
def test_export_killed_half_way_is_repaired(tmp_path: Path, source: dict[str, str], clone: Any) -> None:
    from deltalake import DeltaTable

    root = clone(tmp_path / "receipts", "a", "b")
    for fmt in ("delta", "parquet"):
        target = tmp_path / fmt
        killed = _ledger("export", str(target), "--format", fmt, "--ledger", str(root), cwd=tmp_path,
                         env={"LEDGER_FAULT_AT": "exporting"})
        assert killed.returncode == -9  # SIGKILL: metric tables written, receipts table not
        half = ds.dataset(str(target / "steps"), format="parquet", partitioning="hive",
                          exclude_invalid_files=True).count_rows()
        assert half == 12 and not (target / "receipts").exists()
        done = export(Ledger(root), str(target), fmt)
        assert len(done.added) == 2 and done.repaired > 0
        if fmt == "delta":
            rows = DeltaTable(str(target / "steps")).to_pyarrow_table()
        else:
            rows = ds.dataset(str(target / "steps"), format="parquet", partitioning="hive").to_table()
        assert _rows(rows, ["receipt_id", "step", "loss", "tokens"]) == _query(root, STEPS)


@pytest.mark.slow
def test_export_to_s3_and_a_schema_version_mismatch(tmp_path: Path, s3: Any, source: dict[str, str],
                                                    clone: Any, planted_secret: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    root = clone(tmp_path / "receipts", "a", "d")
    bucket = s3.bucket()
    proc = _ledger("export", f"s3://{bucket}/tables", "--format", "delta", "--ledger", str(root), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"exported 2 receipt(s) to s3://{bucket}/tables as delta")
    assert planted_secret not in proc.stdout + proc.stderr  # the AWS secret key the export ran with
    client = s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys and not [k for k in keys
                         if planted_secret.encode() in client.get_object(Bucket=bucket, Key=k)["Body"].read()]
    table = DeltaTable(f"s3://{bucket}/tables/steps", storage_options={"AWS_ALLOW_HTTP": "true"})
    assert _rows(table.to_pyarrow_table(), ["receipt_id", "step", "loss", "tokens"]) == _query(root, STEPS)
    parquet = export(Ledger(root), f"s3://{bucket}/dataset", "parquet")
    assert parquet.rows["steps"] == 12

    old = tmp_path / "old" / "receipts" / "started_date=2026-01-01"
    old.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["0" * 64], "schema_version": pa.array([1], pa.int32())}),
                   old / f"part-{'0' * 32}-0.parquet")
    with pytest.raises(BadInput, match="schema version 1"):
        export(Ledger(root), str(tmp_path / "old"), "parquet")


@pytest.mark.slow
def test_export_errors_are_one_line(tmp_path: Path, s3: Any, source: dict[str, str], clone: Any) -> None:
    """Issue 34, item 8: the destination's file system was opened outside the error handling, so a destination that
    could not be opened (a bucket whose region lookup failed: 41 lines) printed a traceback. Here: a destination of
    an unknown kind (opening it fails), a missing bucket and a bucket behind an unreachable endpoint."""
    root = clone(tmp_path / "receipts", "a")
    for target, env in (("nosuchfs://bucket/tables", {}), ("s3://no-such-bucket/tables", {}),
                        ("s3://no-such-bucket/tables", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})):
        for fmt in ("parquet", "delta"):
            proc = _ledger("export", target, "--format", fmt, "--ledger", str(root), cwd=tmp_path, env=env)
            assert proc.returncode == 1, proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert proc.stderr.startswith(f"Error: export to {target} failed: "), proc.stderr
