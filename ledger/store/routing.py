"""The routing table's layout: one row per (rank, step, MoE layer) with the counts of its experts as lists.

A production MoE model (DeepSeek-V3: 58 MoE layers of 256 routed experts) logs 14,848 expert loads a
step. As long rows (step, layer, expert, tokens) that is 14,848 rows a step; as lists it is 58 rows whose
``tokens`` list is indexed by expert number (:data:`schemas.tables.ROUTING`). Receipts written before the
list layout hold long rows (:data:`schemas.tables.ROUTING_LONG`); they stay as they are on disk (receipts
are immutable) and are read through :data:`LONG_TO_LISTS`, one SQL statement used wherever such a file
is read: the staging reader, the index sync and the index-against-files check. When a receipt is indexed,
its per-(step, layer) summary (:data:`STEP_SUMMARY`: sums, spread, maximum, argmax and ``sum(n ln n)`` of
each list, ranks summed first) is computed in DuckDB into the index's ``routing_steps`` table, which is
all the analyses read: they never open the lists again. Each long group becomes
one row whose lists run over experts ``0 .. max(expert)``, an expert without a row counting 0; several
rows of one (rank, step, layer, expert) are summed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the index imports this module; `ledger ls` must not load Arrow, nor the staging reader DuckDB
    import duckdb
    import pyarrow as pa

LONG_TO_LISTS = """
WITH cell AS (
    SELECT rank, step, layer, expert, sum(tokens) AS tokens, sum(dropped) AS dropped, max(capacity) AS capacity,
           avg(entropy) AS entropy
    FROM {source} GROUP BY rank, step, layer, expert
), slot AS (
    SELECT rank, step, layer, unnest(range(max(expert) + 1)) AS expert FROM cell GROUP BY rank, step, layer
)
SELECT s.rank::INTEGER AS rank, s.step::BIGINT AS step, s.layer::INTEGER AS layer,
       list(coalesce(c.tokens, 0)::BIGINT ORDER BY s.expert) AS tokens,
       CASE WHEN count(c.dropped) > 0 THEN list(coalesce(c.dropped, 0)::BIGINT ORDER BY s.expert) END AS dropped,
       max(c.capacity)::BIGINT AS capacity, avg(c.entropy)::DOUBLE AS entropy
FROM slot s LEFT JOIN cell c ON c.rank = s.rank AND c.step = s.step AND c.layer = s.layer AND c.expert = s.expert
GROUP BY s.rank, s.step, s.layer
ORDER BY s.rank, s.step, s.layer
"""
"""Long routing rows (a relation named by ``{source}``) -> the list layout, in :data:`ROUTING`'s columns."""


_ROUTING_ONE = """
SELECT step, layer, tokens, dropped, capacity * len(tokens) AS slots, entropy
FROM routing WHERE receipt_id = $1
"""
"""Each (step, layer) logged by one rank: its row as it is (no list is opened)."""

_ROUTING_MERGED = """
WITH r AS (SELECT step, layer, tokens, dropped, capacity * len(tokens) AS slots, entropy
           FROM routing WHERE receipt_id = $1),
cell AS (
    SELECT step, layer, expert, sum(n) AS n, sum(coalesce(d, 0)) AS d
    FROM (SELECT step, layer, unnest(range(len(tokens))) AS expert, unnest(tokens) AS n, unnest(dropped) AS d FROM r)
    GROUP BY step, layer, expert
)
SELECT step, layer, list(n ORDER BY expert) AS tokens, list(d ORDER BY expert) AS dropped, any_value(slots) AS slots,
       any_value(entropy) AS entropy
FROM cell JOIN (SELECT step, layer, sum(slots) AS slots, avg(entropy) AS entropy FROM r GROUP BY step, layer)
     USING (step, layer)
GROUP BY step, layer
"""
"""(step, layer) logged by several ranks: counts summed expert by expert, capacity slots summed over ranks."""

