"""open-instruct style step lines (allenai/open-instruct ``finetune.py``, ``dpo_tune_cache.py``)::

      Step: 10, LR: 1.9e-05, Loss: 1.2345
      Step: 10, LR: 1.9e-05, Loss: 1.2345, TPS: 4101.2
      Step: 10, LR: 1.9e-05, Loss: 1.2345 Aux Loss: 0.01

``TPS`` goes to ``extra`` as ``tps`` as printed (open-instruct's own running figure).
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, Parsed, number

NAME = "open-instruct"
_STEP = re.compile(r"\bStep: (\d+), LR: ([^,\s]+), Loss: ([^,\s]+)")
_TAIL = re.compile(r"(TPS|Aux Loss): ([^,\s]+)")


def parse_line(line: str) -> Parsed | None:
    """One open-instruct step line, or None."""
    if "Step: " not in line:
        return None
    m = _STEP.search(line)
    if not m:
        return None
    lr, loss = number(m.group(2)), number(m.group(3))
    if lr is None or loss is None:
        return BAD
    metrics = {"lr": lr, "loss": loss}
    for key, raw in _TAIL.findall(line[m.end():]):
        value = number(raw)
        if value is not None:
            metrics["aux_loss" if key == "Aux Loss" else "tps"] = value
    return Parsed(step=int(m.group(1)), metrics=metrics)


__all__ = ["NAME", "parse_line"]
