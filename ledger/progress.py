"""Progress of long operations: the library says how far it is, whoever listens shows it.

Library code (store, ingest, analyses) marks a long stretch of work, whatever calls it::

    with progress.task("reading train.log", total=size_in_bytes, unit="bytes") as advance:
        for block in blocks:
            ...
            advance(done)               # absolute: how much of ``total`` is done

Nobody listens by default (the Python API, tests, a piped command): then a task costs a function call. The
command line listens on a terminal (:func:`ledger.report.console.progress_on_terminal`: a rich progress bar on
stderr, shown only once a task has run for a moment, gone when it ends) and nowhere else, so piped output is never
mixed with bars. Tasks nest: the innermost one is shown with its parents' labels.

This module imports nothing of ours and nothing heavy: every layer may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

Advance = Callable[..., None]
"""``advance(done)`` or ``advance(done, total)``: how much of the task is done (absolute, not an increment)."""


class Listener(Protocol):
    """What shows progress (the CLI's is a rich progress bar)."""

    def begin(self, label: str, total: float | None, unit: str) -> int:
        """A task starts; returns its handle."""

    def update(self, handle: int, done: float, total: float | None) -> None:
        """How far the task is."""

    def end(self, handle: int) -> None:
        """The task ended (finished, or left by an exception)."""


_LISTENER: ContextVar[Listener | None] = ContextVar("ledger_progress_listener", default=None)


def _nothing(done: float, total: float | None = None) -> None:
    return None


@contextmanager
def task(label: str, total: float | None = None, unit: str = "") -> Iterator[Advance]:
    """A stretch of work worth showing; yields ``advance(done[, total])``."""
    listener = _LISTENER.get()
    if listener is None:
        yield _nothing
        return
    handle = listener.begin(label, total, unit)
    known = [total]

    def advance(done: float, new_total: float | None = None) -> None:
        if new_total is not None:
            known[0] = new_total
        listener.update(handle, done, known[0])

    try:
        yield advance
    finally:
        listener.end(handle)


@contextmanager
def listening(listener: Listener | None) -> Iterator[None]:
    """Show the tasks started inside the block (in this thread and context) with ``listener``."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def active() -> bool:
    """Whether anyone listens (a caller may then skip work done only for progress, such as a file's size)."""
    return _LISTENER.get() is not None
