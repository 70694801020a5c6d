"""Every node's stack, the differences between nodes, and which launches form a multi-node job."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import sdk
from ledger.analyses.nodes import node_differences
from ledger.errors import BadInput
from ledger.record.jobkey import Job, JobOptions, resolve_job
from ledger.record.nodes import differences, merge_runtime_nodes, package_delta, runtime_merge
from schemas import Drivers, Factor, NodeStack, Package, Receipt, Software, Stack


def _node(k: int, **kw: object) -> NodeStack:
    return NodeStack(node_rank=k, hostname=f"gpu-{k:03d}", **kw)  # type: ignore[arg-type]


def test_differences_are_named_by_factor_and_node() -> None:
    same = {"python": "3.11.7", "code_commit": "abc", "gpu_model": "NVIDIA H200"}
    nodes = [
        _node(0, drivers=Drivers(nccl="2.21.5", gpu_driver="570.1"), container_digest="sha256:aa", **same),
        _node(1, drivers=Drivers(nccl="2.21.5", gpu_driver="570.1"), container_digest="sha256:aa", **same),
        _node(2, drivers=Drivers(nccl="2.19.3", gpu_driver="570.1"), container_digest="sha256:bb",
              code_digest="d1ff", **same),
    ]
    found = differences(nodes)
    assert (Factor.DRIVERS, "NCCL: 2.21.5 on node 0 (gpu-000), node 1 (gpu-001); 2.19.3 on node 2 (gpu-002)") in found
    assert (Factor.CONTAINER, "container digest: sha256:aa on node 0 (gpu-000), node 1 (gpu-001); "
                              "sha256:bb on node 2 (gpu-002)") in found
    assert (Factor.CODE, "code digest: clean on node 0 (gpu-000), node 1 (gpu-001); d1ff on node 2 (gpu-002)") in found
    assert {f for f, _ in found} == {Factor.DRIVERS, Factor.CONTAINER, Factor.CODE}  # python, GPU agree
    # unknown facts (a lost node that reported nothing) are not differences
    assert differences([nodes[0], _node(3, status="lost")]) == []


def test_package_differences_name_the_packages() -> None:
    job = Software(packages=(Package(name="a", version="1"), Package(name="b", version="2")), packages_digest="x")
    other = Software(packages=(Package(name="a", version="1"), Package(name="b", version="3"),
                               Package(name="c", version="1")), packages_digest="y")
    assert package_delta(other, job) == {"b": "3", "c": "1"}
    assert package_delta(job, job) == {}
    nodes = [_node(0, packages_digest="x"), _node(1, packages_digest="y", packages={"b": "3", "c": "1"})]
    receipt = Receipt(run_uuid="u", status="succeeded", stack=Stack(software=job, nodes=tuple(nodes)))
    assert node_differences(receipt) == [
        (Factor.SOFTWARE, "packages: b 2 on node 0 (gpu-000); 3 on node 1 (gpu-001) | "
                          "c absent on node 0 (gpu-000); 1 on node 1 (gpu-001)")
    ]
    assert node_differences(Receipt(run_uuid="u", status="succeeded")) == []


@pytest.mark.slow  # sdk.runtime_facts() imports torch: ~10 s on a loaded 2-core machine
def test_one_wrapper_over_srun_gets_nodes_from_the_ranks_runtime_facts() -> None:
    """`ledger record -- srun ...`: this process's real facts for the launching node's ranks, the same
    facts with another node name and NCCL for the other node's."""
    here = sdk.runtime_facts()
    there = dict(here, host="gpu-002", node_name="gpu-002", node_rank=1, nccl="2.19.3")
    launching = Stack(software=Software(python="3.11.7"))
    launching = launching.model_copy(update={"hardware": launching.hardware.model_copy(
        update={"hostname": here["host"]})})
    mine = dict(here, node_rank=0, node_name=None, nccl="2.21.5")
    stack, notes = merge_runtime_nodes(launching, {0: mine, 1: mine, 2: there, 3: there})
    assert [(n.node_rank, n.hostname, n.ranks) for n in stack.nodes] == [
        (0, here["host"], (0, 1)), (1, "gpu-002", (2, 3))]
    assert stack.nodes[1].detail and "runtime facts" in stack.nodes[1].detail
    assert stack.nodes[0].detail is None
    assert "nodes differ in NCCL: 2.21.5 on node 0" in " ".join(notes)
    # one node: nothing added, as before
    single, _ = merge_runtime_nodes(launching, {0: mine, 1: mine})
    assert single.nodes == ()


SLURM = {"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3", "SLURM_NNODES": "4", "SLURM_STEP_NUM_NODES": "2",
         "SLURM_NODEID": "1", "SLURMD_NODENAME": "gpu-007"}


