"""`ledger probe`: one node's stack, probed on that node, for a launch that one wrapper starts on many nodes.

``ledger record -- srun ...`` runs one wrapper, on the launching node: from outside it sees only that
node. Each node runs ``ledger probe`` inside the launch (``srun ... ledger probe -- python train.py``, or
a step of its own) and contributes its node's facts: the same probes the wrapper runs (code, container,
packages, drivers and GPUs through NVML, clocks, ECC, topology, CPU), written into the run's staging
directory (``$LEDGER_RUN_DIR``, which srun exports to every task) under ``probes/<node>/``. On publish,
:func:`ledger.record.nodes.merge_runtime_nodes` describes each probed node from its probe rather than from
its ranks' runtime facts alone.

While the command runs, the probing task also samples the node's telemetry (:class:`ledger.record.telemetry.
Sampler`, at the wrapper's ``--telemetry-interval``) into ``probes/<node>/`` from a forked process that
ends when the command does (:func:`sample_while_running`); before publishing, the wrapper merges every
node's samples into the run's telemetry with the node's name (:func:`merge_probe_telemetry`).

A node is named as the SDK names it (Slurm's ``SLURMD_NODENAME``, else the host name) and numbered as the
job key names it (``--node-rank``, else ``SLURM_NODEID``, else torchrun's ``GROUP_RANK``). The first task
of a node probes it; the node's other tasks find its directory taken and go on at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.errors import BadInput
from ledger.store.layout import ENV_RUN_DIR, PROBES_DIR, STACK_FILE, WRAPPER_FILE
from ledger.store.merge import read_json
from ledger.store.staging import add_problems, write_json_atomic
from schemas import Stack

if TYPE_CHECKING:
    import pyarrow as pa

PROBE_FILE = "probe.json"
"""In ``probes/<node>/``: who probed the node and when (node name, node rank, pid, time)."""
SAMPLING_FILE = "sampling"
"""In ``probes/<node>/``: written when the node's telemetry sampler starts, removed once it has closed its
files (its last sample written)."""
SAMPLER_GRACE_S = 10.0
"""How long publishing waits for the node samplers still closing (their command has ended)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ProbedNode:
    """One node's stack as `ledger probe` captured it there."""

    node_name: str
    node_rank: int | None
    stack: Stack


def node_identity(env: Mapping[str, str], node_rank: int | None = None) -> tuple[str, int | None]:
    """(node name, node rank) of this process: the names the SDK's runtime facts use, the rank the job key
    mechanism uses (:func:`ledger.record.jobkey.resolve_job`)."""
    name = env.get("SLURMD_NODENAME") or socket.gethostname()
    if node_rank is None:
        for var in ("SLURM_NODEID", "GROUP_RANK"):
            text = env.get(var, "").strip()
            if text.isdigit():
                node_rank = int(text)
                break
    return name, node_rank


def probe_dir(run_dir: Path, node_name: str) -> Path:
    """Where one node's probe lives (the name made safe for a path; a digest keeps distinct names apart)."""
    safe = _UNSAFE.sub("_", node_name)[:64] or "node"
    if safe != node_name:
        import hashlib

        safe += "-" + hashlib.sha256(node_name.encode()).hexdigest()[:8]
    return run_dir / PROBES_DIR / safe


def probe(run_dir: Path | None, env: Mapping[str, str], *, node_rank: int | None = None,
          cwd: Path | None = None, staging: Path | None = None) -> Path | None:
    """Probe this node into ``run_dir`` (default ``$LEDGER_RUN_DIR``); returns its probe directory, or
    None when another task of this node already probes it. BadInput outside a recorded launch, or when
    ``staging`` (a ledger's staging directory) is given and the run is not in it."""
    from ledger.record.capture import capture_stack
    from ledger.redact import Redactor

    if run_dir is None:
        value = env.get(ENV_RUN_DIR)
        if not value:
            raise BadInput(f"ledger probe runs inside a recorded launch (`ledger record -- srun ... ledger probe -- "
                           f"CMD`): {ENV_RUN_DIR} is not set; or give --run-dir DIR")
        run_dir = Path(value)
    if not run_dir.is_dir():
        raise BadInput(f"ledger probe: the run's staging directory {run_dir} does not exist (is the ledger on a "
                       "filesystem this node sees?)")
    if staging is not None and not run_dir.resolve().is_relative_to(staging.resolve()):
        raise BadInput(f"ledger probe: the run {run_dir} is not staged in the ledger's {staging}; probe with the "
                       "ledger the launch is recorded in (or without --ledger)")
    name, rank = node_identity(env, node_rank)
    target = probe_dir(run_dir, name)
    target.parent.mkdir(exist_ok=True)
    try:
        target.mkdir()
    except FileExistsError:
        return None  # this node's first task probes it
    redactor = Redactor(env)
    stack = capture_stack(cwd or Path.cwd(), env, [], redactor)
    write_json_atomic(target / STACK_FILE, stack.model_dump(mode="json"))
    write_json_atomic(target / PROBE_FILE, {"node_name": name, "node_rank": rank, "pid": os.getpid(),
                                            "probed_at": datetime.now(UTC).isoformat()})
    return target


