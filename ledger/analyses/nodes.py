"""Differences between the nodes of a multi-node receipt, named by factor.

``node_differences(receipt)`` is what compare can count as a confound: a job whose nodes ran different
drivers, NCCL, packages, containers, code or GPUs is not one configuration. The comparison itself lives
in :mod:`ledger.record.nodes` (publishing reports the same differences as problems of the receipt).
"""

from __future__ import annotations

from ledger.record.nodes import differences
from schemas import Factor, Receipt


def node_differences(receipt: Receipt) -> list[tuple[Factor, str]]:
    """(factor, description) for every fact on which the receipt's nodes disagree, e.g.
    ``(Factor.DRIVERS, "NCCL: 2.21.5 on node 0 (gpu-001); 2.19.3 on node 1 (gpu-002)")``. Empty for a
    single-node receipt. Lost nodes take part with whatever facts they reported."""
    return differences(receipt.stack.nodes, receipt.stack.software)
