from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ledger.store.merge import read_table
from schemas.tables import STEPS


def test_jsonl_rows_are_read_and_bad_lines_reported(tmp_path: Path) -> None:
    rank = tmp_path / "rank-00001"
    rank.mkdir()
    (rank / "steps.jsonl").write_text(
        '{"step": 1, "loss": 2.0, "tokens": 10, "moe_loss": 0.5}\n'
        "not json\n"
        '{"step": "two", "loss": 1.0}\n'
        '{"step": 3, "loss": "nan"}\n'
        "[1, 2]\n"
        '{"step": 4, "loss": 1.0'
    )
    table, problems = read_table(tmp_path, "steps")
    rows = table.to_pylist()
    assert [r["step"] for r in rows] == [1, 3]
    assert rows[0]["rank"] == 1 and rows[0]["extra"] == [("moe_loss", 0.5)]
    assert rows[1]["loss"] != rows[1]["loss"]  # nan kept as nan
    assert len(problems) == 1
    message = problems[0].message
    assert problems[0].source == "rank-00001/steps.jsonl"
    assert message.startswith("4 malformed line(s)")
    for n in (2, 3, 5, 6):
        assert f"line {n}:" in message


def test_missing_required_field_is_a_bad_line(tmp_path: Path) -> None:
    rank = tmp_path / "rank-00000"
    rank.mkdir()
    (rank / "evals.jsonl").write_text('{"step": 1, "value": 2.0}\n{"step": 1, "metric": "loss", "value": 2.0}\n')
    table, problems = read_table(tmp_path, "evals")
    assert table.num_rows == 1 and "'metric' is required" in problems[0].message


def test_garbage_stream_is_reported_not_fatal(tmp_path: Path) -> None:
    rank = tmp_path / "rank-00000"
    rank.mkdir()
    (rank / "timing.arrows").write_bytes(b"\x00garbage" * 10)
    table, problems = read_table(tmp_path, "timing")
    assert table.num_rows == 0 and "unreadable from byte 0" in problems[0].message


def test_a_stream_of_an_earlier_steps_schema_is_read_not_dropped(tmp_path: Path) -> None:
    """An SDK of an earlier version (before tflops_per_device and global_batch) wrote this rank's steps."""
    older = pa.schema([f for f in STEPS if f.name not in ("tflops_per_device", "global_batch")])
    rank = tmp_path / "rank-00000"
    rank.mkdir()
    batch = pa.RecordBatch.from_pylist([{"rank": 0, "step": 1, "loss": 2.5}, {"rank": 0, "step": 2, "loss": 2.0}],
                                       schema=older)
    with pa.OSFile(str(rank / "steps.arrows"), "wb") as sink, pa.ipc.new_stream(sink, older) as writer:
        writer.write_batch(batch)
    table, problems = read_table(tmp_path, "steps")
    assert problems == [] and table.schema.equals(STEPS)
    assert table.column("loss").to_pylist() == [2.5, 2.0] and table.column("global_batch").null_count == 2
    # a stream whose columns are not a subset of today's is still refused (with its rows kept up to there)
    other = pa.schema([pa.field("rank", pa.int32(), nullable=False), pa.field("step", pa.string())])
    with pa.OSFile(str(rank / "steps.arrows"), "wb") as sink, pa.ipc.new_stream(sink, other) as writer:
        writer.write_batch(pa.RecordBatch.from_pylist([{"rank": 0, "step": "x"}], schema=other))
    table, problems = read_table(tmp_path, "steps")
    assert table.num_rows == 0 and "schema differs" in problems[0].message


def test_a_json_line_longer_than_the_limit_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    from ledger.store.merge import MAX_LINE_BYTES

    rank = tmp_path / "rank-00000"
    rank.mkdir()
    huge = b'{"step": 2, "loss": 1.0, "detail": "' + b"x" * (2 * MAX_LINE_BYTES) + b'"}\n'
    (rank / "steps.jsonl").write_bytes(b'{"step": 1, "loss": 2.0}\n' + huge + b'{"step": 3, "loss": 0.5}\n')
    table, problems = read_table(tmp_path, "steps")
    assert [r["step"] for r in table.to_pylist()] == [1, 3]
    assert "line 2: longer than" in problems[0].message


