"""The store: receipts as files (the truth) and the DuckDB index derived from them.

layout (where everything lives: receipts in shards by id prefix), journal (the ids published, append-only),
receipts (the :class:`Ledger` directory, reading and writing one receipt),
merge and summary (staging rank files into tables and headline figures), energy, publish (one atomic
rename, exactly once), integrity and verify (digests), index (DuckDB), refs, filters (the --where language),
links, attempts and reading (what every command reads through), runs (a receipt as one flat record: the columns of
``Ledger.runs()``), annotation (notes and archive flags beside sealed receipts), faults (crash points for tests).

May import: ``schemas``, ``ledger.errors``, ``ledger.redact``. Nothing above it (record, ingest, analyses,
replay, planning, report, cli); what the recording path must add to a receipt it passes in (``publish``'s
``runtime`` hook).

Importing this package imports nothing: the SDK reads :mod:`ledger.store.layout` (the names of the
directories) and must not load pydantic and DuckDB with it. ``Ledger``, ``parse_receipt`` and
``write_receipt`` are re-exported lazily from :mod:`ledger.store.receipts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.store.receipts import Ledger, parse_receipt, write_receipt

__all__ = ["Ledger", "parse_receipt", "write_receipt"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ledger.store import receipts

        return getattr(receipts, name)
    raise AttributeError(f"module 'ledger.store' has no attribute {name!r}")
