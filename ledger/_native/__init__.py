"""Compiled parts of the per-byte hot path (C, CPython's API), each with a pure-Python twin that is both the
fallback and the definition: :func:`columns` is the template reader of :mod:`ledger.ingest.formats.columns`.

An install without a compiler has no extension (``optional = true`` in pyproject.toml) and uses the Python
path; ``LEDGER_NO_EXT=1`` in the environment forces the Python path too (tests run both and compare them).
"""

from __future__ import annotations

import os
from functools import cache
from types import ModuleType

DISABLE = "LEDGER_NO_EXT"
"""Environment variable: set to anything but empty or ``0``, the compiled parts are not used."""


def enabled() -> bool:
    """Whether the compiled parts may be used (``LEDGER_NO_EXT`` unset, empty or ``0``)."""
    return os.environ.get(DISABLE, "") in ("", "0")


@cache
def _load() -> ModuleType | None:
    try:
        from ledger._native import _columns  # type: ignore[attr-defined]
    except ImportError:  # built without a compiler: the Python path
        return None
    module: ModuleType = _columns
    return module


def columns() -> ModuleType | None:
    """The compiled template reader (``read_shape``, see ``columns.c``); None when not built or disabled."""
    return _load() if enabled() else None


__all__ = ["DISABLE", "columns", "enabled"]
