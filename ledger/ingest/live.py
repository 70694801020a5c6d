"""Live capture: `ledger record` wrapping a Megatron-LM launch gets workload, steps, evals, timing and
routing from the launch's own output, without any SDK call in the training code.

:func:`augment` is called by the wrapper after the child exits and before the staging directory is
published. It acts only when the launch is Megatron (a ``pretrain_*.py`` script or ``megatron`` in the
command, or iteration lines in the tee'd log) and no rank wrote steps through the SDK: a training loop that
uses the SDK is the better source and is never second-guessed. It then parses the log with the importer's
parsers and writes ``rank-00000/<table>.arrows`` (only tables no rank wrote) and ``rank-00000/workload.json``
(only when no rank set a workload), so the normal publish picks them up (a node of a multi-node job writes
them under ``captured/`` instead: :func:`capture_root`). Routing comes from
``tokens_per_expert/*.jsonl`` dumps in the staging directory or in the launch's working directory
(written since the launch started).

It never raises: whatever goes wrong becomes a note, which the caller records as a receipt problem.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ledger.ingest.common import Issues, numbered_lines, write_tables
from ledger.ingest.megatron import is_iteration_line, parse_lines, routing_from_dir
from ledger.ingest.megatron_args import args_from_command, is_megatron_command, merge_args, workload_from_args
from ledger.store.layout import CAPTURED_DIR, JSONL_SUFFIX, STREAM_SUFFIX, WORKLOAD_FILE, WRAPPER_FILE, rank_dir
from ledger.store.merge import rank_dirs, read_json
from schemas import Workload

SNIFF_LINES = 20_000
"""Lines of the log read to recognise Megatron output when the command does not say so."""
SNIFF_BYTES = 8 << 20
"""Bytes of the log searched at once for the word ``iteration`` before its lines are read one by one."""


def capture_root(run_dir: Path) -> Path:
    """Where zero-code capture writes its ``rank-00000/``: the staging directory of a single run; for a node
    of a multi-node job (its wrapper.json names the job), the node's ``captured/`` directory: global rank 0
    writes its own ``rank-00000/`` on whichever node it ran, and every node may capture from its output."""
    return run_dir / CAPTURED_DIR if isinstance(_wrapper(run_dir).get("job"), dict) else run_dir


def capture_dirs(run_dir: Path) -> list[Path]:
    """Every directory a metric table of this staging directory may be in: the ranks' and the capture's."""
    dirs = [directory for _, directory in rank_dirs(run_dir)]
    if (run_dir / CAPTURED_DIR).is_dir():
        dirs += [directory for _, directory in rank_dirs(run_dir / CAPTURED_DIR)]
    return dirs


def has_table(run_dir: Path, name: str) -> bool:
    """Whether a rank (or an earlier capture) wrote rows of table ``name`` in this staging directory."""
    for directory in capture_dirs(run_dir):
        for suffix in (STREAM_SUFFIX, JSONL_SUFFIX):
            path = directory / f"{name}{suffix}"
            if path.exists() and path.stat().st_size > 0:
                return True
    return False


def _has_workload(run_dir: Path) -> bool:
    return any((directory / WORKLOAD_FILE).exists() for directory in capture_dirs(run_dir))


def looks_like_megatron(command: Sequence[str], log_path: Path) -> bool:
    """A Megatron launch by its command, or by iteration lines in its output."""
    if is_megatron_command(command):
        return True
    if not log_path.exists():
        return False
    with log_path.open("rb") as f:  # the sniffed lines without the word: no line to look at one by one
        head = f.read(SNIFF_BYTES)
        whole = not f.read(1)
    if b"iteration" not in head and (whole or head.count(b"\n") >= SNIFF_LINES):
        return False
    for lineno, raw, _ in numbered_lines(log_path):
        if lineno > SNIFF_LINES:
            break
        if is_iteration_line(raw):
            return True
    return False


def augment(run_dir: Path, command: Sequence[str], log_path: Path) -> list[str]:
    """Fill a Megatron launch's staging directory from its log; returns notes (empty when nothing to do)."""
    try:
        return _augment(Path(run_dir), list(command), Path(log_path))
    except Exception as exc:  # capture never fails the run it describes
        return [f"Megatron log capture failed: {type(exc).__name__}: {exc}"]


def _augment(run_dir: Path, command: list[str], log_path: Path) -> list[str]:
    if not looks_like_megatron(command, log_path):
        return []
    if has_table(run_dir, "steps"):
        return ["Megatron launch: steps were logged through the SDK, so the log was not parsed"]
    if not log_path.exists():
        return ["Megatron launch: no output log to parse"]
    log = parse_lines(numbered_lines(log_path), log_path.name)
    launch_args, complete = args_from_command(command)
    args = merge_args(launch_args, log.arguments())
    tables = log.tables(args)
    issues: Issues = log.issues
    started = started_at(run_dir)
    for directory in (run_dir / "tokens_per_expert", _cwd(run_dir) / "tokens_per_expert"):
        if directory.is_dir():
            tables["routing"] = routing_from_dir(directory, issues, since=started)
            break
    notes: list[str] = []
    skipped = [name for name, t in tables.items() if t.num_rows and has_table(run_dir, name)]
    target = rank_dir(capture_root(run_dir), 0)
    written = write_tables(target, {k: v for k, v in tables.items() if k not in skipped})
    if skipped:
        notes.append(f"Megatron log: {', '.join(skipped)} already written through the SDK; kept those")
    if "train_iters" not in args and log.total_iters:
        args["train_iters"] = log.total_iters
    if not _has_workload(run_dir) and (args or complete):
        workload = workload_from_args(args, complete=complete)
        if workload != Workload():
            path = target / WORKLOAD_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(workload.model_dump(mode="json"), sort_keys=True))
            written.append("workload")
    counts = ", ".join(f"{t.num_rows} {name}" for name, t in tables.items() if t.num_rows)
    notes.insert(0, f"Megatron log: {log.iteration_lines} iteration line(s) parsed"
                    + (f" ({counts})" if counts else "") + (f"; wrote {', '.join(written)}" if written else ""))
    notes.extend(f"{p.source}: {p.message}" for p in issues.problems())
    return notes


def _wrapper(run_dir: Path) -> dict[str, object]:
    data, _ = read_json(run_dir / WRAPPER_FILE)
    return data or {}


def started_at(run_dir: Path) -> float | None:
    """When the wrapper started the launch (epoch seconds), from its facts; None when unknown."""
    value = _wrapper(run_dir).get("started_at")
    try:
        return datetime.fromisoformat(str(value)).timestamp() if value else None
    except ValueError:
        return None


def _cwd(run_dir: Path) -> Path:
    return Path(str(_wrapper(run_dir).get("cwd") or run_dir))


__all__ = ["augment", "capture_dirs", "capture_root", "has_table", "looks_like_megatron", "started_at"]
