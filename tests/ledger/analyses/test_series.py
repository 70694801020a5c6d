"""Reading a run's rows from the index into numpy columns (ledger.analyses.series): the dtypes and values the
analyses rely on, whichever way DuckDB hands the rows over (``fetchnumpy`` or Arrow)."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest

from ledger.analyses import series

ROWS = """SELECT * FROM (VALUES
    (1::BIGINT, 10::BIGINT, 1.5::DOUBLE, TRUE, 'gpu0', 7::INTEGER),
    (2, NULL, NULL, NULL, NULL, 8),
    (3, 30, 2.5, FALSE, 'gpu1', 9)
) AS t(step, tokens, loss, skipped, device, layer)"""


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _check(columns: series.Columns) -> None:
    # step and layer stay integers; other integers and booleans become floats; a NULL number is NaN
    assert columns["step"].dtype == np.int64 and columns["step"].tolist() == [1, 2, 3]
    assert columns["layer"].dtype.kind == "i" and columns["layer"].tolist() == [7, 8, 9]
    assert columns["tokens"].dtype == np.float64
    assert columns["tokens"][0] == 10.0 and math.isnan(columns["tokens"][1]) and columns["tokens"][2] == 30.0
    assert columns["loss"].dtype == np.float64 and math.isnan(columns["loss"][1])
    assert columns["skipped"].dtype == np.float64
    assert columns["skipped"][0] == 1.0 and math.isnan(columns["skipped"][1]) and columns["skipped"][2] == 0.0
    # a NULL text is None (not a masked array's fill value such as '?')
    assert columns["device"].tolist() == ["gpu0", None, "gpu1"]


def test_fetchnumpy_columns(con: duckdb.DuckDBPyConnection) -> None:
    _check(series._numpy(con.execute(ROWS).fetchnumpy()))


def test_arrow_columns_are_the_same(con: duckdb.DuckDBPyConnection) -> None:
    columns = series._arrow_numpy(con.sql(ROWS).to_arrow_table())
    _check(columns)
    # each column is an array of its own that the analyses may reorder in place (series._sorted)
    assert all(v.flags.writeable and v.flags.owndata for v in columns.values())


def test_arrow_columns_of_many_chunks_and_of_none(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE TABLE t AS SELECT range AS step, range * 2 AS tokens FROM range(300000)")
    table = con.sql("SELECT step, tokens FROM t ORDER BY step").to_arrow_table()
    assert table.column("step").num_chunks > 1  # DuckDB hands a million rows over in several batches
    columns = series._arrow_numpy(table)
    assert columns["step"].tolist() == list(range(300000))
    assert columns["tokens"].dtype == np.float64 and columns["tokens"][-1] == 599998.0
    empty = series._arrow_numpy(con.sql("SELECT step, tokens FROM t WHERE step < 0").to_arrow_table())
    assert empty["step"].size == 0 and empty["tokens"].dtype == np.float64