@pytest.mark.parametrize(
    ("opts", "env", "expected"),
    [
        (None, {}, None),
        (None, {**SLURM, "SLURM_STEP_NUM_NODES": "1"}, None),  # a one-node step: the single-run path
        (None, {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}, None),  # the batch script itself
        (None, {**SLURM, "SLURM_STEP_ID": "4294967294"}, None),  # Slurm's batch step id
        (None, SLURM, ("slurm:77.3", 1, 2, "gpu-007")),
        (None, {"TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2"}, None),
        (None, {"TORCHELASTIC_RUN_ID": "r1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "SLURMD_NODENAME": "n"},
         ("torchelastic:r1", 1, 2, "n")),
        (JobOptions(key="k", node_rank=0, nnodes=3), {}, ("k", 0, 3, None)),
        (JobOptions(key="k", node_rank=0, nnodes=1), {}, ("k", 0, 1, None)),
    ],
)
def test_job_key_from_options_or_environment(opts: JobOptions | None, env: dict[str, str],
                                             expected: tuple[str, int, int, str | None] | None) -> None:
    job = resolve_job(opts, env)
    if expected is None:
        assert job is None
    else:
        assert job is not None
        assert (job.key, job.node_rank, job.nnodes) == expected[:3]
        if expected[3]:
            assert job.node_name == expected[3]


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (JobOptions(key="k", node_rank=0), "--nnodes"),
        (JobOptions(key="k", nnodes=2), "--node-rank"),
        (JobOptions(key="k", node_rank=2, nnodes=2), "outside 0..1"),
        (JobOptions(node_rank=1, nnodes=2), "--job KEY"),
        (JobOptions(key="k", node_rank=0, nnodes=2, timeout_s=0), "--job-timeout"),
    ],
)
def test_bad_job_options_are_one_line_errors(opts: JobOptions, message: str) -> None:
    with pytest.raises(BadInput, match=message.replace(".", r"\.")):
        resolve_job(opts, {})


def test_a_node_rank_claimed_twice_is_refused(tmp_path: Path) -> None:
    def job(k: int) -> Job:
        found = resolve_job(JobOptions(key="k", node_rank=k, nnodes=2), {})
        assert found is not None
        return found

    first = job(1)
    node = first.claim(tmp_path)
    assert node.name == "node-00001" and node.parent.name.startswith("job-")
    with pytest.raises(BadInput, match="node 1 is already staged"):
        job(1).claim(tmp_path)
    lead = job(0)
    lead.claim(tmp_path)  # node 0 holds the job's lock while it lives
    with pytest.raises(BadInput, match="already runs as node 0"):
        job(0).claim(tmp_path)
    lead.release()


def test_clocks_ecc_and_topology_differences_are_hardware_findings() -> None:
    from ledger.record.nodes import node_stack
    from schemas import Hardware
    from schemas.receipt import Gpu

    def hw(sm: int, ecc: bool, errors: int, governor: str | None) -> Hardware:
        gpus = tuple(Gpu(index=i, sm_clock_app_mhz=sm if i else 1980, sm_clock_max_mhz=1980, mem_clock_app_mhz=2619,
                         ecc_enabled=ecc if i else True, ecc_uncorrected=errors if i else 0) for i in range(2))
        return Hardware(gpus=gpus, gpu_topology=("0-1 NV18",), cpu_sockets=2, numa_nodes=2, threads_per_core=2,
                        cpu_governor=governor, cpu_max_mhz=3700)

    n0 = node_stack(Stack(hardware=hw(1980, True, 0, "performance")), node_rank=0, hostname="gpu-000")
    n1 = node_stack(Stack(hardware=hw(1755, False, 3, "powersave")), node_rank=1, hostname="gpu-001")
    bare = node_stack(Stack(), node_rank=2, hostname="gpu-002")  # nothing probed there: not available
    assert n0.gpu_clocks == "SM 1980 MHz (max 1980), memory 2619 MHz" and n0.ecc == "on" and n0.ecc_errors == 0
    assert n1.gpu_clocks == ("mixed: SM 1755 MHz (max 1980), memory 2619 MHz on GPU 1; "
                             "SM 1980 MHz (max 1980), memory 2619 MHz on GPU 0")
    assert n1.ecc == "mixed: off on GPU 1; on on GPU 0" and n1.ecc_errors == 3
    assert n0.gpu_topology == "NV18 (1 pair)" and n0.cpu_topology == "2 sockets, 2 NUMA nodes, 2 threads per core"
    assert (bare.gpu_clocks, bare.ecc, bare.ecc_errors, bare.gpu_topology, bare.cpu_governor) == (None,) * 5
    found = dict((text.split(":")[0], (factor, text)) for factor, text in differences([n0, n1, bare]))
    assert set(found) == {"GPU clocks", "ECC", "uncorrected ECC errors", "CPU frequency governor"}
    assert all(factor is Factor.HARDWARE for factor, _ in found.values())
    assert found["CPU frequency governor"][1] == ("CPU frequency governor: performance on node 0 (gpu-000); "
                                                  "powersave on node 1 (gpu-001)")
    assert found["uncorrected ECC errors"][1] == "uncorrected ECC errors: 0 on node 0 (gpu-000); 3 on node 1 (gpu-001)"


