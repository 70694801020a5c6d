"""Where things live: the ledger directory and a run's staging directory.

Ledger directory (``./receipts``, ``$LEDGER_DIR`` or ``--ledger DIR``)::

    receipts/
      <64-hex id>/            one published receipt (immutable): receipt.json, <table>.parquet, output.log
      .staging/<run_uuid>/    a run in progress ($LEDGER_RUN_DIR); removed once published
      .tmp-<uuid>/            a receipt being assembled; renamed into place atomically
      index.duckdb            derived index (rebuildable with `ledger reindex`)

Staging directory of one run::

    wrapper.json              the wrapper's facts (pid, host, command, links...), written at launch
    lock                      flock'ed by the wrapper while it lives, then by whoever publishes
    stack.json                stack captured by the wrapper
    output.log                tee'd stdout+stderr of the child, secrets redacted
    arguments.json            the launch's own arguments and config-file keys, flat (redacted)
    capture.json              where each metric table and the configuration came from
    rank-00000/               one directory per rank (SDK), no locks needed
      steps.arrows ...        Arrow IPC streams, one per metric table (the SDK's format)
      <table>.jsonl           alternatively, one JSON object per line (any language can write these)
      workload.json           set_workload()
      runtime.json            report_runtime()
    wrapper/                  samples taken by the wrapper itself (telemetry)
    captured/rank-00000/      a node of a multi-node job: what zero-code capture took from that node's
                              output (kept apart from the ranks' own directories; see ledger.record.job)
    probes/<node>/            `ledger probe` on each node of a launch like `ledger record -- srun ...`:
                              stack.json and probe.json of that node (see ledger.record.probe)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV_RUN_DIR = "LEDGER_RUN_DIR"
"""Exported to the child: the staging directory the SDK writes into."""
ENV_LEDGER_DIR = "LEDGER_DIR"
"""Overrides the default ledger directory ./receipts."""
ENV_RUN_ATTEMPT = "LEDGER_ATTEMPT"
"""Exported to the child: the attempt number of this run."""

STAGING = ".staging"
TMP_PREFIX = ".tmp-"
INDEX = "index.duckdb"
RECEIPT_FILE = "receipt.json"
LOG_FILE = "output.log"
WRAPPER_FILE = "wrapper.json"
LOCK_FILE = "lock"
STACK_FILE = "stack.json"
WORKLOAD_FILE = "workload.json"
RUNTIME_FILE = "runtime.json"
ARGUMENTS_FILE = "arguments.json"
"""In the staging directory: the launch's own arguments, flat ``{"key": "value"}`` (written by the wrapper)."""
CAPTURE_FILE = "capture.json"
"""In the staging directory: where `ledger record` took each metric table and the configuration from (written
by :mod:`ledger.ingest.launch`; published as ``receipt.capture``)."""
WRAPPER_RANK_DIR = "wrapper"
CAPTURED_DIR = "captured"
"""In a job node's staging directory: a run-shaped directory holding what zero-code capture took from the
node's output. Global rank 0 may have run on any node, so the capture of each node cannot go to
``rank-00000/`` of its node: the job's assembly picks from the nodes' captures (:mod:`ledger.record.job`)."""
PROBES_DIR = "probes"
"""In a staging directory: one directory per node that ran `ledger probe` (:mod:`ledger.record.probe`)."""
STREAM_SUFFIX = ".arrows"
JSONL_SUFFIX = ".jsonl"

ID_RE = re.compile(r"^[0-9a-f]{64}$")
_RANK_RE = re.compile(r"rank-([0-9]{1,9})", re.ASCII)
"""ASCII digits only: ``str.isdigit`` accepts ``¹`` and other characters ``int`` refuses."""


def ledger_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ledger directory: the explicit one, else $LEDGER_DIR, else ./receipts."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_LEDGER_DIR)
    return Path(env) if env else Path("receipts")


def rank_dir(run_dir: Path, rank: int) -> Path:
    """Directory one rank writes into."""
    return run_dir / (WRAPPER_RANK_DIR if rank < 0 else f"rank-{rank:05d}")


def rank_of_dir(name: str) -> int | None:
    """Inverse of :func:`rank_dir`'s last component; None for directories that are not rank dirs."""
    if name == WRAPPER_RANK_DIR:
        return -1
    m = _RANK_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def is_receipt_dir(path: Path) -> bool:
    """True for a published receipt directory name (64 hex characters)."""
    return bool(ID_RE.match(path.name))
