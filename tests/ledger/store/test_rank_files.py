"""What the ranks of a run wrote, as the publisher reads it (ledger.store.merge.read_table), in every version and
format a rank's file can come in: the routing table of an SDK from before the list layout (one row per expert), in
a stream and in JSON lines; the steps stream of an SDK from before today's columns with its custom names coded; a
stream whose names were never coded, read the publisher's way; every expected row written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.store.merge import read_table
from schemas.tables import EXTRA_CODED, ROUTING, ROUTING_LONG, STEPS, STEPS_STREAM, TIMING


def write_stream(path: Path, schema: pa.Schema, *batches: pa.RecordBatch) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


LONG_ROWS = [
    # step 1, layer 0: four experts; step 1, layer 1: two experts, capacity enforced; step 2, layer 0
    {"rank": 0, "step": 1, "layer": 0, "expert": 0, "tokens": 5, "dropped": 0, "capacity": None, "entropy": 0.9},
    {"rank": 0, "step": 1, "layer": 0, "expert": 1, "tokens": 3, "dropped": 1, "capacity": None, "entropy": 0.9},
    {"rank": 0, "step": 1, "layer": 0, "expert": 2, "tokens": 2, "dropped": 0, "capacity": None, "entropy": 0.9},
    {"rank": 0, "step": 1, "layer": 0, "expert": 3, "tokens": 6, "dropped": 0, "capacity": None, "entropy": 0.9},
    {"rank": 0, "step": 1, "layer": 1, "expert": 1, "tokens": 7, "dropped": 2, "capacity": 6, "entropy": 0.5},
    {"rank": 0, "step": 1, "layer": 1, "expert": 0, "tokens": 1, "dropped": 0, "capacity": 6, "entropy": 0.5},
    {"rank": 0, "step": 2, "layer": 0, "expert": 0, "tokens": 4, "dropped": 0, "capacity": None, "entropy": 0.8},
    {"rank": 0, "step": 2, "layer": 0, "expert": 1, "tokens": 4, "dropped": 0, "capacity": None, "entropy": 0.8},
]
LISTS = [  # the same, one row per (rank, step, layer), the counts by expert
    {"rank": 0, "step": 1, "layer": 0, "tokens": [5, 3, 2, 6], "dropped": [0, 1, 0, 0], "capacity": None,
     "entropy": 0.9},
    {"rank": 0, "step": 1, "layer": 1, "tokens": [1, 7], "dropped": [0, 2], "capacity": 6, "entropy": 0.5},
    {"rank": 0, "step": 2, "layer": 0, "tokens": [4, 4], "dropped": [0, 0], "capacity": None, "entropy": 0.8},
]


def _by_key(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["rank"], r["step"], r["layer"]))


def test_routing_of_an_sdk_before_the_list_layout_is_read_into_lists(tmp_path: Path) -> None:
    write_stream(tmp_path / "rank-00000" / "routing.arrows", ROUTING_LONG,
                 pa.RecordBatch.from_pylist(LONG_ROWS, schema=ROUTING_LONG))
    table, problems = read_table(tmp_path, "routing")
    table.validate(full=True)  # its arrays are what its schema says (pyarrow does not check that on building)
    assert problems == [] and table.schema.equals(ROUTING)
    assert _by_key(table.to_pylist()) == LISTS


def test_long_routing_rows_in_json_lines_too(tmp_path: Path) -> None:
    import json

    (tmp_path / "rank-00000").mkdir()
    (tmp_path / "rank-00000" / "routing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LONG_ROWS))
    table, problems = read_table(tmp_path, "routing")
    table.validate(full=True)  # its arrays are what its schema says (pyarrow does not check that on building)
    assert problems == [] and _by_key(table.to_pylist()) == LISTS


OLDER = pa.schema([f for f in STEPS_STREAM if f.name not in ("tflops_per_device", "global_batch")])
"""The SDK's steps stream before two columns were added, its custom names coded."""


