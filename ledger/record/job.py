"""One receipt per multi-node job: the wrappers of one job stage together and node 0 publishes once.

``srun --ntasks-per-node 1 ledger record -- torchrun --nnodes N ...`` starts one wrapper per node. They
find each other by a **job key**: ``--job KEY`` (with ``--node-rank`` and ``--nnodes``), else Slurm's
``SLURM_JOB_ID`` + ``SLURM_STEP_ID`` (node rank ``SLURM_NODEID``, nodes ``SLURM_STEP_NUM_NODES`` or
``SLURM_NNODES``), else torchrun's ``TORCHELASTIC_RUN_ID`` (a wrapper started by torchrun on each node:
``GROUP_RANK``, ``GROUP_WORLD_SIZE``). A launch on one node keeps the single-run path.

Each wrapper stages its node into ``.staging/job-<digest>/node-<k>/`` (:mod:`ledger.store.jobs`): the
training processes it starts write their global rank directories there. When a node's launch ends its
wrapper writes everything it has and marks the node ended. Node 0 then waits for the other nodes — until
each has ended, its wrapper is gone (its lock is free: it was killed), or ``--job-timeout`` seconds have
passed — records those that never ended as lost (keeping whatever they wrote), assembles the job
directory into one staging directory (:func:`assemble`) and publishes it, exactly once. Node 0's wrapper
holds the job's lock for its whole life; if it is killed, ``ledger recover`` publishes the job
(:func:`recover_job`) once no node's wrapper is alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from ledger.errors import LedgerError
from ledger.record.jobkey import Job
from ledger.record.outcome import EXIT_FILE, outcome_of, process_alive, say
from ledger.store.jobs import has_ended, mark_ended, node_dir, node_dirs
from ledger.store.layout import (
    ARGUMENTS_FILE,
    CAPTURE_FILE,
    CAPTURED_DIR,
    JSONL_SUFFIX,
    LOG_FILE,
    RUNTIME_FILE,
    STACK_FILE,
    STREAM_COMPRESSION,
    STREAM_SUFFIX,
    WORKLOAD_FILE,
    WRAPPER_FILE,
    WRAPPER_RANK_DIR,
    rank_dir,
)
from ledger.store.merge import odd_rank_dirs, rank_dirs, read_json, read_table
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import PROBLEMS_FILE, Outcome, StagingBusy, acquire_staging_lock, write_json_atomic
from schemas import NodeStack, Receipt, Stack
from schemas.tables import TABLES

Redact = Callable[[str], str]
POLL_S = 0.5


# ------------------------------------------------------------------------------------------ node state
@dataclass(frozen=True)
class NodeState:
    """How one expected node of the job stands when node 0 (or recover) publishes."""

    node_rank: int
    dir: Path
    ended: bool
    detail: str | None = None
    """Why a node that did not end is lost."""


def _wrapper_gone(node: Path) -> bool:
    """True when the node's wrapper started (wrapper.json) and no longer holds its lock."""
    if not (node / WRAPPER_FILE).exists():
        return False
    try:
        fd = acquire_staging_lock(node)
    except StagingBusy:
        return False
    except OSError:
        return False
    os.close(fd)
    return not has_ended(node)  # it may have ended between the two looks


