"""Runs as flat records (ledger/store/runs.py), in process: one receipt's columns written out by hand from its
JSON (summary, evals, tags, the launch's own arguments, every workload field, the stack's few), the column order,
which columns a short name means as people type them (``lr``, ``param.lr``, ``num_experts``), the DataFrame's
types (UTC datetimes from any offset), and a run's steps read back from a real ledger with its custom metrics,
against the values logged."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import MissingExtra
from ledger.store import runs

RID = "ab" + "0" * 62


def _receipt(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": RID, "name": "fp8-grouped", "status": "failed", "started_at": "2026-12-02T10:00:00+00:00",
        "ended_at": "2026-12-02T11:30:00+00:00", "duration_s": 5400.0, "exit_code": 1, "attempt": 2,
        "schema_version": 5, "command": ["torchrun", "train.py"],
        "summary": {"steps": 100, "final_loss": 2.5, "tokens_per_s": 1.5e5, "peak_memory_source": "sdk",
                    "final_eval": {"val/all/loss": 2.75, "test/rare/acc": 0.5}, "per_layer": {"0": 1.0},
                    "windows": [1, 2], "energy_j": None},
        "tags": {"sweep": "lr", "owner": "alice"},
        "workload": {
            "arguments": {"lr": "3e-3", "train.yaml:batch": "64"},
            "launch": {"launcher": "torchrun", "nproc": 8},
            "optimizer": {"name": "adamw", "lr": 0.001, "betas": [0.9, 0.95], "schedule": {"warmup": 10}},
            "model": {"num_experts": 8, "top_k": 2, "shared_experts": 0, "granularity": None, "note": "",
                      "dims": [], "layer_types": ("moe", "dense")},
            "seed": 7, "dirty": False,
        },
        "stack": {"hardware": {"gpu_model": "H200", "gpu_count": 0, "cpu": "x86"},
                  "code": {"commit": "0123abc", "dirty": False, "branch": "main"}, "drivers": {"cuda": "12.4"}},
    }
    data.update(over)
    return data


def test_one_receipt_as_its_columns() -> None:
    assert runs.record(_receipt(), archived=True, notes=3) == {
        "id": RID, "name": "fp8-grouped", "status": "failed", "started_at": "2026-12-02T10:00:00+00:00",
        "ended_at": "2026-12-02T11:30:00+00:00", "duration_s": 5400.0, "exit_code": 1, "attempt": 2,
        "archived": True, "notes": 3,
        "summary.steps": 100, "summary.final_loss": 2.5, "summary.tokens_per_s": 1.5e5,
        "summary.peak_memory_source": "sdk", "summary.final_eval.val/all/loss": 2.75,
        "summary.final_eval.test/rare/acc": 0.5, "summary.energy_j": None,
        "tags.sweep": "lr", "tags.owner": "alice",
        "params.lr": "3e-3", "params.train.yaml:batch": "64",
        "workload.optimizer.name": "adamw", "workload.optimizer.lr": 0.001, "workload.optimizer.betas": "0.9,0.95",
        "workload.optimizer.schedule.warmup": 10, "workload.model.num_experts": 8, "workload.model.top_k": 2,
        "workload.model.shared_experts": 0, "workload.model.layer_types": "moe,dense", "workload.seed": 7,
        "workload.dirty": False,
        "stack.hardware.gpu_model": "H200", "stack.hardware.gpu_count": 0, "stack.code.commit": "0123abc",
        "stack.code.dirty": False,
    }


def test_a_receipt_with_nothing_beyond_its_bookkeeping() -> None:
    bare = {"id": RID, "name": None, "status": "imported", "summary": None, "tags": None, "workload": None,
            "stack": None}
    assert runs.record(bare) == {"id": RID, "name": None, "status": "imported", "started_at": None,
                                 "ended_at": None, "duration_s": None, "exit_code": None, "attempt": None,
                                 "archived": False, "notes": 0}
    partial = runs.record({"id": RID, "summary": {"final_eval": None}, "workload": {"arguments": None},
                           "stack": {"hardware": "H200", "code": {"commit": None}}})
    assert [k for k in partial if "." in k] == []


def test_columns_in_order_bookkeeping_summary_tags_params_workload_stack() -> None:
    a = {"id": 1, "stack.code.commit": "x", "workload.seed": 1, "summary.energy_j": 1.0, "tags.t": "a",
         "summary.zz": 1, "summary.final_loss": 2.0, "params.lr": "1", "other": 5, "name": "a"}
    b = {"summary.steps": 10, "params.batch": "2", "workload.model.top_k": 2, "summary.aa": 0,
         "stack.hardware.gpu_model": "H200", "tags.s": "b"}
    assert runs.columns([a, b]) == [
        "id", "name", "status", "started_at", "ended_at", "duration_s", "exit_code", "attempt", "archived", "notes",
        "summary.steps", "summary.final_loss", "summary.energy_j", "summary.zz", "summary.aa",
        "tags.t", "tags.s", "params.lr", "params.batch", "workload.seed", "workload.model.top_k",
        "stack.code.commit", "stack.hardware.gpu_model", "other"]
    assert runs.columns([]) == list(runs.BASE)
    every = runs.columns([{k: 1 for k in reversed(runs.SUMMARY_FIRST)}])
    assert every[len(runs.BASE):] == list(runs.SUMMARY_FIRST)


def test_hyperparameters_that_differ_come_first() -> None:
    rows = [{"params.lr": "1e-3", "workload.seed": 1, "workload.model.top_k": 2, "summary.steps": 1, "tags.x": "a"},
            {"params.lr": "1e-3", "workload.seed": 2, "workload.model.top_k": 2, "summary.steps": 2, "tags.x": "b"},
            {"params.lr": "1e-3", "workload.seed": 1.0, "workload.model.top_k": 2, "params.batch": "8"}]
    # seed 1 and 1.0 are written differently; the batch is missing from two rows; lr and top_k are the same
    assert runs.hyperparameters(rows) == ["params.batch", "workload.seed", "params.lr", "workload.model.top_k"]
    assert runs.hyperparameters(rows[:1]) == ["params.lr", "workload.seed", "workload.model.top_k"]
    same = [{"params.lr": None}, {}]  # a null and a missing value read the same
    assert runs.hyperparameters(same) == ["params.lr"]


AVAILABLE = ["id", "name", "summary.final_loss", "params.lr", "params.train.yaml:batch", "workload.optimizer.lr",
             "workload.model.num_experts", "workload.seed", "stack.code.commit", "summary.final_eval.val/all/loss",
             "tags.seed", "tags.owner", "workload.router.top_k", "workload.model.top_k"]


@pytest.mark.parametrize(("typed", "meant"), [
    ("name", "name"), ("params.lr", "params.lr"), ("lr", "params.lr"), ("param.lr", "params.lr"),
    ("train.yaml:batch", "params.train.yaml:batch"), ("param.train.yaml:batch", "params.train.yaml:batch"),
    ("num_experts", "workload.model.num_experts"), ("model.num_experts", "workload.model.num_experts"),
    ("final_loss", "summary.final_loss"), ("commit", "stack.code.commit"),
    ("val/all/loss", "summary.final_eval.val/all/loss"), ("loss", None),
    ("seed", "workload.seed"),  # the tag of that name is not a workload column
    ("owner", None), ("top_k", None),  # a tag; two workload columns end in .top_k
    ("batch", None), ("optimizer", None), ("LR", None), ("", None), ("x.lr", None),
])
def test_a_short_name_means_one_column(typed: str, meant: str | None) -> None:
    assert runs.resolve(typed, AVAILABLE) == meant


@given(st.lists(st.from_regex(r"[a-z]{1,4}(\.[a-z]{1,4}){0,2}", fullmatch=True), min_size=1, max_size=6,
                unique=True), st.sampled_from(["params.", "workload.", "summary.", "stack.", "tags."]))
@settings(max_examples=60, deadline=None)
def test_every_full_name_resolves_to_itself(names: list[str], prefix: str) -> None:
    available = [prefix + n for n in names]
    for column in available:
        assert runs.resolve(column, available) == column
    if prefix == "params.":
        for n in names:
            assert runs.resolve(n, available) == "params." + n


def test_the_frame_one_row_per_run_in_column_order_with_utc_times() -> None:
    a = runs.record(_receipt(started_at="2026-12-02T11:00:00+01:00"))
    b = runs.record(_receipt(id="cd" + "1" * 62, name="b", started_at=None, tags={"extra": "x"}))
    df = runs.frame([a, b])
    assert list(df.columns) == runs.columns([a, b])
    assert list(df["name"]) == ["fp8-grouped", "b"]
    assert str(df["started_at"].dtype) == "datetime64[ns, UTC]" or str(df["started_at"].dt.tz) == "UTC"
    assert df["started_at"][0] == pd.Timestamp("2026-12-02T10:00:00", tz="UTC")
    assert pd.isna(df["started_at"][1])
    assert df["ended_at"][1] == pd.Timestamp("2026-12-02T11:30:00", tz="UTC")
    assert pd.isna(df["tags.extra"][0]) and df["tags.extra"][1] == "x"
    assert df["workload.optimizer.lr"][0] == 0.001


def test_without_pandas_it_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(MissingExtra) as err:
        runs.pandas()
    assert str(err.value) == "pandas is not installed; install it with: pip install 'stackreceipt[pandas]'"
    assert (err.value.module, err.value.extra) == ("pandas", "pandas")
    with pytest.raises(MissingExtra):
        runs.frame([])


def _steps_db() -> duckdb.DuckDBPyConnection:
    """A steps table as the index holds it, by hand: two runs, custom metrics in ``extra`` (one named like a
    fixed column, one with a quote in its name)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE steps (receipt_id VARCHAR, step BIGINT, loss DOUBLE, tokens BIGINT, "
                "extra MAP(VARCHAR, DOUBLE))")
    rows = [("a", 3, 2.0, 300, {"moe/load_cv": 0.3, "loss": 9.0}), ("b", 1, 5.0, 100, {}),
            ("a", 1, 4.0, 100, {"moe/load_cv": 0.1, 'say "hi"': 1.0}), ("a", 2, 3.0, 200, None)]
    for rid, step, loss, tokens, extra in rows:
        con.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?)",
                    [rid, step, loss, tokens, None if extra is None else extra])
    return con


