"""The recording path: ``ledger record``'s wrapper, stack capture, telemetry, live capture glue and recovery.

wrapper (launch the child, tee its output, forward signals, publish), inprocess (record a block of this
process from Python: ``Ledger.recording``), capture/ (git, software, container,
hardware, launcher probes), telemetry (the node sampler), recover (publish runs whose wrapper died). The SDK
training code imports is :mod:`ledger.sdk`, kept at the top so a training process imports nothing else.

May import: ``schemas``, ``ledger.errors``, ``ledger.redact``, ``ledger.sdk``, ``ledger.store``,
``ledger.ingest`` (the parsers live capture shares with importers).
"""
