"""Reference MoE runner: pure PyTorch, CPU or CUDA, experts sharded over torch.distributed.

    python -m runners.moe --config tiny [--set moe.top_k=1]...
    torchrun --nproc_per_node 2 -m runners.moe --config tiny --set parallel.ep=2

Modules: configs (run configs as functions + overrides), data (mixture-of-sources corpus, byte files),
router / dispatcher / experts (the MoE layer's parts, each with its own config), moe (the layer), model
(the transformer), comm (process groups, all-to-all), precision, float8 (fp8 linear layers on
torch._scaled_mm), timing, checkpoint, workload (the receipt's Workload), train (the loop), cli. Records
through ``ledger.sdk`` only.
"""

from runners.moe.configs import CONFIGS, ConfigError, RunConfig, apply_overrides, get_config

__all__ = ["CONFIGS", "ConfigError", "RunConfig", "apply_overrides", "get_config"]
