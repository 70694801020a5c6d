"""Thin adapters for the two biggest training ecosystems, writing through :mod:`ledger.sdk` only (optional
extras: ``stackreceipt[hf]``, ``stackreceipt[lightning]``). One line in the training script; richer than
parsing the output: every step with its wall time, exact step numbers, evals by split, checkpoint events.

* :class:`ledger.integrations.hf.LedgerCallback` — ``Trainer(..., callbacks=[LedgerCallback()])``
* :class:`ledger.integrations.lightning.LedgerLogger` — ``Trainer(..., logger=LedgerLogger())``

Both are no-ops outside ``ledger record`` (the SDK's null run).

May import: the core (``ledger.sdk``, ``ledger.errors``...) and ``schemas``, nothing else of ``ledger``.
"""
