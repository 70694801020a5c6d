"""nanoGPT-style lines (karpathy/nanoGPT ``train.py``)::

    iter 1631: loss 4.0863, time 561.94ms, mfu 15.34%
    step 250: train loss 1.5440, val loss 1.7220

The first is a training step (``time`` is the step's wall time; ``mfu`` in percent goes to ``extra`` as
``mfu_pct``, except nanoGPT's ``-100.00%`` placeholder of the first iterations, which means "not measured
yet" and is left out); the second is an evaluation at that step (splits ``train`` and ``val``).
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, Parsed, number

NAME = "nanogpt"
_ITER = re.compile(r"\biter (\d+): loss (\S+?),? time ([\d.]+)ms(?:, mfu ([-\d.]+)%)?")
_EVAL = re.compile(r"\bstep (\d+): train loss (\S+?), val loss (\S+)")


def parse_line(line: str) -> Parsed | None:
    """One nanoGPT line, or None."""
    if "iter " in line:
        m = _ITER.search(line)
        if m:
            loss, time_ms = number(m.group(2)), number(m.group(3))
            if loss is None or time_ms is None:  # `time 0.0.5ms`: a step line we cannot read
                return BAD
            metrics = {"loss": loss, "step_time_s": time_ms / 1000}
            mfu = number(m.group(4)) if m.group(4) else None
            if mfu is not None and mfu >= 0:
                metrics["mfu_pct"] = mfu
            return Parsed(step=int(m.group(1)), metrics=metrics)
    if "val loss" in line:
        m = _EVAL.search(line)
        if m:
            train, val = number(m.group(2)), number(m.group(3))
            if train is None or val is None:
                return BAD
            return Parsed(step=int(m.group(1)), evals=[("train", "loss", train), ("val", "loss", val)])
    return None


__all__ = ["NAME", "parse_line"]
