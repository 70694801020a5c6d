"""Fuzz of the staging reader: whatever a child leaves in ``$LEDGER_RUN_DIR`` (odd rank directory names,
JSON lines with lone surrogates or absurd values, garbage or mutated Arrow streams), publishing keeps the
run and reports what it could not read, and `ledger recover` goes on to the next staging directory.

Counts: 1,500 JSON-lines and 2,500 Arrow-stream reader cases, 400 publish cases and 100 recover cases in the
suite (4,500); ``LEDGER_FUZZ=full`` runs 7,000 JSON-lines cases (10,000 in all), the acceptance run of the
reliability issue. The JSON-lines cases are the cheapest and the most alike: fewer of them keep every kind of
input (the fragments, flat objects of every key, raw bytes) drawn many times over."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.record.capture import merge_runtime
from ledger.record.recover import recover
from ledger.store.layout import rank_of_dir
from ledger.store.merge import rank_dirs, read_table
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome, write_wrapper_facts
from schemas.tables import TABLES

pytestmark = pytest.mark.slow
JSON_CASES = 7000 if os.environ.get("LEDGER_FUZZ") == "full" else 1500

QUIET = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


def _stream(table: str, rows: int) -> bytes:
    schema = TABLES[table]
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema) as w:
        w.write_table(schema.empty_table() if not rows else pa.Table.from_pylist(
            [{f.name: _value(f) for f in schema} for _ in range(rows)], schema=schema))
    return sink.getvalue()


def _value(f: pa.Field) -> object:
    if pa.types.is_integer(f.type):
        return 1
    if pa.types.is_floating(f.type):
        return 1.0
    if pa.types.is_boolean(f.type):
        return True
    if pa.types.is_string(f.type):
        return "x"
    return None


VALID_STREAMS = {t: _stream(t, 3) for t in TABLES}

rank_names = (
    st.text(min_size=1, max_size=12).map(lambda s: "rank-" + s)
    | st.sampled_from(["rank-¹", "rank-٣", "rank-00000", "rank-", "rank--1", "rank-1" * 5, "wrapper", "rank-0x1"])
).filter(lambda s: "/" not in s and "\x00" not in s and s not in (".", ".."))
# JSON text with lone surrogates, huge numbers, nesting, wrong types
json_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
                | st.sampled_from(["\ud800", "\udfff", "\udcff", "nan", "inf"]))
FRAGMENTS = [b'{"step": 1, "loss": 1.0, "phase": "\\ud800", "kind": "\\udfff", "detail": "\\ud800"}',
             b'{"\\ud800": 1.5, "step": 2}', b'{"step": 1e400}', b'{"step": 1.5}', b'[[[[[[[[[[[[[[[[[[[[',
             b'{"step": 99999999999999999999999}', b'{"extra": {"\\udcff": 1}}', b'"\\ud800"', b"\xff\xfe",
             b'{"time": "nan", "kind": null}', b'{"seconds": true, "phase": {"a": [1]}}']
flat_objects = st.dictionaries(
    st.sampled_from(["step", "loss", "tokens", "time", "kind", "detail", "rank", "extra", "metric", "value",
                     "phase", "seconds", "device", "\ud800"]), json_scalars, max_size=6,
).map(lambda d: json.dumps(d).encode())
json_lines = st.lists(st.sampled_from(FRAGMENTS) | flat_objects | st.binary(max_size=30), max_size=4).map(
    lambda lines: b"\n".join(lines))
json_values = st.dictionaries(st.text(max_size=4), json_scalars, max_size=3)


@st.composite
def arrow_streams(draw: st.DrawFn, table: str) -> bytes:
    """Random bytes, or a valid stream of the table cut, flipped or extended."""
    base = VALID_STREAMS[table]
    kind = draw(st.sampled_from(["random", "cut", "flip", "append"]))
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "cut":
        return base[: draw(st.integers(0, len(base)))]
    if kind == "flip":
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return bytes(data)
    return base + draw(st.binary(max_size=100))


def _reset(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _one_file(factory: pytest.TempPathFactory, kind: str, name: str, data: bytes) -> Path:
    """A staging directory whose only rank holds one file (rewritten in place: cheap per case)."""
    run_dir = factory.getbasetemp() / kind
    rank = run_dir / "rank-00000"
    if rank.is_dir():
        for old in rank.iterdir():
            old.unlink()
    else:
        rank.mkdir(parents=True)
    (rank / name).write_bytes(data)
    return run_dir


def test_rank_dir_names_are_ascii_digits_only() -> None:
    assert rank_of_dir("rank-¹") is None and rank_of_dir("rank-٣") is None
    assert rank_of_dir("rank-00012") == 12 and rank_of_dir("wrapper") == -1


@settings(max_examples=JSON_CASES, deadline=None, suppress_health_check=QUIET)
@given(table=st.sampled_from(sorted(TABLES)), lines=json_lines)
def test_json_lines_never_raise(tmp_path_factory: pytest.TempPathFactory, table: str, lines: bytes) -> None:
    run_dir = _one_file(tmp_path_factory, "jsonl", f"{table}.jsonl", lines)
    result, problems = read_table(run_dir, table)
    assert result.schema.equals(TABLES[table])
    result.validate(full=True)
    for row in result.to_pylist():  # every string is storable as UTF-8
        json.dumps(row, default=str).encode("utf-8")
        for v in row.values():
            if isinstance(v, str):
                v.encode("utf-8")
    assert all(p.message for p in problems)


@settings(max_examples=2500, deadline=None, suppress_health_check=QUIET)
@given(data=st.data(), table=st.sampled_from(sorted(TABLES)))
def test_arrow_streams_never_raise(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                   table: str) -> None:
    raw = data.draw(arrow_streams(table))
    run_dir = _one_file(tmp_path_factory, "arrows", f"{table}.arrows", raw)
    result, problems = read_table(run_dir, table)
    result.validate(full=True)
    result.to_pylist()
    if raw == VALID_STREAMS[table]:
        assert result.num_rows == 3 and not problems


def _stage(run_dir: Path, names: list[str], lines: bytes, stream: bytes, table: str, workload: object) -> None:
    write_wrapper_facts(run_dir, {"run_uuid": run_dir.name, "name": "fuzz\ud800", "tags": {"k\udcff": "v"},
                                  "started_at": "2026-12-01T00:00:00+00:00", "command": ["python"]})
    for i, name in enumerate(names):
        d = run_dir / name
        d.mkdir(exist_ok=True)
        (d / f"{table}.jsonl").write_bytes(lines)
        (d / f"{table}.arrows").write_bytes(stream)
        (d / "workload.json").write_text(json.dumps(workload))
        (d / "runtime.json").write_text(json.dumps(workload if i else {"torch": "\ud800"}))


@settings(max_examples=400, deadline=None, suppress_health_check=QUIET)
@given(data=st.data(), names=st.lists(rank_names, min_size=1, max_size=3, unique=True),
       table=st.sampled_from(sorted(TABLES)), lines=json_lines, workload=json_values)
def test_publish_never_loses_the_run(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                     names: list[str], table: str, lines: bytes, workload: object) -> None:
    base = tmp_path_factory.getbasetemp() / "publish"
    ledger = Ledger(_reset(base / "receipts"))
    run_dir = _reset(ledger.staging / "run")
    try:
        _stage(run_dir, names, lines, data.draw(arrow_streams(table)), table, workload)
    except (OSError, UnicodeEncodeError):  # a name the filesystem refuses is no input a child can make
        return
    list(rank_dirs(run_dir))
    receipt = publish(ledger, run_dir, Outcome(status="succeeded", exit_code=0), runtime=merge_runtime)
    assert receipt.status == "succeeded" and ledger.path(receipt.id).is_dir()
    assert not run_dir.exists()
    json.loads((ledger.path(receipt.id) / "receipt.json").read_bytes())


@settings(max_examples=100, deadline=None, suppress_health_check=QUIET)
@given(data=st.data(), names=st.lists(rank_names, min_size=1, max_size=2, unique=True),
       table=st.sampled_from(sorted(TABLES)), lines=json_lines)
def test_recover_publishes_every_staging_dir(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                             names: list[str], table: str, lines: bytes) -> None:
    ledger = Ledger(_reset(tmp_path_factory.getbasetemp() / "recover" / "receipts"))
    staged = []
    for uuid in ("a-bad", "b-good"):
        run_dir = _reset(ledger.staging / uuid)
        try:
            _stage(run_dir, names if uuid == "a-bad" else ["rank-00000"], lines if uuid == "a-bad" else b"",
                   data.draw(arrow_streams(table)) if uuid == "a-bad" else VALID_STREAMS[table], table, {})
        except (OSError, UnicodeEncodeError):
            return
        (run_dir / "exit.json").write_text(json.dumps({"returncode": 0, "ended_at": "2026-12-01T00:01:00+00:00"}))
        staged.append(uuid)
    results = recover(ledger)
    assert [(r.run_uuid, r.action) for r in results] == [(u, "published") for u in staged]
    for r in results:
        assert ledger.load(r.receipt_id or "").status == "succeeded"
