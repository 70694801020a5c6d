"""Energy of a run from its telemetry table: device counters where they exist, else integrated power.

Used when a receipt is built (its summary) and when a quality gate is costed (energy up to the gate).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa

_Samples = list[tuple[float, Any, Any]]
"""One device's (time, energy_j, power_w) samples as one rank saw them."""


def energy_summary(table: pa.Table) -> tuple[float | None, str]:
    """Total energy (J) in a telemetry table, and how it was obtained.

    Per device (node and device name), the cumulative energy counter gives last - first, a decrease
    counting as a reset (the new value is the energy since it). A device without at least two counter
    samples but with at least two power samples has its power integrated over time (trapezoids). Devices
    are summed. When several ranks sampled the same device of the same node (the wrapper and an SDK rank),
    the largest figure is kept, so nothing is counted twice.

    Returns ``(joules, "counter")`` when every device had a counter, ``(joules, "power-integral")`` when
    at least one figure was integrated from power, ``(None, "not measured")`` when nothing measured
    energy: a figure is never invented.
    """
    names = set(table.column_names)
    if not {"time", "device"} <= names or (not {"energy_j", "power_w"} & names):
        return None, "not measured"
    n = table.num_rows

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in names else [None] * n

    series: dict[tuple[Any, Any], dict[Any, _Samples]] = defaultdict(lambda: defaultdict(list))
    columns = (column(c) for c in ("time", "node", "device", "rank", "energy_j", "power_w"))
    for t, node, device, rank, energy, power in zip(*columns, strict=True):
        if t is not None:
            series[(node, device)][rank].append((t, energy, power))
    total = 0.0
    methods: set[str] = set()
    for by_rank in series.values():
        figures = [f for rows in by_rank.values() if (f := _device_energy(sorted(rows, key=lambda r: r[0])))]
        if not figures:
            continue
        counted = [f for f in figures if f[1] == "counter"] or figures
        energy, method = max(counted)
        total += energy
        methods.add(method)
    if not methods:
        return None, "not measured"
    return total, "power-integral" if "power-integral" in methods else "counter"


def _device_energy(rows: _Samples) -> tuple[float, str] | None:
    """(joules, method) of one device's time-sorted samples, or None when they measure no energy."""
    counter = [e for _, e, _ in rows if e is not None]
    if len(counter) >= 2:
        joules = 0.0
        for previous, current in zip(counter, counter[1:], strict=False):
            joules += current - previous if current >= previous else current
        return joules, "counter"
    power = [(t, p) for t, _, p in rows if p is not None]
    if len(power) >= 2:
        joules = sum((p0 + p1) / 2 * (t1 - t0) for (t0, p0), (t1, p1) in zip(power, power[1:], strict=False))
        return joules, "power-integral"
    return None



__all__ = ["energy_summary"]
