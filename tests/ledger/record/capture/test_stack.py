"""capture_stack end to end on this machine, and merge_runtime with per-rank runtime facts."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from ledger.record.capture import capture_stack, merge_runtime
from ledger.redact import Redactor
from schemas.receipt import Drivers, Gpu, Hardware, Software, Stack


def test_capture_stack(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=tmp_path, check=True)
    env = {**os.environ, "NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123456",
           "NCCL_IB_HCA": "mlx5_0", "CUDA_VISIBLE_DEVICES": "0,1"}
    argv = ["torchrun", "--nproc_per_node", "2", "train.py", "--hf-token", env["HF_TOKEN"]]
    capture_stack(tmp_path, env, argv, Redactor(env))  # warm: imports the probes once
    start = time.perf_counter()
    stack = capture_stack(tmp_path, env, argv, Redactor(env))
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"capture took {elapsed:.3f} s"
    assert stack.code.is_repo and stack.code.commit is None and stack.code.error is None
    assert stack.software.source == "wrapper" and stack.software.packages
    assert stack.hardware.hostname and stack.hardware.nvml
    assert (stack.launcher.kind, stack.launcher.world_size) == ("torchrun", 2)
    assert stack.environment["NCCL_DEBUG"] == "INFO" and stack.environment["NCCL_IB_HCA"] == "mlx5_0"
    assert "HF_TOKEN" not in stack.environment and "PATH" not in stack.environment
    dumped = stack.model_dump_json()
    assert "hf_abcdefghij" not in dumped
    assert Stack.model_validate_json(dumped) == stack


def facts(host: str, packages: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"host": host, "python": "3.11.9", "executable": "/usr/bin/python3",
            "packages": [{"name": n, "version": v} for n, v in packages.items()], "errors": {}, **extra}


GPU = {"index": 0, "name": "NVIDIA H200", "memory_bytes": 150_000_000_000, "compute_capability": "9.0"}
WRAPPER_STACK = Stack(
    software=Software(source="wrapper", packages_digest="w"),
    drivers=Drivers(gpu_driver="570.124.06", cuda_driver="12.8"),
    hardware=Hardware(hostname="login", cpu_cores=8, nvml="nvml unavailable: NVML Shared Library Not Found"),
)


def test_merge_runtime_takes_software_drivers_and_gpus_from_the_processes() -> None:
    pkgs = {"torch": "2.7.0", "nvidia-nccl-cu12": "2.26.2"}
    by_rank = {
        0: facts("n1", pkgs, torch="2.7.0", cuda_runtime="12.8", nccl="2.26.2", cudnn="9.9.0",
                 devices=[GPU, {**GPU, "index": 1}]),
        1: facts("n2", pkgs, torch="2.7.0", cuda_runtime="12.8", nccl="2.26.2", cudnn="9.9.0", devices=[GPU]),
    }
    stack, notes = merge_runtime(WRAPPER_STACK, by_rank)
    assert stack.software.source == "process" and stack.software.torch == "2.7.0"
    assert stack.software.nvidia == {"nvidia-nccl-cu12": "2.26.2"}
    assert stack.drivers == Drivers(gpu_driver="570.124.06", cuda_driver="12.8", cuda_runtime="12.8",
                                    nccl="2.26.2", cudnn="9.9.0")
    assert stack.hardware.gpu_count == 2 and stack.hardware.gpu_model == "NVIDIA H200"
    assert stack.hardware.gpus[1] == Gpu(index=1, name="NVIDIA H200", memory_bytes=150_000_000_000,
                                         compute_capability="9.0")
    assert stack.hardware.nodes_observed == ("login", "n1", "n2")
    assert stack.hardware.cpu_cores == 8
    assert notes == ["GPUs described from rank 0 on host n1: the launching host login saw none"]


def test_merge_runtime_reports_ranks_that_disagree() -> None:
    by_rank = {r: facts(f"n{r // 2}", {"torch": "2.7.0"}, nccl="2.26.2") for r in range(4)}
    by_rank[3] = facts("n1", {"torch": "2.6.0"}, nccl="2.21.5")
    _, notes = merge_runtime(WRAPPER_STACK, by_rank)
    assert len(notes) == 2
    packages, nccl = notes
    assert packages.startswith("ranks disagree on packages: ") and "on ranks 0-2" in packages
    assert packages.endswith("on ranks 3")
    assert nccl == "ranks disagree on NCCL: 2.26.2 on ranks 0-2; 2.21.5 on ranks 3"


def test_merge_runtime_keeps_nvml_gpus_and_ignores_the_wrapper_rank() -> None:
    b200 = Hardware(hostname="n1", nvml="ok", gpu_count=1, gpu_model="NVIDIA B200",
                    gpus=(Gpu(index=0, name="NVIDIA B200"),))
    nvml_gpus = WRAPPER_STACK.model_copy(update={"hardware": b200})
    by_rank: dict[int, Any] = {-1: {"host": "x"}, 0: facts("n1", {}, devices=[GPU]), 1: "garbage"}
    stack, notes = merge_runtime(nvml_gpus, by_rank)
    assert stack.hardware.gpu_model == "NVIDIA B200" and stack.hardware.nodes_observed == ("n1",)
    assert notes == ["rank 1: runtime facts are not an object"]


def test_merge_runtime_without_facts_is_the_identity() -> None:
    assert merge_runtime(WRAPPER_STACK, {}) == (WRAPPER_STACK, [])