def wait_for_nodes(job: Path, nnodes: int, timeout_s: float, *, wait: bool = True) -> list[NodeState]:
    """Each expected node's state once every node has ended or is gone, or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = []
        for k in range(nnodes):
            d = node_dir(job, k)
            if has_ended(d):
                states.append(NodeState(k, d, True))
            elif _wrapper_gone(d):
                states.append(NodeState(k, d, False, "its wrapper died before the node ended"))
            else:
                states.append(NodeState(k, d, False))
        pending = [s for s in states if not s.ended and s.detail is None]
        if not pending or not wait or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    out = []
    for s in states:
        if s.ended or s.detail:
            out.append(s)
        elif (s.dir / WRAPPER_FILE).exists():
            why = f"did not end within {timeout_s:g} s of node 0 (--job-timeout)" if wait else "had not ended"
            out.append(NodeState(s.node_rank, s.dir, False, why))
        else:
            out.append(NodeState(s.node_rank, s.dir, False, "never reported (no wrapper staged this node)"))
    return out


def _node_outcome(node: Path) -> Outcome | None:
    done, _ = read_json(node / EXIT_FILE)
    if done is None or not isinstance(done.get("returncode"), int):
        return None
    ended = datetime.fromisoformat(done["ended_at"]) if done.get("ended_at") else None
    return outcome_of(done["returncode"], done.get("forwarded") or [], ended)


def job_outcome(states: list[NodeState]) -> Outcome:
    """The job's outcome: failed when a node failed or was lost, interrupted when a node was interrupted
    (and none failed), else succeeded. The exit code and signal are those of the lowest node that did not
    succeed; the end is the last node's end."""
    outcomes = {s.node_rank: _node_outcome(s.dir) for s in states}
    ends = [o.ended_at for o in outcomes.values() if o is not None and o.ended_at is not None]
    ended = max(ends) if ends else datetime.now(UTC)
    bad = [(k, o) for k, o in sorted(outcomes.items()) if o is not None and o.status != "succeeded"]
    lost = [s for s in states if not s.ended]
    if any(o.status == "failed" for _, o in bad) or lost:
        status = "failed"
    elif bad:
        status = "interrupted"
    else:
        status = "succeeded"
    first = bad[0][1] if bad else outcomes.get(0)
    exit_code = first.exit_code if first is not None else None
    return Outcome(status=status, exit_code=exit_code, signal=first.signal if first else None, ended_at=ended)


# -------------------------------------------------------------------------------------------- assembly
def _node_name(node: Path, k: int) -> str | None:
    facts, _ = read_json(node / WRAPPER_FILE)
    if not facts:
        return None
    job = facts.get("job")
    name = (job.get("node_name") if isinstance(job, dict) else None) or facts.get("host")
    return str(name) if name else None


def _redact_json(data: Any, redact: Redact) -> Any:
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, list):
        return [_redact_json(v, redact) for v in data]
    if isinstance(data, dict):
        return {redact(str(k)): _redact_json(v, redact) for k, v in data.items()}
    return data


def _read_stack(node: Path, notes: list[tuple[str, str]]) -> Stack:
    data, problem = read_json(node / STACK_FILE)
    if problem:
        notes.append((f"{node.name}/{problem.source}", problem.message))
    try:
        return Stack.model_validate(data) if data else Stack()
    except ValueError as exc:
        notes.append((f"{node.name}/{STACK_FILE}", f"invalid: {str(exc).splitlines()[0]}"))
        return Stack()


def _runtime(node: Path, redact: Redact) -> dict[int, dict[str, Any]]:
    facts = {}
    for rank, d in rank_dirs(node):
        data, _ = read_json(d / RUNTIME_FILE)
        if rank >= 0 and data is not None:
            facts[rank] = _redact_json(data, redact)
    return facts


