"""nanotron iteration lines (huggingface/nanotron: ``LoggerWriter.add_scalars_from_list`` in
``src/nanotron/logging.py``, the entries from ``DistributedTrainer.train_step_logs`` in ``src/nanotron/trainer.py``)::

    10/17/2025 16:31:56 [INFO|DP=0|PP=0|TP=0]: iteration: 327281 / 378950 | consumed_tokens: 85.8G |
        elapsed_time_per_iteration_ms: 11.5K | tokens_per_sec: 22.8K | tokens_per_sec_per_gpu: 11.4K |
        global_batch_size: 64 | lm_loss: 2.38 | lr: 1e-05 | model_tflops_per_gpu: 38.3 | grad_norm: 1.25  (one line)

The logger's prefix (time, level, and ``DP=``/``PP=``/``TP=``/``EP=``/``CP=`` ranks and the node name of the
process that printed: nanotron's ``set_logger_verbosity_format``) is a label, never a metric. ``iteration: N / M``
gives the step N and its total M (``@total``). Values are printed by nanotron's ``human_format`` (three significant
digits and a decimal multiplier: ``85.8G``, ``11.5K``, ``761``) or, in older versions, by a format of their own
(``1.422222E+04``); both are read (:func:`.base.mantissa`). Names map as follows:

- ``lm_loss`` -> ``loss``; ``lr``, ``grad_norm`` and ``z_loss`` -> their columns;
- ``consumed_tokens`` (samples consumed x sequence length: all ranks) -> ``tokens``;
- ``elapsed_time_per_iteration_ms`` (``time_per_iteration_ms`` since 2025) -> ``step_time_s`` (milliseconds to
  seconds);
- ``tokens_per_sec`` (the global batch's tokens over the iteration's time: all ranks) -> ``tokens_per_s``;
- ``model_tflops_per_gpu`` (nanotron's model FLOPs per GPU) -> ``tflops_per_device``;
- ``cuda_max_memory_reserved`` (the process's peak reserved device memory, bytes) -> ``memory_bytes``;
- everything else that is a number stays in ``extra`` as printed (``tokens_per_sec_per_gpu``,
  ``hardware_tflops_per_gpu``, ``consumed_samples``, ``cuda_memory_allocated``, ``hd_*``...); ``global_batch_size``
  too, since nanotron printed it in samples and, since 2025, in tokens. ``eta`` (a duration) is not a number.
"""

from __future__ import annotations

import re

from ledger.ingest.formats.base import BAD, TOTAL, Parsed, mantissa, put, scaled

NAME = "nanotron"
_ITERATION = re.compile(r"(?:^|[\s:])iteration: (\d+) / (\d+)((?: \| [^|]*)+)$")
_COLUMNS = {
    "lm_loss": ("loss", 1.0),
    "consumed_tokens": ("tokens", 1.0),
    "elapsed_time_per_iteration_ms": ("step_time_s", 1e-3),
    "time_per_iteration_ms": ("step_time_s", 1e-3),
    "tokens_per_sec": ("tokens_per_s", 1.0),
    "model_tflops_per_gpu": ("tflops_per_device", 1.0),
    "cuda_max_memory_reserved": ("memory_bytes", 1.0),
}
"""Printed name -> (steps column, scale to the column's unit)."""


def parse_line(line: str) -> Parsed | None:
    """One nanotron iteration line, or None."""
    if "iteration: " not in line:
        return None
    m = _ITERATION.search(line)
    if not m:
        return None
    metrics: dict[str, float] = {TOTAL: float(m.group(2))}
    for field in m.group(3).split(" | ")[1:]:
        name, sep, raw = field.partition(": ")
        if not sep:
            return BAD
        got = mantissa(raw)
        if got is None:
            continue  # eta: 1:02:03
        value, scale = got
        column = _COLUMNS.get(name)
        if column is not None:
            metrics[column[0]] = scaled(value, scale * column[1])
        else:
            put(metrics, name, scaled(value, scale))
    if len(metrics) < 2:
        return BAD
    return Parsed(step=int(m.group(1)), metrics=metrics)


__all__ = ["NAME", "parse_line"]
