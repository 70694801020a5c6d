"""`--where` expressions: a tiny, safe filter language over receipt fields.

    EXPR  := COND ( ("and" | ",") COND )*
    COND  := KEY OP VALUE        OP: = != < <= > >= ~ (glob)
    KEY   := a dotted receipt path (workload.precision.compute, summary.final_loss, stack.hardware.gpu_model)
             or a shortcut: name, status, tag.K, precision, experts, top_k, seed, gpu, commit
    VALUE := a bare word or a quoted string; compared as numbers when both sides are numbers

Example: ``--where "precision=bf16 and summary.final_loss<3.5 and tag.sweep=lr"``.
Expressions are parsed, never executed: nothing in them reaches SQL or the file system.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger.errors import InvalidFilter

SHORTCUTS = {
    "precision": "workload.precision.compute",
    "experts": "workload.model.num_experts",
    "top_k": "workload.model.top_k",
    "seed": "workload.seed",
    "gpu": "stack.hardware.gpu_model",
    "commit": "stack.code.commit",
    "device": "workload.device",
}
_MAPS = ("tags", "summary.final_eval", "stack.environment", "stack.container.ngc", "stack.software.nvidia",
         "workload.data.generator")
_COND = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.\-/]*)\s*(!=|<=|>=|=|<|>|~)\s*(.*?)\s*$", re.S)
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@dataclass(frozen=True)
class Cond:
    """One comparison."""

    path: tuple[str, ...]
    op: str
    value: str

    def __call__(self, receipt: dict[str, Any]) -> bool:
        actual: Any = receipt
        for part in self.path:
            if not isinstance(actual, dict) or part not in actual:
                return False
            actual = actual[part]
        if actual is None:
            return self.op == "=" and self.value in ("null", "none", "") or self.op == "!=" and self.value not in (
                "null", "none", "")
        if self.op == "~":
            return fnmatch.fnmatchcase(_text(actual), self.value)
        a, b = _coerce(actual, self.value)
        try:
            return _OPS[self.op](a, b)
        except TypeError:
            return False


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _coerce(actual: Any, value: str) -> tuple[Any, Any]:
    if isinstance(actual, bool):
        return _text(actual), value.lower()
    if isinstance(actual, int | float):
        try:
            return float(actual), float(value)
        except ValueError:
            return _text(actual), value
    return _text(actual), value


def _key_path(key: str) -> tuple[str, ...]:
    key = SHORTCUTS.get(key, key)
    if key.startswith("tag."):
        key = "tags." + key[4:]
    from schemas import leaves

    valid = {path for path, _ in leaves()}
    if key in valid:
        return tuple(key.split("."))
    for prefix in _MAPS:
        if key.startswith(prefix + ".") and len(key) > len(prefix) + 1:
            return (*prefix.split("."), key[len(prefix) + 1 :])
    hint = ", ".join(sorted(SHORTCUTS) + ["tag.K", "summary.final_loss", "workload.router.capacity_factor"])
    raise InvalidFilter(f"unknown field {key!r} in --where; use a receipt path or one of: {hint}")


def parse(expr: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate over receipt dicts (``Receipt.model_dump(mode="json")``)."""
    if not expr.strip():
        raise InvalidFilter("empty --where expression; example: --where 'precision=bf16 and tag.sweep=lr'")
    conds = []
    for part in re.split(r"\s+and\s+|\s*,\s*", expr.strip(), flags=re.I):
        m = _COND.match(part)
        if not m:
            raise InvalidFilter(f"cannot parse {part!r} in --where; expected KEY OP VALUE, e.g. status=failed")
        key, op, raw = m.groups()
        try:
            words = shlex.split(raw) if raw else [""]
        except ValueError as exc:
            raise InvalidFilter(f"bad quoting in {part!r} in --where: {exc}; close the quote") from exc
        if len(words) != 1:
            raise InvalidFilter(f"value {raw!r} in --where must be one word or one quoted string")
        conds.append(Cond(_key_path(key), op, words[0]))
    return lambda receipt: all(c(receipt) for c in conds)
