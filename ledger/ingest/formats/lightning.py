"""PyTorch Lightning's ``CSVLogger``: ``<save_dir>/<name>/version_N/metrics.csv``, one row per logging
call, with the columns of every metric ever logged (empty where a row did not log it)::

    epoch,step,train_loss,val_loss,val_acc
    0,49,2.31,,
    0,99,2.02,,
    0,99,,1.98,0.41

A row's ``step`` is Lightning's global step as written. Columns named ``val...``/``valid...``/``test...``
(``val_loss``, ``val/acc``) are evals of that split; the others are step metrics (``train_loss``,
``train_loss_step``, ``loss`` fill ``loss``; ``lr-AdamW`` from ``LearningRateMonitor`` fills ``lr``;
``epoch`` and the rest go to ``extra``). A row without a step, or whose only values are evals, adds no
step.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from ledger.ingest.formats.base import Parsed, number, put

NAME = "lightning-csv"
FILE = "metrics.csv"
_EVAL = re.compile(r"^(val|valid|validation|test)[_/](.+)$", re.I)


def _metric_name(column: str) -> str:
    low = column.lower()
    if low in ("train_loss", "train_loss_step", "loss_step", "train/loss"):
        return "loss"
    if low.startswith("lr-") or low.startswith("lr/"):
        return "lr"
    return column


def looks_like(path: Path) -> bool:
    """A CSV whose header has a ``step`` column (Lightning's layout)."""
    try:
        with path.open(newline="", errors="replace") as f:
            header = next(csv.reader(f), [])
    except OSError:
        return False
    return "step" in header


def parse_csv(path: Path) -> list[Parsed]:
    """The rows of a Lightning ``metrics.csv``."""
    out = []
    with path.open(newline="", errors="replace") as f:
        for row in csv.DictReader(f):
            raw_step = (row.get("step") or "").strip()
            if not raw_step.isdigit():
                continue
            metrics: dict[str, float] = {}
            evals = []
            for column, raw in row.items():
                if column in (None, "step") or raw is None or not raw.strip():
                    continue
                value = number(raw)
                if value is None:
                    continue
                m = _EVAL.match(column)
                if m:
                    evals.append((m.group(1).lower(), m.group(2), value))
                elif column != "epoch" or len(row) > 2:
                    put(metrics, _metric_name(column), value)
            step = int(raw_step)
            if set(metrics) - {"epoch"}:
                out.append(Parsed(step=step, metrics=metrics, evals=evals))
            elif evals:
                out.append(Parsed(step=step, evals=evals))
    return out


__all__ = ["FILE", "NAME", "looks_like", "parse_csv"]
