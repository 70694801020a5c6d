"""Fault injection for the crash-matrix tests: ``LEDGER_FAULT_AT=<phase>`` makes the wrapper SIGKILL
itself when it reaches that phase. Phases, in order: prelaunch, launched, running, finalizing,
publishing (receipt built, not yet visible), published (visible, staging not yet removed); and
``exporting``: `ledger export` with its metric tables written, its receipts table not yet; ``parser``: the
wrapper's output parser process (:mod:`ledger.ingest.worker`) kills itself after its first batch."""

from __future__ import annotations

import os
import signal

FAULT_ENV = "LEDGER_FAULT_AT"
PHASES = ("prelaunch", "launched", "running", "finalizing", "publishing", "published")
"""The wrapper's phases (`ledger record`), in order: the crash matrix kills it at each (``exporting`` is
`ledger export`'s, tested by its own crash test)."""


def fault(phase: str) -> None:
    """Die here, as `kill -9` would, when the test asked for this phase."""
    if os.environ.get(FAULT_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)
