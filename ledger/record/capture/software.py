"""The software probe: the Python environment, as a sorted package list and one digest.

Versions come from distribution metadata only: torch, transformer-engine and megatron-core are never
imported (importing torch takes seconds and may touch the GPU). Two sources give the same model: the
wrapper's own interpreter (:func:`capture_software`) and the facts a training process reported through
the SDK (:func:`software_from_runtime`); both normalise names the same way, so equal environments have
equal digests whoever listed them.
"""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any, Literal

from ledger.record.capture._util import error_text
from schemas.receipt import Package, Software

_SEPARATORS = re.compile(r"[-_.]+")
_DIST_INFO = re.compile(r"([^-]+)-([0-9][0-9A-Za-z.+!]*)\.dist-info")

HEADLINE = {
    "torch": ("torch",),
    "transformer_engine": ("transformer-engine", "transformer-engine-cu12", "transformer-engine-cu13",
                           "transformer-engine-torch"),
    "megatron_core": ("megatron-core",),
}
"""Software fields filled from the package list, with the distribution names that provide each."""


def normalise(name: str) -> str:
    """A distribution name as PEP 503 normalises it: lower case, runs of -_. become one dash."""
    return _SEPARATORS.sub("-", name).lower()


def _name_version(dist: metadata.Distribution) -> tuple[str, str]:
    """Name and version of a distribution, from its ``.dist-info`` directory name when it has the standard
    ``name-version`` form (no file is parsed), else from its metadata."""
    path = getattr(dist, "_path", None)  # PathDistribution; the public API parses METADATA for each call
    m = _DIST_INFO.fullmatch(getattr(path, "name", ""))
    if m:
        return m.group(1), m.group(2)
    return dist.metadata["Name"] or "", dist.version or ""


def _software(
    pairs: Iterable[tuple[str, str]], source: Literal["wrapper", "process"], **fields: Any
) -> Software:
    """A Software model from (name, version) pairs: names normalised, first occurrence kept (the one
    ``sys.path`` order imports), sorted, digested, headline versions and nvidia-* picked out."""
    versions: dict[str, str] = {}
    for name, version in pairs:
        key = normalise(name)
        if key and key not in versions:
            versions[key] = version
    names = sorted(versions)
    lines = "".join(f"{n}=={versions[n]}\n" for n in names)
    headline = {
        field: next((versions[d] for d in dists if d in versions), None) for field, dists in HEADLINE.items()
    }
    for field, value in headline.items():
        if fields.get(field) is None:
            fields[field] = value
    return Software(
        packages=tuple(Package(name=n, version=versions[n]) for n in names),
        packages_digest=hashlib.sha256(lines.encode()).hexdigest(),
        nvidia={n: versions[n] for n in names if n.startswith("nvidia-")},
        source=source,
        **fields,
    )


def capture_software() -> Software:
    """This interpreter's version, path and every installed distribution (source="wrapper")."""
    try:
        pairs = [_name_version(d) for d in metadata.distributions()]
        return _software(pairs, "wrapper", python=platform.python_version(), python_executable=sys.executable)
    except Exception as exc:
        return Software(python=platform.python_version(), python_executable=sys.executable, source="wrapper",
                        error=error_text(exc))


def software_from_runtime(facts: Mapping[str, Any]) -> Software:
    """The Software a training process reported (the dict :func:`ledger.sdk.runtime_facts` writes to
    ``runtime.json``), with source="process"."""
    try:
        pairs = [(str(p["name"]), str(p["version"])) for p in facts.get("packages") or ()]
        errors = dict(facts.get("errors") or {})
        if "torch" not in facts and not any(normalise(n) == "torch" for n, _ in pairs):
            errors.pop("torch", None)  # torch is simply not installed: nothing failed
        return _software(
            pairs,
            "process",
            python=facts.get("python"),
            python_executable=facts.get("executable"),
            torch=facts.get("torch"),
            transformer_engine=facts.get("transformer_engine"),
            megatron_core=facts.get("megatron_core"),
            error="; ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or None,
        )
    except Exception as exc:
        return Software(source="process", error=f"malformed runtime facts: {error_text(exc)}")


__all__ = ["capture_software", "normalise", "software_from_runtime"]
