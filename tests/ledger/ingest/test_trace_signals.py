"""Communication classification from several signals, EP exposure, unclassified time, and GPU idle when the
GPU lags the CPU: a real EP training trace (DeepEP under DeepSeek's own namespace) and synthetic traces whose
answers are counted by hand here."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from ledger.ingest import trace

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
DEEPSEEK = FIXTURES / "deepseek_profile_data__train_ep64_excerpt.json.gz"


def test_ep_training_trace_with_deepep_fork_kernels() -> None:
    t = trace.analyse(DEEPSEEK)
    assert (t.rank, t.world_size, t.device, [s.step for s in t.steps]) == (0, 64, "NVIDIA H800", [1])
    events = json.load(gzip.open(DEEPSEEK))["traceEvents"]
    gpu = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    # hand count: the EP kernels of this trace are DeepSeek's DeepEP (namespace dpsk::ep); no NCCL kernel ran
    ep = [e for e in gpu if e["cat"] == "kernel" and "dpsk::ep::" in e["name"]]
    assert len(ep) == 36 and not any("nccl" in e["name"].lower() for e in gpu)
    hand_share = sum(e["dur"] for e in ep) / sum(e["dur"] for e in gpu)
    assert t.communication_share is not None and abs(t.communication_share - hand_share) <= 0.02
    assert t.communication_share > 0.4  # the trace reported 0.0% here
    assert t.signals == {"name": 36} and set(t.libraries) == {"deepep"}
    step = t.steps[0].seconds
    assert {k for k in step if k.startswith("comm:")} == {"comm:dispatch", "comm:combine", "comm:notify",
                                                         "comm:layout"}
    # exposed vs overlapped EP time by brute force on a 1 us grid (the trace's times are whole microseconds)
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in gpu)
    origin = min(e["ts"] for e in gpu)
    size = max(e["ts"] + e["dur"] for e in gpu) - origin
    comm, compute = np.zeros(size, bool), np.zeros(size, bool)
    for e in gpu:
        (comm if e in ep else compute)[e["ts"] - origin:e["ts"] - origin + e["dur"]] = True
    assert step["comm_ep_overlapped"] == pytest.approx((comm & compute).sum() / 1e6, abs=1e-9)
    assert step["comm_ep_exposed"] == pytest.approx((comm & ~compute).sum() / 1e6, abs=1e-9)
    assert step["comm_ep_exposed"] > 0 and step["comm_ep_overlapped"] > 10 * step["comm_ep_exposed"]
    # what stayed unclassified is listed with its time: the FP8 casts DeepSeek runs before dispatch lead
    cast = [e for e in gpu if e["name"].startswith("void cuda::per_token_cast_to_fp8_with_channels<")]
    name, seconds, calls = t.unclassified[0]
    assert (name, calls) == ("cuda::per_token_cast_to_fp8_with_channels", len(cast))
    assert seconds == pytest.approx(sum(e["dur"] for e in cast) / 1e6)
    assert sum(s for _, s, _ in t.unclassified) == pytest.approx(step["other"])
    assert t.notes and "matched no kernel class" in t.notes[0]
    detail = json.loads(t.tables()["events"]["detail"].to_pylist()[-1])
    assert detail["communication_signals"] == {"name": 36} and detail["unclassified"][0]["kernel"] == name


def _x(cat: str, name: str, ts: float, dur: float, **extra: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": extra.pop("pid", 1),
            "tid": extra.pop("tid", 1), **extra}


def _kernel(name: str, start: float, dur: float, stream: int, corr: int, launch: float,
            args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [_x("cuda_runtime", "cudaLaunchKernel", launch, 2, args={"correlation": corr}),
            _x("kernel", name, start, dur, pid=0, tid=stream,
               args={"correlation": corr, "stream": stream, **(args or {})})]


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 8}}))
    return path


def test_every_signal_classifies_and_exposure_is_counted_by_hand(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("cpu_op", "record_param_comms", 30, 10),
        _x("cpu_op", "FusedCombineBackward", 40, 10),
        *_kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 100, 200, 7, 1, 10),                       # compute
        *_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 150, 100, 20, 2, 15),              # name
        *_kernel("void myfork::ep::dispatch_kernel<8>(int*)", 260, 100, 20, 3, 20),            # stream 20
        *_kernel("void at::native::copy_kernel(float*)", 380, 40, 21, 4, 35),                  # record_param_comms
        *_kernel("void foo::combineKernel<1>()", 300, 50, 7, 5, 45),                           # FusedCombine op
        *_kernel("void foo::dispatch_tokens(int)", 360, 40, 7, 6, 60),                         # no second signal
        *_kernel("custom_kernel", 500, 50, 22, 7, 70, {"Collective name": "all_to_all_single"}),  # args
    ]
    t = trace.analyse(_write(tmp_path, events))
    s = t.steps[0].seconds
    # by hand: kernels 200+100+100+40+50+40+50 = 580 us, communication 100+100+40+50+50 = 340 us
    assert abs(t.communication_share - 340 / 580) <= 0.02
    assert s["communication"] == pytest.approx(340e-6) and s["other"] == pytest.approx(40e-6)
    assert t.signals == {"name": 1, "stream": 1, "cpu_op": 2, "args": 1}
    assert t.unclassified == [("foo::dispatch_tokens", pytest.approx(40e-6), 1)]
    # communication [150,250] [260,360] [380,420] [500,550] (290 us) against compute [100,300] [360,400]:
    # overlapped 100 + 40 + 20 = 160, exposed 130; EP kernels (dispatch, combine, all_to_all) [260,360] and
    # [500,550] (150 us): overlapped 40, exposed 110
    assert (s["comm_overlapped"], s["comm_exposed"]) == (pytest.approx(160e-6), pytest.approx(130e-6))
    assert (s["comm_ep_overlapped"], s["comm_ep_exposed"]) == (pytest.approx(40e-6), pytest.approx(110e-6))
    assert s["comm:all_to_all"] == pytest.approx(50e-6) and s["comm:dispatch"] == pytest.approx(100e-6)
    # GPU window [100,550], device busy [100,420] and [500,550]: idle 80 us
    assert s["gpu_idle"] == pytest.approx(80e-6) and s["gpu_busy"] == pytest.approx(370e-6)


def test_gpu_idle_when_the_gpu_lags_the_cpu(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "ProfilerStep#2", 100, 100),
        *_kernel("sm90_xmma_gemm_a", 50, 100, 7, 1, 10),        # step 1 runs [50,150]
        *_kernel("ncclDevKernel_AllReduce", 300, 20, 20, 2, 20),  # step 1's all-reduce runs last, [300,320]
        *_kernel("sm90_xmma_gemm_b", 160, 90, 7, 3, 110),       # step 2 [160,250]
        *_kernel("sm90_xmma_gemm_c", 260, 20, 7, 4, 120),       # step 2 [260,280]
    ]
    t = trace.analyse(_write(tmp_path, events))
    idle = [s.seconds["gpu_idle"] for s in t.steps]
    # by hand: the device is idle 150-160, 250-260 and 280-300 (40 us); step 1's window is [50,160) (10 us
    # idle), step 2's [160,320] (30 us). The CPU step window would have counted step 2's kernels as step 1's
    # idle: [50,320] minus step 1's own 120 us = 150 us.
    assert idle == [pytest.approx(10e-6), pytest.approx(30e-6)]
    assert sum(idle) == pytest.approx(40e-6)


@pytest.mark.parametrize(("name", "lib"), [
    ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)", "deepep"),
    ("void dpsk::ep::internode::cached_notify<false>(int, int)", "deepep"),
    ("void deep_ep::internode_ll::combine<8, 7168>(void*)", "deepep"),
    ("void uccl::internode_ll::dispatch<true, 3, 7168>(void*)", "uccl-ep"),
    ("void (anonymous namespace)::dispatchKernel<10u, true, false>(int*, unsigned long)", "pplx"),
    ("void mori::moe::EpDispatchInterNodeV1Kernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs)", "mori"),
    ("void hybrid_ep::dispatch_kernel<1>(int)", "hybrid-ep"),
    ("nvshmemi_transfer_rma_kernel", "nvshmem"),
    ("ibgda_send_recv_kernel(P2pIbgdaTransportDevice*, char*, char*, unsigned long)", "nvshmem"),  # IBGDA
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "nccl"),
    ("userbuffers_fp16_sum_inplace_gpu_rw", "userbuffers"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>()", "custom-allreduce"),
])
def test_communication_libraries_by_name(name: str, lib: str) -> None:
    assert trace.category(name, "kernel") == "communication" and trace.library(name) == lib


def test_a_second_signal_never_overrides_a_known_class_or_lacks_its_word() -> None:
    cast = "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128>(__nv_bfloat16 const*)"
    gemm = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(Params)"
    topk = "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(int)"
    assert trace.classify(cast, "kernel", None, "dispatch(F)") == ("other", None)  # EP op, no EP word
    assert trace.classify(cast, "kernel", None, "record_param_comms") == ("communication", "cpu_op")
    assert trace.classify(gemm, "kernel", None, "record_param_comms") == ("grouped_gemm", None)
    assert trace.classify(topk, "kernel", None, None, comm_stream=True) == ("moe_permute", None)
    assert trace.classify("cub::DeviceReduceKernel<cub::DispatchReduce<int>>", "kernel") == ("other", None)


def test_a_gpu_side_annotation_of_a_collective_is_a_signal(tmp_path: Path) -> None:
    events = [
        _x("user_annotation", "ProfilerStep#3", 0, 1000),
        _x("gpu_user_annotation", "nccl:all_to_all", 100, 80, pid=0, tid=30),
        *_kernel("void at::native::elementwise_copy(float*)", 110, 50, 30, 1, 10),  # inside it, same stream
        *_kernel("void at::native::elementwise_copy(float*)", 300, 50, 31, 2, 20),  # another stream: not
    ]
    t = trace.analyse(_write(tmp_path, events))
    assert t.signals == {"annotation": 1}
    assert t.steps[0].seconds["communication"] == pytest.approx(50e-6)
    assert t.steps[0].seconds["other"] == pytest.approx(50e-6)


@pytest.mark.slow
def test_gpu_idle_of_a_real_trace_against_a_brute_force_grid(traces_dir: Path) -> None:
    """HTA's test trace (V100, 6 steps) where the GPU lags the CPU: the CPU-window reading summed 209.6 ms of idle.
    Brute force: a 0.1 us grid over [first kernel of the steps, last end], busy wherever any GPU event runs."""
    path = traces_dir / "hta__trace_diff_test_test.json.gz"
    t = trace.analyse(path)
    events = json.load(gzip.open(path))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events
              if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    mine = [e for e in gpu if any(a <= launch.get(e["args"].get("correlation"), -1) <= b for a, b in steps)]
    lo, hi = min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine)
    busy = np.zeros(int((hi - lo) * 10) + 1, bool)
    for e in gpu:
        busy[max(int(round((e["ts"] - lo) * 10)), 0):max(int(round((e["ts"] + e["dur"] - lo) * 10)), 0)] = True
    idle_us = (~busy[: int(round((hi - lo) * 10))]).sum() / 10
    assert t.total("gpu_idle") * 1e6 == pytest.approx(idle_us, abs=0.1 * len(gpu))
    assert t.total("gpu_idle") < 0.03  # about 27 ms, not the 210 ms the CPU windows gave


def test_ep_trace_reaches_the_receipt_and_what_the_user_reads(tmp_path: Path) -> None:
    """`ledger ingest trace` of the DeepEP trace into a receipt: the user is told the communication share, the EP
    time split into exposed and overlapped, and what stayed unclassified; the receipt keeps the same figures."""
    from ledger.ingest.api import ingest_megatron, ingest_trace
    from ledger.store.receipts import Ledger

    ledger = Ledger(tmp_path / "receipts")
    base = ingest_megatron(ledger, Path(__file__).resolve().parents[2] / "fixtures" / "megatron"
                           / "megatron_deepspeed_moe8_ep4_gpt125m.log").receipt
    imported = ingest_trace(ledger, DEEPSEEK, base.id[:8])
    events = json.load(gzip.open(DEEPSEEK))["traceEvents"]
    gpu = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    ep = [e for e in gpu if "dpsk::ep::" in e["name"]]
    origin = min(e["ts"] for e in gpu)
    busy = np.zeros(max(e["ts"] + e["dur"] for e in gpu) - origin, bool)
    for e in ep:
        busy[e["ts"] - origin:e["ts"] - origin + e["dur"]] = True
    ep_ms = busy.sum() / 1e3  # the union of the EP kernels' time, on a 1 us grid
    hand_share = sum(e["dur"] for e in ep) / sum(e["dur"] for e in gpu)
    notes = "\n".join(imported.notes)
    share = float(re.search(r"communication ([\d.]+)% of GPU kernel time", notes).group(1)) / 100
    assert abs(share - hand_share) <= 0.02
    got = re.search(r"expert-parallel communication ([\d.]+) ms: ([\d.]+) ms exposed, ([\d.]+) ms overlapped", notes)
    assert got is not None and float(got.group(1)) == pytest.approx(ep_ms, rel=1e-3)
    assert float(got.group(2)) + float(got.group(3)) == pytest.approx(ep_ms, rel=1e-3)
    assert "matched no kernel class" in notes and "cuda::per_token_cast_to_fp8_with_channels" in notes
    timing = pq.read_table(ledger.path(imported.receipt.id) / "timing.parquet").to_pylist()
    phases = {r["phase"]: r["seconds"] for r in timing if r["phase"].startswith("comm_ep_")}
    assert phases["comm_ep_exposed"] + phases["comm_ep_overlapped"] == pytest.approx(ep_ms / 1e3, abs=1e-9)
