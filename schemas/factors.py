"""Factors: the causes a comparison can credit a change to.

Every field of a receipt is tagged with exactly one factor (see DESIGN.md). `compare` and attribution
group changes by factor, never by raw keys. The pseudo-factor ``record`` tags bookkeeping and outcomes
(ids, times, status, metrics summaries): those are effects or labels, never causes.

``hyperparameters`` are the training recipe (optimizer, learning rate and schedule, warm-up, clipping,
weight decay, dropout, batch size); ``arguments`` are the command-line arguments and config files of a
launch whose meaning the ledger does not know: a potential cause, never noise. The ``seed`` is the one
factor whose change makes two runs *replicates* of one configuration.
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
    HYPERPARAMETERS = "hyperparameters"
    ARGUMENTS = "arguments"
    TASK = "task"
    DATA = "data"
    SEED = "seed"
    SCALE = "scale"
    RECORD = "record"


#: The factors that describe the stack and workload (everything but bookkeeping).
CAUSAL_FACTORS: tuple[Factor, ...] = tuple(f for f in Factor if f is not Factor.RECORD)
