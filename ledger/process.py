"""Settings the `ledger` process makes for itself, which the launches it starts must not inherit.

``PYDANTIC_DISABLE_PLUGINS``: on its first model pydantic reads the entry points of every installed
distribution to find plugins (15-20 ms of every `ledger record` on a training image), and no plugin has any
business with the receipt models.

``OPENBLAS_NUM_THREADS``: numpy's OpenBLAS starts a pool of threads (one per core, less one) when numpy is
imported, and on a loaded machine those threads spin for the CPU. The `ledger` process does no linear algebra that
a second thread would speed up, and pyarrow imports numpy: one thread saves about 100 ms of CPU on every
`ledger record` on a 2-core machine (`import numpy` 270 against 160 ms of CPU, median of 9; more where a node has
more cores, each with its thread). A launch never gets this setting: its numpy keeps the user's own.

A user who set either variable keeps their value.

:func:`reuse_freed_memory`: allocator settings for the processes of ours that build large arrays once and then
exit (the output parser's worker, `ledger record` once its launch ended); a launch started by `exec` never keeps
them.

Part of the core: imports nothing of ours.
"""

from __future__ import annotations

import os

OWN_SETTINGS = {"PYDANTIC_DISABLE_PLUGINS": "__all__", "OPENBLAS_NUM_THREADS": "1"}
"""Environment variables the `ledger` command sets for its own process when the user did not."""

_set: dict[str, str] = {}


def configure() -> None:
    """Apply :data:`OWN_SETTINGS` to this process (the `ledger` command does, first thing)."""
    for name, value in OWN_SETTINGS.items():
        if name not in os.environ:
            os.environ[name] = value
            _set[name] = value


def launch_environment() -> dict[str, str]:
    """This process's environment without what :func:`configure` set: what a launch gets."""
    env = dict(os.environ)
    for name, value in _set.items():
        if env.get(name) == value:
            del env[name]
    return env


MMAP_THRESHOLD = 64 << 20
"""Allocations up to this size come from the process's heap, not from pages mapped for each (glibc)."""
TRIM_THRESHOLD = 256 << 20
"""Freed heap up to this size stays the process's, for its next arrays (glibc)."""


def reuse_freed_memory(arrow: bool = False) -> None:
    """Let this process reuse the memory it frees, for work that allocates and frees large arrays and then exits:
    the output parser's worker, and `ledger record` once its launch ended. glibc's ``mallopt`` (elsewhere nothing):
    allocations up to :data:`MMAP_THRESHOLD` from the heap, freed heap kept up to :data:`TRIM_THRESHOLD`; with
    ``arrow``, Arrow's default memory pool becomes the system allocator (so under the same settings) when pyarrow
    is loaded. By default an array above glibc's starting threshold (128 KiB) was mapped afresh, and the kernel
    zeroes every page it touches. Measured: a 100 MB log of step lines parsed in a new process, 0.82 s (0.38 s of it
    system time, 49,000 page faults) by default, 0.52 s (0.10 s) with these settings; `ledger record -- cat` of a
    200 MB log of 1.47 million unique steps, the capture's tables and the publish after the launch 1.6-2.0 s by
    default, 0.9-1.3 s with them (peak RSS 50-90 MB higher, of about 600 MB). Never for a training process (the
    SDK's in-process recording): its allocator is the user's."""
    import ctypes
    import ctypes.util
    import sys

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their allocators decide
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)
    if arrow and "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())


__all__ = ["OWN_SETTINGS", "configure", "launch_environment", "reuse_freed_memory"]
