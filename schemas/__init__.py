"""The contract: pydantic models of a receipt and Arrow schemas of its metric tables.

This package imports nothing else of stackreceipt. Importing it imports nothing either: each name is loaded
from its module on first use, so ``schemas.tables`` (pyarrow) does not pull in pydantic and the receipt
models, and ``ledger --help`` imports none of them.
"""

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schemas.factors import CAUSAL_FACTORS, Factor
    from schemas.flatten import factor_of, flatten, leaves
    from schemas.identity import canonical_json, content_id, is_sealed, seal
    from schemas.migrations import SchemaVersionError, migrate
    from schemas.receipt import (
        Architecture,
        Artifact,
        Batch,
        Capture,
        CapturedTable,
        Code,
        Container,
        Data,
        Drivers,
        Failure,
        Gpu,
        Hardware,
        ImportSource,
        Kernels,
        Launch,
        Launcher,
        Link,
        Links,
        NodeStack,
        Optimizer,
        Package,
        Parallelism,
        Precision,
        Problem,
        QualityGate,
        Receipt,
        Router,
        Software,
        Stack,
        Summary,
        Task,
        Workload,
    )
    from schemas.tables import TABLES
    from schemas.version import SCHEMA_VERSION

_MODULES = {
    "Architecture": "schemas.receipt",
    "Artifact": "schemas.receipt",
    "Batch": "schemas.receipt",
    "CAUSAL_FACTORS": "schemas.factors",
    "Capture": "schemas.receipt",
    "CapturedTable": "schemas.receipt",
    "Code": "schemas.receipt",
    "Container": "schemas.receipt",
    "Data": "schemas.receipt",
    "Drivers": "schemas.receipt",
    "Factor": "schemas.factors",
    "Failure": "schemas.receipt",
    "Gpu": "schemas.receipt",
    "Hardware": "schemas.receipt",
    "ImportSource": "schemas.receipt",
    "Kernels": "schemas.receipt",
    "Launch": "schemas.receipt",
    "Launcher": "schemas.receipt",
    "Link": "schemas.receipt",
    "Links": "schemas.receipt",
    "NodeStack": "schemas.receipt",
    "Optimizer": "schemas.receipt",
    "Package": "schemas.receipt",
    "Parallelism": "schemas.receipt",
    "Precision": "schemas.receipt",
    "Problem": "schemas.receipt",
    "QualityGate": "schemas.receipt",
    "Receipt": "schemas.receipt",
    "Router": "schemas.receipt",
    "SCHEMA_VERSION": "schemas.version",
    "SchemaVersionError": "schemas.migrations",
    "Software": "schemas.receipt",
    "Stack": "schemas.receipt",
    "Summary": "schemas.receipt",
    "TABLES": "schemas.tables",
    "Task": "schemas.receipt",
    "Workload": "schemas.receipt",
    "canonical_json": "schemas.identity",
    "content_id": "schemas.identity",
    "factor_of": "schemas.flatten",
    "flatten": "schemas.flatten",
    "is_sealed": "schemas.identity",
    "leaves": "schemas.flatten",
    "migrate": "schemas.migrations",
    "seal": "schemas.identity",
}
"""Where each public name lives."""

__all__ = [
    "CAUSAL_FACTORS", "SCHEMA_VERSION", "TABLES", "Architecture", "Artifact", "Batch", "Capture", "CapturedTable",
    "Code", "Container",
    "Data", "Drivers", "Factor", "Failure", "Gpu", "Hardware", "ImportSource", "Kernels", "Launch", "Launcher", "Link",
    "Links",
    "NodeStack", "Optimizer", "Package", "Parallelism", "Precision", "Problem", "QualityGate", "Receipt", "Router",
    "SchemaVersionError", "Software", "Stack", "Summary", "Task", "Workload", "canonical_json", "content_id",
    "factor_of", "flatten", "is_sealed", "leaves", "migrate", "seal",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'schemas' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Schemas(types.ModuleType):
    """``schemas.flatten`` is the function, as it was when this package imported every name eagerly: the
    import system's binding of the submodule of the same name must not replace it."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "flatten" and isinstance(value, types.ModuleType):
            value = value.flatten
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Schemas
