"""TensorBoard event files (``events.out.tfevents.*``), read with the ``tensorboard`` package's own event
loader (``EventAccumulator``: every scalar, no sampling).

Tags map as follows: a tag with a part ``eval``/``val``/``valid``/``validation``/``test`` (``eval/loss``,
``val_loss``, ``Loss/val``) is an eval of that split, the metric being the rest of the tag; other tags are
step metrics, ``train`` parts dropped (``train/loss``, ``Loss/train`` and ``loss`` fill ``loss``;
``train/learning_rate`` and ``lr`` fill ``lr``; the rest go to ``extra`` under the tag). Eval timing tags
(``eval/runtime``, ``..._per_second``) and ``hp_metric`` are left out. Scalars written as tensors (TF2
summaries) are read too.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ledger.errors import BadInput
from ledger.ingest.formats.base import Parsed, put

NAME = "tensorboard"
PREFIX = "events.out.tfevents."
_SPLITS = {"eval": "eval", "val": "val", "valid": "val", "validation": "val", "test": "test"}
_PART = re.compile(r"[/_]")
_SKIP_EVAL = ("runtime", "samples_per_second", "steps_per_second")


def available() -> bool:
    """Whether the reader is installed (the ``tensorboard`` extra)."""
    try:
        import tensorboard.backend.event_processing.event_accumulator  # noqa: F401
    except Exception:
        return False
    return True


def classify(tag: str) -> tuple[str | None, str] | None:
    """(split, metric) for an eval tag, (None, step metric name) otherwise; None for tags left out."""
    if tag == "hp_metric":
        return None
    parts = [p for p in tag.split("/") if p]
    for i, part in enumerate(parts):
        low = part.lower()
        head = _PART.split(low, maxsplit=1)
        if low in _SPLITS or (len(head) == 2 and head[0] in _SPLITS):
            split = _SPLITS[low] if low in _SPLITS else _SPLITS[head[0]]
            rest = parts[:i] + parts[i + 1:] if low in _SPLITS else parts[:i] + [part[len(head[0]) + 1:]] + parts[
                i + 1:]
            metric = "/".join(rest) or "value"
            if metric.endswith(_SKIP_EVAL):
                return None
            return split, metric
    kept = [p for p in parts if p.lower() not in ("train", "training")] or parts
    return None, "/".join(kept)


def _scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    out: dict[str, list[tuple[int, float]]] = defaultdict(list)
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        out[tag].extend((int(e.step), float(e.value)) for e in acc.Scalars(tag))
    if tags.get("tensors"):
        from tensorboard.util import tensor_util

        for tag in tags["tensors"]:
            for e in acc.Tensors(tag):
                value: Any = tensor_util.make_ndarray(e.tensor_proto)
                if getattr(value, "size", 0) == 1 and value.dtype.kind in "fiu":
                    out[tag].append((int(e.step), float(value.reshape(())) ))
    return out


def parse_events(paths: list[Path]) -> list[Parsed]:
    """Step and eval rows from event files (one row per step, metrics of every file merged)."""
    if not available():
        raise BadInput("reading TensorBoard events needs the tensorboard package: "
                       "pip install 'stackreceipt[tensorboard]'")
    steps: dict[int, dict[str, float]] = defaultdict(dict)
    evals: dict[int, list[tuple[str | None, str, float]]] = defaultdict(list)
    for path in paths:
        for tag, points in _scalars(path).items():
            kind = classify(tag)
            if kind is None:
                continue
            split, metric = kind
            for step, value in points:
                if split is None:
                    put(steps[step], metric, value)
                else:
                    evals[step].append((split, metric, value))
    out = [Parsed(step=s, metrics=m) for s, m in sorted(steps.items())]
    out += [Parsed(step=s, evals=e) for s, e in sorted(evals.items())]
    return out


__all__ = ["NAME", "PREFIX", "available", "classify", "parse_events"]