def test_a_runs_steps_with_each_custom_metric_as_a_column() -> None:
    table = _steps_db()
    got = runs.steps_table(table, "a")
    assert got.column_names == ["step", "loss", "tokens", "extra.loss", "moe/load_cv", 'say "hi"']
    assert got.to_pydict() == {"step": [3, 1, 2], "loss": [2.0, 4.0, 3.0], "tokens": [300, 100, 200],
                               "extra.loss": [9.0, None, None], "moe/load_cv": [0.3, 0.1, None],
                               'say "hi"': [None, 1.0, None]}  # in recorded order, not sorted
    only = runs.steps_table(table, "b")
    assert only.to_pydict() == {"step": [1], "loss": [5.0], "tokens": [100]}
    assert runs.steps_table(table, "zz").num_rows == 0


def test_steps_and_runs_of_a_real_ledger(tmp_path: Path) -> None:
    import ledger
    import ledger.sdk

    lg = ledger.open(tmp_path / "receipts")
    for name, lr in (("a", 1e-3), ("b", 3e-4)):
        with lg.recording(name=name, tags={"sweep": "lr"}):
            run = ledger.sdk.current()
            run.set_workload({"optimizer": {"lr": lr}, "seed": 1})
            for step in range(1, 5):
                run.log_step(step, loss=4.0 / step, tokens=10 * step, **{"moe/load_cv": step / 8})
    steps = lg.steps("a")
    assert list(steps["step"]) == [1, 2, 3, 4]
    assert list(steps["loss"]) == [4.0, 2.0, 4.0 / 3, 1.0]
    assert list(steps["moe/load_cv"]) == [0.125, 0.25, 0.375, 0.5]
    df = lg.runs()
    assert list(df["name"]) == ["a", "b"] and list(df["workload.optimizer.lr"]) == [1e-3, 3e-4]
    assert list(df["tags.sweep"]) == ["lr", "lr"] and list(df["summary.final_loss"]) == [1.0, 1.0]
    assert list(df["notes"]) == [0, 0] and not df["archived"].any()
    assert math.isclose(df["duration_s"][0], (df["ended_at"][0] - df["started_at"][0]).total_seconds(), abs_tol=1e-3)
    lg.note("b", "slow node", author="alice")
    assert list(lg.runs()["notes"]) == [0, 1]


def test_times_with_and_without_fractions_of_a_second_in_one_frame() -> None:
    # a receipt's JSON drops the fraction of a run that started on the second ("...:00Z"); others keep theirs
    a = runs.record(_receipt(started_at="2026-12-02T10:00:00Z", ended_at="2026-12-02T10:30:00.500000+00:00"))
    b = runs.record(_receipt(id="cd" + "1" * 62, started_at="2026-12-02T11:00:00.250000+00:00",
                             ended_at="2026-12-02T12:00:00+02:00"))
    df = runs.frame([a, b])
    assert list(df["started_at"]) == [pd.Timestamp("2026-12-02T10:00:00", tz="UTC"),
                                      pd.Timestamp("2026-12-02T11:00:00.25", tz="UTC")]
    assert list(df["ended_at"]) == [pd.Timestamp("2026-12-02T10:30:00.5", tz="UTC"),
                                    pd.Timestamp("2026-12-02T10:00:00", tz="UTC")]
