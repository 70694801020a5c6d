"""A reader of an index that is up to date takes no write lock and writes nothing (so `ledger ls` loads no
Arrow, numpy or receipt models); one that is behind the receipt directories, or of another layout version,
is synced or rebuilt first."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT, child_env

from ledger.ingest.api import ingest_golden
from ledger.store import index
from ledger.store.receipts import Ledger


def _golden(path: Path, loss: float) -> Path:
    values = {str(s): loss - 0.01 * s for s in range(1, 11)}
    path.write_text(json.dumps({"lm loss": {"start_step": 1, "end_step": 10, "step_interval": 1, "values": values}}))
    return path


@pytest.fixture
def two(tmp_path: Path) -> tuple[Ledger, list[str]]:
    ledger = Ledger(tmp_path / "receipts")
    ids = [ingest_golden(ledger, _golden(tmp_path / f"g{i}.json", 3.0 + i), name=f"g{i}").receipt.id for i in (0, 1)]
    return ledger, ids


def _ids(ledger: Ledger) -> list[str]:
    with index.reader(ledger) as con:
        return sorted(str(r[0]) for r in con.execute("SELECT id FROM receipts").fetchall())


def test_an_up_to_date_index_is_read_without_writing_it(two: tuple[Ledger, list[str]]) -> None:
    ledger, ids = two
    assert _ids(ledger) == sorted(ids)  # the first read brings the index up to date
    before = ledger.index_path.stat()
    with index.reader(ledger):  # a reader open meanwhile (it once made the next one fail to take the lock)
        assert _ids(ledger) == sorted(ids)
    after = ledger.index_path.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    assert not ledger.index_path.with_name(ledger.index_path.name + ".wal").exists()


def test_an_index_behind_the_files_or_of_another_version_is_synced(two: tuple[Ledger, list[str]]) -> None:
    ledger, ids = two
    assert _ids(ledger) == sorted(ids)
    shutil.rmtree(ledger.path(ids[0]))
    assert _ids(ledger) == [ids[1]]
    with index.writable(ledger) as con:
        con.execute("UPDATE index_meta SET value = '1' WHERE key = 'version'")
        con.execute("DELETE FROM receipts")
    assert _ids(ledger) == [ids[1]]  # rebuilt from the files, not trusted
    with duckdb.connect(str(ledger.index_path), read_only=True) as con:
        assert con.execute("SELECT value FROM index_meta WHERE key = 'version'").fetchone() == (
            str(index.INDEX_VERSION),)
        assert con.execute("SELECT count(*) FROM steps").fetchone() == (10,)


def test_ls_of_an_up_to_date_index_loads_no_arrow_numpy_or_models(two: tuple[Ledger, list[str]]) -> None:
    ledger, ids = two
    _ids(ledger)
    code = ("import sys\nfrom ledger.cli.app import cli\n"
            "try:\n    cli(['ls', '--json'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pyarrow', 'numpy', 'pydantic', 'schemas.receipt') if m in sys.modules),"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env=child_env(LEDGER_DIR=str(ledger.root)))
    assert sorted(r["id"] for r in json.loads(out.stdout)) == sorted(ids)
    assert out.stderr.strip().splitlines()[-1] == "[]"


def test_query_rows_are_the_api_tables_values_and_plain_ones_load_no_arrow(two: tuple[Ledger, list[str]]) -> None:
    """`ledger query`'s rows (:func:`reading.read_only_rows`) hold the values of the Python API's Arrow table, for
    plain columns (fetched without Arrow) and for the others (a JSON, a HUGEINT sum, a MAP, a struct)."""
    from ledger.store import reading

    ledger, _ = two
    for sql in ("SELECT id, name, started_at, final_loss, steps FROM receipts ORDER BY id",
                "SELECT name, tags, sum(steps) AS s, map([name], [steps]) AS m, {'a': steps} AS st FROM receipts "
                "GROUP BY ALL ORDER BY name"):
        table = reading.read_only_query(ledger, sql)
        columns, rows = reading.read_only_rows(ledger, sql)
        assert columns == table.column_names and [dict(zip(columns, r, strict=True)) for r in rows] == table.to_pylist()
    code = ("import sys\nfrom ledger.cli.app import cli\n"
            "try:\n    cli(['query', '--json', 'SELECT count(*) AS n, min(started_at) AS t FROM receipts'])\n"
            "except SystemExit:\n    pass\nprint('pyarrow' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env=child_env(LEDGER_DIR=str(ledger.root)))
    assert json.loads(out.stdout)[0]["n"] == 2 and out.stderr.strip().splitlines()[-1] == "False"
