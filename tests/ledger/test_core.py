"""The core's small shared facts: the KEY=VALUE parser, strict JSON values and MFU's two facts (peaks, FLOPs per
token)."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import numpy as np
import pytest

from ledger.errors import BadInput
from ledger.jsonsafe import json_safe
from ledger.kv import listed, pair, pairs, recorded
from ledger.mfu import PEAK_TFLOPS, model_flops_per_token, peak_flops, peak_flops_of


def test_key_value_items() -> None:
    assert pair("sweep=lr", "--tag") == ("sweep", "lr")
    assert pair("cmd=a=b", "--set") == ("cmd", "a=b")  # the value is everything after the first '='
    assert pair("empty=", "--tag") == ("empty", "")
    assert pairs(["a=1", "b=2", "a=3"], "--set") == {"a": "3", "b": "2"}
    with pytest.raises(BadInput, match=r"--tag 'sweep': expected KEY=VALUE, e\.g\. --tag sweep=lr"):
        pair("sweep", "--tag")
    with pytest.raises(BadInput, match="--group '=x'"):
        pair("=x", "--group")


def test_several_items_in_one_argument() -> None:
    assert listed("tp=2, pp=4;ep=8", "--parallel", ("tp", "pp", "ep"), convert=int) == {"tp": 2, "pp": 4, "ep": 8}
    assert listed("top-k=2,hidden=64", "--geometry", convert=float) == {"top_k": 2.0, "hidden": 64.0}
    assert listed("", "--geometry") == {}
    with pytest.raises(BadInput, match=r"--parallel 'xp=2': unknown key 'xp'; the keys are tp, pp"):
        listed("tp=1,xp=2", "--parallel", ("tp", "pp"), convert=int)
    with pytest.raises(BadInput, match=r"--parallel 'tp=two': tp must be an integer, got 'two'"):
        listed("tp=two", "--parallel", ("tp",), convert=int)
    with pytest.raises(BadInput, match=r"--geometry 'layers': expected KEY=VALUE"):
        listed("layers", "--geometry", convert=float)


def test_json_safe_values_parse_as_strict_json() -> None:
    data = {"nan": math.nan, "inf": [1.5, -math.inf, (2, math.inf)], "sum": Decimal("12"), "half": Decimal("2.5"),
            "huge": Decimal("Infinity"), "text": "x"}
    out = json_safe(data)
    assert out == {"nan": None, "inf": [1.5, None, [2, None]], "sum": 12, "half": 2.5, "huge": None, "text": "x"}
    assert isinstance(out["sum"], int)
    assert json.loads(json.dumps(out, allow_nan=False)) == out


def test_one_peak_table_with_the_vendor_figures() -> None:
    # NVIDIA's HGX B200 per-GPU specification: 75 TFLOP/s FP32, TF32 2.2 PFLOP/s with sparsity (1.1 dense)
    assert PEAK_TFLOPS["B200"]["fp32"] == 75 and PEAK_TFLOPS["B200"]["tf32"] == 1100
    # H100 SXM datasheet: TF32 989 TFLOP/s with sparsity -> 494.5 dense
    assert peak_flops_of("H100")["tf32"] == 494.5e12
    fp16 = peak_flops("NVIDIA H100 PCIe", "fp16")
    assert not isinstance(fp16, str) and fp16.flops == 756e12 and "H100 PCIe" in fp16.label
    assert peak_flops("NVIDIA B200", "nvfp4") != peak_flops("NVIDIA B200", "fp8")


def test_model_flops_per_token_by_hand() -> None:
    # 6 x 1e6 active + 12 x 2 layers x 64 hidden x 128 tokens = 6,000,000 + 196,608
    assert model_flops_per_token(1_000_000, 2, 64, 128) == 6_196_608.0
    out = model_flops_per_token(np.array([1e6, 2e6]), 2, 64, 128)
    assert list(out) == [6_196_608.0, 12_196_608.0]


def test_recorded_overrides_read_as_the_options_were() -> None:
    """A launch's recorded ``--set`` overrides (rerun and the missing-run commands read them the same way):
    split at the first ``=``, values kept as written, a later key wins, what is not KEY=VALUE left out."""
    items = ["steps=8", "lr=1e-3", "name=a=b", "flag", "=orphan", "steps=16", "note= spaced "]
    assert recorded(items) == {"steps": "16", "lr": "1e-3", "name": "a=b", "note": " spaced "}
