from __future__ import annotations

import pytest

from ledger.errors import InvalidFilter
from ledger.store.filters import parse
from schemas import Receipt, Workload

R = Receipt(run_uuid="u", status="failed", name="fp8-run", tags={"sweep": "lr"},
            workload=Workload.model_validate({"seed": 3, "precision": {"compute": "fp8"}, "model": {"num_experts": 8}}),
            ).model_dump(mode="json")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("status=failed", True),
        ("status!=failed", False),
        ("precision=fp8 and experts>=8", True),
        ("experts>8", False),
        ("seed=3, tag.sweep=lr", True),
        ("name~fp8-*", True),
        ("name~*bf16*", False),
        ("tag.missing=x", False),
        ("workload.router.capacity_factor=null", True),
        ("name='fp8-run'", True),
    ],
)
def test_conditions(expr: str, expected: bool) -> None:
    assert parse(expr)(R) is expected


@pytest.mark.parametrize("expr", ["", "nofield=1", "name", "a==b==c", "name='unclosed", "name=two words"])
def test_bad_expressions(expr: str) -> None:
    with pytest.raises(InvalidFilter):
        parse(expr)
