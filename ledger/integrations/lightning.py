"""A PyTorch Lightning ``Logger`` that records through :mod:`ledger.sdk`.

Usage (one line)::

    trainer = L.Trainer(max_epochs=3, logger=LedgerLogger())      # or logger=[CSVLogger(...), LedgerLogger()]

Each ``log_metrics`` call at a step becomes one row at Lightning's step: metrics named ``val...``,
``valid...`` or ``test...`` (``val_loss``, ``val/acc``) are evals of that split; the others are step
metrics (``train_loss``/``train_loss_step``/``loss`` fill ``loss``, ``lr-*`` from ``LearningRateMonitor``
fills ``lr``, the rest go to ``extra``). Rows of one step are merged before they are written. Hyper-parameters
Lightning hands to the logger are kept as the workload's seed and optimizer learning rate when they carry
those names (``lr``/``learning_rate``, ``seed``). Only rank zero writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

import ledger.sdk

_EVAL = re.compile(r"^(val|valid|validation|test)[_/](.+)$", re.I)


def _name(key: str) -> str:
    low = key.lower()
    if low in ("train_loss", "train_loss_step", "loss_step", "train/loss"):
        return "loss"
    if low.startswith(("lr-", "lr/")) or low in ("learning_rate", "lr"):
        return "lr"
    return key


class LedgerLogger(Logger):  # type: ignore[misc,unused-ignore]
    """Records a Lightning run's metrics into the current ledger run."""

    def __init__(self, run: Any = None) -> None:
        super().__init__()
        self.run = run if run is not None else ledger.sdk.current()
        self._pending: tuple[int, dict[str, float]] | None = None

    @property
    def name(self) -> str:
        return "ledger"

    @property
    def version(self) -> str:
        return "0"

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        return self.run

    @rank_zero_only  # type: ignore[misc,unused-ignore]
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        values = dict(params) if isinstance(params, Mapping) else dict(vars(params)) if params is not None else {}
        workload: dict[str, Any] = {}
        lr = values.get("lr", values.get("learning_rate"))
        if isinstance(lr, int | float) and not isinstance(lr, bool):
            workload["optimizer"] = {"lr": float(lr)}
        if isinstance(values.get("seed"), int):
            workload["seed"] = values["seed"]
        if workload:
            self.run.set_workload(workload)

    @rank_zero_only  # type: ignore[misc,unused-ignore]
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        at = int(step or 0)
        train: dict[str, float] = {}
        for key, value in metrics.items():
            value = float(value)
            m = _EVAL.match(key)
            if m:
                self.run.log_eval(at, value, metric=m.group(2), split=m.group(1).lower())
            elif key != "epoch" or len(metrics) > 1:
                train[_name(key)] = value
        if set(train) - {"epoch"}:
            if self._pending is not None and self._pending[0] == at:
                for k, v in train.items():
                    self._pending[1].setdefault(k, v)
            else:
                self._flush()
                self._pending = (at, train)

    def _flush(self) -> None:
        if self._pending is not None:
            step, values = self._pending
            self._pending = None
            self.run.log_step(step, **values)

    @rank_zero_only  # type: ignore[misc,unused-ignore]
    def save(self) -> None:
        self.run.flush()  # the pending step stays open: Lightning may log more of it

    @rank_zero_only  # type: ignore[misc,unused-ignore]
    def finalize(self, status: str) -> None:
        self._flush()
        self.run.flush()


__all__ = ["LedgerLogger"]
