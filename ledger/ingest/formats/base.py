"""What every log-line format shares: the parsed row, the mapping of printed names to step columns, and
number parsing as printed (``10,050``, ``66.91GiB``, ``43.2K``, ``nan``).

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
from typing import Any

STEP_COLUMNS = frozenset({
    "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "flops_per_s", "aux_loss", "z_loss", "loss_scale",
    "memory_bytes", "tokens", "tflops_per_device",
})
"""Columns of the steps table a printed metric may fill (the rest go to ``extra``). ``tflops_per_device`` is the
model TFLOP/s of one device as the framework printed it (its own FLOPs formula: torchtitan's ``tflops``, nanotron's
``model_tflops_per_gpu``)."""

SAMPLES_PER_S = "samples_per_s"
"""Standard ``extra`` name of a printed samples rate (``640.0 samples/sec``, ``samples_per_second``)."""
STEPS_PER_S = "steps_per_s"
"""Standard ``extra`` name of a printed rate of optimizer steps (``2.5it/s``, ``iter/s``, ms-swift's
``train_speed(iter/s)``)."""

ALIASES: Mapping[str, str] = {
    "loss": "loss", "train_loss": "loss", "train/loss": "loss", "training_loss": "loss", "lm_loss": "loss",
    "lr": "lr", "learning_rate": "lr", "train/learning_rate": "lr", "learning-rate": "lr", "train/lr": "lr",
    "grad_norm": "grad_norm", "gradnorm": "grad_norm", "grad-norm": "grad_norm", "train/grad_norm": "grad_norm",
    "gnorm": "grad_norm",
    "aux_loss": "aux_loss", "load_balancing_loss": "aux_loss", "z_loss": "z_loss", "loss_scale": "loss_scale",
    "tokens": "tokens", "consumed_tokens": "tokens", "num_input_tokens_seen": "tokens",
    "tokens_per_s": "tokens_per_s", "tokens_per_sec": "tokens_per_s", "tokens_per_second": "tokens_per_s",
    "tok/s": "tokens_per_s", "tokens/s": "tokens_per_s", "tokens/sec": "tokens_per_s", "tps": "tokens_per_s",
    "step_time_s": "step_time_s",
    "samples_per_s": SAMPLES_PER_S, "samples_per_sec": SAMPLES_PER_S, "samples_per_second": SAMPLES_PER_S,
    "samples/s": SAMPLES_PER_S, "samples/sec": SAMPLES_PER_S, "sample/s": SAMPLES_PER_S,
    "steps_per_s": STEPS_PER_S, "steps_per_sec": STEPS_PER_S, "steps_per_second": STEPS_PER_S, "steps/s": STEPS_PER_S,
    "it/s": STEPS_PER_S, "iter/s": STEPS_PER_S, "iters/s": STEPS_PER_S, "train_speed(iter/s)": STEPS_PER_S,
}
"""Printed metric names (lower case) that mean one of the step columns, or one of the standard ``extra`` names of a
rate (:data:`SAMPLES_PER_S`, :data:`STEPS_PER_S`). ``tokens``: tokens seen so far by all ranks (nanotron's
``consumed_tokens``, the Hugging Face Trainer's ``num_input_tokens_seen``, gathered over the processes)."""

UNITS: Mapping[str, tuple[str, float]] = {"memory(gib)": ("memory_bytes", float(2**30))}
"""Printed names (lower case) that say their unit: (column, scale to the column's unit). ms-swift's ``memory(GiB)``
is its own figure of the peak reserved device memory."""

RATE_UNITS: Mapping[str, str] = {
    "sample": SAMPLES_PER_S, "samples": SAMPLES_PER_S,
    "token": "tokens_per_s", "tokens": "tokens_per_s", "tok": "tokens_per_s",
    "it": STEPS_PER_S, "iter": STEPS_PER_S, "iters": STEPS_PER_S, "step": STEPS_PER_S, "steps": STEPS_PER_S,
}
"""What a rate printed after its number means, by the unit before ``/s`` (``640.0 samples/sec``, ``12,345 tokens/s``,
tqdm's ``1.96it/s``)."""

LABELS = frozenset({
    "rank", "local_rank", "global_rank", "node_rank", "world_rank", "dp", "pp", "tp", "ep", "cp", "etp", "dp_rank",
    "pp_rank", "tp_rank", "ep_rank", "cp_rank",
})
"""Printed names (lower case) of a process's place in the job: ``[Rank 0]``, ``rank=3``, nanotron's
``DP=0|PP=0|TP=0``. Labels that tell the printers of one step apart, never metrics (the capture takes the rank from
the launcher's prefix: :data:`RANK`)."""

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
SUFFIXES: Mapping[str, float] = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
"""Decimal multipliers a number may carry, glued (``43.2K``, ``85.8G``: nanotron's ``human_format``, powers of
1000)."""
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
_SIZE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\b", re.I)


def scaled(value: Any, scale: float) -> Any:
    """A value (a float or an array) read in a printed unit, in its column's: ``* scale``, or for a scale below 1
    (milliseconds to seconds) ``/ (1 / scale)``: ``893.5 / 1000`` is 0.8935, ``893.5 * 1e-3`` one unit in the last
    place above it. The parsers and the templates (:mod:`.template`, :mod:`.columns`) scale through it alike."""
    if scale == 1.0:
        return value
    return value / (1.0 / scale) if scale < 1.0 else value * scale


def number(text: str) -> float | None:
    """A number as printed: ``3.2``, ``1e-3``, ``10,050``, ``nan``, ``inf``, ``-inf``, ``43.2K`` (a decimal multiplier
    of :data:`SUFFIXES` glued to it); None otherwise."""
    if text[:1].isdigit() and text[-1:].isdigit():  # the common case, fast
        try:
            return float(text)
        except ValueError:
            pass
    got = mantissa(text)
    return None if got is None else scaled(got[0], got[1])


def mantissa(text: str) -> tuple[float, float] | None:
    """A number as printed and the multiplier glued to it: ``43.2K`` -> (43.2, 1000.0), ``3.2`` -> (3.2, 1.0); None
    for text that is no number. A format that scales a value again (nanotron's ``11.5K`` milliseconds) multiplies the
    scales first and scales once (:func:`scaled`), as a template does."""
    t = text.strip().rstrip(",;")
    low = t.lower()
    if low in ("nan", "+nan", "-nan"):
        return math.nan, 1.0
    if low in ("inf", "+inf", "infinity"):
        return math.inf, 1.0
    if low in ("-inf", "-infinity"):
        return -math.inf, 1.0
    scale = SUFFIXES.get(t[-1:], 1.0)
    if scale != 1.0:
        t = t[:-1]
    if not _NUM.match(t):
        return None
    try:
        return float(t.replace(",", "").replace("_", "")), scale
    except ValueError:
        return None


def size_bytes(text: str) -> float | None:
    """``66.91GiB`` (optionally followed by anything, e.g. ``(37.51%)``) as bytes; None otherwise."""
    m = _SIZE.match(text.strip())
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def put(metrics: dict[str, float], name: str, value: float) -> None:
    """Store a printed metric under its step column when the name is known (:data:`ALIASES`, or in its column's unit
    when the name says its own: :data:`UNITS`), else under its own name."""
    low = name.lower()
    unit = UNITS.get(low)
    if unit is not None:
        metrics[unit[0]] = scaled(value, unit[1])
    else:
        metrics[ALIASES.get(low, name)] = value


__all__ = ["ALIASES", "BAD", "EPOCH", "LABELS", "RANK", "RATE_UNITS", "RESERVED", "SAMPLES_PER_S", "STEPS_PER_S",
           "SUFFIXES", "TOTAL", "UNITS", "Format", "INT_COLUMNS", "Parsed", "STEP_COLUMNS", "labelled", "mantissa",
           "number", "put", "scaled", "size_bytes"]
