"""A tiny Megatron-Core MoELayer (allgather dispatcher, SequentialMLP experts) trained on CPU (or, with
``--device cuda``, on one GPU: the GPU proof's Megatron step) and recorded through ``ledger.sdk``: the Megatron
integration, checked without Transformer Engine.

    ledger record -- python -m runners.megatron.mcore_cpu --steps 4 [--device cuda]

Each step: a regression loss on random tokens plus the layer's load-balancing loss, SGD; logged: loss,
aux_loss (Megatron-Core's own tracker), step time, tokens per expert per step (from the router's routing
map), and forward/backward timing. Needs ``pip install megatron-core`` (no Transformer Engine: the two CPU
incompatibilities that leaves are patched in :mod:`runners.megatron.cpu_shim`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from typing import Any

import ledger.sdk
from runners.megatron.config import MegatronConfig
from runners.megatron.flags import workload


def _config(args: argparse.Namespace) -> MegatronConfig:
    return MegatronConfig(
        num_layers=1, hidden_size=args.hidden, num_attention_heads=2, ffn_hidden_size=args.hidden * 4,
        seq_length=args.seq, num_experts=args.experts, moe_router_topk=args.topk, moe_ffn_hidden_size=args.hidden,
        moe_token_dispatcher_type="allgather", moe_grouped_gemm=False, micro_batch_size=args.batch,
        global_batch_size=args.batch, train_iters=args.steps, seed=args.seed, lr_warmup_iters=0,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runners.megatron.mcore_cpu")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args(argv)
    cfg = _config(args)
    with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed": expected here
        warnings.simplefilter("ignore")
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.transformer.moe.moe_layer import MoELayer
        from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker
        from megatron.core.transformer.transformer_config import TransformerConfig

        from runners.megatron import cpu_shim

        cpu_shim.install()
    run = ledger.sdk.current()
    run.report_runtime()
    wl = workload(cfg, "mcore_cpu").model_copy(update={"device": args.device})
    run.set_workload(wl.model_copy(update={"precision": wl.precision.model_copy(update={"params": "fp32",
                                                                                        "compute": "fp32"})}))
    torch.manual_seed(args.seed)
    rendezvous = tempfile.NamedTemporaryFile(prefix="mcore-cpu-", delete=False)  # a file store: no port to clash
    rendezvous.close()
    os.unlink(rendezvous.name)
    if args.device == "cuda" and torch.cuda.is_available():
        torch.cuda.set_device(0)
    backend = "nccl" if args.device == "cuda" and torch.cuda.is_available() else "gloo"  # gloo: CPU tensors
    dist.init_process_group(backend, init_method=f"file://{rendezvous.name}", rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tc = TransformerConfig(
                num_layers=1, hidden_size=args.hidden, num_attention_heads=2, ffn_hidden_size=args.hidden * 4,
                num_moe_experts=args.experts, moe_router_topk=args.topk, moe_token_dispatcher_type="allgather",
                moe_aux_loss_coeff=cfg.moe_aux_loss_coeff or 0.0, moe_router_load_balancing_type="aux_loss",
                moe_ffn_hidden_size=args.hidden, moe_grouped_gemm=False, use_cpu_initialization=True,
                add_bias_linear=False, params_dtype=torch.float32,
            )
        spec = get_gpt_layer_local_spec(num_experts=args.experts, moe_grouped_gemm=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer = MoELayer(tc, spec.submodules.mlp.submodules)
        dev = torch.device(args.device)
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                print("error: --device cuda but no CUDA device is visible", file=sys.stderr)
                return 2
            layer = layer.to(dev)

        def sync() -> None:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        layer.router.set_layer_number(1)  # a TransformerLayer would; the aux-loss tracker needs it
        routing: list[Any] = []
        layer.router.register_forward_hook(lambda _m, _i, out: routing.append(out[1].detach()))
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.05)
        target = torch.randn(args.seq, args.batch, args.hidden, device=dev)
        tokens = args.seq * args.batch
        for step in range(1, args.steps + 1):
            start = time.perf_counter()
            x = torch.randn(args.seq, args.batch, args.hidden, device=dev)
            routing.clear()
            out, _ = layer(x)
            loss = torch.nn.functional.mse_loss(out, target)
            sync()
            forward = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()  # the aux loss is attached to the output by Megatron-Core's MoEAuxLossAutoScaler
            optimizer.step()
            sync()
            end = time.perf_counter()
            tracker = get_moe_layer_wise_logging_tracker().get("load_balancing_loss")
            aux = float(tracker["values"].sum()) if tracker else None
            if tracker:
                tracker["values"].zero_()
            counts = routing[-1].sum(dim=0).tolist() if routing else []
            run.log_step(step, loss=loss.item(), aux_loss=aux, step_time_s=end - start, tokens=step * tokens,
                         tokens_per_s=tokens / (end - start))
            if counts:
                run.log_routing(step, 0, [int(c) for c in counts])
            run.log_timing(step, "forward", forward - start)
            run.log_timing(step, "backward_optimizer", end - forward)
            print(f" iteration {step:8d}/{args.steps:8d} | lm loss: {loss.item():.6E} | load_balancing_loss: "
                  f"{aux if aux is not None else float('nan'):.6E} | elapsed time per iteration (ms): "
                  f"{(end - start) * 1000:.1f} |", flush=True)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
        if os.path.exists(rendezvous.name):
            os.unlink(rendezvous.name)
    run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
