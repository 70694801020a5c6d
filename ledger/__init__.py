"""stackreceipt's registry: capture, record, SDK, store, analyses and CLI.

Kept import-light: training processes import ``ledger.sdk``, and the CLI must start fast.
"""

__version__ = "0.1.0"
