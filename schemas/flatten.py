"""Flatten a receipt into (dotted path, value, factor) leaves: what compare and `--where` work on."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from pydantic import BaseModel

from schemas.factors import Factor
from schemas.receipt import Receipt


@cache
def _field_factors(model: type[BaseModel]) -> dict[str, Factor | type[BaseModel]]:
    """Each field of a model: its factor for leaves, its model class for nested models."""
    out: dict[str, Factor | type[BaseModel]] = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and "factor" in extra:
            out[name] = Factor(str(extra["factor"]))
        elif isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            out[name] = info.annotation
        else:  # pragma: no cover - guarded by tests/schemas/test_receipt.py
            raise TypeError(f"{model.__name__}.{name} has no factor")
    return out


def leaves(model: type[BaseModel] = Receipt, prefix: str = "") -> Iterator[tuple[str, Factor]]:
    """Every leaf field path of a model class with its factor."""
    for name, tag in _field_factors(model).items():
        path = f"{prefix}{name}"
        if isinstance(tag, Factor):
            yield path, tag
        else:
            yield from leaves(tag, path + ".")


def factor_of(path: str) -> Factor:
    """The factor of a dotted leaf path such as ``workload.router.capacity_factor``."""
    model: type[BaseModel] = Receipt
    parts = path.split(".")
    for i, part in enumerate(parts):
        tag = _field_factors(model).get(part)
        if tag is None:
            raise KeyError(path)
        if isinstance(tag, Factor):
            return tag
        model = tag
        if i == len(parts) - 1:
            raise KeyError(f"{path} is a section, not a field")
    raise KeyError(path)  # pragma: no cover


def flatten(obj: BaseModel, prefix: str = "") -> dict[str, Any]:
    """Leaf path -> JSON-able value, for a receipt or any part of one."""
    out: dict[str, Any] = {}
    for name, tag in _field_factors(type(obj)).items():
        value = getattr(obj, name)
        path = f"{prefix}{name}"
        if isinstance(tag, Factor):
            out[path] = _jsonable(value)
        else:
            out.update(flatten(value, path + "."))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
