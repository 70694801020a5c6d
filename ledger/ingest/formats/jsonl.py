"""JSON lines: one JSON object per line, on stdout or stderr, alone or after a logging prefix::

    {"step": 1, "loss": 3.0, "lr": 0.001}
    2022-11-11 14:05:29 | INFO | train_inner | {"epoch": 1, "loss": "15.864", "num_updates": "2", "lr": "5.6e-07"}

The object is the text from the line's first ``{"`` to its last ``}``, read by :func:`json.loads` (so ``NaN`` and
``Infinity`` as Python's ``json.dumps`` writes them are numbers); whatever precedes it (a time, a level, a logger's
name: fairseq's and metaseq's ``--log-format json``) is a prefix and never read. A line whose text there is not a
JSON object is not a line of this format.

- **Nested objects** are flattened, their names joined with ``/``: ``{"train": {"loss": 2.0}}`` is ``train/loss``
  (which :data:`.base.ALIASES` reads as ``loss``), as W&B and TensorBoard name them. Lists, booleans, nulls and
  strings that are not numbers are left out; a string that is a number (fairseq prints ``"loss": "15.864"``) is
  read as one, with a decimal multiplier if it has one (``"85.8G"``).
- **The step**: the first of ``step``, ``global_step``, ``iteration``, ``iter``, ``_step`` (W&B),
  ``num_updates`` (fairseq), ``current_steps`` (LlamaFactory's ``trainer_log.jsonl``), ``train/global_step``,
  ``trainer/global_step`` that is a whole number (an integer, or a string of digits); a counter string such as
  ms-swift's ``"global_step/max_steps": "45/94"`` gives the step (45) and its total (``@total``: 94). A total may
  also be given by ``total_steps``, ``max_steps`` or ``train_iters``. The step's key is never a metric.
- **A step** is an object with a step and at least one training metric: a name with ``loss`` in it, or ``lr``,
  ``learning_rate``, ``grad_norm``, ``ppl``, ``perplexity`` (the rule of key-value lines: ``{"step": 500,
  "event": "checkpoint"}`` is no step). ``epoch`` goes to the reserved ``epoch``; every other number through
  :data:`.base.ALIASES` (``train/loss`` -> ``loss``, ``tokens_per_sec`` -> ``tokens_per_s``,
  ``samples_per_second`` -> ``samples_per_s``...) and, when it has no column, to ``extra`` under its name.
- **Evals**: names that start with ``eval``, ``val``, ``valid``, ``validation`` or ``test`` and ``_`` or ``/``
  (``eval_loss``, ``val/acc``) are evals of that split at the object's step; their timing and batch names
  (``*_runtime``, ``*_samples_per_second``, ``*_steps_per_second``, fairseq's ``*_wps``, ``*_ups``, ``*_wpb``,
  ``*_bsz``, ``*_wall``) are left out. An object of evals only may name its step with the
  split's prefix (fairseq's ``"valid_num_updates": "500"``); without a step they belong to the latest step.
- Names of a process's place (``rank``, ``local_rank``...: :data:`.base.LABELS`) are labels, never metrics.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ledger.ingest.formats.base import LABELS, TOTAL, Parsed, number, put

NAME = "json-lines"
STEP_KEYS = ("step", "global_step", "iteration", "iter", "_step", "num_updates", "current_steps", "train/global_step",
             "trainer/global_step", "global_step/max_steps")
"""Names of the step, the first present wins."""
TOTAL_KEYS = ("total_steps", "max_steps", "train_iters")
_TRAINING = frozenset({"lr", "learning_rate", "grad_norm", "ppl", "perplexity"})
_EVAL = re.compile(r"^(eval|val|valid|validation|test)[_/](.+)$", re.I)
_SPLITS = {"val": "val", "valid": "val", "validation": "val", "eval": "eval", "test": "test"}
_EVAL_TIMING = ("runtime", "samples_per_second", "steps_per_second")
_EVAL_FIGURES = frozenset({"wps", "ups", "wpb", "bsz", "wall", "train_wall"})
"""Eval names that are the eval's throughput or batch, not its quality: ending like the Trainer's ``eval_runtime``...,
or fairseq's ``valid_wps``, ``valid_wpb``, ``valid_bsz``..."""
_COUNTER = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_line(line: str) -> Parsed | None:
    """One JSON object with a step (or evals), or None."""
    start = line.find('{"')
    if start < 0:
        return None
    end = line.rfind("}")
    if end < start:
        return None
    try:
        obj = json.loads(line[start:end + 1])
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    flat: dict[str, Any] = {}
    _flatten(obj, "", flat)
    step, total, step_key = _step(flat)
    metrics: dict[str, float] = {}
    evals: list[tuple[str | None, str, float]] = []
    training = False
    for key, raw in flat.items():
        if key == step_key or key.lower() in LABELS:
            continue
        value = _value(raw)
        if value is None:
            continue
        m = _EVAL.match(key)
        if m:
            name = m.group(2)
            if not name.endswith(_EVAL_TIMING) and name not in _EVAL_FIGURES and name.lower() not in STEP_KEYS:
                evals.append((_SPLITS[m.group(1).lower()], name, value))
            continue
        low = key.lower()
        if low in TOTAL_KEYS:
            total = total if total is not None else value
            continue
        if "loss" in low or low in _TRAINING:
            training = True
        put(metrics, key, value)
    if step is None and evals:
        step = _eval_step(flat)
    if training and step is not None:
        if total is not None:
            metrics[TOTAL] = total
        return Parsed(step=step, metrics=metrics, evals=evals)
    if evals:
        return Parsed(step=step, evals=evals)
    return None


def _flatten(obj: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, f"{name}/", out)
        else:
            out.setdefault(name, value)


def _value(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        return number(raw)
    return None


def _whole(raw: Any) -> int | None:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    return None


def _step(flat: dict[str, Any]) -> tuple[int | None, float | None, str | None]:
    """(step, its total, the step's key) of an object."""
    for key in STEP_KEYS:
        if key not in flat:
            continue
        raw = flat[key]
        if isinstance(raw, str):
            m = _COUNTER.match(raw)
            if m:
                return int(m.group(1)), float(m.group(2)), key
        step = _whole(raw)
        if step is not None:
            return step, None, key
    return None, None, None


def _eval_step(flat: dict[str, Any]) -> int | None:
    """The step an object of evals names with its split's prefix (``valid_num_updates``)."""
    for key, raw in flat.items():
        m = _EVAL.match(key)
        if m and m.group(2).lower() in STEP_KEYS:
            return _whole(raw)
    return None


__all__ = ["NAME", "STEP_KEYS", "TOTAL_KEYS", "parse_line"]
