"""Where the wrappers of one multi-node job stage: one directory per job, one per node inside it.

Layout (under the ledger's ``.staging/``, which must be on a filesystem every node sees)::

    job-<16 hex of sha256(key)>/     the job; published as one receipt, then removed
      lock                           flock'ed by node 0's wrapper for its whole life, then by the publisher
      node-00000/                    one node's staging directory (a single run's layout: wrapper.json,
        wrapper.json ...             stack.json, output.log, exit.json, rank-NNNNN/ of the global ranks
        rank-00000/ ...              that ran there, wrapper/ with the node's telemetry)
        ENDED                        written by the node's wrapper once it has written everything
      node-00001/ ...

Node 0 assembles the job directory into a single-run staging directory (rank directories linked from the
nodes, merged log, telemetry and problems, the job's stack with every node's) and publishes it with
:func:`ledger.store.publish.publish`, which keeps its exactly-once guarantee (the lock, and the id it marks
the staging directory with).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

JOB_PREFIX = "job-"
NODE_PREFIX = "node-"
ENDED_MARK = "ENDED"
"""In a node directory: the node's wrapper finished writing (its child had ended)."""


def job_digest(key: str) -> str:
    """The job directory's name part for a job key (the key itself may hold any character)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def job_dir(staging: Path, key: str) -> Path:
    """The staging directory of the job with this key."""
    return staging / f"{JOB_PREFIX}{job_digest(key)}"


def node_dir(job: Path, node_rank: int) -> Path:
    """The staging directory of one node of a job."""
    return job / f"{NODE_PREFIX}{node_rank:05d}"


def node_rank_of_dir(name: str) -> int | None:
    """Inverse of :func:`node_dir`'s last component."""
    if name.startswith(NODE_PREFIX) and name[len(NODE_PREFIX):].isdigit():
        return int(name[len(NODE_PREFIX):])
    return None


def node_dirs(job: Path) -> list[tuple[int, Path]]:
    """(node rank, directory) of every node directory of a job, by node rank."""
    found = []
    if job.is_dir():
        for child in job.iterdir():
            rank = node_rank_of_dir(child.name)
            if rank is not None and child.is_dir():
                found.append((rank, child))
    return sorted(found)


def is_job_dir(path: Path) -> bool:
    """True for a job's staging directory (as opposed to a single run's)."""
    return path.name.startswith(JOB_PREFIX) and path.is_dir()


def mark_ended(node: Path) -> None:
    """Write the node's ENDED mark (synced: node 0 may read it from another host)."""
    fd = os.open(node / ENDED_MARK, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"ended\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def has_ended(node: Path) -> bool:
    """True once the node's wrapper has written everything."""
    return (node / ENDED_MARK).exists()
