"""Every node's stack in a multi-node receipt, and the differences between nodes, named by factor.

Two sources, one per launch shape:

- ``srun ledger record -- torchrun ...`` (a wrapper per node): each node's wrapper captured its own stack
  (``node-<k>/stack.json``: code, container, drivers from NVML, hardware, packages) and the ranks that
  ran there reported their runtime facts; :func:`node_stack` folds them into one :class:`NodeStack`.
- ``ledger record -- srun ...`` (one wrapper): only the launching node was probed from outside. The other
  nodes are described from the SDK's runtime facts of their ranks (``runtime.json``: host, Slurm node
  name and id, Python, packages, torch, CUDA runtime, NCCL, cuDNN, devices), grouped by node:
  :func:`merge_runtime_nodes`. Not captured there: the GPU driver version and NVML facts, the container,
  the code tree and the CPU of nodes other than the launching one (their fields stay None, never a
  guess), nor the telemetry of nodes whose ranks do not sample it through the SDK.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.record.capture import merge_runtime
from schemas import Factor, Hardware, NodeStack, Software, Stack
from schemas.receipt import Gpu

if TYPE_CHECKING:
    from ledger.record.probe import ProbedNode

MAX_PACKAGES_NAMED = 10


def node_stack(
    stack: Stack,
    *,
    node_rank: int | None,
    hostname: str | None,
    ranks: Sequence[int] = (),
    status: str = "ended",
    detail: str | None = None,
    exit_code: int | None = None,
    reference: Software | None = None,
) -> NodeStack:
    """One node's entry from its stack (already merged with its ranks' runtime facts). ``reference``: the
    job's software, against which the node's differing packages are listed."""
    software = stack.software
    return NodeStack(
        node_rank=node_rank,
        hostname=hostname,
        status=status,  # type: ignore[arg-type]
        detail=detail,
        ranks=tuple(sorted(ranks)),
        exit_code=exit_code,
        drivers=stack.drivers,
        python=software.python,
        torch=software.torch,
        packages_digest=software.packages_digest,
        packages=package_delta(software, reference) if reference is not None else {},
        container_image=stack.container.image,
        container_digest=stack.container.digest,
        code_commit=stack.code.commit,
        code_digest=stack.code.diff_digest,
        gpu_model=stack.hardware.gpu_model,
        gpu_count=stack.hardware.gpu_count if stack.hardware.gpu_count or stack.hardware.nvml else None,
        cpu_model=stack.hardware.cpu_model,
        **hardware_summary(stack.hardware),
    )


def _mixed(by_value: Mapping[str, list[int]]) -> str | None:
    """One value, or 'mixed: A on GPUs 0, 1; B on GPU 2' when the GPUs of a node differ."""
    if len(by_value) <= 1:
        return next(iter(by_value), None)
    return "mixed: " + "; ".join(f"{v} on GPU{'s' if len(ix) > 1 else ''} {', '.join(map(str, ix))}"
                                 for v, ix in sorted(by_value.items()))


def _gpu_clock(g: Gpu) -> str | None:
    parts = []
    if g.sm_clock_app_mhz is not None or g.sm_clock_max_mhz is not None:
        sm = f"SM {g.sm_clock_app_mhz} MHz" if g.sm_clock_app_mhz is not None else "SM"
        parts.append(sm + (f" (max {g.sm_clock_max_mhz})" if g.sm_clock_max_mhz is not None else ""))
    if g.mem_clock_app_mhz is not None:
        parts.append(f"memory {g.mem_clock_app_mhz} MHz")
    return ", ".join(parts) or None


def hardware_summary(hw: Hardware) -> dict[str, Any]:
    """The node-level clocks, ECC and topology facts of one node's hardware (:class:`NodeStack` fields):
    None wherever the node's probe could not tell (no NVML, no cpufreq)."""
    clocks: dict[str, list[int]] = defaultdict(list)
    ecc: dict[str, list[int]] = defaultdict(list)
    for g in hw.gpus:
        clock = _gpu_clock(g)
        if clock:
            clocks[clock].append(g.index)
        if g.ecc_enabled is not None:
            ecc["on" if g.ecc_enabled else "off"].append(g.index)
    errors = [g.ecc_uncorrected for g in hw.gpus if g.ecc_uncorrected is not None]
    kinds = Counter(pair.split(" ", 1)[1] for pair in hw.gpu_topology if " " in pair)
    cpu = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in (
        (hw.cpu_sockets, "socket"), (hw.numa_nodes, "NUMA node")) if n is not None]
    if hw.threads_per_core is not None:
        cpu.append(f"{hw.threads_per_core} thread{'s' if hw.threads_per_core != 1 else ''} per core")
    return {
        "gpu_clocks": _mixed(clocks),
        "ecc": _mixed(ecc),
        "ecc_errors": sum(errors) if errors else None,
        "gpu_topology": "; ".join(f"{k} ({n} pair{'s' if n != 1 else ''})" for k, n in sorted(kinds.items()))
        or None,
        "cpu_topology": ", ".join(cpu) or None,
        "cpu_governor": hw.cpu_governor,
        "cpu_max_mhz": hw.cpu_max_mhz,
    }


