"""A Hugging Face ``TrainerCallback`` that records through :mod:`ledger.sdk`.

Usage (one line)::

    trainer = Trainer(model, args, train_dataset=ds, callbacks=[LedgerCallback()])

Every optimizer step gets a row with its wall time (``step_time_s``, from ``on_step_begin`` to
``on_step_end``) and, on logging steps, what the Trainer logged (``loss``, ``learning_rate`` as ``lr``,
``grad_norm``; anything else numeric in ``extra``); tokens when the Trainer counts them
(``include_num_input_tokens_seen``). Eval logs (``eval_loss``, ``eval_accuracy``...) become evals of split
``eval`` at the step they were made (their timing entries are left out). The training arguments that are
hyper-parameters become the workload's optimizer, batch and seed; checkpoint saves become events. Only the
main process writes.
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

import ledger.sdk

_EVAL_TIMING = ("runtime", "samples_per_second", "steps_per_second")
_RENAME = {"learning_rate": "lr"}


class LedgerCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
    """Records a Trainer's steps, evals and hyper-parameters into the current ledger run."""

    def __init__(self, run: Any = None) -> None:
        self.run = run if run is not None else ledger.sdk.current()
        self._began: float | None = None
        self._pending: tuple[int, dict[str, float]] | None = None

    def _flush(self) -> None:
        if self._pending is not None:
            step, metrics = self._pending
            self._pending = None
            self.run.log_step(step, **metrics)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self.run.set_workload({
            "optimizer": {"name": str(getattr(args, "optim", "") or "") or None, "lr": args.learning_rate,
                          "weight_decay": args.weight_decay, "warmup_steps": args.warmup_steps or None,
                          "schedule": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
                          "grad_clip": args.max_grad_norm},
            "batch": {"micro_batch": args.per_device_train_batch_size,
                      "steps": state.max_steps or None},
            "seed": args.seed,
        })

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._began = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        self._flush()
        metrics: dict[str, float] = {}
        if self._began is not None:
            metrics["step_time_s"] = time.perf_counter() - self._began
        tokens = getattr(state, "num_input_tokens_seen", 0)
        if tokens:
            metrics["tokens"] = int(tokens)
        self._pending = (state.global_step, metrics)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        step = state.global_step
        train = {}
        for key, value in logs.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if key.startswith("eval_"):
                if not key.endswith(_EVAL_TIMING):
                    self.run.log_eval(step, float(value), metric=key[len("eval_"):], split="eval")
            elif "loss" in logs:
                train[_RENAME.get(key, key)] = float(value)
        if train:
            if self._pending is not None and self._pending[0] == step:
                self._pending[1].update(train)
            else:
                self._flush()
                self._pending = (step, train)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self.run.event("checkpoint_save_end", step=state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._flush()
            self.run.flush()


__all__ = ["LedgerCallback"]
