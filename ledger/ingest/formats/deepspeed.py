"""DeepSpeed engine lines (``deepspeed/runtime/engine.py`` ``_report_progress`` and the throughput timer)::

    [...] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]
    [...] [INFO] [timer.py:215:stop] epoch=0/micro_step=100/global_step=100, RunningAvgSamplesPerSec=5720.5,
        CurrSamplesPerSec=5370.4, MemAllocated=0.01GB, MaxMemAllocated=0.12GB      (one line)

DeepSpeed prints no loss (its maintainers' choice: the loss is the model's business). ``lr`` is the first
parameter group's; ``skipped`` (cumulative skipped steps) and the samples/s go to ``extra``;
``MaxMemAllocated`` becomes ``memory_bytes``. The ``step=0`` line printed when the engine is built is its
initial state, not a training step, and is left out.
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, Parsed, number, size_bytes

NAME = "deepspeed"
_PROGRESS = re.compile(r"\bstep=(\d+), skipped=(\d+), lr=\[([^\]]*)\]")
_TIMER = re.compile(r"\bepoch=(\d+)/micro_step=(\d+)/global_step=(\d+), (.*)")
_PAIR = re.compile(r"(\w+)=([^,\s]+)")


def parse_line(line: str) -> Parsed | None:
    """One DeepSpeed progress or throughput line, or None."""
    if "skipped=" in line:
        m = _PROGRESS.search(line)
        if m:
            step = int(m.group(1))
            if step == 0:
                return None
            first = m.group(3).split(",")[0]
            lr = number(first) if first.strip() else None
            if first.strip() and lr is None:
                return BAD
            metrics = {"skipped_steps": float(m.group(2))}
            if lr is not None:
                metrics["lr"] = lr
            return Parsed(step=step, metrics=metrics)
    if "global_step=" in line:
        m = _TIMER.search(line)
        if m:
            step = int(m.group(3))
            if step == 0:
                return None
            metrics = {"epoch": float(m.group(1))}
            for key, raw in _PAIR.findall(m.group(4)):
                if key == "MaxMemAllocated":
                    size = size_bytes(raw)
                    if size is not None:
                        metrics["memory_bytes"] = size
                elif key in ("RunningAvgSamplesPerSec", "CurrSamplesPerSec"):
                    value = number(raw)
                    if value is not None:
                        metrics[key] = value
            return Parsed(step=step, metrics=metrics)
    return None


__all__ = ["NAME", "parse_line"]
