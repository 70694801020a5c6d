"""torchtitan step lines (``torchtitan/train.py`` via ``MetricsProcessor.log``)::

    [rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  grad_norm:  0.8319
        memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%                  (one line)

``loss`` and ``grad_norm`` fill their columns and ``memory`` (the peak active memory of the device) becomes
``memory_bytes``. ``tps``, ``tflops`` and ``mfu`` are per device in torchtitan, while the steps table's
throughput columns are for all ranks, so they go to ``extra`` as printed: ``tps`` (tokens/s per device),
``tflops`` (per device) and ``mfu_pct``.
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, Parsed, number, size_bytes

NAME = "torchtitan"
_STEP = re.compile(r"(?:^|\s-\s|\]\s?)step:\s*(\d+)\s+loss:\s*(\S+)")
_PAIR = re.compile(r"(\w+):\s*(\S+)")


def parse_line(line: str) -> Parsed | None:
    """One torchtitan step line, or None."""
    if "step:" not in line or "loss:" not in line:
        return None
    m = _STEP.search(line)
    if not m:
        return None
    loss = number(m.group(2))
    if loss is None:
        return BAD
    metrics = {"loss": loss}
    for key, raw in _PAIR.findall(line[m.end():]):
        if key == "memory":
            size = size_bytes(raw)
            if size is not None:
                metrics["memory_bytes"] = size
        elif key == "mfu":
            value = number(raw.rstrip("%"))
            if value is not None:
                metrics["mfu_pct"] = value
        else:
            value = number(raw)
            if value is not None:
                metrics[key] = value
    return Parsed(step=int(m.group(1)), metrics=metrics)


__all__ = ["NAME", "parse_line"]
