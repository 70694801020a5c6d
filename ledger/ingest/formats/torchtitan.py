"""torchtitan step lines (``torchtitan/train.py`` via ``MetricsProcessor.log``)::

    [rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  grad_norm:  0.8319
        memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%                  (one line)

``loss`` and ``grad_norm`` fill their columns and ``memory`` (the peak active memory of the device) becomes
``memory_bytes``. What the other figures are, from ``MetricsProcessor.log`` (``torchtitan/components/metrics.py``):
``tps`` is tokens per second *per device* (the rank's tokens since the last log over the time since, divided by the
non-data-parallel degree), ``tflops`` is ``num_flops_per_token * tps / 1e12``, the model TFLOP/s of one device
(torchtitan's own FLOPs formula), and ``mfu`` that over the device's peak, in percent. So ``tflops`` fills the
``tflops_per_device`` column (what Megatron's ``throughput per GPU (TFLOP/s/GPU)`` fills), while ``tps`` stays in
``extra`` as printed (the ``tokens_per_s`` column is all ranks' tokens/s, which the line does not say), and ``mfu``
goes to ``extra`` as ``mfu_pct``.
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
        elif key == "tflops":
            value = number(raw)
            if value is not None:
                metrics["tflops_per_device"] = value
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
