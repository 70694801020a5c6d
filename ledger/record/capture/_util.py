"""Small helpers shared by the probes: error text and bounded file reads that never raise."""

from __future__ import annotations

from pathlib import Path


def error_text(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line, ``Type: message``, at most ``limit`` characters."""
    text = " ".join(str(exc).split())
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line[:limit]


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    """The first ``limit`` bytes of a file as text, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


__all__ = ["error_text", "read_text"]
