"""Reading receipts written by older schema versions.

History:
- v1 (pre-release, 2026-11): links were top-level fields (``attempt_of``, ``replicates``, ``baseline``)
  and tags a list of ``"key=value"`` strings.
- v2: links grouped under ``links``; tags a mapping.
- v3: ``workload.arguments`` (the ``arguments`` factor), ``optimizer.dropout`` and ``optimizer.min_lr``; the
  optimizer and batch sizes are tagged ``hyperparameters``. Both new fields default to empty: a v2 receipt
  needs only its version raised.
- v4: ``capture`` (where `ledger record` took each metric table and the configuration from); absent, i.e.
  null, in older receipts: a v3 receipt needs only its version raised.
- v5: clocks, ECC and topology of the GPUs and CPUs (``Gpu``, ``Hardware``) and of each node of a job
  (``NodeStack``); all default to unknown: a v4 receipt needs only its version raised.
- v6: what a wrapped launch's output says beyond its metrics: ``failure`` (the last lines of a failed run's
  traceback), the step identity and derived columns of each captured table (``CapturedTable``: lines read,
  merged, segments, restarts, planned steps, ``derived``), and where the peak memory came from
  (``Summary.peak_memory_source``, ``peak_host_memory_bytes``); the steps table gains ``epoch`` and
  ``printed_step``. All default to unknown or empty: a v5 receipt needs only its version raised.

``migrate(data)`` upgrades a raw receipt dict step by step to :data:`SCHEMA_VERSION`. A receipt newer than
this code raises :class:`SchemaVersionError` (upgrade stackreceipt to read it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.version import SCHEMA_VERSION


class SchemaVersionError(ValueError):
    """A receipt's schema_version is unknown to this code."""


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    out["links"] = {key: out.pop(key, None) for key in ("attempt_of", "replicates", "baseline")}
    tags = out.get("tags") or []
    if isinstance(tags, list):
        pairs = [str(t).split("=", 1) for t in tags]
        out["tags"] = {p[0]: (p[1] if len(p) > 1 else "") for p in pairs}
    out["schema_version"] = 2
    return out


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 3}


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 4}


def _v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 5}


def _v5_to_v6(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": 6}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6}
"""MIGRATIONS[v] turns a version-v dict into a version-(v+1) dict."""


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Upgrade a raw receipt dict to the current schema version."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaVersionError(f"schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema_version {version} is newer than this stackreceipt (knows up to {SCHEMA_VERSION}); "
            "upgrade stackreceipt to read it"
        )
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise SchemaVersionError(f"schema_version {version} cannot be migrated (no migration from it)")
        data = step(data)
        version = data["schema_version"]
    return data
