"""Bad input to the planning commands. Each is a :class:`ledger.errors.BadInput`: one line, exit 2.

    BadInput
    ├── TooFewReceipts       too few usable receipts to fit; says how many and which dimensions vary
    ├── DegenerateDesign     the receipts cannot identify the fit's parameters; says why and which runs would
    ├── NoFeasiblePlan       no parallel plan fits a geometry in memory; says the smallest memory it needs
    └── UnknownHardware      a hardware profile that is neither known nor a readable file; lists the known
"""

from __future__ import annotations

from ledger.errors import BadInput


class TooFewReceipts(BadInput):
    """Too few usable receipts (or too little variation among them) to fit a model."""


class DegenerateDesign(BadInput):
    """Receipts whose design (too few distinct points, collinear or narrow variables) cannot identify a fit."""


class NoFeasiblePlan(BadInput):
    """No parallel plan fits a geometry in the memory of the hardware."""


class UnknownHardware(BadInput):
    """A hardware profile name that is not known, or a profile file that does not parse."""
