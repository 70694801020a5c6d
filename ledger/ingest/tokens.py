"""Tokens per step of a wrapped launch, from its own configuration, where the names leave no doubt.

A launch that prints no token count still has a throughput in tokens when its configuration says how many
tokens one optimizer step consumes: the global batch (sequences per step, all ranks) times the sequence length.
The ledger does not know what a launch's arguments mean (``workload.arguments``), so only names whose meaning is
settled by the tools that use them count, each read as the last component of its key (``--global_batch_size``,
``train.yaml:data.seq_len``):

- the global batch: ``global_batch_size``, ``global_batch``, ``total_batch_size``, ``train_batch_size``
  (DeepSpeed's: all ranks, accumulation included);
- else, for a launch of a single process (no ``torchrun``, ``accelerate``, ``deepspeed``, ``srun`` or ``mpirun``
  in the command): a per-process batch (``per_device_train_batch_size``, ``micro_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``batch_size``) times the accumulation steps
  (``gradient_accumulation_steps``, ``grad_accum_steps``, ``accumulation_steps``; 1 when none is given);
- the sequence length: ``seq_length``, ``seq_len``, ``sequence_length``, ``max_seq_length``, ``max_seq_len``,
  ``block_size``, ``context_length``, ``cutoff_len``.

Two keys of one kind with different values (two configs that disagree) give nothing: no guess. The result says
which keys it used, for the receipt (``capture.tables[].derived``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GLOBAL_BATCH = ("global_batch_size", "global_batch", "total_batch_size", "train_batch_size")
LOCAL_BATCH = ("per_device_train_batch_size", "micro_batch_size", "train_micro_batch_size_per_gpu", "batch_size")
ACCUMULATION = ("gradient_accumulation_steps", "grad_accum_steps", "accumulation_steps")
SEQUENCE = ("seq_length", "seq_len", "sequence_length", "max_seq_length", "max_seq_len", "block_size",
            "context_length", "cutoff_len")
DISTRIBUTED = frozenset({"torchrun", "accelerate", "deepspeed", "srun", "mpirun", "mpiexec"})
_INT = re.compile(r"^\d{1,9}$")


@dataclass(frozen=True)
class TokensPerStep:
    """Tokens of one optimizer step and how they were found."""

    tokens: int
    how: str
    """e.g. ``global_batch_size x seq_len from the launch's arguments (64 x 2048)``."""


def _leaf(key: str) -> str:
    """The last component of a flattened key: ``train.yaml:data.seq_len`` -> ``seq_len``."""
    return re.split(r"[:.]", key)[-1].lower().lstrip("-")


def _one(args: Mapping[str, str], names: Sequence[str]) -> tuple[str, int] | None | bool:
    """The value of the first name (in ``names``' order) found among the keys, as an integer; None when none is
    found; False when its keys disagree or a value is not a whole number."""
    for name in names:
        found = {str(v).strip() for k, v in args.items() if _leaf(k) == name}
        if not found:
            continue
        if len(found) != 1 or not _INT.match(next(iter(found))):
            return False
        return name, int(next(iter(found)))
    return None


def tokens_per_step(args: Mapping[str, str], command: Sequence[str]) -> TokensPerStep | None:
    """Tokens per optimizer step from a launch's flattened arguments (see the module docs); None when its names
    do not settle it."""
    seq = _one(args, SEQUENCE)
    if not isinstance(seq, tuple) or seq[1] <= 0:
        return None
    batch = _one(args, GLOBAL_BATCH)
    if batch is False:
        return None
    if isinstance(batch, tuple):
        names, samples = batch[0], batch[1]
        values = f"{batch[1]} x {seq[1]}"
    else:
        if any(word.rsplit("/", 1)[-1] in DISTRIBUTED for word in command):
            return None  # per-process batches of an unknown number of processes
        local = _one(args, LOCAL_BATCH)
        accum = _one(args, ACCUMULATION)
        if not isinstance(local, tuple) or accum is False:
            return None
        steps = accum[1] if isinstance(accum, tuple) else 1
        names = local[0] + (f" x {accum[0]}" if isinstance(accum, tuple) else "")
        samples = local[1] * steps
        values = f"{local[1]}" + (f" x {steps}" if isinstance(accum, tuple) else "") + f" x {seq[1]}"
    if samples <= 0:
        return None
    return TokensPerStep(samples * seq[1], f"{names} x {seq[0]} from the launch's arguments ({values})")


__all__ = ["TokensPerStep", "tokens_per_step"]
