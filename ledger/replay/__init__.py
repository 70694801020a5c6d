"""Replay: run a receipt again (rerun, at another scale), claims checked by replay, sharing through a remote (DVC's,
S3 first) and export to Parquet / Delta Lake.

May import: ``schemas``, ``ledger.errors``, ``ledger.redact``, ``ledger.store``, ``ledger.record``,
``ledger.ingest``, ``ledger.analyses``.
"""