def test_show_says_not_available_for_hardware_facts_a_node_could_not_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ledger.cli.app import cli
    from ledger.report.console import console
    from ledger.store.publish import publish
    from ledger.store.receipts import Ledger
    from ledger.store.staging import Outcome
    from schemas import Hardware

    run = tmp_path / "receipts" / ".staging" / "run"
    run.mkdir(parents=True)
    nodes = (_node(0, cpu_governor="performance", gpu_clocks="SM 1980 MHz"), _node(1))
    (run / "stack.json").write_text(Stack(hardware=Hardware(hostname="gpu-000"), nodes=nodes).model_dump_json())
    (run / "wrapper.json").write_text('{"run_uuid": "run", "name": "two-nodes"}')
    publish(Ledger(tmp_path / "receipts"), run, Outcome(status="succeeded", exit_code=0))
    monkeypatch.setattr(console, "width", 200)  # a wide terminal: cells on one line
    out = CliRunner().invoke(cli, ["--ledger", str(tmp_path / "receipts"), "show", "two-nodes"])
    assert out.exit_code == 0, out.output
    hardware = out.output.split("node hardware")[1]
    assert "performance" in hardware and "not available" in hardware
    assert "CPU frequency governor: performance on node 0 (gpu-000)" not in out.output  # unknown is no difference


DRIVERS = {"gpu_driver": "570.124", "cuda_driver": "12.8", "cuda_runtime": "12.6"}


@pytest.mark.parametrize(
    ("planted", "factor", "text"),
    [
        ({"drivers": Drivers(**{**DRIVERS, "gpu_driver": "570.86"})}, Factor.DRIVERS,
         "GPU driver: 570.124 on node 0 (gpu-000); 570.86"),
        ({"drivers": Drivers(**{**DRIVERS, "cuda_driver": "12.7"})}, Factor.DRIVERS,
         "CUDA driver: 12.8 on node 0 (gpu-000); 12.7"),
        ({"drivers": Drivers(**{**DRIVERS, "cuda_runtime": "12.4"})}, Factor.DRIVERS,
         "CUDA runtime: 12.6 on node 0 (gpu-000); 12.4"),
        ({"gpu_model": "NVIDIA H100 80GB HBM3"}, Factor.HARDWARE,
         "GPU model: NVIDIA H200 on node 0 (gpu-000); NVIDIA H100 80GB HBM3"),
        ({"gpu_topology": "PIX (1 pair)"}, Factor.HARDWARE, "GPU topology: NV18 (1 pair) on node 0 (gpu-000); PIX"),
    ],
)
def test_each_named_fact_that_differs_on_one_node_is_a_finding_of_its_factor(
    planted: dict[str, object], factor: Factor, text: str
) -> None:
    """The issue's list (driver, CUDA, GPU model, topology; NCCL, packages, container, code, clocks and ECC
    above): node 1 differs from node 0 in one fact, and that one fact is named with the expected factor."""
    base: dict[str, object] = {"drivers": Drivers(**DRIVERS), "gpu_model": "NVIDIA H200",
                               "gpu_topology": "NV18 (1 pair)"}
    found = differences([_node(0, **base), _node(1, **{**base, **planted})])
    assert len(found) == 1 and found[0][0] is factor and found[0][1].startswith(text)
    assert found[0][1].endswith(" on node 1 (gpu-001)")


def test_the_launching_node_is_found_by_its_slurm_node_name_when_the_host_name_differs(tmp_path: Path) -> None:
    """`ledger record -- srun ...` from a batch script on gpu-000 whose host name is another (a cluster
    whose Slurm node names are not host names): the ranks name their node gpu-000, and so does the wrapper
    (SLURMD_NODENAME), so that node is described by the wrapper's own probes, not as a node nobody probed."""
    launching = Stack(software=Software(python="3.11.7"))
    launching = launching.model_copy(update={"hardware": launching.hardware.model_copy(
        update={"hostname": "n0017.cluster.example"})})
    facts = {r: {"host": f"n00{17 + r // 2}.cluster.example", "node_name": f"gpu-00{r // 2}", "node_rank": r // 2,
                 "python": "3.11.7"} for r in range(4)}
    (tmp_path / "wrapper.json").write_text('{"node_name": "gpu-000"}')  # what the wrapper wrote on gpu-000
    stack, _ = runtime_merge(tmp_path)(launching, facts)
    assert [(n.node_rank, n.hostname, n.ranks, n.detail) for n in stack.nodes][0] == (0, "gpu-000", (0, 1), None)
    assert stack.nodes[1].detail and "runtime facts" in stack.nodes[1].detail
    without, _ = merge_runtime_nodes(launching, facts)  # the host name alone does not find it
    assert all(n.detail and "runtime facts" in n.detail for n in without.nodes)
