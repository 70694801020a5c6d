"""Factors: the causes a comparison can credit a change to.

Every field of a receipt is tagged with exactly one factor (see DESIGN.md). `compare` and attribution
group changes by factor, never by raw keys. The pseudo-factor ``record`` tags bookkeeping and outcomes
(ids, times, status, metrics summaries): those are effects or labels, never causes.
"""

from __future__ import annotations

from enum import StrEnum


class Factor(StrEnum):
    """One cause of a difference between two runs."""

    CODE = "code"
    SOFTWARE = "software"
    KERNELS = "kernels"
    DRIVERS = "drivers"
    CONTAINER = "container"
    HARDWARE = "hardware"
    PARALLELISM = "parallelism"
    PRECISION = "precision"
    ROUTER = "router"
    ARCHITECTURE = "architecture"
    TASK = "task"
    DATA = "data"
    SEED = "seed"
    SCALE = "scale"
    RECORD = "record"


#: The factors that describe the stack and workload (everything but bookkeeping).
CAUSAL_FACTORS: tuple[Factor, ...] = tuple(f for f in Factor if f is not Factor.RECORD)