def assemble(job: Path, states: list[NodeState], redact: Redact) -> list[NodeStack]:
    """Turn the job directory into one single-run staging directory that :func:`publish` reads: rank
    directories linked from their nodes, the nodes' own rows (telemetry) with their node names, one log,
    node 0's wrapper facts and stack with every node's stack, and problems naming lost nodes and the
    differences between nodes. Idempotent (``ledger recover`` may assemble again). Returns the nodes."""
    from ledger.record.capture import merge_runtime
    from ledger.record.nodes import differences, node_stack

    notes: list[tuple[str, str]] = []
    present = [s for s in states if s.dir.is_dir()]
    # rank directories: linked (relative links: the shared filesystem may be mounted elsewhere)
    owner: dict[str, int] = {}
    for s in present:
        notes += [(f"{s.dir.name}/{p.source}", p.message) for p in odd_rank_dirs(s.dir)]
        for rank, d in rank_dirs(s.dir):
            if rank < 0:
                continue
            link = job / d.name
            if d.name in owner:
                notes.append(("nodes", f"{d.name} was written on node {owner[d.name]} and node {s.node_rank}; "
                                       f"kept node {owner[d.name]}'s"))
                continue
            owner[d.name] = s.node_rank
            if link.is_symlink():
                link.unlink()
            elif link.exists():
                shutil.rmtree(link)
            link.symlink_to(Path(s.dir.name) / d.name, target_is_directory=True)
    captured, capture_node = _pick_captures(job, present, notes)
    _merge_wrapper_rows(job, present, notes, captured)
    _merge_logs(job, present)
    # wrapper facts: node 0's (else the lowest node's), started at the first node's start
    wrappers = [w for w in (read_json(s.dir / WRAPPER_FILE)[0] for s in present) if w]
    if wrappers:
        first = dict(wrappers[0])
        starts = [str(w["started_at"]) for w in wrappers if w.get("started_at")]
        if starts:
            first["started_at"] = min(starts, key=datetime.fromisoformat)
        write_json_atomic(job / WRAPPER_FILE, first)
    for name in (ARGUMENTS_FILE, CAPTURE_FILE):  # node 0's (the lowest node's) launch arguments; the capture
        source = capture_node if name == CAPTURE_FILE and capture_node is not None else next(iter(present), None)
        if source is not None and (source.dir / name).exists():  # facts of the node whose capture was kept
            shutil.copyfile(source.dir / name, job / name)
    # every node's stack
    all_facts: dict[int, dict[str, Any]] = {}
    per_node: dict[int, tuple[Stack, dict[int, dict[str, Any]]]] = {}
    for s in present:
        runtime = _runtime(s.dir, redact)
        per_node[s.node_rank] = (_read_stack(s.dir, notes), runtime)
        for rank, f in runtime.items():
            all_facts.setdefault(rank, f)
    base = per_node[min(per_node)][0] if per_node else Stack()
    reference = merge_runtime(base, all_facts)[0].software
    nodes = []
    for s in states:
        stack, runtime = per_node.get(s.node_rank, (Stack(), {}))
        merged = merge_runtime(stack, runtime)[0] if runtime else stack
        outcome = _node_outcome(s.dir)
        ranks = sorted(r for r, d in rank_dirs(s.dir) if r >= 0) if s.dir.is_dir() else []
        nodes.append(node_stack(merged, node_rank=s.node_rank, hostname=_node_name(s.dir, s.node_rank),
                                ranks=ranks, status="ended" if s.ended else "lost", detail=s.detail,
                                exit_code=outcome.exit_code if outcome else None, reference=reference))
    observed = set(base.hardware.nodes_observed) | {n.hostname for n in nodes if n.hostname and n.status == "ended"}
    hardware = base.hardware.model_copy(update={"nodes_observed": tuple(sorted(observed))})
    job_stack = base.model_copy(update={"nodes": tuple(nodes), "hardware": hardware})
    write_json_atomic(job / STACK_FILE, job_stack.model_dump(mode="json"))
    for n in nodes:
        if n.status == "lost":
            kept = f"; kept what it wrote (ranks {', '.join(map(str, n.ranks))})" if n.ranks else ""
            notes.append(("nodes", f"node {n.node_rank} ({n.hostname or 'unknown host'}) lost: {n.detail}{kept}"))
    notes += [("nodes", f"nodes differ in {d}") for _, d in differences(nodes, reference)]
    # problems: the nodes' own notes, then the job's (rewritten, not appended: assembly may run twice)
    lines = []
    for s in present:
        path = s.dir / PROBLEMS_FILE
        for line in (path.read_text(errors="replace").splitlines() if path.exists() else []):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                item = json.loads(line)
                lines.append({"source": f"{s.dir.name}/{item['source']}", "message": str(item["message"])})
    lines += [{"source": src, "message": redact(msg)} for src, msg in notes]
    (job / PROBLEMS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines))
    return nodes