def sample_while_running(target: Path, run_dir: Path) -> int | None:
    """Fork a process that samples this node's telemetry into ``target`` (a probe directory) every
    ``telemetry_interval`` seconds of the run's wrapper, until this process (which then becomes the
    command, by exec) has ended. Returns the sampler's pid, or None when the wrapper samples no telemetry
    or the fork fails (telemetry is best effort)."""
    facts, _ = read_json(run_dir / WRAPPER_FILE)
    interval = facts.get("telemetry_interval") if isinstance(facts, dict) else None
    if not isinstance(interval, int | float) or interval <= 0:
        return None
    parent = os.getpid()
    (target / SAMPLING_FILE).touch()
    try:
        pid = os.fork()
    except OSError:
        (target / SAMPLING_FILE).unlink(missing_ok=True)
        return None
    if pid:
        return pid
    code = 0
    try:  # the child: never returns into the CLI, never holds the launch's output open
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        from ledger.record.telemetry import Sampler

        sampler = Sampler(target, interval=float(interval))
        sampler.start()
        while os.getppid() == parent:  # the command runs as our parent (exec keeps its pid)
            time.sleep(min(0.2, float(interval)))
        sampler.stop()
    except BaseException:
        code = 1
    finally:
        with contextlib.suppress(OSError):
            (target / SAMPLING_FILE).unlink(missing_ok=True)
        os._exit(code)


def launching_node(run_dir: Path) -> str | None:
    """The name of the node the wrapper ran on, as its ranks and `ledger probe` name it: its Slurm node name
    (``node_name`` in wrapper.json), else the host name of its stack, else the wrapper's host."""
    facts, _ = read_json(run_dir / WRAPPER_FILE)
    stack, _ = read_json(run_dir / STACK_FILE)
    facts = facts if isinstance(facts, dict) else {}
    hardware = stack.get("hardware") if isinstance(stack, dict) else None
    host = hardware.get("hostname") if isinstance(hardware, dict) else None
    name = facts.get("node_name") or host or facts.get("host")
    return name if isinstance(name, str) else None


def merge_probe_telemetry(run_dir: Path) -> None:
    """Each probed node's telemetry into the run's, with the node's name in the ``node`` column (the
    wrapper's own rows named after the launching node, as :func:`ledger.record.nodes.runtime_merge` names
    it; that node's own probe is left out: the wrapper sampled it). Waits up to
    :data:`SAMPLER_GRACE_S` for samplers still closing. Never raises: what went wrong becomes one of the
    receipt's problems (the wrapper's own rows are then kept as they were). Called by whoever publishes
    (the wrapper, `ledger recover`), before publishing."""
    root = run_dir / PROBES_DIR
    if not root.is_dir():
        return
    try:
        _merge_probe_telemetry(run_dir, root)
    except Exception as exc:  # best effort: the run is published whatever happens here
        with contextlib.suppress(OSError):
            add_problems(run_dir, [("telemetry", f"the nodes' telemetry was not merged ({type(exc).__name__}: "
                                                 f"{exc})")])


def _merge_probe_telemetry(run_dir: Path, root: Path) -> None:
    import pyarrow as pa

    from ledger.store.layout import STREAM_SUFFIX, WRAPPER_RANK_DIR
    from ledger.store.merge import read_table
    from schemas.tables import TELEMETRY

    deadline = time.monotonic() + SAMPLER_GRACE_S
    while any(root.glob(f"*/{SAMPLING_FILE}")) and time.monotonic() < deadline:
        time.sleep(0.1)
    launching = launching_node(run_dir)
    parts = []
    for name, node in sorted(read_probes(run_dir).items()):
        if name != launching:
            table, _ = read_table(probe_dir(run_dir, name), "telemetry", ranks=(-1,))
            if table.num_rows:
                parts.append(_named(table, node.node_name))
    if not parts:
        return
    own, _ = read_table(run_dir, "telemetry", ranks=(-1,))
    target = run_dir / WRAPPER_RANK_DIR
    target.mkdir(exist_ok=True)
    merged = pa.concat_tables([_named(own, launching), *parts] if own.num_rows else parts)
    tmp = target / f"telemetry{STREAM_SUFFIX}.tmp"
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, TELEMETRY) as writer:
        writer.write_table(merged)
    tmp.replace(target / f"telemetry{STREAM_SUFFIX}")


def _named(table: pa.Table, node: object) -> pa.Table:
    import pyarrow as pa

    i = table.schema.get_field_index("node")
    return table.set_column(i, table.schema.field(i), pa.array([None if node is None else str(node)] * table.num_rows,
                                                               pa.string()))


def read_probes(run_dir: Path) -> dict[str, ProbedNode]:
    """Every node probe of a staging directory, by node name; a probe that is incomplete or unreadable
    (its node died while probing) is left out."""
    out: dict[str, ProbedNode] = {}
    root = run_dir / PROBES_DIR
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        facts, _ = read_json(d / PROBE_FILE)
        data, _ = read_json(d / STACK_FILE)
        if not isinstance(facts, dict) or not isinstance(data, dict) or not facts.get("node_name"):
            continue
        try:
            stack = Stack.model_validate(data)
        except ValueError:
            continue
        rank = facts.get("node_rank")
        out[str(facts["node_name"])] = ProbedNode(str(facts["node_name"]), rank if isinstance(rank, int) else None,
                                                  stack)
    return out


def describe(path: Path | None) -> str:
    """The line `ledger probe` prints."""
    if path is None:
        return "ledger probe: this node is already probed by another of its tasks"
    facts = json.loads((path / PROBE_FILE).read_text())
    return f"ledger probe: node {facts['node_name']} (node rank {facts['node_rank']}) probed into {path}"


__all__ = ["ProbedNode", "describe", "launching_node", "merge_probe_telemetry", "node_identity", "probe", "probe_dir",
           "read_probes", "sample_while_running"]