def test_coded_custom_names_are_decoded_and_a_bad_index_is_reported(tmp_path: Path) -> None:
    """The SDK's steps stream codes the custom names (STEPS_STREAM): read_table gives them back as strings,
    and a batch whose name index points past its dictionary is damage, reported, the batch before it kept."""
    from schemas.tables import EXTRA_CODED, STEPS_STREAM

    def batch(step: int, indices: list[int]) -> pa.RecordBatch:
        names = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(["a/x", "b"]), safe=False)
        extra = pa.MapArray.from_arrays(pa.array([0, len(indices)], pa.int32()), names,
                                        pa.array([0.5 * i for i in range(len(indices))]))
        columns = {"rank": pa.array([0], pa.int32()), "step": pa.array([step], pa.int64()), "extra": extra}
        return pa.RecordBatch.from_arrays(
            [columns.get(f.name, pa.nulls(1, f.type)) for f in STEPS_STREAM], schema=STEPS_STREAM)

    path = tmp_path / "rank-00000" / "steps.arrows"
    path.parent.mkdir()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, STEPS_STREAM) as writer:
        writer.write_batch(batch(1, [1, 0]))
        writer.write_batch(batch(2, [0, 7]))  # no name 7
    assert STEPS_STREAM.field("extra").type == EXTRA_CODED
    table, problems = read_table(tmp_path, "steps")
    assert table.schema.equals(STEPS)
    assert table.to_pylist()[0]["extra"] == [("b", 0.0), ("a/x", 0.5)] and table.num_rows == 1
    assert len(problems) == 1 and "kept the 1 rows" in problems[0].message


def test_coded_names_stay_coded_only_when_every_file_codes_them(tmp_path: Path) -> None:
    """read_table(coded=True), as publish reads: the SDK's coded names stay coded; beside a rank that wrote
    JSON lines (names as strings) every rank's are decoded; either way the same rows."""
    from ledger.sdk import Run
    from schemas.tables import STEPS_STREAM

    run = Run(tmp_path, rank=0, background=False)
    run.log_step(1, loss=1.0, a=0.5)
    run.flush()
    run.log_step(2, b=2.0)  # another batch, another dictionary
    run.close()
    coded, problems = read_table(tmp_path, "steps", coded=True)
    assert not problems and coded.schema.equals(STEPS_STREAM)
    assert coded.column("extra").to_pylist() == [[("a", 0.5)], [("b", 2.0)]]
    assert read_table(tmp_path, "steps")[0].schema.equals(STEPS)

    (tmp_path / "rank-00001").mkdir()
    (tmp_path / "rank-00001" / "steps.jsonl").write_text('{"step": 1, "c": 3.0}\n')
    mixed, problems = read_table(tmp_path, "steps", coded=True)
    assert not problems and mixed.schema.equals(STEPS)
    assert mixed.column("extra").to_pylist() == [[("a", 0.5)], [("b", 2.0)], [("c", 3.0)]]


def test_staged_tables_are_written_compressed_and_read_back_whole(tmp_path: Path) -> None:
    """The capture's and the importers' tables go into staging as zstd-compressed Arrow streams: a steps table of
    mostly null columns is a fraction of its Arrow size on disk, and the staging reader gives back every row."""
    from ledger.ingest.common import table, write_tables

    n = 50_000
    steps = table("steps", {"rank": [0] * n, "step": range(1, n + 1), "loss": [3.0 - i * 1e-5 for i in range(n)]})
    assert write_tables(tmp_path / "rank-00000", {"steps": steps}) == ["steps"]
    stream = tmp_path / "rank-00000" / "steps.arrows"
    assert stream.stat().st_size < steps.nbytes / 4  # uncompressed: every column's buffers, null or not
    back, problems = read_table(tmp_path, "steps")
    assert not problems
    assert back.equals(steps)
