"""How :func:`ledger.store.publish.write_parquet` encodes a table: values round-trip exactly, and a column's
dictionary is bounded (a column of unique values falls back to plain encoding instead of hashing its whole row
group into a dictionary that packs nothing), while a column of few values keeps its dictionary."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ledger.store.publish import DICTIONARY_PAGE, write_parquet


def test_unique_values_stop_filling_the_dictionary_and_few_values_keep_it(tmp_path: Path) -> None:
    rnd = random.Random(0)
    n = 3 * DICTIONARY_PAGE // 8  # unique float64s worth three times the dictionary page
    unique = [rnd.random() for _ in range(n)]
    steady = [1e-3] * n
    table = pa.table({"loss": pa.array(unique, pa.float64()), "lr": pa.array(steady, pa.float64())})
    path = tmp_path / "t.parquet"
    write_parquet(table, path)

    assert pq.read_table(path).to_pydict() == {"loss": unique, "lr": steady}
    meta = pq.ParquetFile(path).metadata.row_group(0)
    loss, lr = meta.column(0), meta.column(1)
    assert loss.has_dictionary_page and lr.has_dictionary_page
    # the dictionary page spans from its offset to the first data page; random doubles do not compress
    loss_dictionary = loss.data_page_offset - loss.dictionary_page_offset
    assert loss_dictionary <= DICTIONARY_PAGE * 1.1 < n * 8
    assert lr.total_compressed_size < 1024  # one value in the dictionary, every row an index to it


def test_the_names_of_custom_metrics_are_lz4_and_every_other_column_zstd(tmp_path: Path) -> None:
    import duckdb

    from schemas.tables import STEPS

    rows = [{"rank": 0, "step": s, "loss": 1.0 / s, "extra": [("moe/cv", s / 2), ("tokens/s", 3.0 * s)]}
            for s in range(1, 101)]
    table = pa.Table.from_pylist(rows, schema=STEPS)
    path = tmp_path / "steps.parquet"
    write_parquet(table, path)

    assert pq.read_table(path).equals(table)
    con = duckdb.connect()
    codecs = dict(con.execute("SELECT path_in_schema, compression FROM parquet_metadata(?)", [str(path)]).fetchall())
    assert codecs.pop("extra, key_value, key") == "LZ4_RAW"
    assert len(codecs) == len(STEPS) and set(codecs.values()) == {"ZSTD"}  # none left uncompressed
    total = con.execute("SELECT sum(extra['moe/cv']), sum(extra['tokens/s']) FROM read_parquet(?)",
                        [str(path)]).fetchone()
    assert total == (sum(s / 2 for s in range(1, 101)), sum(3.0 * s for s in range(1, 101)))


def test_the_sdks_coded_names_are_written_as_a_dictionary_and_redacted_when_one_must_change(tmp_path: Path) -> None:
    """An SDK run's custom names arrive dictionary-coded and are published as a Parquet dictionary (no string
    per value), a MAP(VARCHAR, DOUBLE) to DuckDB, every value under its name, also when a flush names other
    metrics (another dictionary in the same row group); a name that carries a secret is redacted all the same
    (decoded, then written as names)."""
    import duckdb

    from ledger.sdk import Run
    from ledger.store.publish import Outcome, publish
    from ledger.store.receipts import Ledger

    def publish_run(rows: list[dict[str, float]], where: Path) -> Path:
        run = Run(where / "run", rank=0, background=False)
        for step, metrics in enumerate(rows, 1):
            run.log_step(step, **metrics)
            if step == 60:
                run.flush()
        run.close()
        lg = Ledger(where / "ledger")
        receipt = publish(lg, where / "run", Outcome("succeeded", exit_code=0),
                          redact=lambda text: text.replace("hunter2", "[gone]"))
        return lg.path(receipt.id) / "steps.parquet"

    rows = [{"moe/cv": s / 2, "tokens/s" if s <= 60 else "late": 3.0 * s} for s in range(1, 101)]
    path = publish_run(rows, tmp_path / "plain")
    assert [dict(m) for m in pq.read_table(path).column("extra").to_pylist()] == rows
    con = duckdb.connect()
    key = con.execute("SELECT encodings, compression FROM parquet_metadata(?) WHERE path_in_schema = "
                      "'extra, key_value, key'", [str(path)]).fetchone()
    assert key is not None and "RLE_DICTIONARY" in key[0] and key[1] == "ZSTD"
    assert con.execute("SELECT typeof(extra), sum(extra['moe/cv']), sum(extra['tokens/s']), sum(extra['late']) "
                       "FROM read_parquet(?) GROUP BY ALL", [str(path)]).fetchall() == [
        ("MAP(VARCHAR, DOUBLE)", sum(s / 2 for s in range(1, 101)), sum(3.0 * s for s in range(1, 61)),
         sum(3.0 * s for s in range(61, 101)))]

    secret = [{"moe/cv": 1.0, "key hunter2": 2.0}, {"moe/cv": 3.0, "key hunter2": 4.0}]
    path = publish_run(secret, tmp_path / "secret")
    assert pq.read_table(path).column("extra").to_pylist() == [
        [("moe/cv", 1.0), ("key [gone]", 2.0)], [("moe/cv", 3.0), ("key [gone]", 4.0)]]
