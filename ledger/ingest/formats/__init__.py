"""Log formats shared by live capture (``ledger record``) and ``ledger ingest log``.

Line formats, tried in this order on every line that mentions a loss, a step or an iteration:
Hugging Face Trainer dicts (and those of trainers built on it: LlamaFactory, ms-swift), nanoGPT, torchtitan,
DeepSpeed, open-instruct, nanotron, JSON lines, then generic key/value step lines. File formats found in the
run's directory: ``trainer_state.json``, Lightning's ``metrics.csv`` and TensorBoard event files. See each module
for what its lines look like and how their names map to columns. Megatron-LM logs are read by
:mod:`ledger.ingest.megatron` (its iteration lines are skipped here).
"""

from __future__ import annotations

from ledger.ingest.formats import deepspeed, hf, jsonl, keyvalue, nanogpt, nanotron, openinstruct, torchtitan
from ledger.ingest.formats.base import Format

LINE_FORMATS: dict[str, Format] = {
    hf.NAME: hf.parse_line,
    nanogpt.NAME: nanogpt.parse_line,
    torchtitan.NAME: torchtitan.parse_line,
    deepspeed.NAME: deepspeed.parse_line,
    openinstruct.NAME: openinstruct.parse_line,
    nanotron.NAME: nanotron.parse_line,
    jsonl.NAME: jsonl.parse_line,
    keyvalue.NAME: keyvalue.parse_line,
}
"""Line formats by name, in the order autodetection tries them (the generic one last)."""

__all__ = ["LINE_FORMATS"]
