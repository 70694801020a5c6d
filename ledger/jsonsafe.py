"""Strict JSON values: what every ``--json`` output and ``to_json()`` result holds, so that any JSON parser
reads it. JSON has no NaN or infinities (they become null) and no decimals (DuckDB's sums of integers come as
:class:`decimal.Decimal`: they become integers when whole, else floats).

    >>> json_safe({"a": float("nan"), "b": [1.5, float("inf")], "c": Decimal("12")})
    {'a': None, 'b': [1.5, None], 'c': 12}

Part of the core: imports nothing of ours.
"""

from __future__ import annotations

import math
import sys
from typing import Any


def json_safe(data: Any) -> Any:
    """``data`` with NaN and infinities as None and decimals as numbers, through dicts, lists and tuples
    (tuples become lists, as JSON has them); anything else unchanged."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    decimal = sys.modules.get("decimal")  # not imported here: a Decimal exists only once something imported it
    if decimal is not None and isinstance(data, decimal.Decimal):
        return int(data) if data.is_finite() and data == data.to_integral_value() else json_safe(float(data))
    return data


__all__ = ["json_safe"]
