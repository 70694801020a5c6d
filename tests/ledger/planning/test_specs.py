"""`ledger plan`'s ``--geometry`` and ``--parallel``: several KEY=VALUE items in one argument, read by the one
parser of the core (:func:`ledger.kv.listed`), with planning's own checks on the values."""

from __future__ import annotations

import pytest

from ledger.errors import BadInput
from ledger.planning.api import parse_parallel
from ledger.planning.geometry import Geometry, parse_spec


def test_geometry_over_defaults() -> None:
    spec = parse_spec("layers=32, hidden=4096;experts=64,top-k=4,granularity=2", {"layers": 1.0, "vocab": 50.0})
    assert spec == {"layers": 32.0, "hidden": 4096.0, "experts": 64.0, "top_k": 4.0, "granularity": 2.0,
                    "vocab": 50.0}
    assert parse_spec("shared_experts=0", {})["shared_experts"] == 0.0  # the one field that may be 0
    for text, message in (("layers=0", "--geometry: layers must be > 0, got 0"),
                          ("hidden=-64", "--geometry: hidden must be > 0, got -64"),
                          ("hidden=wide", "hidden must be a number, got 'wide'"),
                          ("depth=2", "unknown key 'depth'; the keys are layers, hidden")):
        with pytest.raises(BadInput, match=message):
            parse_spec(text, {})


def test_parallel_plan() -> None:
    assert parse_parallel("tp=2,pp=4,micro-batch=1") == {"tp": 2, "pp": 4, "micro_batch": 1}
    with pytest.raises(BadInput, match="tp must be an integer, got '1.5'"):
        parse_parallel("tp=1.5")
    with pytest.raises(BadInput, match=r"expected KEY=VALUE, e\.g\. --parallel tp=2,pp=4"):
        parse_parallel("tp")


def test_flops_per_token_is_the_core_formula_by_hand() -> None:
    # 2 layers, D=64, F=256, dense (1 expert), seq 128, vocab 100, heads 1:
    # attention 4 D^2 + 2 D = 16,512 per layer; dense FFN 3 D F = 49,152 per layer; head D + V D = 6,464
    # active = 2 x (16,512 + 49,152) + 6,464 = 137,792; FLOPs/token = 6 x 137,792 + 12 x 2 x 64 x 128 = 1,023,360
    g = Geometry.of(layers=2, hidden=64, heads=1, ffn_hidden=256, experts=1, top_k=1, granularity=1, seq_len=128,
                    vocab=100, moe_layers=0)
    assert float(g.active_params[0]) == 137_792.0
    assert float(g.flops_per_token[0]) == 1_023_360.0
