"""Profiler traces: every fixture trace, checked against an independent json.load computation."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from ledger.errors import BadInput
from ledger.ingest import trace

PAIR = ("hta__trace_diff_control_control.json.gz", "hta__trace_diff_test_test.json.gz")
NCCL = "hta__nccl_parser_config_nccl_data.json.gz"
# file -> (rank, world size, ProfilerSteps, device)
EXPECTED = {
    PAIR[0]: (3, 8, [1009, 1010, 1011, 1012, 1013, 1014], "NVIDIA A100-PG509-200"),
    PAIR[1]: (1, 2, [1009, 1010, 1011, 1012, 1013, 1014], "Tesla V100-SXM2-16GB"),
    NCCL: (0, 2, [4, 5, 6], "NVIDIA A100-PG509-200"),
}


def _reference(path: Path) -> tuple[float, float]:
    """(communication share, communication seconds) the simple way: json.load, GPU events attributed to the
    ProfilerStep whose CPU window holds their launch (correlation id), NCCL kernels / all GPU time."""
    events = json.load(gzip.open(path))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    device = Counter(e["pid"] for e in gpu).most_common(1)[0][0]
    comm = total = 0.0
    for e in gpu:
        ts = launch.get(e["args"].get("correlation"))
        if e["pid"] != device or ts is None or not any(a <= ts <= b for a, b in steps):
            continue
        total += e["dur"]
        if "nccl" in e["name"].lower():
            comm += e["dur"]
    return comm / total, comm / 1e6


def test_every_trace_is_covered(traces_dir: Path) -> None:
    assert sorted(p.name for p in traces_dir.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_steps_and_communication_share(traces_dir: Path, name: str) -> None:
    rank, world, steps, device = EXPECTED[name]
    t = trace.analyse(traces_dir / name)
    assert (t.rank, t.world_size, [s.step for s in t.steps], t.device) == (rank, world, steps, device)
    share, comm = _reference(traces_dir / name)
    assert t.communication_share == pytest.approx(share, rel=1e-9)
    assert t.total("communication") == pytest.approx(comm, rel=1e-9)
    for s in t.steps:
        sec = s.seconds
        assert sec["comm_exposed"] + sec["comm_overlapped"] <= sec["communication"] + 1e-9
        assert sec["gpu_busy"] <= sum(sec[c] for c in trace.CATEGORIES) + 1e-9
        assert sec["gpu_idle"] >= 0 and sec["step"] > 0 and sec["cpu_launch"] > 0
        assert sum(v for k, v in sec.items() if k.startswith("comm:")) == pytest.approx(sec["communication"])


def test_the_control_test_pair(traces_dir: Path) -> None:
    control, test = (trace.analyse(traces_dir / n) for n in PAIR)
    assert control.communication_share == pytest.approx(0.32604816505073, rel=1e-9)
    assert test.communication_share == pytest.approx(0.25244999972444, rel=1e-9)
    # NCCL all_to_all runs as SendRecv kernels; both traces have 7 of them and 3 all_reduce per step
    assert {k: v["calls"] for k, v in control.steps[0].comms.items()} == {"send_recv": 7, "all_reduce": 3}
    assert {k: v["calls"] for k, v in test.steps[0].comms.items()} == {"send_recv": 7, "all_reduce": 3}


def test_message_sizes_and_bandwidth_from_record_param_comms(traces_dir: Path) -> None:
    t = trace.analyse(traces_dir / NCCL)
    events = json.load(gzip.open(traces_dir / NCCL))["traceEvents"]
    first = t.steps[0]
    ar = first.comms["all_reduce"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
    assert ar["calls"] == 5 and ar["group_size"] == 2
    # bytes: In msg nelems x 4 (Float) of the step's five all_reduce kernels
    by_corr = {e["args"]["correlation"]: e for e in kernels}
    launched = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    step_start, step_end = 4458676416788.066, 4458676416788.066 + 222442.191
    mine = [k for c, k in by_corr.items() if step_start <= launched.get(c, -1) <= step_end]
    assert ar["bytes"] == sum(k["args"]["In msg nelems"] * 4 for k in mine)
    assert ar["algbw_GBps"] == pytest.approx(ar["bytes"] / sum(k["dur"] for k in mine) / 1e3)
    assert ar["busbw_GBps"] == pytest.approx(ar["algbw_GBps"] * 2 * (2 - 1) / 2)
    detail = [json.loads(d) for k, d in zip(t.tables()["events"]["kind"].to_pylist(),
                                            t.tables()["events"]["detail"].to_pylist(), strict=True)
              if k == "comm_collective"]
    assert {d["collective"] for d in detail} == {"all_reduce", "broadcast"}


def test_streaming_across_window_boundaries(traces_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = trace.analyse(traces_dir / NCCL)
    monkeypatch.setattr(trace, "CHUNK", 777)  # every event straddles a window edge somewhere
    again = trace.analyse(traces_dir / NCCL)
    assert [s.seconds for s in again.steps] == [s.seconds for s in expected.steps]


def _write(tmp_path: Path, obj: object, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_no_profiler_step_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]})
    with pytest.raises(BadInput, match="no ProfilerStep"):
        trace.analyse(path)


def test_wrong_kinds_and_damage(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="expected a PyTorch profiler chrome trace.*found Megatron-LM golden values"):
        trace.analyse(_write(tmp_path, {"lm loss": {"start_step": 1, "values": {}}}))
    with pytest.raises(BadInput, match="found a JSON array"):
        trace.analyse(_write(tmp_path, [1, 2]))
    full = json.dumps({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "ts": 1,
                                        "dur": 5}] * 3})
    cut = tmp_path / "cut.json"
    cut.write_text(full[: len(full) // 2])
    with pytest.raises(BadInput, match="cut off|damaged"):
        trace.analyse(cut)


def test_keys_after_trace_events_and_small_values_at_the_edge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(trace, "CHUNK", 3)
    path = _write(tmp_path, {"traceEvents": [
        {"ph": "X", "name": "ProfilerStep#12", "cat": "user_annotation", "ts": 100, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 4,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING", "ts": 120, "dur": 10,
         "args": {"correlation": 7}, "pid": 0},
    ], "distributedInfo": {"rank": 12345, "world_size": 16}})
    t = trace.analyse(path)
    assert t.rank == 12345 and t.world_size == 16 and t.steps[0].seconds["comm:all_gather"] == 10e-6
    assert t.steps[0].seconds["comm_exposed"] == 10e-6 and t.steps[0].seconds["cpu_launch"] == 4e-6


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclDevKernel_AllToAll_RING", "communication"), ("deep_ep::internode::dispatch<8>", "communication"),
    ("void hybrid_ep::combine_kernel", "communication"), ("cutlass::gemm::kernel::GemmGrouped<x>", "grouped_gemm"),
    ("flash_fwd_kernel", "attention"), ("nvjet_tst_192x192_64x3", "gemm"), ("sm90_xmma_gemm_bf16", "gemm"),
    ("transformer_engine::moe_permute_row_map", "moe_permute"), ("_unpermute_kernel", "moe_permute"),
    ("void fbgemm_gpu::permute_2D_lengths_kernel<int>", "other"), ("void at::native::vectorized_elementwise", "other"),
])
def test_kernel_classes(name: str, kind: str) -> None:
    assert trace.category(name, "kernel") == kind
