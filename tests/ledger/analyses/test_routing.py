"""Routing in the list layout (a row per (rank, step, layer), counts by expert): the SDK's rows survive
staging, publishing and the index unchanged; the DuckDB summaries (per (step, layer), per layer, the binned
heatmap) equal a brute-force numpy computation of DESIGN.md's definitions on a small planted-imbalance
receipt; and a receipt written with the long layout (tests/fixtures/long_routing) still verifies, indexes
and summarises the same way."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import ledger.sdk as sdk
from ledger.analyses.routing import layer_summaries
from ledger.analyses.series import imbalanced_layers, load_run, routing_matrices
from ledger.store import index
from ledger.store.agreement import check_involved
from ledger.store.layout import STACK_FILE, WRAPPER_FILE
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "long_routing"
STEPS, LAYERS, EXPERTS, CAPACITY = 12, 3, 8, 40
START = datetime(2026, 12, 1, tzinfo=UTC)


def _publish(ledger: Ledger, log: Any, name: str) -> str:
    run_dir = ledger.staging / uuid.uuid4().hex
    log(run_dir)
    (run_dir / STACK_FILE).write_text("{}")
    (run_dir / WRAPPER_FILE).write_text(json.dumps({"name": name, "run_uuid": run_dir.name, "attempt": 1,
                                                    "started_at": START.isoformat(), "command": ["train"]}))
    return publish(ledger, run_dir, Outcome("succeeded", 0, None, START + timedelta(seconds=STEPS))).id


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One receipt whose layer 1 sends 40% of its tokens to expert 5; counts as numpy arrays, drops capped
    by a capacity, one rank."""
    rng = np.random.default_rng(7)
    probs = np.full((LAYERS, EXPERTS), 1 / EXPERTS)
    probs[1] = 0.6 / (EXPERTS - 1)
    probs[1, 5] = 0.4
    n = np.stack([[rng.multinomial(256, probs[lay]) for lay in range(LAYERS)] for _ in range(STEPS)])  # S x L x E
    d = np.maximum(n - CAPACITY, 0)
    h = rng.uniform(0.5, 1.0, (STEPS, LAYERS))

    def log(run_dir: Path) -> None:
        run = sdk.Run(run_dir, rank=0, background=False)
        for s in range(STEPS):
            run.log_step(s + 1, loss=1.0, step_time_s=0.1, time=START.timestamp() + s + 1)
            for lay in range(LAYERS):
                run.log_routing(s + 1, lay, n[s, lay], dropped=d[s, lay], capacity=CAPACITY, entropy=h[s, lay])
        run.close()

    root = tmp_path_factory.mktemp("routing")
    ledger = Ledger(root / "receipts")
    ledger.ensure_writable()
    rid = _publish(ledger, log, "planted")
    return {"ledger": ledger, "id": rid, "n": n, "d": d, "h": h}


def _expected_per_step(n: np.ndarray, d: np.ndarray, slots: np.ndarray) -> dict[str, np.ndarray]:
    """DESIGN.md's definitions, by hand, for arrays S x L x E (slots: S x L, E x C)."""
    e = n.shape[-1]
    mean = n.sum(-1) / e
    q = n / n.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(q > 0, q * np.log(q), 0.0)
    return {"cv": n.std(-1) / mean, "max_mean": n.max(-1) / mean, "load_entropy": -plogp.sum(-1) / np.log(e),
            "waste": (slots - (n - d).sum(-1)) / slots, "dominant": n.argmax(-1), "n_sum": n.sum(-1),
            "d_sum": d.sum(-1)}


def test_sdk_rows_reach_the_index_as_lists(planted: dict[str, Any]) -> None:
    ledger, rid, n, d = planted["ledger"], planted["id"], planted["n"], planted["d"]
    with index.reader(ledger) as con:
        rows = con.execute("SELECT step, layer, tokens, dropped, capacity FROM routing WHERE receipt_id = ? "
                           "ORDER BY step, layer", [rid]).fetchall()
        long = con.execute("SELECT step, layer, expert, tokens FROM routing_experts WHERE receipt_id = ? "
                           "ORDER BY step, layer, expert", [rid]).fetchall()
    assert len(rows) == STEPS * LAYERS
    assert [r[2] for r in rows] == n.reshape(-1, EXPERTS).tolist()
    assert [r[3] for r in rows] == d.reshape(-1, EXPERTS).tolist()
    assert {r[4] for r in rows} == {CAPACITY}
    assert [r[3] for r in long] == n.ravel().tolist() and long[EXPERTS + 1][:3] == (1, 1, 1)
    assert ledger.load(rid).summary.routing_rows == STEPS * LAYERS


