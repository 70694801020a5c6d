"""`ledger recover`: publish runs whose wrapper died, as `interrupted`, exactly once.

A staging directory is abandoned when nobody holds its lock (the wrapper holds it for its whole life and
the kernel releases it when the wrapper dies) and its child process no longer runs. Temporary
directories of publishers that died are removed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ledger.errors import BadInput
from ledger.record.nodes import runtime_merge
from ledger.record.outcome import EXIT_FILE, outcome_of, process_alive
from ledger.record.probe import merge_probe_telemetry
from ledger.store.jobs import is_job_dir, node_rank_of_dir
from ledger.store.layout import LOCK_FILE, TMP_PREFIX, WRAPPER_FILE, rank_of_dir
from ledger.store.merge import read_json
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome, StagingBusy, acquire_staging_lock


@dataclass
class Recovered:
    """What recover did with one staging directory."""

    run_uuid: str
    action: str  # published, running, skipped, failed (kept in staging: the detail says why)
    receipt_id: str | None = None
    detail: str = ""


def _last_sign_of_life(run_dir: Path) -> datetime:
    latest = run_dir.stat().st_mtime
    for root, _, files in os.walk(run_dir):
        for name in files:
            try:
                latest = max(latest, os.stat(os.path.join(root, name)).st_mtime)
            except OSError:
                pass
    return datetime.fromtimestamp(latest, UTC)


def staging_root_of(path: Path) -> Path | None:
    """The staging root that holds ``path`` when ``path`` is one run's staging directory or a part of one (a
    job's, a node's, a rank's, the wrapper's rows); None when it is not (a staging root, or any other
    directory)."""
    path = path.absolute()
    root = path
    while _in_a_run(root) and root.parent != root:
        root = root.parent
    return None if root == path else root


def _in_a_run(path: Path) -> bool:
    if any((path / name).exists() for name in (WRAPPER_FILE, LOCK_FILE, EXIT_FILE)) or is_job_dir(path):
        return True
    if rank_of_dir(path.name) is not None or node_rank_of_dir(path.name) is not None:
        return _in_a_run(path.parent)  # rank-00000/, wrapper/, node-00001/ of a run or job
    return False


def recover(ledger: Ledger, staging: Path | None = None) -> list[Recovered]:
    """Publish every abandoned run of the ledger (or of another staging root, e.g. the fallback a wrapper used
    when the ledger was not writable); report what was done with each run. ``staging`` must be a staging root,
    the directory that holds runs' staging directories: one run's own directory (the path a wrapper that could
    not publish names) or a part of it is refused with the root to give instead (recovering its parts as runs
    published bogus receipts and lost the run's steps)."""
    results: list[Recovered] = []
    root = staging or ledger.staging
    if staging is not None:
        holder = staging_root_of(staging)
        if holder is not None:
            raise BadInput(f"{staging} is one run's staging directory (or a part of one), not a staging root: give "
                           f"the directory that holds it, `ledger recover --from {holder}`")
        ledger.ensure_writable()
    if root.is_dir():
        for run_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
            try:
                results.append(_recover_one(ledger, run_dir))
            except Exception as exc:  # one staging directory never stops the recovery of the others
                results.append(Recovered(run_dir.name, "failed", detail=f"{type(exc).__name__}: {exc}"))
    _remove_stale_tmp(ledger)
    return results


def _recover_one(ledger: Ledger, run_dir: Path) -> Recovered:
    if is_job_dir(run_dir):  # a multi-node job: see ledger.record.job
        from ledger.record.job import recover_job

        action, receipt_id, detail = recover_job(ledger, run_dir)
        return Recovered(run_dir.name, action, receipt_id, detail)
    try:
        fd = acquire_staging_lock(run_dir)
    except StagingBusy:
        return Recovered(run_dir.name, "running", detail="its wrapper is alive")
    except OSError as exc:
        return Recovered(run_dir.name, "skipped", detail=str(exc))
    try:
        facts, _ = read_json(run_dir / WRAPPER_FILE)
        facts = facts or {}
        if facts.get("host") in (None, os.uname().nodename) and process_alive(
            facts.get("child_pid"), facts.get("child_start")
        ):
            return Recovered(run_dir.name, "running", detail=f"its child (pid {facts['child_pid']}) still runs")
        outcome = _outcome(run_dir)
        _capture_if_missing(run_dir, facts)
        merge_probe_telemetry(run_dir)  # the nodes `ledger probe` sampled, if any
        receipt = publish(ledger, run_dir, outcome, locked=True, runtime=runtime_merge(run_dir))
        return Recovered(run_dir.name, "published", receipt.id)
    finally:
        os.close(fd)


def _capture_if_missing(run_dir: Path, facts: dict[str, object]) -> None:
    """The metric capture of the launch's output and files when its wrapper died before doing it."""
    from ledger.ingest.launch import finish, finished

    command = facts.get("command")
    if finished(run_dir) or not isinstance(command, list):
        return
    finish(run_dir, [str(a) for a in command], Path(str(facts.get("cwd") or run_dir)))


def _outcome(run_dir: Path) -> Outcome:
    """The child's true outcome when the wrapper saw it exit (exit.json); otherwise interrupted, ended at
    the run's last sign of life."""
    done, _ = read_json(run_dir / EXIT_FILE)
    if done is not None and isinstance(done.get("returncode"), int):
        ended = datetime.fromisoformat(done["ended_at"]) if done.get("ended_at") else _last_sign_of_life(run_dir)
        return outcome_of(done["returncode"], done.get("forwarded") or [], ended)
    return Outcome(status="interrupted", ended_at=_last_sign_of_life(run_dir))


def _remove_stale_tmp(ledger: Ledger) -> None:
    """Remove .tmp-<run_uuid>-* directories whose run is no longer being published by anyone."""
    if not ledger.root.is_dir():
        return
    for tmp in ledger.root.iterdir():
        if not tmp.name.startswith(TMP_PREFIX) or not tmp.is_dir():
            continue
        run_uuid = tmp.name[len(TMP_PREFIX) :].rsplit("-", 1)[0]  # a job's staging name holds a dash
        run_dir = ledger.staging / run_uuid
        if run_dir.is_dir():
            try:
                fd = acquire_staging_lock(run_dir)
            except (StagingBusy, OSError):
                continue
            os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