STEP_SUMMARY = """
SELECT step, layer, len(tokens) AS experts, list_sum(tokens) AS n_sum, list_stddev_pop(tokens) AS n_std,
       list_max(tokens) AS n_max, coalesce(list_sum(dropped), 0) AS d_sum, slots AS c_sum, entropy,
       list_sum(list_transform(tokens, lambda x: CASE WHEN x > 0 THEN x * ln(x) ELSE 0 END)) AS n_log_n,
       list_position(tokens, list_max(tokens)) - 1 AS dominant
FROM ({source})
"""
"""Per (step, layer), from the list columns in DuckDB (DESIGN.md's definitions): experts E, n_sum = sum(n),
n_std = std(n), n_max = max(n), d_sum = sum(d), c_sum = E x C (summed over ranks), entropy (router entropy /
log E), n_log_n = sum(n ln n) (load entropy = (ln sum(n) - n_log_n / sum(n)) / ln E) and dominant = argmax(n)
(the lowest expert number on a tie)."""


def step_source(con: duckdb.DuckDBPyConnection, receipt_id: str) -> str:
    """The SQL relation (parameter $1: the receipt id) of a receipt's routing with one row per (step, layer):
    step, layer, tokens, dropped (lists by expert), slots (E x C) and entropy."""
    row = con.execute("SELECT count(*) > count(DISTINCT (step, layer)) FROM routing WHERE receipt_id = $1",
                      [receipt_id]).fetchone()
    return _ROUTING_MERGED if row and row[0] else _ROUTING_ONE


STEP_SUMMARY_COLUMNS = ("step", "layer", "experts", "n_sum", "n_std", "n_max", "d_sum", "c_sum", "entropy",
                        "n_log_n", "dominant")
"""The columns of :data:`STEP_SUMMARY`, the index's ``routing_steps`` table (with ``receipt_id``)."""

STEP_SUMMARY_DDL = """
CREATE TABLE IF NOT EXISTS routing_steps (receipt_id VARCHAR, step BIGINT, layer INTEGER, experts BIGINT,
    n_sum DOUBLE, n_std DOUBLE, n_max BIGINT, d_sum DOUBLE, c_sum BIGINT, entropy DOUBLE, n_log_n DOUBLE,
    dominant BIGINT)
"""


def index_step_summary(con: duckdb.DuckDBPyConnection, receipt_id: str) -> None:
    """Fill the index's ``routing_steps`` rows of one receipt from its ``routing`` rows (in DuckDB)."""
    sql = STEP_SUMMARY.format(source=step_source(con, receipt_id))
    con.execute(f"INSERT INTO routing_steps SELECT $1 AS receipt_id, * FROM ({sql})", [receipt_id])


def is_long(schema: pa.Schema) -> bool:
    """True for a routing table of the long layout (a row per expert)."""
    return "expert" in schema.names


def file_is_long(path: Path) -> bool:
    """True when a routing Parquet file holds long rows (a receipt written before the list layout)."""
    import pyarrow.parquet as pq

    return is_long(pq.read_schema(path))


def parquet_source(path: Path) -> str:
    """A SQL relation (one ``?`` parameter: the path) of a routing Parquet file in the list layout,
    whichever layout the file holds."""
    if file_is_long(path):
        return "(" + LONG_TO_LISTS.format(source="read_parquet(?)") + ")"
    return "read_parquet(?)"


def as_lists(table: pa.Table) -> pa.Table:
    """A routing table in the list layout (long rows are converted; a list-layout table is returned as is)."""
    if not is_long(table.schema):
        return table
    import duckdb
    import pyarrow as pa

    from schemas.tables import ROUTING

    con = duckdb.connect(":memory:")
    try:
        con.register("long_rows", table)
        out = con.sql(LONG_TO_LISTS.format(source="long_rows")).to_arrow_table()
    finally:
        con.close()
    return pa.Table.from_arrays([out.column(f.name).cast(f.type) for f in ROUTING], schema=ROUTING)


__all__ = ["LONG_TO_LISTS", "STEP_SUMMARY", "STEP_SUMMARY_COLUMNS", "STEP_SUMMARY_DDL", "as_lists", "file_is_long",
           "index_step_summary", "is_long", "parquet_source", "step_source"]
