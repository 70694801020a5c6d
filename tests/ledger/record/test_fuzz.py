"""Property-based fuzzing: whatever bytes or strings arrive, every failure is a LedgerError with a
message (or, for run files, a recorded problem) and nothing else escapes."""

from __future__ import annotations

import json

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.errors import LedgerError
from ledger.store import filters
from ledger.store.index import _ensure_schema
from ledger.store.merge import read_table
from ledger.store.receipts import parse_receipt
from ledger.store.refs import resolve
from schemas import Receipt, migrate
from schemas.tables import TABLES

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VALID = Receipt(run_uuid="u", status="succeeded", name="x").model_dump(mode="json")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def _paths(data: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    return out


PATHS = [p for p in _paths(VALID) if p]


@FUZZ
@given(path=st.sampled_from(PATHS), value=json_values)
def test_mutated_receipt_json_is_a_ledger_error_or_valid(path: tuple[str, ...], value: object) -> None:
    data = json.loads(json.dumps(VALID))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parse_receipt(migrate(data), "receipt.json")
    except LedgerError as exc:
        assert str(exc).startswith("receipt.json: field ")
    except ValueError as exc:  # SchemaVersionError from migrate: turned into SchemaTooNew by the store
        assert "schema_version" in str(exc)


@FUZZ
@given(raw=st.binary(max_size=400), table=st.sampled_from(sorted(TABLES)), kind=st.sampled_from(["jsonl", "arrows"]))
def test_run_files_never_raise(tmp_path_factory: pytest.TempPathFactory, raw: bytes, table: str, kind: str) -> None:
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "rank-00000").mkdir()
    (run_dir / "rank-00000" / f"{table}.{kind}").write_bytes(raw)
    result, problems = read_table(run_dir, table)
    assert result.schema.equals(TABLES[table])
    if result.num_rows == 0 and raw.strip():
        assert problems and all(p.message for p in problems)


@FUZZ
@given(lines=st.lists(st.dictionaries(st.sampled_from(["step", "loss", "tokens", "rank", "extra", "x", "lr"]),
                                      json_values, max_size=5), max_size=6))
def test_jsonl_objects_never_raise(tmp_path_factory: pytest.TempPathFactory, lines: list[dict[str, object]]) -> None:
    run_dir = tmp_path_factory.mktemp("run")
    (run_dir / "rank-00000").mkdir()
    (run_dir / "rank-00000" / "steps.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    result, problems = read_table(run_dir, "steps")
    assert result.num_rows + sum(int(p.message.split()[0]) for p in problems) == len(lines)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    _ensure_schema(con)
    con.execute("INSERT INTO receipts (id, name, started_at) VALUES (?, 'n', '2026-01-01')", ["ab" * 32])
    return con


@FUZZ
@given(ref=st.text(max_size=80))
def test_refs(con: duckdb.DuckDBPyConnection, ref: str) -> None:
    try:
        assert resolve(con, ref) == "ab" * 32
    except LedgerError as exc:
        assert "\n" not in str(exc) and "ref" in str(exc), str(exc)  # one line that names what was wrong


@FUZZ
@given(expr=st.text(max_size=80) | st.builds(lambda k, o, v: f"{k}{o}{v}",
                                             st.sampled_from(["name", "tag.x", "seed", "summary.steps", "nope"]),
                                             st.sampled_from(["=", "!=", "<", ">=", "~", "=="]),
                                             st.text(max_size=10)))
def test_where(expr: str) -> None:
    try:
        predicate = filters.parse(expr)
    except LedgerError as exc:
        assert "\n" not in str(exc) and "--where" in str(exc), str(exc)
        return
    assert predicate(VALID) in (True, False)


RUNNER_RECEIPT = Receipt.model_validate({
    "run_uuid": "u", "status": "succeeded",
    "workload": {"model": {"layers": 2, "hidden": 64, "ffn_hidden": 256, "num_experts": 8},
                 "parallelism": {"ep": 1}, "batch": {"global_batch": 16, "steps": 10},
                 "launch": {"runner": "runners.moe", "config": "tiny", "overrides": []}}})


@FUZZ
@given(sets=st.lists(st.text(max_size=30), max_size=3), scale=st.lists(st.text(max_size=20), max_size=2))
def test_set_and_scale_arguments(sets: list[str], scale: list[str]) -> None:
    from ledger.replay.rerun import rebuild_command
    from ledger.replay.scale import parse_scale

    try:
        command = rebuild_command(RUNNER_RECEIPT, sets, [parse_scale(s) for s in scale])
    except LedgerError as exc:
        assert any(o in str(exc) for o in ("--set", "--scale", "scale dimension")), str(exc)  # names the option
        return
    assert command[command.index("-m") + 1] in ("runners.moe", "torch.distributed.run")
