"""Peak FLOP/s per device and precision, for MFU: the table lives in :mod:`ledger.mfu` (one copy, shared
with :mod:`ledger.planning.hardware`); this module keeps the names :mod:`ledger.analyses.metrics` imports."""

from __future__ import annotations

from ledger.mfu import TERA, Peak, device_key, peak_flops

__all__ = ["TERA", "Peak", "device_key", "peak_flops"]