def _pick_captures(job: Path, present: list[NodeState], notes: list[tuple[str, str]],
                   ) -> tuple[dict[str, Any], NodeState | None]:
    """What the nodes' zero-code captures (``node-<k>/captured/``) give the job: each metric table that no
    rank of any node wrote, from the lowest node whose output gave it, and the workload when no rank set
    one. Returns ({table name: table, "workload": path}, the node whose capture gave the steps (else any
    table)). Every other node's capture of a table is left out, with a note saying so."""
    ranks = [d for rank, d in rank_dirs(job) if rank >= 0]  # the job's wrapper/ may hold an earlier pick

    def ranks_wrote(name: str) -> bool:
        return any((d / f"{name}{suffix}").exists() and (d / f"{name}{suffix}").stat().st_size > 0
                   for d in ranks for suffix in (STREAM_SUFFIX, JSONL_SUFFIX))

    picked: dict[str, Any] = {}
    source: dict[str, int] = {}
    first: NodeState | None = None
    has_workload = any((d / WORKLOAD_FILE).exists() for d in ranks)
    for s in present:
        root = s.dir / CAPTURED_DIR
        if not root.is_dir():
            continue
        for name in TABLES:
            table, problems = read_table(root, name)
            notes += [(f"{s.dir.name}/{CAPTURED_DIR}/{p.source}", p.message) for p in problems]
            if not table.num_rows:
                continue
            if ranks_wrote(name):
                notes.append(("capture", f"node {s.node_rank}'s output also gave {table.num_rows} {name} row(s); "
                                         "the ranks' own were kept"))
            elif name in picked:
                notes.append(("capture", f"node {s.node_rank}'s output also gave {table.num_rows} {name} row(s); "
                                         f"node {source[name]}'s were kept"))
            else:
                picked[name], source[name] = table, s.node_rank
                first = first or s
        workload = rank_dir(root, 0) / WORKLOAD_FILE
        if not has_workload and "workload" not in picked and workload.exists():
            picked["workload"] = workload
    by_rank = {s.node_rank: s for s in present}
    steps_node = by_rank.get(source["steps"]) if "steps" in source else None
    return picked, steps_node or first


def _merge_wrapper_rows(job: Path, present: list[NodeState], notes: list[tuple[str, str]],
                        captured: dict[str, Any] | None = None) -> None:
    """Rows the node wrappers wrote themselves (telemetry of each node), into the job's wrapper
    directory, with each node's name in the telemetry's ``node`` column; with them the tables and the
    workload picked from the nodes' captures (:func:`_pick_captures`)."""
    captured = captured or {}
    target = job / WRAPPER_RANK_DIR
    if target.exists():
        shutil.rmtree(target)
    if isinstance(captured.get("workload"), Path):
        target.mkdir()
        shutil.copyfile(captured["workload"], target / WORKLOAD_FILE)
    for name, schema in TABLES.items():
        parts = [captured[name]] if isinstance(captured.get(name), pa.Table) else []
        for s in present:
            if not (s.dir / WRAPPER_RANK_DIR).is_dir():
                continue
            table, problems = read_table(s.dir, name, ranks=(-1,))
            notes += [(f"{s.dir.name}/{p.source}", p.message) for p in problems]
            node = _node_name(s.dir, s.node_rank)
            if name == "telemetry" and table.num_rows and node:
                i = table.schema.get_field_index("node")
                table = table.set_column(i, table.schema.field(i), pa.array([node] * table.num_rows, pa.string()))
            if table.num_rows:
                parts.append(table)
        if parts:
            target.mkdir(exist_ok=True)
            options = pa.ipc.IpcWriteOptions(compression=STREAM_COMPRESSION)
            with pa.OSFile(str(target / f"{name}{STREAM_SUFFIX}"), "wb") as sink, \
                    pa.ipc.new_stream(sink, schema, options=options) as writer:
                writer.write_table(pa.concat_tables(parts))


