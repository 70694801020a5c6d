"""Hugging Face Trainer: the dict lines it prints (``{'loss': 2.34, 'grad_norm': 1.1, 'learning_rate':
0.001, 'epoch': 0.1}``) and, at the end, ``trainer_state.json``'s ``log_history`` in its output directory; the same
dicts as trainers built on it print them (LlamaFactory, ms-swift).

The Trainer's dicts carry no step number, so they are ``ordinal``: the capture numbers them 1, 2, ... unless a
progress bar's counter was printed before the dict on the same physical line (the Trainer writes its dict with
``tqdm.write``, between two redraws of its bar: ``\\r 1%| | 20/1352 [00:10<11:20, 1.96it/s]\\r{'loss': ...}``), or on
the physical line before it: then the counter is the step and its total ``@total``
(:meth:`.scan.LineCapture.offer`). tqdm redraws its bar at most every 0.1 s, so when steps are faster than that the
counter printed before a dict may lag the step it logs. The capture prefers ``trainer_state.json``, whose entries
carry ``step``, when the run wrote one.

- Eval dicts (``eval_loss``, ``eval_accuracy``...) become evals of split ``eval`` at the latest step (or at their
  own step, below); their timing entries (``eval_runtime``, ``eval_samples_per_second``, ``eval_steps_per_second``)
  are throughput of the eval, not quality, and are left out. The closing ``{'train_runtime': ..., 'train_loss':
  ...}`` summary is not a step.
- A dict cut short (another process's output or a bar's redraw wrote into the middle of it: ``{'eval_loss': 2.31,
  'eval_runtime': 3.2, 'eval_sam``) keeps the entries complete before the cut (those followed by ``, '``).
- ``epoch`` goes to the reserved ``epoch`` column; ``num_input_tokens_seen`` (all processes) to ``tokens``; other
  names through :data:`.base.ALIASES`.
- ms-swift adds ``'global_step/max_steps': '45/94'``: the step (45) and its total (``@total``, 94), for its eval
  dicts too; ``memory(GiB)`` (its own peak memory figure) -> ``memory_bytes``; ``train_speed(iter/s)`` ->
  ``steps_per_s``; its ``percentage``, ``elapsed_time`` and ``remaining_time`` strings are not numbers.
- LlamaFactory's ``LogCallback`` logs a short dict on the line its bar was last drawn on, before the Trainer's own
  (``  2%|█▋    | 5/300 [00:26<25:00,  5.09s/it][INFO|2025-04-30 22:55:57] llamafactory.train.callbacks:143 >>
  {'loss': 1.4229, 'learning_rate': 4.9978e-05, 'epoch': 0.17, 'throughput': 1828.21}``, its values rounded); both
  get the bar's counter as their step, so the two prints of one step are one step. Its ``throughput`` (tokens/s of
  all processes averaged since the start) stays in ``extra`` as printed.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from ledger.ingest.formats.base import BAD, TOTAL, Parsed, number, put

NAME = "hf-trainer"
STATE_FILE = "trainer_state.json"
_EVAL_TIMING = ("runtime", "samples_per_second", "steps_per_second")
_GLOBAL_STEP = "global_step/max_steps"
_COUNTER = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def _value(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        return number(v)
    return None


def _from_dict(d: dict[str, Any], step: int | None) -> Parsed | None:
    total: float | None = None
    counter = d.get(_GLOBAL_STEP)
    if step is None and isinstance(counter, str):
        m = _COUNTER.match(counter)
        if m:
            step, total = int(m.group(1)), float(m.group(2))
    if "loss" in d:
        metrics: dict[str, float] = {}
        for k, v in d.items():
            x = _value(v)
            if x is not None and k != "step":
                put(metrics, str(k), x)
        if total is not None:
            metrics[TOTAL] = total
        return Parsed(step=step, metrics=metrics, ordinal=step is None)
    evals: list[tuple[str | None, str, float]] = []
    for k, v in d.items():
        key = str(k)
        if key.startswith("eval_") and not key.endswith(_EVAL_TIMING):
            x = _value(v)
            if x is not None:
                evals.append(("eval", key[len("eval_"):], x))
    if evals:
        return Parsed(step=step, evals=evals)
    return None


def parse_line(line: str) -> Parsed | None:
    """One printed Trainer dict (or the complete entries of one cut short), or None."""
    start = line.find("{'")
    if start < 0:
        return None
    end = line.rfind("}")
    if end < start:  # cut short: the entries before the last `, '` are complete
        end = line.rfind(", '")
        if end <= start:
            return None
        text = line[start:end] + "}"
    else:
        text = line[start:end + 1]
    if "'loss'" not in text and "'eval_" not in text:
        return None
    try:
        d = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return BAD
    if not isinstance(d, dict):
        return BAD
    return _from_dict(d, None)


def parse_state(path: Path) -> list[Parsed]:
    """The ``log_history`` entries of a ``trainer_state.json`` (each with its step)."""
    data = json.loads(path.read_text(errors="replace"))
    out = []
    for entry in data.get("log_history") or [] if isinstance(data, dict) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            continue
        parsed = _from_dict(entry, entry["step"])
        if parsed is not None:
            out.append(parsed)
    return out


__all__ = ["NAME", "STATE_FILE", "parse_line", "parse_state"]