def _coded_batch(schema: pa.Schema, steps: list[int], names: list[list[str]], values: list[list[float]]) -> Any:
    vocabulary = sorted({n for row in names for n in row})
    flat = [vocabulary.index(n) for row in names for n in row]
    offsets = [0]
    for row in names:
        offsets.append(offsets[-1] + len(row))
    extra = pa.MapArray.from_arrays(pa.array(offsets, pa.int32()),
                                    pa.DictionaryArray.from_arrays(pa.array(flat, pa.int32()), pa.array(vocabulary)),
                                    pa.array([v for row in values for v in row], pa.float64()))
    n = len(steps)
    columns = {"rank": pa.array([0] * n, pa.int32()), "step": pa.array(steps, pa.int64()),
               "loss": pa.array([3.0 - s / 10 for s in steps]), "extra": extra}
    return pa.RecordBatch.from_arrays([columns.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)


def test_an_older_steps_stream_with_coded_names_is_widened_and_decoded(tmp_path: Path) -> None:
    write_stream(tmp_path / "rank-00000" / "steps.arrows", OLDER,
                 _coded_batch(OLDER, [1, 2], [["moe/aux", "z"], ["z"]], [[0.5, 0.25], [0.125]]))
    for coded in (False, True):  # an older stream is decoded either way: it is widened column by column
        table, problems = read_table(tmp_path, "steps", coded=coded)
        table.validate(full=True)  # its arrays are what its schema says (pyarrow does not check that on building)
        assert problems == [] and table.schema.equals(STEPS), coded
        rows = table.to_pylist()
        assert [r["step"] for r in rows] == [1, 2] and [r["loss"] for r in rows] == [2.9, 2.8]
        assert [r["extra"] for r in rows] == [[("moe/aux", 0.5), ("z", 0.25)], [("z", 0.125)]]
        assert [r["global_batch"] for r in rows] == [None, None]


def test_todays_coded_stream_stays_coded_only_when_asked(tmp_path: Path) -> None:
    write_stream(tmp_path / "rank-00000" / "steps.arrows", STEPS_STREAM,
                 _coded_batch(STEPS_STREAM, [1], [["a"]], [[1.5]]),
                 _coded_batch(STEPS_STREAM, [2], [["b", "a"]], [[2.5, 3.5]]))
    plain, problems = read_table(tmp_path, "steps")
    plain.validate(full=True)
    assert problems == [] and plain.schema.equals(STEPS)
    assert plain.column("extra").to_pylist() == [[("a", 1.5)], [("b", 2.5), ("a", 3.5)]]
    coded, problems = read_table(tmp_path, "steps", coded=True)
    coded.validate(full=True)
    assert problems == [] and coded.schema.equals(STEPS_STREAM) and coded.schema.field("extra").type == EXTRA_CODED
    assert coded.column("extra").to_pylist() == [[("a", 1.5)], [("b", 2.5), ("a", 3.5)]]


def test_a_stream_without_coded_names_read_the_publishers_way(tmp_path: Path) -> None:
    """A producer that wrote today's steps schema with its names as strings: asked for coded names, the reader
    gives them decoded (there is nothing coded to keep), every row."""
    rows = [{"rank": 0, "step": 1, "loss": 2.0, "extra": [("a", 1.0)]},
            {"rank": 0, "step": 2, "loss": 1.5, "extra": None}]
    write_stream(tmp_path / "rank-00000" / "steps.arrows", STEPS, pa.RecordBatch.from_pylist(rows, schema=STEPS))
    table, problems = read_table(tmp_path, "steps", coded=True)
    table.validate(full=True)  # its arrays are what its schema says (pyarrow does not check that on building)
    assert problems == [] and table.schema.equals(STEPS)
    assert [(r["step"], r["loss"], r["extra"]) for r in table.to_pylist()] == [(1, 2.0, [("a", 1.0)]),
                                                                                (2, 1.5, None)]


def test_two_streams_appended_to_one_file_today_and_older(tmp_path: Path) -> None:
    """A run resumed under an older SDK appends its stream to the same file: both are read, the older widened; the
    publisher's reading (coded names kept where it can) gives every name decoded, since not every part codes them
    the same way."""
    path = tmp_path / "rank-00000" / "steps.arrows"
    write_stream(path, STEPS_STREAM, _coded_batch(STEPS_STREAM, [1], [["a"]], [[1.5]]))
    first = path.read_bytes()
    write_stream(path, OLDER, _coded_batch(OLDER, [2], [["b"]], [[2.5]]))
    path.write_bytes(first + path.read_bytes())
    for coded in (True, False):
        table, problems = read_table(tmp_path, "steps", coded=coded)
        table.validate(full=True)
        assert problems == [] and table.schema.equals(STEPS), coded
        assert [(r["step"], r["extra"]) for r in table.to_pylist()] == [(1, [("a", 1.5)]), (2, [("b", 2.5)])]


def test_a_file_that_holds_another_tables_rows_is_refused(tmp_path: Path) -> None:
    """Routing rows of the long layout in the timing table's file: not the timing table, not read as routing."""
    write_stream(tmp_path / "rank-00000" / "timing.arrows", ROUTING_LONG,
                 pa.RecordBatch.from_pylist(LONG_ROWS, schema=ROUTING_LONG))
    table, problems = read_table(tmp_path, "timing")
    assert table.num_rows == 0 and len(problems) == 1
    assert problems[0].source == "rank-00000/timing.arrows"
    assert problems[0].message == (f"unreadable from byte 0 (schema differs from {TIMING.names}); kept the 0 rows "
                                   "before it")
