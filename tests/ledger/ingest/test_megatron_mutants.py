"""The Megatron log parser field by field: every column a printed field fills and its unit, every derived column
and the facts it needs, every message a bad line gets, and when a log reads as stopped early. Expected values are
worked out by hand from the lines written here (issue 23: mutation testing of the ingest parsers)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.ingest.common import Issues, LineError
from ledger.ingest.megatron import (
    MegatronLog,
    is_iteration_line,
    parse_line,
    parse_lines,
    routing_from_dir,
    split_fields,
)


def numbered(*lines: str, last_ended: bool = True) -> list[tuple[int, str, bool]]:
    out = [(i, line, True) for i, line in enumerate(lines, start=1)]
    if out and not last_ended:
        out[-1] = (out[-1][0], out[-1][1], False)
    return out


def steps_of(*lines: str, args: dict[str, object] | None = None) -> list[dict[str, object]]:
    return parse_lines(numbered(*lines)).tables(args)["steps"].to_pylist()


# ------------------------------------------------------------------------------------------ fields
def test_durations_become_seconds() -> None:
    values, bad = split_fields(" a: 1m 52s | b: 7h 6m 43s | c: 2d 1h | d: 1.5s | e: 3m | f: 250 ")
    assert values == {"a": 112.0, "b": 7 * 3600 + 6 * 60 + 43.0, "c": 2 * 86400 + 3600.0, "d": 1.5, "e": 180.0,
                      "f": 250.0}
    assert bad == []
    assert all(type(v) is float or type(v) is int for v in values.values())
    assert split_fields("t: 5ms")[1] == ["'t': '5ms' is not a number"]  # ms is not minutes


def test_every_unusable_field_is_named_with_why() -> None:
    long = "n" * 50
    values, bad = split_fields(f"lone | {long} | empty:   | x: abc | {long}: y{'z' * 50} | ok: 2 | ")
    assert values == {"ok": 2.0}
    assert bad == ["'lone' has no ': value'", f"{'n' * 40!r} has no ': value'", "'empty' has no value",
                   "'x': 'abc' is not a number", f"{'n' * 40!r}: {'y' + 'z' * 39!r} is not a number"]


def test_timestamps_ranks_and_the_cheap_iteration_check() -> None:
    line = parse_line("3: [2025-09-05 16:08:25,250] iteration 4/ 9 | lm loss: 1.5 |\r\n")
    assert line is not None and (line.kind, line.rank, line.step, line.total) == ("iteration", 3, 4, 9)
    assert line.time == datetime(2025, 9, 5, 16, 8, 25, 250000)
    bad_date = parse_line("[2025-13-45 16:08:25] iteration 4/ 9 | lm loss: 1.5")
    assert bad_date is not None and bad_date.time is None and bad_date.step == 4
    assert is_iteration_line("[default0]: [2025-09-05T16:08:25] iteration 1/ 2 |")
    assert not is_iteration_line("no such word here") and not is_iteration_line("iteration lines follow")


def test_each_kind_of_bad_line_gets_its_message() -> None:
    cases = {
        "iteration x/ y": "an iteration line without 'iteration N/ TOTAL'",
        "validation loss at step 4 | lm loss value: 1": (
            "a validation line without 'at iteration N' or 'at the end of training'"),
        "validation loss at iteration 4 | note: x": "a validation line without values",
        "[Rank 0] (after 5 iterations) memory (TB) | allocated: 1": (
            "a memory report without '(after N iterations) memory (MB) | ...'"),
        "    forward ....: (1.0, x2)": "timer 'forward' with a value that is not a number",
    }
    for text, message in cases.items():
        with pytest.raises(LineError) as exc:
            parse_line(text)
        assert str(exc.value) == message


def test_line_kinds() -> None:
    header = parse_line("0: [2025-01-02 03:04:05] (min, max) time across ranks (ms):")
    assert header is not None and (header.kind, header.rank) == ("timers-header", 0)
    assert header.time == datetime(2025, 1, 2, 3, 4, 5)
    timers = parse_line("time (ms) | fwd: 10.5 | bwd: x")
    assert timers is not None and timers.kind == "timers" and timers.values == {"fwd": 10.5}
    assert timers.bad == ["'bwd': 'x' is not a number"]
    assert parse_line("time (ms) without bars") is None
    one = parse_line("    optimizer ......: 4.5")
    assert one is not None and (one.kind, one.name, one.values) == ("timer", "optimizer", {"min": 4.5, "max": 4.5})
    arg = parse_line("  num_layers ...................... 24")
    assert arg is not None and (arg.kind, arg.name, arg.value) == ("argument", "num_layers", 24)
    arg = parse_line("[default3]: [2025-01-02 03:04:05]  tokenizer_type ........ TokenizerX\r\n")
    assert arg is not None and (arg.rank, arg.time, arg.value) == (3, datetime(2025, 1, 2, 3, 4, 5), "TokenizerX")
    memory = parse_line("[Rank 1] (after 7 iterations) memory (GB) | allocated: 2 | max allocated: 3.5 | x: y")
    assert memory is not None and (memory.kind, memory.step) == ("memory", 7)
    assert memory.values == {"allocated": 2 * 2**30, "max allocated": 3.5 * 2**30} and memory.bad == [
        "'x': 'y' is not a number"]
    kib = parse_line("(after 1 iterations) memory (MiB) | allocated: 1.5")
    assert kib is not None and kib.values == {"allocated": 1.5 * 2**20}
    assert parse_line("plain text ... and more") is None and parse_line("just a line") is None


@pytest.mark.parametrize(("where", "split"), [("", "val"), (" on valid set", "val"), (" on validation set", "val"),
                                              (" on VAL set", "val"), (" on Test set", "test"),
                                              (" on train set", "train")])
def test_validation_splits(where: str, split: str) -> None:
    line = parse_line(f"validation loss at iteration 12{where} | lm loss value: 2.0 | lm loss PPL: 7.5 | junk")
    assert line is not None and (line.kind, line.step, line.split) == ("validation", 12, split)
    assert line.values == {"lm loss value": 2.0, "lm loss PPL": 7.5} and line.bad == ["'junk' has no ': value'"]


# ------------------------------------------------------------------------------------------ steps
def test_every_printed_field_fills_its_column_in_its_unit() -> None:
    [row] = steps_of(
        "iteration 5/ 10 | lm loss: 2.5 | learning rate: 3.0E-04 | grad norm: 1.25 | loss scale: 1024.0 | "
        "load_balancing_loss: 0.01 | z_loss: 0.002 | elapsed time per iteration (ms): 1500.0 | consumed tokens: "
        "4096 | memory(GiB): 1.5 | number of skipped iterations: 2 | global batch size: 8 | "
        "throughput per GPU (TFLOP/s/GPU): 120.5 | params norm: 3.5 | mtp_1 loss: 2.75 |")
    assert {k: v for k, v in row.items() if k not in ("extra", "time")} == {
        "rank": 0, "step": 5, "tokens": 4096, "loss": 2.5, "lr": 3.0e-4, "grad_norm": 1.25, "step_time_s": 1.5,
        "tokens_per_s": None, "flops_per_s": None, "tflops_per_device": 120.5, "global_batch": 8, "aux_loss": 0.01,
        "z_loss": 0.002, "loss_scale": 1024.0, "memory_bytes": 3 * 2**29, "skipped": True,
        "epoch": None, "printed_step": None}
    # printed fields without a column of their own stay in extra; those with one (also the first-class
    # ones: throughput, global batch size) do not
    assert dict(row["extra"]) == {"number of skipped iterations": 2.0, "params norm": 3.5, "mtp_1 loss": 2.75}
    assert row["time"] is None


def test_moe_loss_is_the_aux_loss_and_lm_loss_wins_over_loss() -> None:
    a, b, c = steps_of("iteration 1/ 3 | loss: 9.0 | lm loss: 2.0 | moe loss: 0.5 |",
                       "iteration 2/ 3 | lm loss: 2.0 | loss: 9.0 |",
                       "iteration 3/ 3 | loss: 9.0 | number of skipped iterations: 0 |")
    assert (a["loss"], b["loss"], c["loss"]) == (2.0, 2.0, 9.0) and a["aux_loss"] == 0.5
    assert (a["skipped"], c["skipped"]) == (None, False)
    assert b["extra"] is None  # no field left over: a null map, not an empty one
    [one] = steps_of("iteration 1/ 3 | global batch size: 1 |")
    assert one["global_batch"] == 1 and one["extra"] is None


def test_tokens_throughput_and_flops_are_derived_only_from_facts_in_the_log() -> None:
    lines = ("iteration 1/ 9 | consumed samples: 10 | elapsed time per iteration (ms): 2000 | global batch size: "
             "4 | TFLOPs: 50.0 |",
             "iteration 2/ 9 | consumed samples: 20 | actual seqlen: 100 | samples per second: 3.0 |",
             "iteration 3/ 9 | consumed samples: 30 | actual seqlen: nan | samples per second: 3.0 | "
             "global batch size: 0 | elapsed time per iteration (ms): 0 |",
             "iteration 4/ 9 | consumed samples: nan | global batch size: nan | TFLOPs: inf | "
             "number of skipped iterations: nan |",
             "iteration 5/ 9 | consumed samples: 50 | actual seqlen: 100 | global batch size: 4 | "
             "elapsed time per iteration (ms): 500 | consumed tokens: 7 |")
    with_args = steps_of(*lines, args={"seq_length": 64, "world_size": 2})
    got = [(r["tokens"], r["tokens_per_s"], r["tflops_per_device"], r["flops_per_s"], r["global_batch"],
            r["skipped"]) for r in with_args]
    assert got == [(640, 4 * 64 / 2.0, 50.0, 50.0e12 * 2, 4, None),
                   (1280, 3.0 * 64, None, None, None, None),
                   (1920, 3.0 * 64, None, None, None, None),
                   (None, None, None, None, None, None),
                   (7, 4 * 64 / 0.5, None, None, 4, None)]
    without = steps_of(*lines)  # no seq_length, no world size: only the lines' own facts
    got = [(r["tokens"], r["tokens_per_s"], r["flops_per_s"]) for r in without]
    assert got == [(None, None, None), (2000, 300.0, None), (None, None, None), (None, None, None),
                   (7, 4 * 100 / 0.5, None)]
    bad_args = steps_of(*lines[:1], args={"seq_length": True, "world_size": -2})
    assert (bad_args[0]["tokens"], bad_args[0]["flops_per_s"]) == (None, None)
    float_args = steps_of(*lines[:1], args={"seq_length": 64.0, "world_size": float("nan")})
    assert (float_args[0]["tokens"], float_args[0]["flops_per_s"]) == (640, None)


def test_memory_reports_join_their_iteration_or_make_a_row_of_their_own() -> None:
    log = parse_lines(numbered(
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 100 | max allocated: 200",
        "iteration 1/ 5 | lm loss: 1.0 |",
        "iteration 2/ 5 | lm loss: 1.0 | memory(GiB): 2 |",
        "[Rank 0] (after 2 iterations) memory (MB) | max allocated: 300",
        "[Rank 1] (after 2 iterations) memory (MB) | allocated: 50",
        "[Rank 3] (after 4 iterations) memory (MB) | max allocated: 10",
    ))
    rows = log.tables()["steps"].to_pylist()
    got = [(r["rank"], r["step"], r["memory_bytes"], r["loss"], r["extra"]) for r in rows]
    mb = 2**20
    assert got == [
        (0, 1, 200 * mb, 1.0, [("memory allocated (bytes)", 100.0 * mb), ("memory max allocated (bytes)", 200.0 * mb)]),
        (0, 2, 2 * 2**30, 1.0, [("memory max allocated (bytes)", 300.0 * mb)]),  # the printed column wins
        (1, 2, None, None, [("memory allocated (bytes)", 50.0 * mb)]),
        (3, 4, 10 * mb, None, [("memory max allocated (bytes)", 10.0 * mb)]),
    ]
    assert log.last_step == 2


def test_memory_reports_of_several_ranks_without_a_launcher_prefix_keep_their_rank() -> None:
    # each data-parallel rank 0 prints a memory report (several with TP or PP); before the fix every report
    # without a launcher prefix was rank 0's and the last one replaced rank 0's own
    log = parse_lines(numbered(
        "[Rank 0] (after 5 iterations) memory (MB) | max allocated: 100",
        "[Rank 1] (after 5 iterations) memory (MB) | max allocated: 900",
        "iteration 5/ 9 | lm loss: 1.0 |",
        "7: [Rank 3] (after 5 iterations) memory (MB) | max allocated: 50",
    ))
    rows = log.tables()["steps"].to_pylist()
    assert [(r["rank"], r["step"], r["memory_bytes"]) for r in rows] == [
        (0, 5, 100 * 2**20), (1, 5, 900 * 2**20), (7, 5, 50 * 2**20)]  # a launcher prefix wins


def test_timers_belong_to_the_last_iteration_and_start_up_timers_are_dropped() -> None:
    log = parse_lines(numbered(
        "(min, max) time across ranks (ms):",
        "    model-and-optimizer-setup ......: (100.0, 200.0)",
        "time (ms) | load-checkpoint: 5000.0",
        "iteration 3/ 9 | lm loss: 1.0 |",
        "2: (min, max) time across ranks (ms):",
        "2:     forward ......: (10.0, 30.0)",
        "2: time (ms) | backward: 40.0 | optimizer: 2.0",
        "iteration 1/ 9 | lm loss: 1.0 |",
        "    forward ......: 5.0",
    ))
    assert log.timing == [(2, 3, "forward", 0.03), (2, 3, "backward", 0.04), (2, 3, "optimizer", 0.002),
                          (0, 3, "forward", 0.005)]  # the last iteration seen is the highest, 3
    rows = log.tables()["timing"].to_pylist()
    assert rows[0] == {"rank": 2, "step": 3, "phase": "forward", "seconds": 0.03}


def test_evals_at_an_iteration_and_at_the_end() -> None:
    log = parse_lines(numbered(
        "validation loss at the end of training for val data | lm loss value: 5.0",
        "iteration 7/ 9 | lm loss: 1.0 |",
        "validation loss at the end of training for test data | lm loss value: 2.5 | lm loss PPL: 12.2 | "
        "acc value: 0.5 | other: 1",
        "validation loss at iteration 9 | lm loss value: 2.25",
    ))
    assert log.evals == [(0, 7, None, "test", "loss", 2.5), (0, 7, None, "test", "ppl", 12.2),
                         (0, 7, None, "test", "acc", 0.5), (0, 7, None, "test", "other", 1.0),
                         (0, 9, None, "val", "loss", 2.25)]
    assert log.issues.unparsed == [(1, "a validation result before any iteration")]
    assert log.tables()["evals"].to_pylist()[0] == {"rank": 0, "step": 7, "time": None, "tokens": None,
                                                    "split": "test", "source": None, "metric": "loss",
                                                    "value": 2.5}


def test_times_are_read_as_utc_and_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # whatever the machine's zone, Megatron's stamps read as UTC
    time.tzset()
    monkeypatch.undo()
    try:
        utc_read = parse_lines(numbered("[2025-01-02 03:04:05] iteration 1/ 2 | lm loss: 1.0 |")).steps[0][2]
    finally:
        time.tzset()
    assert utc_read == datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    log = parse_lines(numbered("[2025-01-02 03:04:05] iteration 1/ 2 | lm loss: 1.0 |",
                               "[2025-01-02 03:04:06] validation loss at iteration 1 | lm loss value: 2.0",
                               "[2025-01-02 03:04:09] iteration 2/ 2 | lm loss: 1.0 |"))
    t0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert [s[2] for s in log.steps] == [t0, t0 + 4] and log.evals[0][2] == t0 + 1
    assert log.timestamps and log.first_time == datetime(2025, 1, 2, 3, 4, 5)
    assert log.last_time == datetime(2025, 1, 2, 3, 4, 9)
    assert log.issues.notes == ["timestamps carry no time zone: read as UTC (durations between them are exact)"]
    zoned = parse_lines(numbered("[2025-01-02T03:04:05+02:00] iteration 1/ 2 | lm loss: 1.0 |"))
    assert zoned.steps == []  # Megatron prints no zone: a stamp with one is not Megatron's (foreign line)
    plain = parse_lines(numbered("iteration 1/ 2 | lm loss: 1.0 |"))
    assert not plain.timestamps and plain.first_time is None and plain.issues.notes == []


def test_the_log_level_counts_and_notes() -> None:
    log = parse_lines(numbered(
        "", "some warning", "iteration 1/ 4 | lm loss: 1.0 | x: bad |", "iteration 1/ 4 | lm loss: 1.0 |",
        "iteration 2/ 4 | lm loss: 1.0 |", "iteration 2/ 4 | lm loss: 1.0 |", "  seq_length ....... 128",
        "iteration three/ 4 |", "iteration 3/ 4 | lm loss: 1.0", last_ended=False))
    assert log.issues.source == "log"  # the default name of the source
    assert log.issues.unparsed == [(8, "an iteration line without 'iteration N/ TOTAL'")]
    assert (log.lines, log.iteration_lines, log.total_iters, log.truncated_last) == (9, 5, 4, True)
    assert log.args == {"seq_length": 128} and log.issues.fields == [(3, "'x': 'bad' is not a number")]
    assert log.issues.notes == [
        "line 9 has no line end: the log may have been cut off (a killed job); its fields were kept as far as they "
        "parse",
        "2 iteration(s) appear more than once (a restart into the same log?): 1, 2"]
    empty = parse_lines([])
    assert (empty.lines, empty.truncated_last, empty.issues.notes, empty.last_step) == (0, False, [], None)


def test_repeats_are_listed_up_to_ten() -> None:
    lines = [f"iteration {i}/ 99 | lm loss: 1.0 |" for i in range(1, 13)] * 2
    log = parse_lines(numbered(*lines))
    assert log.issues.notes == ["12 iteration(s) appear more than once (a restart into the same log?): "
                                "1, 2, 3, 4, 5, 6, 7, 8, 9, 10"]


# ------------------------------------------------------------------------------------------ stopping
END = "the log stops at iteration {} of {} (train_iters) without Megatron's end-of-run message{}: the run ended " \
      "early (killed, crashed or preempted), or the log is an excerpt"


def stopped(*lines: str, args: dict[str, object] | None = None, ended: bool = True) -> str | None:
    return parse_lines(numbered(*lines, last_ended=ended)).stopped_early(args)


def test_when_a_log_reads_as_stopped_early() -> None:
    it = "iteration {}/ 100 | lm loss: 1.0 |"
    assert stopped(it.format(40)) == END.format(40, 100, "")
    assert stopped(it.format(40), ended=False) == END.format(40, 100, " (its last line has no line end)")
    assert stopped(it.format(100)) is None and stopped(it.format(101)) is None
    assert stopped(it.format(40), "[after training is done] ...") is None
    assert stopped(it.format(40), "exiting program after 5 minutes") is None
    assert stopped(it.format(40), args={"train_iters": 40}) is None
    assert stopped(it.format(40), args={"train_iters": 50}) == END.format(40, 50, "")
    assert stopped(it.format(40), args={"exit_interval": 20}) is None  # stopped at its exit interval
    assert stopped(it.format(40), args={"exit_interval": 40}) is None
    assert stopped(it.format(40), args={"exit_interval": 30}) == END.format(40, 100, "")
    assert stopped(it.format(20), args={"exit_interval": 40}) == END.format(20, 100, "")
    assert stopped(it.format(90), args={"log_interval": 10}) == END.format(90, 100, "")  # 90 + 10 is not past 100
    assert stopped(it.format(91), args={"log_interval": 10}) is None
    assert stopped("noise") is None
    assert stopped("iteration 5/ 0 | lm loss: 1.0 |") is None  # no total known


def test_the_end_line_is_kept() -> None:
    log = parse_lines(numbered("iteration 1/ 9 |", "  " + "x" * 10 + " exiting program at iteration 1 " + "y" * 200))
    assert log.end_line is not None and log.end_line[0] == 2
    assert log.end_line[1] == ("x" * 10 + " exiting program at iteration 1 " + "y" * 200)[:120]


def test_an_empty_log_has_empty_tables() -> None:
    tables = MegatronLog().tables()
    assert {k: t.num_rows for k, t in tables.items()} == {"steps": 0, "evals": 0, "timing": 0}


# ------------------------------------------------------------------------------------------ routing
def test_routing_rows_and_their_problems(tmp_path: Path) -> None:
    d = tmp_path / "tokens_per_expert"
    d.mkdir()
    (d / "a.jsonl").write_text("\n".join([
        json.dumps({"iteration": 1, "layer": 2, "counts": [1, 2], "dropped": [0, True], "capacity": 3,
                    "entropy": 1, "rank": 4}),
        json.dumps({"iteration": 1, "layer": 2, "tokens_per_expert": [1, 2], "dropped": [0], "capacity": True,
                    "entropy": True, "rank": True}),
        json.dumps({"iteration": 2, "tokens_per_expert": [[1], [2]], "dropped": [5]}),
        "",
        json.dumps([1]),
        json.dumps({"iteration": True, "layer": 0, "tokens_per_expert": [1]}),
        json.dumps({"step": 3, "tokens_per_expert": [1]}),
        json.dumps({"step": 3, "tokens_per_expert": 5}),
        json.dumps({"step": 3, "tokens_per_expert": {"x": [1]}}),
        json.dumps({"step": 3, "tokens_per_expert": {"1": [1.5, "a"]}}),
    ]) + "\n")
    issues = Issues("train.log")
    rows = routing_from_dir(d, issues).to_pylist()
    assert rows == [
        {"rank": 4, "step": 1, "layer": 2, "tokens": [1, 2], "dropped": [0, 0], "capacity": 3, "entropy": 1.0},
        {"rank": 0, "step": 1, "layer": 2, "tokens": [1, 2], "dropped": None, "capacity": None, "entropy": None},
        {"rank": 0, "step": 2, "layer": 0, "tokens": [1], "dropped": None, "capacity": None, "entropy": None},
        {"rank": 0, "step": 2, "layer": 1, "tokens": [2], "dropped": None, "capacity": None, "entropy": None},
    ]
    assert issues.unparsed == [(5, "expected a JSON object"), (6, "no integer 'iteration' (or 'step')"),
                               (7, "a flat tokens_per_expert list needs 'layer'"),
                               (8, "no 'tokens_per_expert' list"), (9, "layer 'x': counts must be integers"),
                               (10, "layer '1': counts must be integers")]
    assert issues.notes == ["tokens_per_expert/a.jsonl: 6 line(s) did not parse: line 5: expected a JSON object; "
                            "line 6: no integer 'iteration' (or 'step'); line 7: a flat tokens_per_expert list needs "
                            "'layer'; line 8: no 'tokens_per_expert' list; line 9: layer 'x': counts must be "
                            "integers; line 10: layer '1': counts must be integers"]


def test_routing_ignores_dumps_older_than_the_run(tmp_path: Path) -> None:
    d = tmp_path / "tokens_per_expert"
    d.mkdir()
    old, new = d / "old.jsonl", d / "new.jsonl"
    old.write_text(json.dumps({"iteration": 1, "layer": 0, "tokens_per_expert": [1]}) + "\nnot json\n")
    new.write_text(json.dumps({"iteration": 2, "layer": 0, "tokens_per_expert": [2]}) + "\n")
    os.utime(old, (1000.0, 1000.0))
    os.utime(new, (3000.0, 3000.0))
    issues = Issues("x")
    assert [r["step"] for r in routing_from_dir(d, issues, since=2000.0).to_pylist()] == [2]
    assert issues.unparsed == [] and issues.notes == []
    assert [r["step"] for r in routing_from_dir(d, Issues("x"), since=3000.0).to_pylist()] == [2]
    issues = Issues("x")
    assert [r["step"] for r in routing_from_dir(d, issues).to_pylist()] == [2, 1]  # sorted by file name
    assert issues.unparsed == [(2, "not JSON (Expecting value: line 1 column 1 (char 0))")]
    old.write_text("{bad\n")
    issues = Issues("tokens_per_expert/old.jsonl")  # problems of the file itself name no other source
    routing_from_dir(d, issues)
    why = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"[:60]
    assert issues.unparsed == [(1, f"not JSON ({why})")]
    assert issues.notes == [f"1 line(s) did not parse: line 1: not JSON ({why})"]
