"""stackreceipt's registry, and its typed Python API.

    import ledger
    lg = ledger.open("receipts")                     # a Ledger
    runs = lg.receipts(where="precision=bf16")       # schemas.Receipt models
    steps = lg.table("steps", refs=runs)             # a pyarrow.Table with receipt_id
    result = lg.compare("baseline", "bf16")          # a Comparison; result.to_json()

The facade is :mod:`ledger.api` (re-exported here); the parts of the house are the packages ``store``,
``ingest``, ``record``, ``analyses``, ``replay``, ``planning``, ``report`` and ``cli`` (docs/architecture.md).
Kept import-light: training processes import ``ledger.sdk`` (which runs this file), and the CLI must start
fast; :mod:`ledger.api` imports what a method needs when it runs.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.api import LawFitResult, Ledger, PerfFitResult, PlanOptions, PlanOutcome, group, open

__version__ = "0.1.0"

__all__ = ["LawFitResult", "Ledger", "PerfFitResult", "PlanOptions", "PlanOutcome", "__version__", "group", "open"]


def __getattr__(name: str) -> Any:
    """The facade's names, loaded from :mod:`ledger.api` on first use (``import ledger.sdk`` runs this file)."""
    if name in __all__:
        from ledger import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
