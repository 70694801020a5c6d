"""Megatron-LM runner: launch Megatron-LM's ``pretrain_gpt.py`` (path given by the user) through torchrun
under ``ledger record``, from a run config (a config function, a params.yaml section, ``--set`` overrides),
with Transformer Engine precision recipes (bf16, fp8 delayed / tensorwise / blockwise, mxfp8) and the MoE
flags.

    python -m runners.megatron --pretrain ~/Megatron-LM/pretrain_gpt.py --config small_moe \\
        --set precision=fp8-delayed --set nproc_per_node=8 --name fp8-delayed

Modules: config (the run config, its variants and overrides), flags (config -> Megatron flags, torchrun and
`ledger record` commands, and the receipt's Workload), entry (what torchrun runs: reports the runtime
through ``ledger.sdk`` and runs the real script with runpy), cli, cpu_shim (the two CPU incompatibilities of
megatron-core without Transformer Engine, isolated), mcore_cpu (a tiny Megatron-Core MoELayer trained on CPU
through the SDK: the integration test that needs no GPU).
"""

from runners.megatron.config import CONFIGS, ConfigError, MegatronConfig, apply_overrides, get_config

__all__ = ["CONFIGS", "ConfigError", "MegatronConfig", "apply_overrides", "get_config"]
