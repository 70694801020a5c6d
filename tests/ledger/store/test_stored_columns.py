"""Every stored column of every metric table, checked on one known run recorded in this process (values
given by hand, times bracketed by the clock read around the logging): nothing dropped, renamed, shifted or
defaulted on the way from the SDK to the published Parquet files; the events carry the run's attempt
number; the ledger's ids are its published receipts only, never the staging directory."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ledger.record.inprocess import recording
from ledger.store.layout import STAGING
from ledger.store.receipts import Ledger
from schemas.tables import EVALS, EVENTS, ROUTING, STEPS, TELEMETRY, TIMING


def rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def known_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ledger, str, float, float]:
    lg = Ledger(tmp_path_factory.mktemp("ledger"))
    before = time.time()
    with recording(lg, name="known", attempt=3, tags={"k": "v"}) as rec:
        run = rec.run
        run.log_step(1, loss=4.5, lr=1e-3, tokens=1024, grad_norm=1.25, step_time_s=0.5, tokens_per_s=2048.0,
                     flops_per_s=3.0e12, aux_loss=0.01, z_loss=0.002, loss_scale=65536.0, memory_bytes=123456,
                     skipped=False, epoch=0.25, my_metric=7.5)
        run.log_step(2, loss=4.25, tokens=2048, step_time_s=0.25, skipped=True)
        run.log_eval(2, 3.9, metric="loss", split="val", source="arith", tokens=2048)
        run.log_eval(2, 0.5, metric="accuracy", split="test", source=None)
        run.log_routing(2, 1, [5, 3], dropped=[1, 0], capacity=4, entropy=0.75)
        run.log_timing(2, "all_to_all", 0.125)
        run.log_telemetry("gpu0", power_w=300.5, energy_j=1000.0, utilization=0.5, memory_bytes=2048, time_s=before,
                          sm_clock_mhz=1980.0, memory_clock_mhz=2619.0, temperature_c=61.5, ecc_corrected=2,
                          ecc_uncorrected=0)
        run.event("checkpoint_save_start", step=2, path="ckpt/2")
    after = time.time()
    assert rec.receipt is not None
    return lg, rec.receipt.id, before, after


def test_every_column_of_every_table_is_stored_as_logged(known_run: tuple[Ledger, str, float, float]) -> None:
    lg, rid, before, after = known_run
    d = lg.path(rid)
    steps = rows(d / "steps.parquet")
    assert [c for c in pq.read_schema(d / "steps.parquet").names] == STEPS.names
    assert len(steps) == 2
    s1, s2 = steps
    assert before <= s1["time"] <= s2["time"] <= after
    assert {k: v for k, v in s1.items() if k not in ("time", "extra")} == {
        "rank": 0, "step": 1, "tokens": 1024, "loss": 4.5, "lr": 1e-3, "grad_norm": 1.25, "step_time_s": 0.5,
        "tokens_per_s": 2048.0, "flops_per_s": 3.0e12, "tflops_per_device": None, "global_batch": None,
        "aux_loss": 0.01, "z_loss": 0.002, "loss_scale": 65536.0, "memory_bytes": 123456, "skipped": False,
        "epoch": 0.25, "printed_step": None}
    assert dict(s1["extra"]) == {"my_metric": 7.5}
    assert {k: v for k, v in s2.items() if k not in ("time", "extra")} == {
        "rank": 0, "step": 2, "tokens": 2048, "loss": 4.25, "lr": None, "grad_norm": None, "step_time_s": 0.25,
        "tokens_per_s": None, "flops_per_s": None, "tflops_per_device": None, "global_batch": None,
        "aux_loss": None, "z_loss": None, "loss_scale": None, "memory_bytes": None, "skipped": True,
        "epoch": None, "printed_step": None}
    assert not s2["extra"]

    evals = rows(d / "evals.parquet")
    assert pq.read_schema(d / "evals.parquet").names == EVALS.names
    assert all(before <= e.pop("time") <= after for e in evals)
    assert evals == [
        {"rank": 0, "step": 2, "tokens": 2048, "split": "val", "source": "arith", "metric": "loss", "value": 3.9},
        {"rank": 0, "step": 2, "tokens": None, "split": "test", "source": None, "metric": "accuracy", "value": 0.5}]

    assert pq.read_schema(d / "routing.parquet").names == ROUTING.names
    # schema v5: one row per rank, step and layer, with the per-expert counts as lists
    assert rows(d / "routing.parquet") == [
        {"rank": 0, "step": 2, "layer": 1, "tokens": [5, 3], "dropped": [1, 0], "capacity": 4, "entropy": 0.75}]

    assert pq.read_schema(d / "timing.parquet").names == TIMING.names
    assert rows(d / "timing.parquet") == [{"rank": 0, "step": 2, "phase": "all_to_all", "seconds": 0.125}]

    telemetry = [t for t in rows(d / "telemetry.parquet") if t["rank"] == 0]  # the SDK's, not the wrapper's
    assert pq.read_schema(d / "telemetry.parquet").names == TELEMETRY.names
    assert telemetry == [{"rank": 0, "time": before, "node": socket.gethostname(), "device": "gpu0",
                          "power_w": 300.5, "energy_j": 1000.0, "utilization": 0.5, "memory_bytes": 2048,
                          "sm_clock_mhz": 1980.0, "memory_clock_mhz": 2619.0, "temperature_c": 61.5,
                          "ecc_corrected": 2, "ecc_uncorrected": 0}]

    events = rows(d / "events.parquet")
    assert pq.read_schema(d / "events.parquet").names == EVENTS.names
    mine = [e for e in events if e["kind"] == "checkpoint_save_start"]
    assert len(mine) == 1 and before <= mine[0]["time"] <= after
    assert {k: v for k, v in mine[0].items() if k != "time"} == {
        "rank": 0, "kind": "checkpoint_save_start", "step": 2, "attempt": 3, "detail": json.dumps({"path": "ckpt/2"})}
    assert {e["attempt"] for e in events} == {3}  # every event carries the run's attempt number


def test_the_artifacts_list_each_table_with_its_rows(known_run: tuple[Ledger, str, float, float]) -> None:
    lg, rid, _, _ = known_run
    receipt = json.loads((lg.path(rid) / "receipt.json").read_text())
    by_path = {a["path"]: a for a in receipt["artifacts"]}
    for name in ("steps", "evals", "routing", "timing", "events", "telemetry"):
        a = by_path[f"{name}.parquet"]
        assert a["rows"] == pq.read_metadata(lg.path(rid) / a["path"]).num_rows
    assert (by_path["steps.parquet"]["rows"], by_path["routing.parquet"]["rows"]) == (2, 1)
    assert receipt["attempt"] == 3 and receipt["name"] == "known" and receipt["tags"] == {"k": "v"}


def test_ids_are_the_published_receipts_only(known_run: tuple[Ledger, str, float, float]) -> None:
    lg, rid, _, _ = known_run
    (lg.root / STAGING / ("0" * 64)).mkdir(parents=True, exist_ok=True)  # a run in progress, id-shaped
    (lg.root / "not-a-receipt").mkdir(exist_ok=True)
    assert (lg.root / STAGING).is_dir()
    assert lg.ids() == [rid]
