"""Shared pieces of the CLI for ledger/cli/app.py and the command modules in ledger/cli/commands/.

Imports only click and the standard library at module level: `ledger --help` must start fast."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

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


def ledger_from(ctx: click.Context, path: Path | None) -> Ledger:
    """The ledger named by the command's --ledger, else the group's, else $LEDGER_DIR, else ./receipts."""
    from ledger.store.receipts import Ledger

    return Ledger(ledger_dir(path or ctx.find_root().params.get("ledger_path")))


def facade_from(ctx: click.Context, path: Path | None) -> api.Ledger:
    """The Python API's :class:`ledger.api.Ledger` for the command's ledger (see :func:`ledger_from`)."""
    from ledger.api import Ledger as Facade

    return Facade(ledger_from(ctx, path).root)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):  # DuckDB's sum() of integers is a HUGEINT, i.e. a decimal in Arrow
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def echo_json(data: Any) -> None:
    """Print JSON with stable key order."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=_json_default))


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """``--tag K=V`` options as a mapping; a malformed one is bad input."""
    from ledger.kv import pairs

    return pairs(values, "--tag")
