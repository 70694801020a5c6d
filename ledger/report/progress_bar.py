"""The command line's progress bars (:mod:`ledger.progress`'s listener): rich, on stderr, on a terminal only.

A task is drawn once it has run for :data:`DELAY` seconds (``$LEDGER_PROGRESS_DELAY``), so quick commands print
nothing, and disappears when it ends (a transient bar: the output that follows is unchanged). rich is imported when
the first bar is drawn, not before: `ledger ls` answered from an up-to-date index pays nothing.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ledger import progress

DELAY = 0.5
"""Seconds a task runs before its bar is drawn."""
ENV_DELAY = "LEDGER_PROGRESS_DELAY"


@dataclass
class _Task:
    label: str
    total: float | None
    unit: str
    done: float = 0.0
    shown: Any = None
    """rich's task id once drawn."""


class TerminalBars:
    """Draws each task that runs longer than ``delay`` as a rich progress bar on ``stream`` (a terminal)."""

    def __init__(self, stream: Any, delay: float = DELAY) -> None:
        self.stream = stream
        self.delay = delay
        self.tasks: dict[int, _Task] = {}
        self.lock = threading.Lock()
        self.bar: Any = None
        self.next = 0

    def begin(self, label: str, total: float | None, unit: str) -> int:
        with self.lock:
            self.next += 1
            handle = self.next
            self.tasks[handle] = _Task(label, total, unit)
        if self.delay <= 0:
            self._show(handle)
        else:
            timer = threading.Timer(self.delay, self._show, [handle])
            timer.daemon = True
            timer.start()
        return handle

    def update(self, handle: int, done: float, total: float | None) -> None:
        with self.lock:
            task = self.tasks.get(handle)
            if task is None:
                return
            task.done, task.total = done, total
            if task.shown is not None:
                self.bar.update(task.shown, completed=done, total=total)

    def end(self, handle: int) -> None:
        with self.lock:
            task = self.tasks.pop(handle, None)
            if task is not None and task.shown is not None:
                self.bar.remove_task(task.shown)
            if not self.tasks and self.bar is not None:
                self.bar.stop()
                self.bar = None

    def _show(self, handle: int) -> None:
        with self.lock:
            task = self.tasks.get(handle)
            if task is None or task.shown is not None:
                return
            if self.bar is None:
                self.bar = _bar(self.stream)
                self.bar.start()
            task.shown = self.bar.add_task(task.label, total=task.total, completed=task.done,
                                           unit=task.unit)
            self.bar.refresh()  # drawn now, not at the next tick: a task that ends sooner was still shown


def _bar(stream: Any) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    from ledger.report import fmt

    class Amount(ProgressColumn):
        """``1.2 GiB / 3.4 GiB`` for bytes, ``64 / 512`` for counts, the count alone without a total."""

        def render(self, task: Any) -> Text:
            unit = task.fields.get("unit", "")
            show = fmt.size if unit == "bytes" else (lambda n: f"{int(n):,}")
            done = show(task.completed)
            return Text(done if task.total is None else f"{done} / {show(task.total)}" + (
                f" {unit}" if unit not in ("bytes", "") else ""), style="progress.download")

    return Progress(TextColumn("{task.description}"), BarColumn(), Amount(), TimeElapsedColumn(),
                    console=Console(file=stream, emoji=False, force_terminal=True), transient=True,
                    refresh_per_second=8)


@contextmanager
def on_terminal(stream: Any = None) -> Iterator[None]:
    """Show the library's tasks as bars while the block runs, when ``stream`` (stderr) is a terminal; nothing
    otherwise (a pipe, a file: no bars in logs)."""
    stream = stream if stream is not None else sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if not terminal:
        yield
        return
    try:
        delay = float(os.environ.get(ENV_DELAY, DELAY))
    except ValueError:
        delay = DELAY
    bars = TerminalBars(stream, delay)
    with progress.listening(bars):
        try:
            yield
        finally:
            with bars.lock:
                if bars.bar is not None:
                    bars.bar.stop()
                    bars.bar = None