def _merge_logs(job: Path, present: list[NodeState]) -> None:
    """One output.log: each node's, in node order, under a header line."""
    logs = [s for s in present if (s.dir / LOG_FILE).exists()]
    if not logs:
        return
    with open(job / LOG_FILE, "wb") as out:
        for s in logs:
            out.write(f"==> node {s.node_rank} ({_node_name(s.dir, s.node_rank) or 'unknown host'}) <==\n".encode())
            with open(s.dir / LOG_FILE, "rb") as f:
                shutil.copyfileobj(f, out)


# --------------------------------------------------------------------------------- end of one node
def finish(ledger: Ledger, job: Job, node: Path, redact: Redact, err: IO[bytes]) -> Receipt | None:
    """Called by a node's wrapper after its launch ended and it wrote everything: mark the node ended;
    node 0 then waits for the others, assembles and publishes (returns the receipt); other nodes return
    None. Raises what :func:`publish` raises (the wrapper then points at `ledger recover`)."""
    from ledger.record.nodes import merge_runtime_nodes

    try:
        mark_ended(node)
    except OSError:
        if job.node_rank == 0:
            raise
        say(err, f"ledger: node {job.node_rank} of job {job.key}: the job was published without it "
                  f"(node 0 waited {job.timeout_s:g} s); what it wrote since is not in the receipt")
        return None
    if job.node_rank != 0:
        say(err, f"ledger: node {job.node_rank} of job {job.key} staged in {node}; node 0 publishes the receipt")
        return None
    assert job.dir is not None
    others = job.nnodes - 1
    if others:
        say(err, f"ledger: node 0 of job {job.key}: waiting up to {job.timeout_s:g} s for {others} other node(s)")
    states = wait_for_nodes(job.dir, job.nnodes, job.timeout_s)
    try:
        try:
            assemble(job.dir, states, redact)
        except (ValueError, TypeError, pa.ArrowException) as exc:  # the data stays staged for `ledger recover`
            raise LedgerError(f"assembling job {job.key!r} failed: {type(exc).__name__}: {exc}") from exc
        return publish(ledger, job.dir, job_outcome(states), redact=redact, locked=True, runtime=merge_runtime_nodes)
    finally:
        job.release()


def recover_job(ledger: Ledger, job: Path) -> tuple[str, str | None, str]:
    """Publish a job whose node-0 wrapper died, once no node's wrapper or launch still runs:
    (action, receipt id, detail) with action published, running or skipped."""
    from ledger.record.nodes import merge_runtime_nodes

    try:
        fd = acquire_staging_lock(job)
    except StagingBusy:
        return "running", None, "its node-0 wrapper is alive"
    except OSError as exc:
        return "skipped", None, str(exc)
    try:
        nnodes = 0
        for k, d in node_dirs(job):
            try:
                busy = acquire_staging_lock(d)
                os.close(busy)
            except StagingBusy:
                return "running", None, f"node {k}'s wrapper is alive"
            facts, _ = read_json(d / WRAPPER_FILE)
            facts = facts or {}
            if facts.get("host") in (None, os.uname().nodename) and process_alive(
                facts.get("child_pid"), facts.get("child_start")
            ):
                return "running", None, f"node {k}'s launch (pid {facts['child_pid']}) still runs"
            declared = (facts.get("job") or {}).get("nnodes") if isinstance(facts.get("job"), dict) else None
            nnodes = max(nnodes, k + 1, declared if isinstance(declared, int) else 0)
        if nnodes == 0:
            shutil.rmtree(job, ignore_errors=True)
            return "skipped", None, "no node had staged anything; removed"
        states = wait_for_nodes(job, nnodes, 0.0, wait=False)
        redact = _default_redactor()
        assemble(job, states, redact)
        receipt = publish(ledger, job, job_outcome(states), redact=redact, locked=True, runtime=merge_runtime_nodes)
        lost = [s.node_rank for s in states if not s.ended]
        return "published", receipt.id, f"job of {nnodes} nodes" + (f"; lost: nodes {lost}" if lost else "")
    finally:
        os.close(fd)


def _default_redactor() -> Redact:
    from ledger.redact import Redactor

    return Redactor(os.environ).text
