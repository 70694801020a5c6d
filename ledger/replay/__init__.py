"""Replay: run a receipt again (rerun, at another scale), claims checked by replay, sharing through DVC.

May import: ``schemas``, ``ledger.errors``, ``ledger.redact``, ``ledger.store``, ``ledger.record``,
``ledger.ingest``, ``ledger.analyses``.
"""
