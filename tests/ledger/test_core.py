"""The core's small shared facts: the KEY=VALUE parser and MFU's two facts (peaks, FLOPs per token)."""

from __future__ import annotations

import numpy as np
import pytest

from ledger.errors import BadInput
from ledger.kv import pair, pairs
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