def package_delta(software: Software, reference: Software) -> dict[str, str]:
    """Packages whose version differs from the reference's (name -> version here; "" when absent here).
    Empty when either side has no listing or the digests agree."""
    if not software.packages or not reference.packages or software.packages_digest == reference.packages_digest:
        return {}
    mine = {p.name: p.version for p in software.packages}
    theirs = {p.name: p.version for p in reference.packages}
    return {name: mine.get(name, "") for name in sorted(mine.keys() | theirs.keys())
            if mine.get(name) != theirs.get(name)}


def node_key(facts: Mapping[str, Any]) -> str | None:
    """Which node a rank ran on, from its runtime facts: the Slurm node name, else the host name."""
    name = facts.get("node_name") or facts.get("host")
    return str(name) if name else None


def merge_runtime_nodes(stack: Stack, facts_by_rank: Mapping[int, Mapping[str, Any]],
                        probes: Mapping[str, ProbedNode] | None = None,
                        launching: str | None = None) -> tuple[Stack, list[str]]:
    """:func:`ledger.record.capture.merge_runtime`, plus ``stack.nodes`` when the ranks ran on several
    nodes under one wrapper (``ledger record -- srun ...``): each node described from what `ledger probe`
    captured on it (``probes``, by node name; :mod:`ledger.record.probe`) and its ranks' runtime facts, the
    launching node also from the wrapper's own probes. A stack that already lists its nodes (a job staged
    by a wrapper per node) keeps them. Notes name the differences between nodes.
    ``launching``: the Slurm node name of the node the wrapper ran on (else its host name is used)."""
    merged, notes = merge_runtime(stack, facts_by_rank)
    if stack.nodes:
        return merged, notes
    probes = probes or {}
    groups: dict[str, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for rank, facts in facts_by_rank.items():
        if rank >= 0 and isinstance(facts, Mapping) and node_key(facts):
            groups[str(node_key(facts))][rank] = facts
    for name in probes:
        groups.setdefault(name, {})
    if len(groups) < 2:
        return merged, notes
    # the launching node by the name its ranks use: Slurm's node name when the wrapper saw one
    launching = launching or stack.hardware.hostname
    nodes = []
    for name, group in groups.items():
        here = name == launching
        probed = probes.get(name)
        base = stack if here else probed.stack if probed else Stack(hardware=Hardware(hostname=name))
        node, _ = merge_runtime(base, group) if group else (base, [])
        ids = {f.get("node_rank") for f in group.values()}
        node_rank = ids.pop() if len(ids) == 1 and isinstance(next(iter(ids), None), int) else None
        if node_rank is None and probed is not None:
            node_rank = probed.node_rank
        if here:
            detail = None
        elif probed is not None:
            detail = "probed on the node by `ledger probe`" + ("" if group else "; no rank reported runtime facts")
        else:
            detail = ("from its ranks' runtime facts (no wrapper or `ledger probe` on this node: GPU driver, "
                      "container, code and CPU not captured)")
        nodes.append(node_stack(node, node_rank=node_rank, hostname=name, ranks=list(group), detail=detail,
                                reference=merged.software))
    nodes.sort(key=lambda n: (n.node_rank is None, n.node_rank or 0, min(n.ranks or (0,)), n.hostname or ""))
    observed = set(merged.hardware.nodes_observed) | set(probes)
    merged = merged.model_copy(update={"nodes": tuple(nodes), "hardware": merged.hardware.model_copy(
        update={"nodes_observed": tuple(sorted(observed))})})
    return merged, notes + [f"nodes differ in {d}" for _, d in differences(nodes, merged.software)]


def runtime_merge(run_dir: Path) -> Callable[[Stack, Mapping[int, Mapping[str, Any]]], tuple[Stack, list[str]]]:
    """The runtime merge for publishing one staging directory: :func:`merge_runtime_nodes` with the node
    probes `ledger probe` left in it."""
    from ledger.record.probe import launching_node, read_probes

    return partial(merge_runtime_nodes, probes=read_probes(run_dir), launching=launching_node(run_dir))


# --------------------------------------------------------------------------------------- differences
_FACTS: tuple[tuple[str, Factor, Callable[[NodeStack], Any]], ...] = (
    ("GPU driver", Factor.DRIVERS, lambda n: n.drivers.gpu_driver),
    ("CUDA driver", Factor.DRIVERS, lambda n: n.drivers.cuda_driver),
    ("CUDA runtime", Factor.DRIVERS, lambda n: n.drivers.cuda_runtime),
    ("NCCL", Factor.DRIVERS, lambda n: n.drivers.nccl),
    ("cuDNN", Factor.DRIVERS, lambda n: n.drivers.cudnn),
    ("python", Factor.SOFTWARE, lambda n: n.python),
    ("torch", Factor.SOFTWARE, lambda n: n.torch),
    ("container image", Factor.CONTAINER, lambda n: n.container_image),
    ("container digest", Factor.CONTAINER, lambda n: n.container_digest),
    ("code commit", Factor.CODE, lambda n: n.code_commit),
    ("code digest", Factor.CODE, lambda n: n.code_digest or ("clean" if n.code_commit else None)),
    ("GPU model", Factor.HARDWARE, lambda n: n.gpu_model),
    ("GPU count", Factor.HARDWARE, lambda n: n.gpu_count),
    ("CPU model", Factor.HARDWARE, lambda n: n.cpu_model),
    ("GPU clocks", Factor.HARDWARE, lambda n: n.gpu_clocks),
    ("ECC", Factor.HARDWARE, lambda n: n.ecc),
    ("uncorrected ECC errors", Factor.HARDWARE, lambda n: n.ecc_errors),
    ("GPU topology", Factor.HARDWARE, lambda n: n.gpu_topology),
    ("CPU topology", Factor.HARDWARE, lambda n: n.cpu_topology),
    ("CPU frequency governor", Factor.HARDWARE, lambda n: n.cpu_governor),
    ("CPU max MHz", Factor.HARDWARE, lambda n: n.cpu_max_mhz),
)
"""What must agree between the nodes of a job: (name, factor, how to read it from a node)."""


def _label(node: NodeStack) -> str:
    rank = "?" if node.node_rank is None else str(node.node_rank)
    return f"node {rank} ({node.hostname})" if node.hostname else f"node {rank}"


def differences(nodes: Sequence[NodeStack], reference: Software | None = None) -> list[tuple[Factor, str]]:
    """(factor, description) for every fact on which the nodes disagree; nodes that do not know a fact
    (None) are left out of it. Packages are named (up to ten) when the node entries list them;
    ``reference``: the job's software, the version a node has when its entry lists no difference."""
    out: list[tuple[Factor, str]] = []
    for name, factor, read in _FACTS:
        by_value: dict[Any, list[NodeStack]] = defaultdict(list)
        for node in nodes:
            value = read(node)
            if value is not None:
                by_value[value].append(node)
        if len(by_value) > 1:
            parts = [f"{value} on {', '.join(_label(n) for n in group)}" for value, group in by_value.items()]
            out.append((factor, f"{name}: " + "; ".join(parts)))
    digests = {n.packages_digest for n in nodes if n.packages_digest}
    if len(digests) > 1:
        out.append((Factor.SOFTWARE, "packages: " + _package_text(nodes, reference)))
    return out


def _package_text(nodes: Sequence[NodeStack], reference: Software | None) -> str:
    base = {p.name: p.version for p in reference.packages} if reference is not None else {}
    names = sorted({name for n in nodes for name in n.packages})
    if not names:
        groups: dict[str, list[NodeStack]] = defaultdict(list)
        for n in nodes:
            if n.packages_digest:
                groups[n.packages_digest[:12]].append(n)
        return "package sets differ (digest " + "; ".join(
            f"{d} on {', '.join(_label(n) for n in g)}" for d, g in groups.items()) + ")"
    parts = []
    for name in names[:MAX_PACKAGES_NAMED]:
        by_version: dict[str, list[NodeStack]] = defaultdict(list)
        for n in nodes:
            if n.packages_digest:
                by_version[n.packages.get(name, base.get(name, "")) or "absent"].append(n)
        parts.append(f"{name} " + "; ".join(f"{v} on {', '.join(_label(n) for n in g)}"
                                             for v, g in by_version.items()))
    more = f" (and {len(names) - MAX_PACKAGES_NAMED} more)" if len(names) > MAX_PACKAGES_NAMED else ""
    return " | ".join(parts) + more
