"""The contract: pydantic models of a receipt and Arrow schemas of its metric tables.

This package imports nothing else of stackreceipt.
"""

from schemas.factors import CAUSAL_FACTORS, Factor
from schemas.flatten import factor_of, flatten, leaves
from schemas.identity import canonical_json, content_id, is_sealed, seal
from schemas.migrations import SchemaVersionError, migrate
from schemas.receipt import (
    SCHEMA_VERSION,
    Architecture,
    Artifact,
    Batch,
    Capture,
    CapturedTable,
    Code,
    Container,
    Data,
    Drivers,
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

__all__ = [
    "CAUSAL_FACTORS", "SCHEMA_VERSION", "TABLES", "Architecture", "Artifact", "Batch", "Capture", "CapturedTable",
    "Code", "Container",
    "Data", "Drivers", "Factor", "Gpu", "Hardware", "ImportSource", "Kernels", "Launch", "Launcher", "Link", "Links",
    "NodeStack", "Optimizer", "Package", "Parallelism", "Precision", "Problem", "QualityGate", "Receipt", "Router",
    "SchemaVersionError", "Software", "Stack", "Summary", "Task", "Workload", "canonical_json", "content_id",
    "factor_of", "flatten", "is_sealed", "leaves", "migrate", "seal",
]
