"""What every log-line format shares: the parsed row, the mapping of printed names to step columns, and
number parsing as printed (``10,050``, ``66.91GiB``, ``nan``).

A format is a function from one line (its launcher rank prefix already stripped) to a :class:`Parsed` or
``None``. ``None`` means "not a line of mine": a format never turns a line without a step number into a
step (a saved-checkpoint line, an epoch banner, a progress bar), and a line it recognises only in part is
returned as :data:`BAD` so the capture can count it as unparsed instead of guessing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

STEP_COLUMNS = frozenset({
    "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "flops_per_s", "aux_loss", "z_loss", "loss_scale",
    "memory_bytes", "tokens",
})
"""Columns of the steps table a printed metric may fill (the rest go to ``extra``)."""

ALIASES: Mapping[str, str] = {
    "loss": "loss", "train_loss": "loss", "train/loss": "loss", "training_loss": "loss", "lm_loss": "loss",
    "lr": "lr", "learning_rate": "lr", "train/learning_rate": "lr", "learning-rate": "lr", "train/lr": "lr",
    "grad_norm": "grad_norm", "gradnorm": "grad_norm", "grad-norm": "grad_norm", "train/grad_norm": "grad_norm",
    "gnorm": "grad_norm",
    "aux_loss": "aux_loss", "load_balancing_loss": "aux_loss", "z_loss": "z_loss", "loss_scale": "loss_scale",
    "tokens": "tokens", "tokens_per_s": "tokens_per_s", "tokens_per_sec": "tokens_per_s", "tok/s": "tokens_per_s",
    "tps": "tokens_per_s", "step_time_s": "step_time_s",
}
"""Printed metric names (lower case) that mean one of the step columns."""

INT_COLUMNS = frozenset({"tokens", "memory_bytes"})

EPOCH = "epoch"
"""Reserved metric name: the epoch the line printed (``epoch 2``, Hugging Face's ``'epoch': 0.38``). The capture
puts it in the steps table's ``epoch`` column, never in ``extra``; a line with only an epoch is no step."""
TOTAL = "@total"
"""Reserved metric name: the total a step counter is printed against (``20/1352`` -> 1352, ms-swift's
``'global_step/max_steps': '45/94'`` -> 94): the planned steps of the run, or of the epoch when the line prints
an epoch too. The capture takes it as the run's planned steps (ETA) and as the length of an epoch whose counter
restarts; never a metric."""
RANK = "@rank"
"""Reserved metric name: the rank a launcher's prefix names (``[rank3]:``, ``[default3]:``, ``3:``). Set by the
capture from :func:`ledger.ingest.common.strip_rank`, never by a format: a label that tells the printers of one
step apart, never a metric."""
RESERVED = frozenset({EPOCH, TOTAL, RANK})
"""Metric names that are facts about the line, not metrics (see each)."""


@dataclass
class Parsed:
    """One parsed line: a step with its metrics, and/or eval values at a step.

    ``step`` None with ``evals`` means "evals at the latest step seen" (HF Trainer prints eval dicts
    without a step)."""

    step: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    evals: list[tuple[str | None, str, float]] = field(default_factory=list)
    """(split, metric, value)."""
    ordinal: bool = False
    """The format prints no step number: ``step`` is None and the capture numbers the lines 1, 2, ..."""


BAD = Parsed(step=None)
"""A line a format recognised by its shape but could not read (counted as unparsed, never a step)."""

Format = Callable[[str], Parsed | None]

def labelled(parsed: Parsed, rank: int | None) -> Parsed:
    """A parsed step line with the rank its prefix named (:data:`RANK`), when it named one."""
    if rank is None or parsed is BAD or not parsed.metrics:
        return parsed
    return Parsed(step=parsed.step, metrics={**parsed.metrics, RANK: float(rank)}, evals=parsed.evals,
                  ordinal=parsed.ordinal)


_NUM = re.compile(r"^[-+]?(?:\d[\d,_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
_SIZE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\b", re.I)


def number(text: str) -> float | None:
    """A number as printed: ``3.2``, ``1e-3``, ``10,050``, ``nan``, ``inf``, ``-inf``; None otherwise."""
    if text[:1].isdigit() and text[-1:].isdigit():  # the common case, fast
        try:
            return float(text)
        except ValueError:
            pass
    t = text.strip().rstrip(",;")
    low = t.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan
    if low in ("inf", "+inf", "infinity"):
        return math.inf
    if low in ("-inf", "-infinity"):
        return -math.inf
    if not _NUM.match(t):
        return None
    try:
        return float(t.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def size_bytes(text: str) -> float | None:
    """``66.91GiB`` (optionally followed by anything, e.g. ``(37.51%)``) as bytes; None otherwise."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def put(metrics: dict[str, float], name: str, value: float) -> None:
    """Store a printed metric under its step column when the name is known, else under its own name."""
    metrics[ALIASES.get(name.lower(), name)] = value


__all__ = ["ALIASES", "BAD", "EPOCH", "RANK", "RESERVED", "TOTAL", "Format", "INT_COLUMNS", "Parsed", "STEP_COLUMNS",
           "labelled", "number", "put", "size_bytes"]
