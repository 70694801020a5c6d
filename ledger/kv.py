"""``KEY=VALUE`` options (``--tag``, ``--set``, ``--scale``, ``--group``, ``--env``...): one parser.

    >>> pair("sweep=lr", "--tag")
    ('sweep', 'lr')
    >>> pairs(["a=1", "b=x=y"], "--set")
    {'a': '1', 'b': 'x=y'}

The value is everything after the first ``=`` (it may hold ``=`` itself, and may be empty); the key must
not be empty. A malformed item is :class:`ledger.errors.BadInput` naming the option, the item and an
example. Part of the core: imports nothing but :mod:`ledger.errors`.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.errors import BadInput

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


__all__ = ["pair", "pairs"]
