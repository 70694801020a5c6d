"""fp8 through PyTorch's own float8 matmul (torch._scaled_mm, per-tensor scales): forward and both backward
products against float64 matmuls of the dequantised operands, the policy it records, and the one-line error of
the Transformer Engine backend where TE cannot run. Measured here: torch 2.13's CPU build computes
torch._scaled_mm (e4m3 x e4m3 and e5m2 x e4m3) with a reference kernel, so the torch backend runs on CPU."""

from __future__ import annotations

import pytest
import torch

from runners.moe.configs import ConfigError, get_config
from runners.moe.float8 import E4M3, E5M2, Float8Linear, quantize, scaled_mm_works
from runners.moe.precision import PrecisionPolicy, check_precision


def _dequant(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x rounded to ``dtype`` with the per-tensor scale amax / max(dtype), back in float64 (by hand: no call of
    the module's quantize)."""
    scale = x.detach().abs().max().double() / torch.finfo(dtype).max
    return (x.detach().double() / scale).to(dtype).double() * scale


def test_quantize_uses_the_whole_range_and_round_trips_within_float8_precision() -> None:
    x = torch.tensor([[-3.0, 0.5], [1.5, 0.0]])
    x8, scale = quantize(x, E4M3)
    assert x8.dtype == E4M3 and scale.item() == pytest.approx(3.0 / 448)
    assert x8.float().abs().max().item() == 448.0  # the largest magnitude maps to e4m3's maximum
    assert torch.allclose(x8.float() * scale, x, rtol=2**-3)  # 3 mantissa bits


def test_forward_and_both_gradients_match_float64_products_of_the_dequantised_operands() -> None:
    gen = torch.Generator().manual_seed(3)
    layer = Float8Linear(64, 48)
    x = torch.randn(40, 64, generator=gen, requires_grad=True)  # 40 rows: padded to 48 inside
    g = torch.randn(40, 48, generator=gen)
    y = layer(x)
    y.backward(g)
    assert y.shape == (40, 48) and y.dtype == torch.float32
    xd, wd, gd = _dequant(x, E4M3), _dequant(layer.weight, E4M3), _dequant(g, E5M2)
    assert torch.allclose(y.double(), xd @ wd.T, rtol=1e-4, atol=1e-4)
    assert x.grad is not None and layer.weight.grad is not None
    assert torch.allclose(x.grad.double(), gd @ wd, rtol=1e-4, atol=1e-4)
    assert torch.allclose(layer.weight.grad.double(), gd.T @ xd, rtol=1e-4, atol=1e-4)
    # and it is a float8 product, not an exact one: the error is that of the rounding
    exact = x.detach().double() @ layer.weight.detach().double().T
    assert 0 < (y.double() - exact).abs().max() < 0.1 * exact.abs().max()


def test_under_bf16_autocast_the_output_is_bf16_and_gradients_keep_their_dtypes() -> None:
    layer = Float8Linear(32, 16)
    x = torch.randn(2, 8, 32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and y.shape == (2, 8, 16)
    y.float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32


def test_the_torch_backend_is_its_own_recorded_policy_and_runs_on_this_cpu() -> None:
    cpu = torch.device("cpu")
    assert scaled_mm_works(cpu) == ""
    check_precision("fp8", cpu, "torch")  # no error: it runs here
    torch_fp8 = PrecisionPolicy("fp8", cpu, "torch").describe()
    te_fp8 = PrecisionPolicy("fp8", cpu, "te").describe()
    assert (torch_fp8["fp8_backend"], torch_fp8["fp8_recipe"]) == ("torch", "tensorwise")
    assert (te_fp8["fp8_backend"], te_fp8["fp8_recipe"]) == ("transformer_engine", "delayed")
    assert isinstance(PrecisionPolicy("fp8", cpu, "torch").linear_factory()(16, 32), Float8Linear)
    assert get_config("small_fp8").fp8_backend == "torch"


def test_the_te_backend_on_cpu_is_one_line_that_names_the_torch_backend() -> None:
    with pytest.raises(ConfigError) as err:
        check_precision("fp8", torch.device("cpu"), "te")
    assert "\n" not in str(err.value) and "fp8_backend=torch" in str(err.value)
    with pytest.raises(ConfigError, match="fp8_backend must be one of torch, te"):
        get_config("tiny", ["fp8_backend=amd"])
