"""The one exception tree of stackreceipt. The CLI catches :class:`LedgerError` once, prints
``Error: <message>`` on one line and exits with ``exit_code``.

    LedgerError                      exit 1: something in the ledger or the environment is wrong
    ├── BadInput                     exit 2: the user's input is wrong; the message says how to fix it
    │   ├── UnknownRef               no receipt has that id prefix or name
    │   ├── AmbiguousRef             several receipts match; the message lists them
    │   ├── InvalidRef               a ref that is empty, too long or has control characters
    │   ├── InvalidReceipt           a receipt file that fails validation; names the field
    │   ├── SchemaTooNew             a receipt written by a newer stackreceipt
    │   ├── QueryRefused             `ledger query` given a statement that writes
    │   ├── InvalidFilter            a `--where` expression that does not parse
    │   ├── TaskMismatch             compare of two different tasks (ledger.analyses.diff)
    │   ├── InvalidGroup, SameReceipt  bad `--group`, a receipt compared with itself (ledger.analyses.groups)
    │   └── LedgerNotWritable        the ledger directory cannot be written (choose another)
    ├── DamagedReceipt               a receipt file is missing or fails its digest
    ├── LinkRefused                  a file or directory of the ledger's own is a symbolic link (never followed)
    ├── IndexBusy                    the DuckDB index stayed locked by another process
    └── MissingExtra                 an optional dependency is not installed; says which extra
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error stackreceipt raises on purpose."""

    exit_code = 1


class BadInput(LedgerError):
    """The user's input is wrong; the message says how to fix it."""

    exit_code = 2


class UnknownRef(BadInput):
    """No receipt has that id prefix or name."""


class AmbiguousRef(BadInput):
    """Several receipts match a ref."""


class InvalidRef(BadInput):
    """A ref with characters that are not allowed."""


class InvalidReceipt(BadInput):
    """A receipt file fails schema validation."""


class SchemaTooNew(BadInput):
    """A receipt written by a newer stackreceipt."""


class QueryRefused(BadInput):
    """A query that would write, or is not a single read statement."""


class InvalidFilter(BadInput):
    """A `--where` expression that does not parse."""


class LedgerNotWritable(BadInput):
    """The ledger directory cannot be written."""


class DamagedReceipt(LedgerError):
    """A receipt file is missing or fails its digest."""


class LinkRefused(LedgerError):
    """A file or directory of the ledger's own is a symbolic link, which ledger never writes through."""


class IndexBusy(LedgerError):
    """The DuckDB index stayed locked by another process."""


class MissingExtra(LedgerError):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(f"{module} is not installed; install it with: pip install 'stackreceipt[{extra}]'")
        self.module = module
        self.extra = extra
