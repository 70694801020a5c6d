"""``KEY=VALUE`` options (``--tag``, ``--set``, ``--scale``, ``--group``, ``--env``, ``--geometry``,
``--parallel``...): one parser.

    >>> pair("sweep=lr", "--tag")
    ('sweep', 'lr')
    >>> pairs(["a=1", "b=x=y"], "--set")
    {'a': '1', 'b': 'x=y'}
    >>> listed("tp=2, pp=4", "--parallel", ("tp", "pp", "ep"), convert=int)
    {'tp': 2, 'pp': 4}

The value is everything after the first ``=`` (it may hold ``=`` itself, and may be empty); the key must
not be empty. A malformed item is :class:`ledger.errors.BadInput` naming the option, the item and an
example. Part of the core: imports nothing but :mod:`ledger.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import TypeVar

from ledger.errors import BadInput

T = TypeVar("T")

_EXAMPLES = {
    "--tag": "--tag sweep=lr",
    "--set": "--set precision=bf16",
    "--scale": "--scale layers=x2",
    "--group": "--group sweep=bf16",
}


def pair(item: str, option: str, *, example: str | None = None, error: type[BadInput] = BadInput) -> tuple[str, str]:
    """``KEY=VALUE`` -> ``(key, value)``; raises ``error`` (a :class:`BadInput`) when there is no ``=`` or
    no key."""
    key, sep, value = item.partition("=")
    if not sep or not key:
        shown = example or _EXAMPLES.get(option, f"{option} key=value")
        raise error(f"{option} {item!r}: expected KEY=VALUE, e.g. {shown}")
    return key, value


def pairs(items: Iterable[str], option: str, *, example: str | None = None) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options as a mapping (a later key wins)."""
    return dict(pair(item, option, example=example) for item in items)


_KINDS = {"int": "an integer", "float": "a number"}


def recorded(items: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings a receipt recorded (a launch's ``--set`` overrides) as a mapping, each read as
    :func:`pair` reads it; an item that is not one was never an override and is left out (a later key wins)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def listed(text: str, option: str, keys: Collection[str] | None = None, *,
           convert: Callable[[str], T] = str,  # type: ignore[assignment]
           example: str | None = None) -> dict[str, T]:
    """Several ``KEY=VALUE`` items in one argument, ``a=1,b=2`` (``,`` or ``;`` between them, blanks around
    them ignored, ``-`` in a key read as ``_``), as a mapping; with ``keys``, every key must be one of them.
    Each value goes through ``convert`` (``int``, ``float``...); a value it refuses (``ValueError``) is a
    :class:`BadInput` naming the option and the key."""
    out: dict[str, T] = {}
    for item in filter(None, (p.strip() for p in text.replace(";", ",").split(","))):
        key, value = pair(item, option, example=example)
        key, value = key.strip().replace("-", "_"), value.strip()
        if keys is not None and key not in keys:
            raise BadInput(f"{option} {item!r}: unknown key {key!r}; the keys are {', '.join(keys)}")
        try:
            out[key] = convert(value)
        except ValueError:
            kind = _KINDS.get(getattr(convert, "__name__", ""), "a valid value")
            raise BadInput(f"{option} {item!r}: {key} must be {kind}, got {value!r}") from None
    return out


__all__ = ["listed", "pair", "pairs"]