def test_summaries_match_brute_force(planted: dict[str, Any]) -> None:
    ledger, rid, n, d, h = planted["ledger"], planted["id"], planted["n"], planted["d"], planted["h"]
    want = _expected_per_step(n, d, np.full((STEPS, LAYERS), EXPERTS * CAPACITY, dtype=np.float64))
    with index.reader(ledger) as con:
        r = load_run(con, rid).routing
        per_layer = layer_summaries(con, rid)
        late = layer_summaries(con, rid, first_step=7)
        heat = routing_matrices(con, rid, max_bins=5)
        worst = imbalanced_layers(con, rid, 1)
    mean = r["n_sum"] / r["experts"]
    np.testing.assert_allclose(r["n_std"] / mean, want["cv"].ravel(), rtol=1e-12)
    np.testing.assert_allclose(r["n_max"] / mean, want["max_mean"].ravel(), rtol=1e-12)
    np.testing.assert_allclose((np.log(r["n_sum"]) - r["n_log_n"] / r["n_sum"]) / np.log(r["experts"]),
                               want["load_entropy"].ravel(), rtol=1e-12)
    np.testing.assert_allclose((r["c_sum"] - (r["n_sum"] - r["d_sum"])) / r["c_sum"], want["waste"].ravel())
    np.testing.assert_array_equal(r["dominant"], want["dominant"].ravel())
    np.testing.assert_allclose(r["entropy"], h.ravel())

    np.testing.assert_array_equal(per_layer["layer"], np.arange(LAYERS))
    np.testing.assert_allclose(per_layer["load_cv"], want["cv"].mean(0), rtol=1e-12)
    np.testing.assert_allclose(per_layer["max_mean"], want["max_mean"].mean(0), rtol=1e-12)
    np.testing.assert_allclose(per_layer["load_entropy"], want["load_entropy"].mean(0), rtol=1e-12)
    np.testing.assert_allclose(per_layer["dropped_fraction"], want["d_sum"].sum(0) / want["n_sum"].sum(0))
    np.testing.assert_allclose(per_layer["capacity_waste"], want["waste"].mean(0))
    np.testing.assert_allclose(per_layer["router_entropy"], h.mean(0))
    for lay in range(LAYERS):
        experts, hits = np.unique(want["dominant"][:, lay], return_counts=True)
        best = experts[hits == hits.max()].min()
        assert per_layer["dominant_expert"][lay] == best
        assert per_layer["dominant_frequency"][lay] == pytest.approx(hits.max() / STEPS)
    assert per_layer["dominant_expert"][1] == 5 and per_layer["dominant_frequency"][1] > 0.9  # the planted one
    assert worst == [int(np.argmax(want["cv"].mean(0)))] == [1]
    np.testing.assert_allclose(late["load_cv"], want["cv"][6:].mean(0), rtol=1e-12)

    edges = np.linspace(0, STEPS, 6).astype(np.int64)  # 12 steps in 5 bins, as numpy splits them
    for lay in range(LAYERS):
        grid = np.add.reduceat(n[:, lay, :].T.astype(np.float64), edges[:-1], axis=1)
        np.testing.assert_allclose(heat[lay]["load"], grid / grid.mean(0, keepdims=True))
        np.testing.assert_array_equal(heat[lay]["step"], edges[:-1] + 1)


def test_a_receipt_of_long_rows_still_reads(tmp_path: Path) -> None:
    (rid_dir,) = [p for p in FIXTURE.iterdir() if p.is_dir()]
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    shutil.copytree(rid_dir, ledger.root / rid_dir.name)
    rid = rid_dir.name
    long = pq.read_table(rid_dir / "routing.parquet").to_pydict()
    assert "expert" in long  # the fixture really is of the old layout
    n = np.zeros((6, 2, 4))  # steps x layers x experts, summed over the two ranks
    d = np.zeros((6, 2, 4))
    slots = np.zeros((6, 2))
    for step, layer, expert, tokens, dropped, capacity in zip(
            *(long[c] for c in ("step", "layer", "expert", "tokens", "dropped", "capacity")), strict=True):
        n[step - 1, layer, expert] += tokens
        d[step - 1, layer, expert] += dropped or 0
        slots[step - 1, layer] += capacity or 0
    slots[slots == 0] = np.nan
    want = _expected_per_step(n, d, slots)
    with index.reader(ledger) as con:
        check_involved(ledger, con, [rid])  # the index holds exactly what the long file says
        per_rank = con.execute("SELECT count(*), min(len(tokens)), max(len(tokens)) FROM routing").fetchone()
        r = load_run(con, rid).routing
        per_layer = layer_summaries(con, rid)
    assert per_rank == (24, 4, 4)  # 2 ranks x 6 steps x 2 layers; rank 1's missing expert 3 filled with 0
    np.testing.assert_allclose(r["n_std"] / (r["n_sum"] / 4), want["cv"].ravel(), rtol=1e-12)
    np.testing.assert_array_equal(r["dominant"], want["dominant"].ravel())
    np.testing.assert_allclose(r["d_sum"], want["d_sum"].ravel())
    np.testing.assert_allclose(per_layer["capacity_waste"], [want["waste"][:, 0].mean(), np.nan])  # 1: no capacity
    assert per_layer["dominant_expert"][0] == 0  # layer 0 was planted on expert 0


def test_sdk_copies_counts_and_leaves_out_only_bad_rows(tmp_path: Path) -> None:
    from ledger.store.merge import read_table

    run = sdk.Run(tmp_path, rank=0, background=False)
    counts = np.array([5, 0, 7], dtype=np.int32)
    run.log_routing(1, 0, counts, dropped=np.array([1, 0, 2]), capacity=6, entropy=np.float32(0.5))
    counts[:] = 99  # the training loop reuses its buffer: what was logged stays logged
    run.flush()  # a batch of numpy rows only (the concatenating path)
    run.log_routing(2, 0, [4.0, 4, 4])  # integral floats are counts
    run.log_routing(2, 1, ["x", 1, 2])  # not counts: this row only is left out, and named
    run.log_routing(3, 0, np.array([1, 2, 3]))
    run.close()
    rows, problems = read_table(tmp_path, "routing")
    assert not problems
    assert [(r["step"], r["layer"], r["tokens"], r["dropped"], r["capacity"]) for r in rows.to_pylist()] == [
        (1, 0, [5, 0, 7], [1, 0, 2], 6), (2, 0, [4, 4, 4], None, None), (3, 0, [1, 2, 3], None, None)]
    assert "step 2 layer 1" in (tmp_path / "rank-00000" / "sdk_errors.log").read_text()
    with pytest.raises(ValueError, match="dropped has 2 entries"):
        run.log_routing(4, 0, [1, 2, 3], dropped=[0, 1])
