"""The live trail of a wrapped launch: what its output's capture has read so far, for ``ledger watch`` and the web
view's live page, which read it while the launch runs.

The capture (:class:`ledger.ingest.formats.scan.LineCapture`) hands every step line it reads to a :class:`Trail`,
which keeps, per format, the latest :data:`RECENT` step lines in full (counter, epoch, the total beside the
counter, loss, learning rate, rates) and a thinned history of the whole run for the loss curve (at most
:data:`HISTORY` points: when full, every other point is dropped and only every other later line is kept). At most
every :data:`WRITE_S` seconds, and when the capture is idle or ends, the trail of the format that read the most
lines is written to ``live.json`` in the staging directory (written aside, then renamed: a reader never sees half
a file). Lines are identified by their line number in ``output.log``; a reader times them with the output's clock
(:mod:`ledger.store.clock`).

Writing the trail never fails the capture: an error stops the trail, not the parsing.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RECENT = 50
"""Step lines kept in full, per format."""
HISTORY = 1000
"""Points of the thinned loss history, per format."""
WRITE_S = 0.5
"""Seconds between two writes of the trail (while lines come)."""
FIELDS = ("loss", "lr", "tokens_per_s", "samples_per_s", "steps_per_s", "epoch", "@total")
"""What is kept of each recent line besides its line number and counter."""


@dataclass
class _Format:
    lines: int = 0
    recent: deque[list[Any]] = field(default_factory=lambda: deque(maxlen=RECENT))
    history: list[tuple[int, int, float]] = field(default_factory=list)
    stride: int = 1
    points: int = 0
    """Finite losses seen: every ``stride``-th of them goes to the history."""

    def add(self, lines: Any, steps: Any, values: Mapping[str, Any]) -> None:
        """Step lines (sequences or arrays of line numbers, counters and each metric's values)."""
        n = len(lines)
        self.lines += n
        for i in range(max(0, n - RECENT), n):
            self.recent.append([int(lines[i]), int(steps[i]),
                                *(_finite(values[name][i]) if name in values else None for name in FIELDS)])
        losses = values.get("loss")
        if losses is None:
            return
        finite = [i for i in range(n) if math.isfinite(float(losses[i]))] if n <= RECENT else \
            np.flatnonzero(np.isfinite(np.asarray(losses, np.float64))).tolist()
        first = (-self.points) % self.stride  # the next point the stride keeps
        for k in range(first, len(finite), self.stride):
            i = finite[k]
            self.history.append((int(lines[i]), int(steps[i]), float(losses[i])))
        self.points += len(finite)
        while len(self.history) >= HISTORY:
            self.history = self.history[::2]
            self.stride *= 2


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


class Trail:
    """What the capture read so far, written to ``path`` now and then (see the module docs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.formats: dict[str, _Format] = {}
        self.changed = False
        self.written = 0.0
        self.failed = False

    def add(self, name: str, line: int, step: int, metrics: Mapping[str, float]) -> None:
        """One step line a format read (``step``: its counter as printed)."""
        self.formats.setdefault(name, _Format()).add([line], [step], {k: [v] for k, v in metrics.items()})
        self.changed = True

    def add_columns(self, name: str, lines: Any, steps: Any, values: Mapping[str, Any]) -> None:
        """Step lines read as columns (arrays): all counted, the last :data:`RECENT` kept, the history thinned."""
        self.formats.setdefault(name, _Format()).add(lines, steps, values)
        self.changed = True

    def due(self) -> bool:
        return self.changed and not self.failed and time.monotonic() - self.written >= WRITE_S

    def write(self) -> None:
        """Write the trail of the format that read the most lines (when something changed)."""
        if not self.changed or self.failed or not self.formats:
            return
        name, fmt = max(self.formats.items(), key=lambda kv: kv[1].lines)
        totals = [r[-1] for r in fmt.recent if r[-1] is not None]
        data = {"format": name, "lines": fmt.lines, "fields": ["line", "step", *FIELDS],
                "recent": list(fmt.recent), "planned": int(totals[-1]) if totals else None,
                "history": fmt.history}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps(data, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError:
            self.failed = True
            return
        self.changed = False
        self.written = time.monotonic()


__all__ = ["FIELDS", "HISTORY", "RECENT", "WRITE_S", "Trail"]
