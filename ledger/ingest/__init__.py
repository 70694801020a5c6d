"""Importers: evidence other tools wrote (Megatron-LM logs, MLPerf results, Megatron-LM CI golden values,
PyTorch profiler traces) -> receipts with status ``imported``, and the live capture of Megatron launches
under ``ledger record``.

Modules: common (line errors, problems, publishing), megatron_args (arguments -> workload), megatron (logs),
mlperf, golden, trace, api (one function per import command),
live (``ledger record``'s hook). Import these lazily: the CLI must start without them.

May import: ``schemas``, ``ledger.errors``, ``ledger.redact``, ``ledger.store``. Never ``record`` or anything above.
"""
