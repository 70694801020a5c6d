"""Hugging Face Trainer: the dict lines it prints (``{'loss': 2.34, 'grad_norm': 1.1, 'learning_rate':
0.001, 'epoch': 0.1}``) and, at the end, ``trainer_state.json``'s ``log_history`` in its output directory.

The printed dicts carry no step number, so lines are numbered 1, 2, ... (``ordinal``); the capture prefers
``trainer_state.json``, whose entries carry ``step``, when the run wrote one. Eval dicts (``eval_loss``,
``eval_accuracy``...) become evals of split ``eval`` at the latest step; their timing entries
(``eval_runtime``, ``eval_samples_per_second``, ``eval_steps_per_second``) are throughput of the eval, not
quality, and are left out. The closing ``{'train_runtime': ..., 'train_loss': ...}`` summary is not a step.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from ledger.ingest.formats.base import BAD, Parsed, number, put

NAME = "hf-trainer"
STATE_FILE = "trainer_state.json"
_EVAL_TIMING = ("runtime", "samples_per_second", "steps_per_second")


def _value(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        return number(v)
    return None


def _from_dict(d: dict[str, Any], step: int | None) -> Parsed | None:
    if "loss" in d:
        metrics: dict[str, float] = {}
        for k, v in d.items():
            x = _value(v)
            if x is not None and k != "step":
                put(metrics, str(k), x)
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
    """One printed Trainer dict, or None."""
    if "{'" not in line or "}" not in line:
        return None
    start, end = line.find("{'"), line.rfind("}")
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
