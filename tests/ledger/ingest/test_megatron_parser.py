"""The Megatron line and log parsers on the shapes real logs take, and on anything at all (hypothesis)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.ingest.common import Issues, LineError
from ledger.ingest.megatron import parse_line, parse_lines, parse_log, routing_from_dir

LINE = (" [2025-09-05 16:08:25] iteration        2/    2000 | consumed samples:          256 | elapsed time per "
        "iteration (ms): 11182.0 | throughput per GPU (TFLOP/s/GPU): 128.2 | learning rate: 2.999993E-05 | global "
        "batch size:   128 | lm loss: 2.688647E+00 | z_loss: 1.019938E+01 | mtp_1 loss: 2.843235E+00 | loss scale: "
        "1.0 | grad norm: 7.737 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def _lines(text: str) -> list[tuple[int, str, bool]]:
    parts = text.split("\n")
    out = [(i, p, True) for i, p in enumerate(parts[:-1], start=1)]
    if parts[-1]:
        out.append((len(parts), parts[-1], False))
    return out


def test_a_fixture_line_parses() -> None:
    line = parse_line(LINE)
    assert line is not None and line.kind == "iteration" and line.step == 2 and line.total == 2000
    assert line.values["lm loss"] == 2.688647 and line.values["global batch size"] == 128 and not line.bad


@pytest.mark.parametrize(("prefix", "rank"), [("", None), ("0: ", 0), ("  7: ", 7), ("[default3]:", 3),
                                              ("[rank5]:", 5), ("[1,6]<stdout>:", 6)])
@pytest.mark.parametrize("stamp", ["", "[2025-09-05 16:08:25] "])
def test_rank_prefixes_and_timestamps(prefix: str, rank: int | None, stamp: str) -> None:
    body = LINE.split("] ", 1)[1]
    line = parse_line(prefix + stamp + body)
    assert line is not None and line.step == 2 and line.values["lm loss"] == 2.688647
    assert (line.time is not None) == bool(stamp) and line.rank == rank


def test_missing_trailing_bar_nan_and_inf() -> None:
    line = parse_line("iteration 5/ 10 | lm loss: nan | grad norm: inf | loss scale: -inf")
    assert line is not None and math.isnan(line.values["lm loss"])
    assert line.values["grad norm"] == math.inf and line.values["loss scale"] == -math.inf


def test_foreign_lines_are_skipped_and_broken_evidence_counted() -> None:
    text = "\n".join([
        "Loading checkpoint ... done",
        "/site-packages/torch/x.py:79: FutureWarning: `torch.distributed._all_gather_base` is private",
        LINE,
        " iteration 3 of 2000 | lm loss: 2.6",  # looks like an iteration line, is not one
        " validation loss at somewhere | lm loss value: 3.0",
        LINE.replace("iteration        2/", "iteration        4/"),
    ]) + "\n"
    log = parse_lines(_lines(text), "x.log")
    assert log.iteration_lines == 2 and [n for n, _ in log.issues.unparsed] == [4, 5]
    problem = log.issues.problems()[0]
    assert "2 line(s) did not parse" in problem.message and "line 4" in problem.message


def test_a_truncated_last_line_keeps_what_parses_and_says_so() -> None:
    cut = LINE[: LINE.index("grad norm: 7") + len("grad norm: 7.7")] + " | number of skipped iterations:"
    log = parse_lines(_lines(LINE + "\n" + cut.replace("iteration        2/", "iteration        3/")), "x.log")
    rows = log.tables()["steps"].to_pylist()
    assert [r["step"] for r in rows] == [2, 3] and rows[1]["loss"] == 2.688647 and rows[1]["grad_norm"] == 7.7
    assert log.truncated_last and log.issues.fields == [(2, "'number of skipped iterations' has no value")]
    assert any("no line end" in n for n in log.issues.notes)


def test_validation_timers_and_memory() -> None:
    text = "\n".join([
        "[Rank 0] (after 100 iterations) memory (MB) | allocated: 100.0 | max allocated: 2048.0 | reserved: 4096.0",
        " iteration      100/     200 | lm loss: 3.5 | elapsed time per iteration (ms): 250.0 |",
        "(min, max) time across ranks (ms):",
        "    forward-backward ...............................: (240.12, 245.50)",
        "    optimizer ......................................: (4.00, 4.50)",
        "time (ms) | forward-compute: 100.0 | backward-compute: 120.5",
        "-" * 40,
        " validation loss at iteration 100 | lm loss value: 3.456E+00 | lm loss PPL: 3.168E+01 | ",
        " validation loss at iteration 100 on test set | lm loss value: 3.5E+00 |",
        " validation loss at the end of training for val data | lm loss value: 3.4E+00 |",
    ]) + "\n"
    log = parse_lines(_lines(text))
    tables = log.tables()
    assert tables["steps"].to_pylist()[0]["memory_bytes"] == 2048 * 2**20
    timing = {(r["phase"], r["step"]): r["seconds"] for r in tables["timing"].to_pylist()}
    assert timing == {("forward-backward", 100): 0.2455, ("optimizer", 100): 0.0045,
                      ("forward-compute", 100): 0.1, ("backward-compute", 100): 0.1205}
    evals = [(r["step"], r["split"], r["metric"], r["value"]) for r in tables["evals"].to_pylist()]
    assert evals == [(100, "val", "loss", 3.456), (100, "val", "ppl", 31.68), (100, "test", "loss", 3.5),
                     (100, "val", "loss", 3.4)]


def test_argument_dump_and_derived_columns() -> None:
    text = "\n".join([
        "------------------------ arguments ------------------------",
        "  seq_length ...................................... 4096",
        "  world_size ...................................... 8",
        "  num_experts ..................................... 64",
        "  data_path ....................................... ['1.0', '/data/x_text_document']",
        "  fp8 ............................................. hybrid",
        "  params_dtype .................................... torch.bfloat16",
        "-------------------- end of arguments ---------------------",
        " iteration 1/ 10 | consumed samples: 32 | elapsed time per iteration (ms): 2000.0 | "
        "throughput per GPU (TFLOP/s/GPU): 100.0 | global batch size: 32 | lm loss: 9.0 |",
    ]) + "\n"
    log = parse_lines(_lines(text))
    assert log.args["seq_length"] == 4096 and log.args["data_path"] == ["1.0", "/data/x_text_document"]
    row = log.tables()["steps"].to_pylist()[0]
    assert row["tokens"] == 32 * 4096 and row["tokens_per_s"] == 32 * 4096 / 2.0
    assert row["flops_per_s"] == 100.0e12 * 8


def test_repeated_iterations_are_noted() -> None:
    log = parse_lines(_lines(LINE + "\n" + LINE + "\n"))
    assert log.tables()["steps"].num_rows == 2 and any("more than once" in n for n in log.issues.notes)


def test_gzip_and_crlf(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "train.log.gz"
    with gzip.open(path, "wt", newline="") as f:
        f.write(LINE + "\r\n" + LINE.replace("iteration        2/", "iteration        3/") + "\r\n")
    log = parse_log(path)
    assert log.iteration_lines == 2 and not log.issues.fields


def test_routing_dumps(tmp_path: Path) -> None:
    d = tmp_path / "tokens_per_expert"
    d.mkdir()
    (d / "rank0.jsonl").write_text("\n".join([
        json.dumps({"iteration": 1, "layer": 0, "tokens_per_expert": [3, 5, 0, 8], "dropped": [0, 1, 0, 2],
                    "capacity": 6}),
        json.dumps({"iteration": 2, "tokens_per_expert": [[1, 2], [3, 4]], "layers": [1, 3]}),
        json.dumps({"step": 3, "tokens_per_expert": {"5": [9, 9]}}),
        "not json",
        json.dumps({"iteration": 4}),
    ]) + "\n")
    issues = Issues("log")
    rows = routing_from_dir(d, issues).to_pylist()
    assert [(r["step"], r["layer"], r["tokens"], r["dropped"]) for r in rows] == [
        (1, 0, [3, 5, 0, 8], [0, 1, 0, 2]), (2, 1, [1, 2], None), (2, 3, [3, 4], None), (3, 5, [9, 9], None)]
    assert rows[0]["capacity"] == 6
    assert [n for n, _ in issues.unparsed] == [4, 5]


# ------------------------------------------------------------------------------------------ properties
FIELD_NAMES = st.sampled_from(["lm loss", "grad norm", "learning rate", "z_loss", "mtp_1 loss", "memory(GiB)",
                               "elapsed time", "x", ""])
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.text(max_size=12),
                   st.sampled_from(["1m 52s", "7h 6m 43s", "nan", "-inf", "1.0E+00", ""]))


LINE_ERRORS = ("an iteration line without 'iteration N/ TOTAL'",
               "a validation line without 'at iteration N' or 'at the end of training'",
               "a validation line without values",
               "a memory report without '(after N iterations) memory (MB) | ...'")


def is_line_error_message(message: str) -> bool:
    """One of the parser's messages, which say what the line lacks (a timer names itself)."""
    return message in LINE_ERRORS or (message.startswith("timer ") and message.endswith("is not a number"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_any_text_parses_or_raises_a_line_error(text: str) -> None:
    try:
        line = parse_line(text)
    except LineError as exc:
        assert is_line_error_message(str(exc)), str(exc)
        return
    kinds = ("iteration", "validation", "memory", "timers-header", "timers", "timer", "argument")
    assert line is None or line.kind in kinds, line


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**9), st.integers(0, 10**9), st.lists(st.tuples(FIELD_NAMES, VALUES), max_size=8),
       st.sampled_from(["", "0: ", "[default1]:"]), st.booleans(), st.integers(0, 400))
def test_iteration_lines_with_any_fields(step: int, total: int, fields: list[tuple[str, str]], prefix: str,
                                         bar: bool, cut: int) -> None:
    text = prefix + f" iteration {step}/ {total} | " + " | ".join(f"{n}: {v}" for n, v in fields) + (" |" if bar
                                                                                                     else "")
    for candidate in (text, text[:cut]):
        try:
            line = parse_line(candidate)
        except LineError as exc:
            assert is_line_error_message(str(exc)), str(exc)
            continue
        if candidate == text:
            assert line is not None and line.step == step


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([LINE, "noise", "", " validation loss at iteration 2 | lm loss value: 1.0 |",
                                 "    forward-backward ....: (1.0, 2.0)", "iteration ?", "  seq_length ..... 8"]),
                max_size=30))
def test_whole_logs_never_raise(lines: list[str]) -> None:
    log = parse_lines([(i, line, True) for i, line in enumerate(lines, start=1)])
    steps = log.tables()["steps"]
    # only the full iteration line (step 2) makes step rows
    assert set(steps.column("step").to_pylist()) == ({2} if LINE in lines else set())
