"""A rank's JSON lines as rows of the table's schema (ledger.store.merge): each value coerced into its column's
type or its line refused with the reason, the line-length bound at its exact edge, lone surrogates, the directories
named like a rank's but not one, the ranks and directories a caller picks, a rank file that cannot be opened, and
the small JSON files; every expected row and message written by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ledger.store.merge import MAX_LINE_BYTES, clean_text, odd_rank_dirs, read_json, read_table
from schemas import Problem


def _lines(path: Path, *rows: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_json_values_are_coerced_into_each_columns_type(tmp_path: Path) -> None:
    _lines(tmp_path / "rank-00002" / "steps.jsonl",
           {"step": 3.0, "tokens": 7, "loss": "-inf", "lr": "NaN", "grad_norm": "+inf", "step_time_s": 2,
            "skipped": True, "memory_bytes": -9223372036854775808, "extra": {"b": 1, "a": 0.5, "t": True, "s": "x"},
            "moe_loss": 2, "flag": False, "note": "text"},
           {"step": 4, "aux_loss": "inf", "skipped": False, "printed_step": 9223372036854775807})
    table, problems = read_table(tmp_path, "steps")
    assert problems == []
    first, second = table.to_pylist()
    assert (first["rank"], first["step"], first["tokens"], first["step_time_s"]) == (2, 3, 7, 2.0)
    assert first["loss"] == -math.inf and math.isnan(first["lr"]) and first["grad_norm"] == math.inf
    assert first["skipped"] is True and first["memory_bytes"] == -(2 ** 63)
    # numbers of the extra object, then the unknown top-level numbers; booleans and text are no metric
    assert first["extra"] == [("b", 1.0), ("a", 0.5), ("moe_loss", 2.0)]
    assert second["aux_loss"] == math.inf and second["skipped"] is False and second["printed_step"] == 2 ** 63 - 1
    assert second["extra"] is None and second["loss"] is None

    _lines(tmp_path / "rank-00000" / "events.jsonl",
           {"time": 5, "kind": 17, "detail": {"b": 1, "a": [2, "x"]}},
           {"rank": 4, "time": 6.5, "kind": "ckpt", "detail": ["z", {"y": None, "x": 1}]})
    events, problems = read_table(tmp_path, "events")
    assert problems == []
    assert [(r["rank"], r["time"], r["kind"], r["detail"]) for r in events.to_pylist()] == [
        (0, 5.0, "17", '{"a": [2, "x"], "b": 1}'),  # keys sorted: one text for one object
        (4, 6.5, "ckpt", '["z", {"x": 1, "y": null}]'),
    ]

    _lines(tmp_path / "rank-00001" / "routing.jsonl",
           {"step": 1, "layer": 2, "tokens": [5, 3.0, 0], "dropped": [], "capacity": 8, "entropy": 1})
    routing, problems = read_table(tmp_path, "routing")
    assert problems == []
    assert routing.to_pylist() == [{"rank": 1, "step": 1, "layer": 2, "tokens": [5, 3, 0], "dropped": [],
                                    "capacity": 8, "entropy": 1.0}]


def test_a_value_that_does_not_fit_its_column_refuses_its_line_with_the_reason(tmp_path: Path) -> None:
    _lines(tmp_path / "rank-00000" / "steps.jsonl",
           {"step": 1, "skipped": 1},
           {"step": 1.5},
           {"step": True},
           {"step": "2"},
           {"step": 9223372036854775808},
           {"step": -9223372036854775809},
           {"step": 1, "loss": True},
           {"step": 1, "loss": "1.5"},
           {"step": 1, "rank": 2147483648},
           {"step": 5, "loss": 0.25})
    table, problems = read_table(tmp_path, "steps")
    assert table.to_pylist()[0]["step"] == 5 and table.num_rows == 1
    assert problems == [Problem(source="rank-00000/steps.jsonl", message=(
        "9 malformed line(s) skipped: "
        "line 1: field 'skipped' must be true or false, got 1, "
        "line 2: field 'step' must be an integer, got 1.5, "
        "line 3: field 'step' must be an integer, got True, "
        "line 4: field 'step' must be an integer, got '2', "
        "line 5: field 'step': 9223372036854775808 is out of range for int64, "
        "line 6: field 'step': -9223372036854775809 is out of range for int64, "
        "line 7: field 'loss' must be a number, got True, "
        "line 8: field 'loss' must be a number, got '1.5', "
        "line 9: field 'rank': 2147483648 is out of range for int32"))]

    _lines(tmp_path / "rank-00000" / "routing.jsonl",
           {"step": 1, "layer": 0, "tokens": 5},
           {"step": 1, "layer": 0, "tokens": [1, None]},
           {"step": 1, "layer": 0, "tokens": [1, 2.5]},
           {"step": 1, "layer": 0, "tokens": [4]})
    routing, problems = read_table(tmp_path, "routing")
    assert [r["tokens"] for r in routing.to_pylist()] == [[4]]
    assert problems[0].message == (
        "3 malformed line(s) skipped: line 1: field 'tokens' must be a list, got 5, "
        "line 2: field 'tokens' is required, line 3: field 'tokens' must be an integer, got 2.5")


def test_more_bad_lines_than_are_listed_are_counted(tmp_path: Path) -> None:
    _lines(tmp_path / "rank-00000" / "evals.jsonl", *([{"step": 1, "value": 1.0}] * 12),
           {"step": 1, "metric": "loss", "value": 1.0})
    table, problems = read_table(tmp_path, "evals")
    assert table.num_rows == 1
    listed = ", ".join(f"line {n}: field 'metric' is required" for n in range(1, 11))
    assert problems[0].message == f"12 malformed line(s) skipped: {listed} (and 2 more)"


def _line_of(size: int, step: int) -> bytes:
    """A JSON line of ``size`` bytes before its newline."""
    head = b'{"step": %d, "note": "' % step
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_a_line_of_exactly_the_limit_is_read_and_one_byte_longer_is_skipped(tmp_path: Path) -> None:
    rank = tmp_path / "rank-00000"
    rank.mkdir()
    at, over = _line_of(MAX_LINE_BYTES, 1), _line_of(MAX_LINE_BYTES + 1, 2)
    assert (len(at), len(over)) == (1 << 20, (1 << 20) + 1)
    (rank / "steps.jsonl").write_bytes(at + b"\n" + over + b"\n" + b'{"step": 3}\n' + over)
    table, problems = read_table(tmp_path, "steps")
    assert table.column("step").to_pylist() == [1, 3]
    assert problems[0].message == ("2 malformed line(s) skipped: line 2: longer than 1048576 bytes, "
                                   "line 4: longer than 1048576 bytes")


def test_each_lone_surrogate_becomes_one_replacement_character(tmp_path: Path) -> None:
    assert clean_text("plain é ✓") == "plain é ✓"
    assert clean_text("a\ud800b\udfff") == "a\ufffdb\ufffd"
    assert clean_text("\ud83d\ude00 \ude00\ud83d") == "\U0001f600 \ufffd\ufffd"  # a pair is its character
    (tmp_path / "rank-00000").mkdir()
    (tmp_path / "rank-00000" / "events.jsonl").write_text(
        '{"time": 1.0, "kind": "k\\ud800", "detail": "\\udcff"}\n')
    (tmp_path / "rank-00000" / "steps.jsonl").write_text('{"step": 1, "\\ud800x": 2.5}\n')
    events, _ = read_table(tmp_path, "events")
    assert [(r["kind"], r["detail"]) for r in events.to_pylist()] == [("k\ufffd", "\ufffd")]
    steps, _ = read_table(tmp_path, "steps")
    assert steps.to_pylist()[0]["extra"] == [("\ufffdx", 2.5)]


def test_directories_named_like_a_ranks_but_not_one_are_problems(tmp_path: Path) -> None:
    for name in ("rank-00003", "rank-\u00b9", "rank--1", "other", "rank-99999999999"):
        (tmp_path / name).mkdir()
    (tmp_path / "rank-x").write_text("a file, not a directory")
    message = ("not a rank directory (rank-N, N from 0 to 999999999, as the SDK names them): its files were left "
               "out")
    assert odd_rank_dirs(tmp_path) == [Problem(source="rank--1/", message=message),
                                       Problem(source="rank-99999999999/", message=message),
                                       Problem(source="rank-\u00b9/", message=message)]
    assert odd_rank_dirs(tmp_path / "missing") == []


def test_only_the_ranks_asked_for_and_the_directories_given_are_read(tmp_path: Path) -> None:
    for rank in (0, 1, 2):
        _lines(tmp_path / f"rank-0000{rank}" / "steps.jsonl", {"step": 10 + rank})
    table, _ = read_table(tmp_path, "steps", ranks={1, 2})
    assert table.column("rank").to_pylist() == [1, 2]
    table, _ = read_table(tmp_path, "steps", dirs=[(0, tmp_path / "rank-00000"), (2, tmp_path / "rank-00002")])
    assert table.column("step").to_pylist() == [10, 12]
    table, _ = read_table(tmp_path, "steps", dirs=[])
    assert table.num_rows == 0


def test_a_rank_file_that_cannot_be_opened_is_a_problem_and_the_rest_is_kept(tmp_path: Path) -> None:
    (tmp_path / "rank-00000" / "steps.arrows").mkdir(parents=True)
    (tmp_path / "rank-00001" / "steps.jsonl").mkdir(parents=True)
    _lines(tmp_path / "rank-00002" / "steps.jsonl", {"step": 7})
    table, problems = read_table(tmp_path, "steps")
    assert table.column("step").to_pylist() == [7]
    assert [p.source for p in problems] == ["rank-00000/steps.arrows", "rank-00001/steps.jsonl"]
    assert problems[0].message.startswith("unreadable (OSError: ")
    assert problems[1].message.startswith("unreadable (IsADirectoryError: ")
    assert all(p.message.endswith("); file left out") for p in problems)


def test_small_json_files_read_or_reported(tmp_path: Path) -> None:
    assert read_json(tmp_path / "absent.json") == (None, None)
    (tmp_path / "ok.json").write_text('{"name": "r\\ud800", "n": [1, {"k\\udcff": 2}]}')
    assert read_json(tmp_path / "ok.json") == ({"name": "r\ufffd", "n": [1, {"k\ufffd": 2}]}, None)
    (tmp_path / "cut.json").write_text('{"name": ')
    assert read_json(tmp_path / "cut.json") == (None, Problem(
        source="cut.json", message="unreadable: Expecting value: line 1 column 10 (char 9)"))
    (tmp_path / "list.json").write_text("[1, 2]")
    assert read_json(tmp_path / "list.json") == (None, Problem(source="list.json", message="expected a JSON object"))
