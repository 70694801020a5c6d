"""The two places where megatron-core (0.16.1, without Transformer Engine) cannot run a MoELayer on CPU, and
the smallest patch for each. Nothing else of Megatron-Core is changed; :func:`install` is idempotent and
only ever called by :mod:`runners.megatron.mcore_cpu` (the CPU integration test and the GPU proof's one-layer run,
where patch 1 defers to the original and patch 2 is what a launch without Transformer Engine needs), never on a
`pretrain_gpt.py` launch.

1. ``Router.gating`` moves the router weight to ``torch.cuda.current_device()`` whenever it is on the CPU,
   which raises "Torch not compiled with CUDA enabled" on a CPU build. The patch runs the same computation
   (the router dtype choice, then ``router_gating_linear``) without the move.
2. ``moe_utils.RouterGatingLinearFunction`` tests ``te_general_gemm is not None``, but ``te_general_gemm`` is
   only defined when Transformer Engine imports (the ``except ImportError`` branch does not set it): a
   NameError without TE. The patch defines it as None, which selects the plain ``torch.mm`` path the code
   already has.
"""

from __future__ import annotations

from typing import Any

_installed = False


def install() -> None:
    """Apply both patches (no-ops when a future megatron-core no longer needs them)."""
    global _installed
    if _installed:
        return
    import torch
    from megatron.core.transformer.moe import moe_utils, router

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None

    original = router.Router.gating

    def gating(self: Any, input: torch.Tensor) -> torch.Tensor:
        if self.weight.device.type != "cpu" or torch.cuda.is_available():
            return original(self, input)
        router_dtype = input.dtype
        if self.config.moe_router_dtype == "fp32":
            router_dtype = torch.float32
        elif self.config.moe_router_dtype == "fp64":
            router_dtype = torch.float64
        return moe_utils.router_gating_linear(input, self.weight, self.bias, router_dtype)

    router.Router.gating = gating
    _installed = True


__all__ = ["install"]
