"""What torchrun runs: ``python -m runners.megatron.entry /path/to/pretrain_gpt.py <megatron flags>``.

It reports the runtime through the SDK (versions of torch, CUDA, NCCL, cuDNN, Transformer Engine and
Megatron-Core as this process sees them), sets the workload the launcher described (rank 0), then runs the
real script with runpy as ``__main__``: no sitecustomize, nothing patched, Megatron runs unchanged.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

import ledger.sdk
from runners.megatron.flags import WORKLOAD_ENV


def _imported_versions() -> dict[str, str]:
    """Versions read from the modules themselves: a Megatron-LM source checkout is not a pip distribution,
    so the SDK's package list may not name it. Imports are guarded: any failure just leaves a version out."""
    found: dict[str, str] = {}
    try:
        from megatron.core import package_info

        found["megatron_core"] = str(package_info.__version__)
    except Exception:
        pass
    try:
        import transformer_engine

        found["transformer_engine"] = str(transformer_engine.__version__)
    except Exception:
        pass
    return found


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or not args[0].endswith(".py"):
        sys.exit("usage: python -m runners.megatron.entry /path/to/pretrain_gpt.py [megatron flags...]")
    script, flags = Path(args[0]).resolve(), args[1:]
    if not script.is_file():
        sys.exit(f"runners.megatron: {script} does not exist (give the path of Megatron-LM's pretrain_gpt.py)")
    sys.path.insert(0, str(script.parent))  # `import megatron` from the user's Megatron-LM checkout
    run = ledger.sdk.current()
    run.report_runtime()
    workload = os.environ.get(WORKLOAD_ENV)
    if workload and run.rank == 0:
        run.set_workload(json.loads(Path(workload).read_text()))
    versions = _imported_versions()
    if versions:
        run.event("runtime_versions", source="import", **versions)
    if "mxfp8" in flags:
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 10:
                print("runners.megatron: mxfp8 needs a Blackwell GPU (sm_100 or newer); Transformer Engine will "
                      "refuse it here", file=sys.stderr, flush=True)
        except Exception:
            pass
    sys.argv = [str(script), *flags]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
