"""Shared pieces of the CLI for ledger/cli/app.py and the command modules in ledger/cli/commands/.

Imports only click and the standard library at module level: `ledger --help` must start fast."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ledger.jsonsafe import json_safe
from ledger.store.layout import ledger_dir

if TYPE_CHECKING:  # the store loads pydantic and the schemas: not before a command runs
    from ledger import api
    from ledger.store.receipts import Ledger

F = TypeVar("F", bound=Callable[..., Any])


def ledger_option(f: F) -> F:
    """``--ledger DIR`` on every command."""
    return click.option(
        "--ledger",
        "ledger_path",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Ledger directory (default: ./receipts or $LEDGER_DIR).",
    )(f)


def ledger_from(ctx: click.Context, path: Path | None, must_exist: bool = False) -> Ledger:
    """The ledger named by the command's --ledger, else the group's, else $LEDGER_DIR, else ./receipts.
    ``must_exist``: a ledger named with --ledger that does not exist is an error (a mistyped path), where
    the default or $LEDGER_DIR not created yet is an empty ledger."""
    from ledger.store.receipts import Ledger

    explicit = path or ctx.find_root().params.get("ledger_path")
    ledger = Ledger(ledger_dir(explicit))
    if must_exist and explicit:
        from ledger.store.reading import existing

        existing(ledger)
    return ledger


def facade_from(ctx: click.Context, path: Path | None) -> api.Ledger:
    """The Python API's :class:`ledger.api.Ledger` for the command's ledger (see :func:`ledger_from`)."""
    from ledger.api import Ledger as Facade

    return Facade(ledger_from(ctx, path).root)


def echo_json(data: Any) -> None:
    """Print JSON (strict: NaN and infinities are null) with stable key order."""
    click.echo(json.dumps(json_safe(data), indent=2, sort_keys=True, default=str, allow_nan=False))


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """``--tag K=V`` options as a mapping; a malformed one is bad input."""
    from ledger.kv import pairs

    return pairs(values, "--tag")
