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


__all__ = ["OWN_SETTINGS", "configure", "launch_environment"]
