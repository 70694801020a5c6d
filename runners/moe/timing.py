"""Cheap, switchable per-phase timers: perf_counter on CPU, CUDA events on GPU.

    timer = PhaseTimer(enabled=True, device=torch.device("cpu"))
    with timer.phase("router"):
        ...
    seconds = timer.collect()     # {"router": 0.0012, ...}, summed over the step; resets

Phases never nest, so they add up: the MoE layer stops "dispatch" before it starts "all_to_all". The
all-to-all run by autograd during backward is timed as "all_to_all" too (``in_backward=True``) and taken
out of "backward" by :meth:`collect`. Disabled, :meth:`phase` returns one shared no-op context.

What each phase covers (forward unless said): attention (norm + attention block), router (gate, top-k,
losses, and the all-reduce of expert counts for the global-batch aux loss under DP), dispatch (sort by
expert, capacity, gather, regroup after the exchange), all_to_all (counts and rows, forward and backward),
expert (routed and shared experts; dense FFN layers), combine (un-permute, weighted sum), backward (autograd
minus its all-to-all), grad_sync (gradient all-reduce), optimizer (clip, AdamW, schedule, expert-bias
update). The training loop adds "other": the step's wall time minus all of these (embedding, LM head,
loss, data, delay_s).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Any

import torch

PHASES = (
    "attention",
    "router",
    "dispatch",
    "all_to_all",
    "expert",
    "combine",
    "backward",
    "grad_sync",
    "optimizer",
)
"""The phases a step is split into; "other" (the remainder of the step) is added by the training loop."""

_NULL = contextlib.nullcontext()


class _CpuSpan:
    __slots__ = ("timer", "name", "in_backward", "t0")

    def __init__(self, timer: PhaseTimer, name: str, in_backward: bool) -> None:
        self.timer, self.name, self.in_backward = timer, name, in_backward

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: Any) -> None:
        dt = time.perf_counter() - self.t0
        self.timer._cpu[self.name] += dt
        if self.in_backward:
            self.timer._cpu["_in_backward"] += dt


class _CudaSpan:
    __slots__ = ("timer", "name", "in_backward", "start")

    def __init__(self, timer: PhaseTimer, name: str, in_backward: bool) -> None:
        self.timer, self.name, self.in_backward = timer, name, in_backward

    def __enter__(self) -> None:
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()

    def __exit__(self, *exc: Any) -> None:
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.timer._events.append((self.name, self.start, end, self.in_backward))


class PhaseTimer:
    """Accumulates the time of named phases over one step."""

    def __init__(self, enabled: bool, device: torch.device) -> None:
        self.enabled = enabled
        self.cuda = device.type == "cuda"
        self._cpu: defaultdict[str, float] = defaultdict(float)
        self._events: list[tuple[str, Any, Any, bool]] = []

    def phase(self, name: str, *, in_backward: bool = False) -> contextlib.AbstractContextManager[Any]:
        """Time the enclosed code as ``name`` (a no-op when disabled)."""
        if not self.enabled:
            return _NULL
        return _CudaSpan(self, name, in_backward) if self.cuda else _CpuSpan(self, name, in_backward)

    def collect(self) -> dict[str, float]:
        """Seconds per phase since the last collect (synchronises CUDA once), and reset."""
        totals = defaultdict(float, self._cpu)
        if self._events:
            torch.cuda.synchronize()
            for name, start, end, in_backward in self._events:
                ms = start.elapsed_time(end) / 1e3
                totals[name] += ms
                if in_backward:
                    totals["_in_backward"] += ms
        inner = totals.pop("_in_backward", 0.0)
        if "backward" in totals:
            totals["backward"] = max(0.0, totals["backward"] - inner)
        self._cpu = defaultdict(float)
        self._events = []
        return dict(totals)
