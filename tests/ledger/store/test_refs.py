from __future__ import annotations

import duckdb
import pytest

from ledger.errors import AmbiguousRef, InvalidRef, UnknownRef
from ledger.store.index import _ensure_schema
from ledger.store.refs import check_ref, resolve

A = "abcd" + "1" * 60
B = "abcd" + "2" * 60
C = "ffff" + "3" * 60


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    _ensure_schema(con)
    rows = [
        (A, "base", "2026-01-01 00:00:00", None, 1),
        (B, "job", "2026-01-02 00:00:00", None, 1),
        (C, "job", "2026-01-03 00:00:00", B, 2),
        ("9" * 64, "dup", "2026-01-04 00:00:00", None, 1),
        ("8" * 64, "dup", "2026-01-05 00:00:00", None, 1),
    ]
    for rid, name, started, attempt_of, attempt in rows:
        con.execute("INSERT INTO receipts (id, name, started_at, attempt_of, attempt) VALUES (?, ?, ?, ?, ?)",
                    [rid, name, started, attempt_of, attempt])
    return con


def test_full_id_prefix_and_name(con: duckdb.DuckDBPyConnection) -> None:
    assert resolve(con, A) == A
    assert resolve(con, "abcd1") == A
    assert resolve(con, "base") == A
    assert resolve(con, "job") == C  # attempts of one run: the latest attempt


def test_ambiguous_prefix_lists_candidates(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(AmbiguousRef) as err:
        resolve(con, "abcd")
    assert A[:12] in str(err.value) and B[:12] in str(err.value) and "more characters" in str(err.value)


def test_name_shared_by_unrelated_runs_is_ambiguous(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(AmbiguousRef, match="use an id prefix"):
        resolve(con, "dup")


def test_unknown(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(UnknownRef, match="ledger ls"):
        resolve(con, "zzz")


@pytest.mark.parametrize("ref", ["", "a\x00b", "a\nb", "x\x1b]8;;http://evil\x1b\\", "x" * 201])
def test_refs_without_control_characters(ref: str) -> None:
    with pytest.raises(InvalidRef):
        check_ref(ref)


@pytest.mark.parametrize("ref", ["../x", "a/b", "/etc/passwd", "*", "a b", "[/x]", "<script>", "实验", "%"])
def test_any_other_name_is_a_ref_compared_as_data(con: duckdb.DuckDBPyConnection, ref: str) -> None:
    with pytest.raises(UnknownRef):
        resolve(con, ref)
    con.execute("INSERT INTO receipts (id, name, started_at) VALUES (?, ?, '2026-01-02')", ["ef" * 32, ref])
    try:
        assert resolve(con, ref) == "ef" * 32
    finally:
        con.execute("DELETE FROM receipts WHERE id = ?", ["ef" * 32])
