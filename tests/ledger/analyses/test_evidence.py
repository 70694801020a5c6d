"""What counts as a replicate: hyperparameters and unknown arguments are causes, the seed is noise."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import calibration as cal
import numpy as np
import pytest

from ledger.analyses.compare import CompareOptions, Ref, compare
from ledger.store import index
from ledger.store.layout import ARGUMENTS_FILE
from ledger.store.receipts import Ledger
from schemas.receipt import Optimizer


def _publish(ledger_dir: Path, config: str, seed: int, *, lr: float | None = None,
             arguments: dict[str, str] | None = None) -> str:
    """A synthetic run through the SDK; ``lr`` as the SDK's optimizer.lr, ``arguments`` as a wrapper that
    parsed the command line of a script that described nothing itself."""
    s = cal.series(np.random.default_rng([seed, zlib.crc32(config.encode())]), config, seed)
    original = cal.workload

    def workload(series: cal.Series) -> Any:
        w = original(series)
        if arguments is not None:  # the script reported no workload: only its arguments are known
            from schemas.receipt import Workload
            return Workload()
        return w.model_copy(update={"optimizer": Optimizer(name="adamw", lr=lr), "arguments": {}}) if lr else w

    cal.workload = workload  # type: ignore[assignment]
    try:
        if arguments is None:
            return cal.publish_run(ledger_dir, s, name=f"{config}-s{seed}")
        return _publish_with_arguments(ledger_dir, s, arguments)
    finally:
        cal.workload = original  # type: ignore[assignment]


def _publish_with_arguments(ledger_dir: Path, s: cal.Series, arguments: dict[str, str]) -> str:
    import ledger.store.publish as publish_module

    real = publish_module.publish

    def publish(ledger: Any, run_dir: Path, *args: Any, **kwargs: Any) -> Any:
        (run_dir / ARGUMENTS_FILE).write_text(json.dumps(arguments))
        return real(ledger, run_dir, *args, **kwargs)

    publish_module.publish = publish  # type: ignore[assignment]
    try:
        return cal.publish_run(ledger_dir, s, name=f"{s.config}-s{s.seed}")
    finally:
        publish_module.publish = real  # type: ignore[assignment]


def _compare(ledger_dir: Path, a: str, b: str) -> Any:
    with index.reader(Ledger(ledger_dir)) as con:
        return compare(con, Ref(a), Ref(b), CompareOptions(plugins=False))


def test_a_learning_rate_reported_through_the_sdk_is_a_hyperparameter(tmp_path: Path) -> None:
    d = tmp_path / "receipts"
    _publish(d, "x", 0, lr=1e-3)
    _publish(d, "x", 1, lr=1e-3)
    _publish(d, "y", 0, lr=3e-3)
    c = _compare(d, "x-s0", "y-s0")
    assert c.diff.factors == ["hyperparameters"]
    assert [ch.path for ch in c.diff.changed["hyperparameters"]] == ["workload.optimizer.lr"]
    assert not c.same_config
    assert c.replicates == {"A": [c.catalog.entries[c.a.ids[1]].id], "B": []}  # x-s1 is x-s0's replicate
    assert c.catalog.entries[c.a.ids[1]].name == "x-s1"
    # asked alone (nothing excluded as the other side), the other learning rate is still no replicate
    from ledger.analyses.evidence import replicates_of
    by_name = {e.name: e.id for e in c.catalog.entries.values()}
    assert replicates_of(c.catalog, by_name["x-s0"]) == [by_name["x-s1"]]
    assert replicates_of(c.catalog, by_name["y-s0"]) == []


def test_unknown_command_line_arguments_are_a_cause_never_noise(tmp_path: Path) -> None:
    d = tmp_path / "receipts"
    _publish(d, "p", 0, arguments={"lr": "1e-3", "epochs": "3"})
    _publish(d, "q", 0, arguments={"lr": "3e-3", "epochs": "3"})
    c = _compare(d, "p-s0", "q-s0")
    assert list(c.diff.changed) == ["arguments"]
    (change,) = c.diff.changed["arguments"]
    assert change.path == "workload.arguments" and change.a == {"lr": "1e-3", "epochs": "3"}
    assert change.b == {"lr": "3e-3", "epochs": "3"}
    assert not c.same_config and c.replicates == {"A": [], "B": []}
    assert {r.verdict for r in c.metrics if r.name == "tokens/s per device"} == {"inconclusive"}
    from ledger.analyses.evidence import replicates_of
    assert replicates_of(c.catalog, c.a.ids[0]) == []  # asked alone too: another lr is another configuration


def test_goodput_follows_the_between_run_rules(tmp_path: Path) -> None:
    # goodput is a measurement like throughput, not a deterministic quantity: one run per side and no floor
    # is inconclusive; with replicates it is a t test between runs
    d = tmp_path / "receipts"
    _publish(d, "x", 0)
    _publish(d, "y", 0)
    with index.reader(Ledger(d)) as con:
        one = compare(con, Ref("x-s0"), Ref("y-s0"), CompareOptions(attribution=False))
    row = next(r for r in one.metrics if r.name == "goodput")
    assert row.a != row.b and row.verdict == "inconclusive" and row.p_value is None and row.n == (1, 1)
    for seed in (1, 2):
        _publish(d, "x", seed)
        _publish(d, "y", seed)
    with index.reader(Ledger(d)) as con:
        three = compare(con, Ref("x-s0"), Ref("y-s0"), CompareOptions(attribution=False))
    row = next(r for r in three.metrics if r.name == "goodput")
    assert row.test == "t-test" and row.n == (3, 3) and row.df == 4 and row.p_value is not None


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_runs_that_did_not_complete_are_not_replicates(tmp_path: Path, status: str) -> None:
    from ledger.analyses import evidence
    from ledger.analyses.groups import Catalog

    d = tmp_path / "receipts"
    first = _publish(d, "x", 0)
    second = _publish(d, "x", 1)
    with index.reader(Ledger(d)) as con:
        catalog = Catalog.load(con)
    assert evidence.replicates_of(catalog, first) == [second]
    entry = catalog.entries[second]
    catalog.entries[second] = entry.__class__(entry.id, entry.name, entry.tags, entry.started_at,
                                              {**entry.data, "status": status}, entry.factors)
    assert evidence.replicates_of(catalog, first) == []
    catalog.entries[second] = entry.__class__(entry.id, entry.name, entry.tags, entry.started_at,
                                              {**entry.data, "links": {"attempt_of": first}}, entry.factors)
    assert evidence.replicates_of(catalog, first) == []


def test_a_run_whose_nodes_disagree_is_confounded_within(tmp_path: Path) -> None:
    from schemas.receipt import Drivers, NodeStack

    d = tmp_path / "receipts"
    nodes = (NodeStack(node_rank=0, hostname="gpu-000", drivers=Drivers(nccl="2.21.5")),
             NodeStack(node_rank=1, hostname="gpu-001", drivers=Drivers(nccl="2.19.3")))
    cal.publish_run(d, cal.series(np.random.default_rng(1), "job", 0), name="job", nodes=nodes)
    cal.publish_run(d, cal.series(np.random.default_rng(2), "other", 0), name="other")
    c = _compare(d, "job", "other")
    assert ("drivers",) in c.confounded_sets and c.node_sets == [("drivers",)]
    item = next(i for i in c.confounded() if i["factors"] == ["drivers"])
    assert item["message"] == "confounded: drivers differ between the nodes of one run"
    assert any("NCCL: 2.21.5 on node 0" in n and "2.19.3 on node 1" in n for n in c.notes)


def test_a_job_whose_nodes_disagree_is_not_one_configuration_with_its_replicate(tmp_path: Path) -> None:
    """A and B differ only in the seed, but B's node 1 ran another NCCL: B's metrics mix configurations, so
    the comparison does not call them replicates of one configuration; the difference is a confound."""
    from schemas.receipt import Drivers, NodeStack

    d = tmp_path / "receipts"
    cal.publish_run(d, cal.series(np.random.default_rng(1), "x", 0), name="agree")
    nodes = (NodeStack(node_rank=0, hostname="gpu-000", drivers=Drivers(nccl="2.21.5")),
             NodeStack(node_rank=1, hostname="gpu-001", drivers=Drivers(nccl="2.19.3")))
    cal.publish_run(d, cal.series(np.random.default_rng(2), "x", 1), name="mixed", nodes=nodes)
    c = _compare(d, "agree", "mixed")
    assert list(c.diff.factors) == ["seed"]  # the job-level stacks are one configuration...
    assert not c.same_config and not c.identical  # ...but B's nodes are not
    assert c.node_sets == [("drivers",)] and ("drivers",) in c.confounded_sets
    assert not any(r.verdict == "same configuration" for r in c.metrics)
    assert not any("replicates of one configuration" in n for n in c.notes)
    assert any("the nodes of B (mixed) differ: drivers: NCCL: 2.21.5 on node 0 (gpu-000); 2.19.3 on node 1 "
               "(gpu-001)" in n for n in c.notes)


def test_a_slurm_job_id_or_rendezvous_port_is_bookkeeping_never_a_software_change(tmp_path: Path) -> None:
    """Two replicates under Slurm always run as different jobs (job id, rendezvous port): those variables name
    the launch, not how it runs. A changed NCCL setting stays a software change."""
    from ledger.analyses import evidence
    from ledger.analyses.groups import Catalog

    d = tmp_path / "receipts"

    def run(seed: int, job: str, port: str, algo: str, name: str) -> str:
        env = {"SLURM_JOB_ID": job, "SLURM_NNODES": "2", "MASTER_PORT": port, "NCCL_ALGO": algo, "RANK": "0"}
        return cal.publish_run(d, cal.series(np.random.default_rng(seed), "x", seed), name=name, environment=env)

    j11 = run(0, "11", "29500", "Ring", "j11")
    j12 = run(1, "12", "29611", "Ring", "j12")
    run(2, "13", "29500", "Tree", "tree")
    c = _compare(d, "j11", "j12")
    assert c.diff.factors == ["seed"] and c.same_config
    (instance,) = [ch for ch in c.diff.record if ch.path == "stack.environment (launch instance)"]
    assert (instance.a, instance.b) == ({"MASTER_PORT": "29500", "RANK": "0", "SLURM_JOB_ID": "11"},
                                        {"MASTER_PORT": "29611", "RANK": "0", "SLURM_JOB_ID": "12"})
    with index.reader(Ledger(d)) as con:
        catalog = Catalog.load(con)
    assert evidence.replicates_of(catalog, j11) == [j12]  # not "tree": its NCCL setting differs
    t = _compare(d, "j11", "tree")
    assert t.diff.factors == ["software", "seed"]
    (change,) = t.diff.changed["software"]
    assert (change.path, change.a, change.b) == ("stack.environment", {"NCCL_ALGO": "Ring", "SLURM_NNODES": "2"},
                                                 {"NCCL_ALGO": "Tree", "SLURM_NNODES": "2"})


def test_node_differences_are_found_in_every_run_of_a_side_the_replicates_included(tmp_path: Path) -> None:
    """B is a clean one-node-stack receipt, but its replicate in the ledger (same configuration, another seed)
    ran on nodes that disagree: B's side mixes configurations, and compare says so."""
    from schemas.receipt import Drivers, NodeStack

    d = tmp_path / "receipts"
    cal.publish_run(d, cal.series(np.random.default_rng(1), "x", 0), name="agree")
    cal.publish_run(d, cal.series(np.random.default_rng(2), "y", 0), name="clean")
    nodes = (NodeStack(node_rank=0, hostname="gpu-000", drivers=Drivers(nccl="2.21.5")),
             NodeStack(node_rank=1, hostname="gpu-001", drivers=Drivers(nccl="2.19.3")))
    cal.publish_run(d, cal.series(np.random.default_rng(3), "y", 1), name="mixed", nodes=nodes)
    c = _compare(d, "agree", "clean")
    assert len(c.replicates["B"]) == 1 and c.catalog.entries[c.replicates["B"][0]].name == "mixed"
    assert c.node_sets == [("drivers",)] and ("drivers",) in c.confounded_sets
    assert any(n.startswith("the nodes of B (clean) differ: drivers: NCCL: 2.21.5 on node 0") for n in c.notes)
