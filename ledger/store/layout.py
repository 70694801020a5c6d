"""Where things live: the ledger directory and a run's staging directory.

Ledger directory (``./receipts``, ``$LEDGER_DIR`` or ``--ledger DIR``)::

    receipts/
      <ab>/<64-hex id>/       one published receipt (immutable): receipt.json, <table>.parquet, output.log,
                              in the shard named by the id's first two hex digits (256 shards: 100,000
                              receipts make about 400 entries a directory); the empty tables of receipts
                              published in one group (ledger.store.publish.publish_many) are hard links to
                              one file (same bytes, each listed with its digest in each receipt)
      <64-hex id>/            the same in the old flat layout: still read in place, moved into its shard by
                              `ledger reindex --migrate`
      journal                 the ids published here, one a line, appended after each publish (append-only)
      .staging/<run_uuid>/    a run in progress ($LEDGER_RUN_DIR); removed once published
      .tmp-<uuid>/            a receipt being assembled; renamed into place atomically
      index.duckdb            derived index (rebuildable with `ledger reindex`)
      index.readers           locked by readers of the index (publishers give way to them)
      index.publishers        locked by publishers while they publish (readers then answer from the index
                              as it is rather than index a flood of receipts themselves)
      .cache/fingerprints/    what each immutable table file holds, keyed by its sha256 (a cache: deleting
                              it only costs the time to recompute; see ledger.store.agreement)

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
CACHE = ".cache"
RECEIPT_FILE = "receipt.json"
LOG_FILE = "output.log"
LOG_DIGEST_FILE = "output.log.sha256"
"""In the staging directory: the sha256 of ``output.log`` as the output tee wrote it, with its size and
modification time (:func:`ledger.store.integrity.recorded_sha256`), so publishing does not read the log again."""
LIVE_FILE = "live.json"
"""In the staging directory: what the output's capture read so far (:mod:`ledger.ingest.formats.trail`), for
``ledger watch`` and the live page of a wrapped launch."""
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
STREAM_COMPRESSION = "zstd"
"""The buffer compression of the Arrow IPC streams the wrapper and the importers write into staging (the capture's
tables, a job's merged tables); readers decompress any stream transparently, so the SDK's streams (written in the
training process, uncompressed) and streams of older versions read the same. A step table is mostly null columns:
1,474,310 captured steps were 252 MB of stream uncompressed (written in 0.71 s, read back in 0.90 s) and 15 MB with
zstd (0.13 s and 0.16 s)."""
JSONL_SUFFIX = ".jsonl"

READERS_GATE = "index.readers"
"""In the ledger directory: ``flock``'ed (shared) by readers of the index while they wait and read;
publishers that find it held leave the index to them."""
PUBLISHERS_GATE = "index.publishers"
"""In the ledger directory: ``flock``'ed (shared) by each publish while it runs
(:func:`ledger.store.journal.publishing`)."""
INDEX_STAMP = "index.written"
"""In the ledger directory: the index file's size and modification time as ledger last left it, and whether the
index is unverified (:func:`ledger.store.index.unverified`): an index changed by anything else is said to be so
until ``ledger verify`` finds it true or ``ledger reindex`` rebuilds it."""
JOURNAL = "journal"
"""In the ledger directory: one published id a line, appended once the receipt is in place."""
SHARD_CHARS = 2
"""Receipts live in ``<root>/<id[:SHARD_CHARS]>/<id>/``."""

ID_RE = re.compile(r"^[0-9a-f]{64}$")
SHARD_RE = re.compile(rf"^[0-9a-f]{{{SHARD_CHARS}}}$")
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


def receipt_dir(root: Path, receipt_id: str) -> Path:
    """Where a receipt is published: its shard (``<root>/<id[:2]>/<id>``)."""
    return root / receipt_id[:SHARD_CHARS] / receipt_id


def find_receipt_dir(root: Path, receipt_id: str) -> Path:
    """The directory of a published receipt in either layout: its shard, else the old flat place (looked at
    once more in the shard, for a receipt moved by a migration meanwhile); the shard when it is in neither."""
    sharded = receipt_dir(root, receipt_id)
    for candidate in (sharded, root / receipt_id, sharded):
        if candidate.is_dir():
            return candidate
    return sharded


def is_shard_dir(name: str) -> bool:
    """True for a shard directory name (two hex digits)."""
    return bool(SHARD_RE.match(name))


def listdir(path: Path) -> list[str]:
    """Names in a directory; none when it does not exist (any more)."""
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def flat_ids(root: Path) -> list[str]:
    """Ids of the receipts in the old flat layout (directly under the ledger directory)."""
    return [n for n in listdir(root) if ID_RE.match(n) and (root / n).is_dir()]


def shard_ids(root: Path, shard: str) -> list[str]:
    """Ids of the receipts in one shard."""
    return [n for n in listdir(root / shard) if ID_RE.match(n) and n.startswith(shard)]


def shards(root: Path) -> list[str]:
    """Names of the shard directories of a ledger."""
    return sorted(n for n in listdir(root) if SHARD_RE.match(n))
