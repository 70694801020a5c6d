"""CLI commands beyond the core ones, one module per capability (compare, goodput, ingest, ...).

Each module defines ``register(cli: click.Group) -> None`` and keeps its module-level imports light
(click and the standard library): heavy imports go inside the command functions, so `ledger` starts fast.
Modules are discovered here, so adding a capability never edits ledger/cli.py.
"""

from __future__ import annotations

import importlib
import pkgutil

import click


def register_all(cli: click.Group) -> None:
    """Import every module of this package and let it add its commands."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(cli)
