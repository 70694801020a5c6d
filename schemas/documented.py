"""The receipt models with each field's docstring as its description, for the JSON Schema files and
anything that shows field descriptions.

:mod:`schemas.receipt` is loaded once more, from the same file, as ``schemas.documented_receipt``, where
:data:`schemas.receipt.DOCUMENTED` turns on pydantic's ``use_attribute_docstrings``. The runtime models skip
that extraction (pydantic parses the module's source for it: a third of the import, paid by every `ledger
record`); the two copies validate alike, and only this one is used to write ``schemas/json``.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from pydantic import BaseModel

from schemas import receipt

NAME = "schemas.documented_receipt"


def module() -> ModuleType:
    """The documented copy of :mod:`schemas.receipt` (loaded on first use, then kept in ``sys.modules``, where
    pydantic's docstring extraction finds the classes' source)."""
    loaded = sys.modules.get(NAME)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(NAME, receipt.__file__)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[NAME]
        raise
    return loaded


def model(name: str) -> type[BaseModel]:
    """The documented model of this name (``"Receipt"``, ``"Router"``...): a class of its own, not the runtime
    model of that name."""
    cls = getattr(module(), name)
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
        raise KeyError(f"schemas.receipt has no model {name!r}")
    return cls
