"""PyTorch profiler (Kineto) chrome traces -> timing per ProfilerStep.

The trace streams: :func:`iter_trace` decodes one event of ``traceEvents`` at a time (``json``'s C decoder on
a sliding 1 MiB window, gzip or not), so memory holds the window plus the few fields kept per GPU event,
not the file's objects (measured in ``bench/bench_ingest.py``).

Per ProfilerStep (the ``ProfilerStep#N`` CPU annotations; a trace without one is an error), GPU work is
attributed to the step whose CPU window holds the runtime call that launched it (matched by correlation id),
as Holistic Trace Analysis does. Timing rows, in seconds:

- one per kernel class: ``gemm``, ``grouped_gemm``, ``attention``, ``moe_permute`` (MoE token
  permute/unpermute, router and top-k kernels; generic sorts and recsys permutes are not MoE and stay
  ``other``), ``communication``, ``memcpy`` (memcpy and memset), ``other``: the sum of kernel durations;
- ``comm:<collective>`` (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast,
  dispatch, combine, notify, layout...): communication split by collective;
- ``comm_exposed`` / ``comm_overlapped``: time when communication runs with no / with other (non-communication)
  GPU work at the same time (interval unions on the device); ``comm_ep_exposed`` / ``comm_ep_overlapped``: the
  same for the expert-parallel kernels alone (those of an EP library, and all_to_all, dispatch, combine, notify
  and layout collectives);
- ``gpu_busy``: the union of the step's own GPU work; ``gpu_idle``: the time in the step's GPU window when the
  device runs nothing at all. A step's GPU window starts at its first kernel and ends where the next step's
  first kernel starts (the last step's at the end of the last attributed kernel), so the windows never
  overlap even when the GPU lags the CPU, and the idle of all steps adds up to the device's idle time;
- ``cpu_launch``: time in kernel-launch and async-copy runtime calls (cudaLaunchKernel...);
- ``step``: the ProfilerStep's CPU duration.

**What is communication** is decided from several signals, strongest first (:func:`classify`):

1. the kernel's name: NCCL/RCCL, and the expert-parallel libraries as their kernels really appear in traces
   (:data:`LIBRARIES`): DeepEP (``deep_ep::``) and its forks under other namespaces (DeepSeek's own
   ``dpsk::ep::``; MagiAttention's ``grpcoll``, a fork for attention), HybridEP, UCCL-EP, pplx-kernels, AMD
   MORI, NVSHMEM/IBGDA kernels, Transformer Engine userbuffers, symmetric-memory and custom all-reduce kernels;
2. the kernel's own args: ``Collective name`` (newer PyTorch copies ``record_param_comms`` metadata onto it);
3. the CPU op that launched it: a kernel of no other class launched inside ``record_param_comms``,
   ``nccl:*``, ``c10d::*``, or (when its name says dispatch/combine/notify) inside an EP library's op such as
   Megatron's ``FusedDispatch``/``FusedCombine`` or HybridEP's;
4. the GPU-side annotation around it (``gpu_user_annotation`` events such as ``nccl:all_to_all`` on the kernel's
   own stream), read like the CPU op;
5. the stream it runs on: a kernel whose name says dispatch/combine/notify/all-to-all, running on a communication
   stream (one where kernels recognised by 1-4 hold at least half the kernel time).

Kernels that no signal recognises stay ``other``; :attr:`TraceTiming.unclassified` lists them with the time they
hold, and the profiler_trace event records how many kernels each signal classified.

Message sizes come from ``record_param_comms`` metadata (on the kernel itself in newer traces, else on the
enclosing ``record_param_comms`` CPU op): bytes = max(in, out) elements x dtype size, the size nccl-tests
report; effective (algorithm) bandwidth = bytes / kernel time, and bus bandwidth with nccl-tests' factors
(all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n). They are recorded as events
(``comm_collective``, one per step and collective, with a JSON detail) because the timing table holds seconds.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from ledger.ingest.common import Issues, WrongKind, describe, open_text, table

CHUNK = 1 << 20
CATEGORIES = ("gemm", "grouped_gemm", "attention", "moe_permute", "communication", "memcpy", "other")
LIBRARIES: tuple[tuple[str, str, bool], ...] = (
    ("nccl", r"nccl|rccl|msccl", False),
    ("deepep", r"deep_?ep|dpsk::ep::", True),
    ("grpcoll", r"grpcoll", False),
    ("hybrid-ep", r"hybrid_?ep", True),
    ("uccl-ep", r"uccl", True),
    ("pplx", r"pplx|\(anonymous namespace\)::(?:dispatch|combine)Kernel<", True),
    ("mori", r"mori::moe|EpDispatch\w*Kernel|EpCombine\w*Kernel", True),
    ("nvshmem", r"nvshmem|ibgda", True),
    ("userbuffers", r"userbuffers", False),
    ("symm-mem", r"symmetric_memory|multimem_|(?:one|two)_shot_all_reduce", False),
    ("custom-allreduce", r"cross_device_reduce|custom_?all_?reduce", False),
    ("all-to-all", r"all_?to_?all|a2a_", True),
)
"""(library, kernel-name pattern, whether its kernels are expert-parallel communication), first match wins.
DeepEP's forks keep its kernels under their own namespaces (``dpsk::ep::internode::dispatch`` in DeepSeek's
published training trace); pplx-kernels keeps its ``dispatchKernel``/``combineKernel`` in an anonymous namespace,
so they appear as ``(anonymous namespace)::dispatchKernel<...>``; NVSHMEM/IBGDA kernels are counted as EP because
the EP libraries are what launch them in MoE training."""
_LIBRARY = [(lib, re.compile(pattern, re.I), ep) for lib, pattern, ep in LIBRARIES]
_COMM = re.compile("|".join(f"(?:{pattern})" for _, pattern, _ in LIBRARIES), re.I)
_EP_WORDS = re.compile(r"(?<![a-z])(?:[Dd]ispatch|[Cc]ombine|[Nn]otify|[Aa]ll_?[Tt]o_?[Aa]ll|[Aa]2[Aa])(?![a-z])")
"""Words that make a kernel communication only with another signal (its CPU op or its stream)."""
_COMM_OPS = re.compile(r"^(?:record_param_comms$|nccl:|c10d::|gloo:)")
"""CPU ops that launch nothing but communication (and its staging)."""
_EP_OPS = re.compile(r"Fused(?:Dispatch|Combine)|HybridEP|deep_?ep|uccl|pplx|dispatch|combine", re.I)
"""CPU ops of an EP library's dispatch/combine (Megatron's FusedDispatch/FusedCombine, HybridEP...)."""
SIGNALS = ("name", "args", "cpu_op", "annotation", "stream")
_EP_COLLECTIVES = frozenset({"all_to_all", "dispatch", "combine", "notify", "layout"})
_GROUPED = re.compile(r"group(ed)?_?gemm|gemm_?group|grouped_?mm|moe_?gemm|multi_?gemm", re.I)
_ATTENTION = re.compile(r"flash|fmha|attn|attention|sdpa|scaled_dot_product|mha_", re.I)
_PERMUTE = re.compile(r"moe|router|routing|topk|top_k|unpermut|(?<![a-z0-9])_?permute_kernel|permute_?tokens|"
                      r"tokens?_?permut|row_id_map|sort_chunks|expert", re.I)
_GEMM = re.compile(r"(?<!fb)gemm|gemv|cutlass|cublas|nvjet|xmma|matmul|splitkreduce|wgmma|s\d+816|s1688", re.I)
_LAUNCH = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                     "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchCooperativeKernel", "cudaGraphLaunch"})
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
_DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
                "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "byte": 1,
                "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
                "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16}
_BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
               "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


class TraceError(WrongKind):
    """A file that is not a usable profiler trace."""


# ---------------------------------------------------------------------------------------- streaming
class _Window:
    """A sliding window over a text stream for incremental JSON decoding."""

    def __init__(self, f: IO[str]) -> None:
        self.f = f
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decoder = json.JSONDecoder()

    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.f.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def skip_ws(self) -> str:
        """The next non-whitespace character (not consumed), or '' at the end."""
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self.fill():
                return ""

    def expect(self, ch: str) -> None:
        got = self.skip_ws()
        if got != ch:
            raise TraceError(f"expected {ch!r} at character {self.pos} of the JSON, found {got or 'the end'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value, reading more of the file until it is complete."""
        self.skip_ws()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.fill():
                    continue
                raise TraceError(f"the JSON is damaged or cut off ({exc.msg} near character {exc.pos})") from exc
            if end >= len(self.buf) and not self.eof and not isinstance(obj, dict | list):
                self.fill()  # a number or literal at the edge of the window may continue: decode again
                continue
            self.pos = end
            return obj


def iter_trace(f: IO[str], header: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Yield the events of a chrome trace one at a time; the other top-level keys go into ``header``
    (those after ``traceEvents`` once the events are exhausted)."""
    w = _Window(f)
    first = w.skip_ws()
    if first != "{":
        raise TraceError(f"expected a JSON object with traceEvents, found {first or 'nothing'!r} first")
    w.pos += 1
    seen_events = False
    while True:
        ch = w.skip_ws()
        if ch == "}":
            w.pos += 1
            break
        if ch == ",":
            w.pos += 1
            continue
        key = w.value()
        if not isinstance(key, str):
            raise TraceError("the trace's top-level object has a key that is not a string")
        w.expect(":")
        if key != "traceEvents":
            header[key] = w.value()
            continue
        seen_events = True
        w.expect("[")
        while True:
            ch = w.skip_ws()
            if ch == "]":
                w.pos += 1
                break
            if ch == ",":
                w.pos += 1
                continue
            if ch == "":
                raise TraceError("the trace is cut off inside traceEvents")
            event = w.value()
            if isinstance(event, dict):
                yield event
    if not seen_events:
        raise TraceError("the JSON object has no traceEvents")


# ------------------------------------------------------------------------------------------ analysis
def category(name: str, cat: str) -> str:
    """The kernel class of a GPU event from its name and category alone (signal 1 of :func:`classify`)."""
    if cat in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset"):
        return "memcpy"
    if _COMM.search(name):
        return "communication"
    if _GROUPED.search(name):
        return "grouped_gemm"
    if _ATTENTION.search(name):
        return "attention"
    if _GEMM.search(name):
        return "gemm"
    if _PERMUTE.search(name):
        return "moe_permute"
    return "other"


def library(name: str) -> str | None:
    """The communication library a kernel name belongs to (see :data:`LIBRARIES`), or None."""
    return next((lib for lib, pattern, _ in _LIBRARY if pattern.search(name)), None)


EP_LIBRARIES = frozenset(lib for lib, _, ep in LIBRARIES if ep)


def classify(name: str, cat: str, args: dict[str, Any] | None = None, cpu_op: str | None = None,
             comm_stream: bool = False) -> tuple[str, str | None]:
    """(kernel class, the signal that made it communication or None) from every signal a trace gives: the
    name, the kernel's args (``Collective name``), the CPU op that launched it and whether its stream carries
    communication (see the module docstring)."""
    klass = category(name, cat)
    if klass == "communication":
        return klass, "name"
    if klass == "memcpy":
        return klass, None
    if args and args.get("Collective name"):
        return "communication", "args"
    if klass != "other":
        return klass, None
    if cpu_op is not None and (_COMM_OPS.match(cpu_op) or (_EP_OPS.search(cpu_op) and _EP_WORDS.search(name))):
        return "communication", "cpu_op"
    if comm_stream and _EP_WORDS.search(name):
        return "communication", "stream"
    return klass, None


def collective(name: str, meta: dict[str, Any] | None) -> str:
    """The collective a communication kernel performs."""
    if meta and meta.get("Collective name"):
        c = str(meta["Collective name"]).lower()
        return {"allreduce": "all_reduce", "allgather": "all_gather", "all_gather_into_tensor": "all_gather",
                "reduce_scatter_tensor": "reduce_scatter", "reducescatter": "reduce_scatter",
                "all_to_all_single": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
                "_allgather_base": "all_gather", "_reduce_scatter_base": "reduce_scatter"}.get(c, c)
    low = name.lower()
    for key, label in (("layout", "layout"), ("notify", "notify"), ("dispatch", "dispatch"),
                       ("combine", "combine"), ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"),
                       ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
                       ("all_to_all", "all_to_all"), ("sendrecv", "send_recv"), ("broadcast", "broadcast"),
                       ("reduce", "reduce"), ("send", "send"), ("recv", "recv")):
        if key in low:
            return label
    return "other"


def short_name(name: str, width: int = 80) -> str:
    """A kernel name without ``void``, its parameter list and template arguments, for listings."""
    text = name.removeprefix("void ").strip()
    depth, out = 0, list[str]()
    for ch in text:
        if ch == "<":
            depth += 1
            continue
        if ch == ">":
            depth = max(0, depth - 1)
            continue
        if ch == "(" and depth == 0 and out:
            break
        if depth == 0:
            out.append(ch)
    short = "".join(out).strip() or text
    return short if len(short) <= width else short[: width - 3] + "..."


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _meta(args: dict[str, Any]) -> dict[str, Any] | None:
    if "Collective name" in args or "In msg nelems" in args:
        return {k: args.get(k) for k in ("Collective name", "In msg nelems", "Out msg nelems", "Group size",
                                         "dtype")}
    return None


@dataclass
class StepTiming:
    """The timing of one ProfilerStep."""

    step: int
    start_us: float
    seconds: dict[str, float] = field(default_factory=dict)
    comms: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class TraceTiming:
    """What a trace says, per step."""

    steps: list[StepTiming]
    rank: int | None
    world_size: int | None
    device: str | None
    events: int
    gpu_events: int
    unattributed: int
    base_s: float
    notes: list[str] = field(default_factory=list)
    unclassified: list[tuple[str, float, int]] = field(default_factory=list)
    """Kernels no signal classified (class ``other``) in the steps: (short name, seconds, calls), most time first."""
    signals: dict[str, int] = field(default_factory=dict)
    """How many of the steps' communication kernels each signal (:data:`SIGNALS`) classified."""
    libraries: dict[str, float] = field(default_factory=dict)
    """Communication seconds per library (:data:`LIBRARIES`; ``unknown`` when only a CPU op or stream said so)."""

    def total(self, phase: str) -> float:
        return sum(s.seconds.get(phase, 0.0) for s in self.steps)

    @property
    def communication_share(self) -> float | None:
        """Communication kernel time / all GPU kernel and copy time, over every step."""
        busy = sum(self.total(c) for c in CATEGORIES)
        return self.total("communication") / busy if busy else None

    @property
    def unclassified_share(self) -> float | None:
        """Kernel time no signal classified (``other``) / all GPU kernel and copy time."""
        busy = sum(self.total(c) for c in CATEGORIES)
        return self.total("other") / busy if busy else None

    @property
    def exposed_share(self) -> float | None:
        """Exposed communication / the steps' GPU busy time."""
        busy = self.total("gpu_busy")
        return self.total("comm_exposed") / busy if busy else None

    def tables(self) -> dict[str, pa.Table]:
        rank = self.rank or 0
        timing: dict[str, list[Any]] = {"rank": [], "step": [], "phase": [], "seconds": []}
        events: dict[str, list[Any]] = {"rank": [], "time": [], "kind": [], "step": [], "detail": []}
        for s in self.steps:
            for phase, seconds in s.seconds.items():
                timing["rank"].append(rank)
                timing["step"].append(s.step)
                timing["phase"].append(phase)
                timing["seconds"].append(seconds)
            for name, c in sorted(s.comms.items()):
                events["rank"].append(rank)
                events["time"].append(self.base_s + s.start_us / 1e6)
                events["kind"].append("comm_collective")
                events["step"].append(s.step)
                events["detail"].append(json.dumps({"collective": name, **c}, sort_keys=True))
        if self.steps:
            events["rank"].append(rank)
            events["time"].append(self.base_s + self.steps[0].start_us / 1e6)
            events["kind"].append("profiler_trace")
            events["step"].append(self.steps[0].step)
            events["detail"].append(json.dumps({
                "device": self.device, "rank": self.rank, "world_size": self.world_size,
                "steps": [s.step for s in self.steps], "communication_share": self.communication_share,
                "exposed_share": self.exposed_share, "unattributed_gpu_events": self.unattributed,
                "communication_signals": self.signals, "communication_libraries": self.libraries,
                "unclassified_share": self.unclassified_share,
                "unclassified": [{"kernel": n, "seconds": sec, "calls": calls}
                                 for n, sec, calls in self.unclassified[:UNCLASSIFIED_LISTED]],
            }, sort_keys=True))
        return {"timing": table("timing", timing), "events": table("events", events)}


UNCLASSIFIED_LISTED = 10
"""Unclassified kernels named in the receipt (the time of all of them is always counted)."""


@dataclass
class _Gpu:
    """One GPU event, as much as the analysis keeps."""

    ts: float
    dur: float
    name: str
    cat: str
    correlation: Any
    device: int
    stream: int
    meta: dict[str, Any] | None
    klass: str = "other"
    signal: str | None = None


def analyse(path: Path, issues: Issues | None = None) -> TraceTiming:
    """Read a trace (``.json`` or ``.json.gz``) and compute its per-step timing."""
    issues = issues or Issues(path.name)
    header: dict[str, Any] = {}
    steps: list[tuple[float, float, int]] = []
    runtime: dict[Any, tuple[float, int]] = {}  # correlation -> (launch ts, tid)
    launches: list[tuple[float, float]] = []  # (ts, dur) of launch calls
    gpu: list[_Gpu] = []
    comm_ops: dict[int, list[tuple[float, float, dict[str, Any]]]] = defaultdict(list)
    ops: dict[int, list[tuple[float, float, str]]] = defaultdict(list)  # tid -> communication CPU ops
    ranges: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)  # (device, stream) -> GPU
    names: dict[tuple[str, str], str] = {}
    durations: dict[int, float] = {}
    count = 0
    try:
        with open_text(path) as f:
            for e in iter_trace(f, header):
                count += 1
                ph = e.get("ph")
                if ph != "X":
                    continue
                cat = e.get("cat") or ""
                name = e.get("name") or ""
                ts, dur = e.get("ts"), e.get("dur")
                if not isinstance(ts, int | float) or not isinstance(dur, int | float):
                    continue
                if cat in _GPU_CATS:
                    args = e.get("args") or {}
                    key = (name, cat)
                    klass = names.get(key)
                    if klass is None:
                        klass = names[key] = category(name, cat)
                    stream = args.get("stream", e.get("tid"))
                    gpu.append(_Gpu(float(ts), float(dur), name, cat, args.get("correlation"),
                                    int(e.get("pid") or 0), stream if isinstance(stream, int) else 0,
                                    _meta(args), klass))
                elif cat in ("cuda_runtime", "cuda_driver"):
                    corr = (e.get("args") or {}).get("correlation")
                    if corr is not None:
                        runtime[corr] = (float(ts), int(e.get("tid") or 0))
                    if name in _LAUNCH:
                        launches.append((float(ts), float(dur)))
                elif name.startswith("ProfilerStep#"):
                    if cat in ("user_annotation", "cpu_op", "") or "gpu" not in cat:
                        try:
                            steps.append((float(ts), float(ts) + float(dur), int(name.split("#", 1)[1])))
                            durations[steps[-1][2]] = float(dur)
                        except ValueError:
                            issues.note(f"a ProfilerStep annotation named {name!r}: not a step number")
                elif cat == "gpu_user_annotation":
                    if _COMM_OPS.match(name) or _EP_OPS.search(name):
                        stream = (e.get("args") or {}).get("stream", e.get("tid"))
                        key2 = (int(e.get("pid") or 0), stream if isinstance(stream, int) else 0)
                        ranges[key2].append((float(ts), float(ts) + float(dur), name))
                elif "gpu" not in cat:
                    if name == "record_param_comms":
                        meta = _meta(e.get("args") or {})
                        if meta:
                            comm_ops[int(e.get("tid") or 0)].append((float(ts), float(ts) + float(dur), meta))
                    if _COMM_OPS.match(name) or _EP_OPS.search(name):
                        ops[int(e.get("tid") or 0)].append((float(ts), float(ts) + float(dur), name))
    except UnicodeDecodeError as exc:  # pragma: no cover - open_text replaces bad bytes
        raise TraceError(f"{path}: not text ({exc})") from exc
    except TraceError as exc:
        raise TraceError(f"{path}: expected a PyTorch profiler chrome trace (JSON with traceEvents), found "
                         f"{describe(path)}: {exc}") from exc
    if not steps:
        raise TraceError(f"{path}: the trace has no ProfilerStep: record it with torch.profiler.profile(schedule=...) "
                         "and call prof.step() each iteration, so timing can be split per step")
    _classify_all(gpu, runtime, ops, ranges)
    return _per_step(header, steps, durations, runtime, launches, gpu, comm_ops, count, issues)


def _innermost(intervals: list[tuple[float, float, Any]], starts: list[float], ts: float) -> Any:
    """The payload of the latest-starting interval (sorted by start) that holds ``ts``, or None."""
    j = bisect.bisect_right(starts, ts) - 1
    while j >= 0:
        if intervals[j][0] <= ts <= intervals[j][1]:
            return intervals[j][2]
        j -= 1
        if j >= 0 and ts - intervals[j][0] > 60e6:  # CPU ops do not last a minute: stop looking back
            break
    return None


def _classify_all(gpu: list[_Gpu], runtime: dict[Any, tuple[float, int]],
                  ops: dict[int, list[tuple[float, float, str]]],
                  ranges: dict[tuple[int, int], list[tuple[float, float, str]]] | None = None) -> None:
    """Signals 2-5 of :func:`classify` for the kernels the name alone did not place."""
    for intervals in (*ops.values(), *(ranges or {}).values()):
        intervals.sort(key=lambda o: o[0])
    starts = {tid: [o[0] for o in tid_ops] for tid, tid_ops in ops.items()}
    range_starts = {key: [o[0] for o in r] for key, r in (ranges or {}).items()}
    for g in gpu:
        if g.klass == "communication":
            g.signal = "name"
            continue
        if g.klass == "memcpy":
            continue
        launch = runtime.get(g.correlation) if g.correlation is not None else None
        op = None
        if launch is not None and launch[1] in ops:
            op = _innermost(ops[launch[1]], starts[launch[1]], launch[0])
        g.klass, g.signal = classify(g.name, g.cat, g.meta, op)
        key = (g.device, g.stream)
        if g.klass == "other" and ranges and key in ranges:  # a GPU-side annotation of a collective
            annotation = _innermost(ranges[key], range_starts[key], g.ts)
            if annotation is not None:
                g.klass, signal = classify(g.name, g.cat, g.meta, annotation)
                g.signal = "annotation" if signal == "cpu_op" else signal
    time: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0.0, 0.0])  # stream -> [comm, all] us
    for g in gpu:
        if g.klass != "memcpy":
            t = time[(g.device, g.stream)]
            t[1] += g.dur
            if g.klass == "communication":
                t[0] += g.dur
    comm_streams = {stream for stream, (comm, total) in time.items() if total and comm >= total / 2}
    for g in gpu:
        if g.klass == "other" and (g.device, g.stream) in comm_streams:
            g.klass, g.signal = classify(g.name, g.cat, g.meta, None, comm_stream=True)


def _per_step(header: dict[str, Any], steps: list[tuple[float, float, int]], durations: dict[int, float],
              runtime: dict[Any, tuple[float, int]],
              launches: list[tuple[float, float]], gpu: list[_Gpu], comm_ops: dict[int, list[Any]], count: int,
              issues: Issues) -> TraceTiming:
    steps.sort()
    starts = [s[0] for s in steps]

    def step_of(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= steps[i][1] else None

    devices: dict[int, int] = defaultdict(int)
    for g in gpu:
        devices[g.device] += 1
    device_pid = max(devices, key=lambda d: devices[d]) if devices else None
    if device_pid is not None and len(devices) > 1:
        issues.note(f"the trace holds GPU events of {len(devices)} devices: timing covers device {device_pid} "
                    f"({devices[device_pid]} events)")
    for tid_ops in comm_ops.values():
        tid_ops.sort(key=lambda o: o[0])
    op_starts = {tid: [o[0] for o in tid_ops] for tid, tid_ops in comm_ops.items()}
    per_step: list[list[tuple[float, float, _Gpu, dict[str, Any] | None]]] = [[] for _ in steps]
    device_work: list[tuple[float, float]] = []
    unattributed = 0
    for g in gpu:
        if g.device != device_pid:
            continue
        device_work.append((g.ts, g.ts + g.dur))
        launch = runtime.get(g.correlation) if g.correlation is not None else None
        index = step_of(launch[0]) if launch else None
        if index is None:
            unattributed += 1
            continue
        meta = g.meta
        if g.klass == "communication" and meta is None and launch is not None and launch[1] in comm_ops:
            meta = _innermost(comm_ops[launch[1]], op_starts[launch[1]], launch[0])
        per_step[index].append((g.ts, g.ts + g.dur, g, meta))
    if unattributed:
        issues.note(f"{unattributed} GPU event(s) were launched outside every ProfilerStep (or their launch is not "
                    "in the trace): not attributed to a step")
    launch_per_step = [0.0] * len(steps)
    for ts, dur in launches:
        index = step_of(ts)
        if index is not None:
            launch_per_step[index] += dur
    windows = _gpu_windows(per_step)
    device_u = _union(device_work)
    result: list[StepTiming] = []
    signals: dict[str, int] = {}
    libraries: dict[str, float] = {}
    unclassified: dict[str, list[float]] = {}
    for (start, _end, number), events, launch_us, window in zip(steps, per_step, launch_per_step, windows,
                                                               strict=True):
        seconds = dict.fromkeys(CATEGORIES, 0.0)
        comm_intervals, ep_intervals, other_intervals = [], [], []
        comms: dict[str, dict[str, Any]] = {}
        for s, e, g, meta in events:
            dur = g.dur
            seconds[g.klass] += dur / 1e6
            if g.klass == "other":
                u = unclassified.setdefault(short_name(g.name), [0.0, 0])
                u[0] += dur / 1e6
                u[1] += 1
            if g.klass != "communication":
                other_intervals.append((s, e))
                continue
            comm_intervals.append((s, e))
            signal = g.signal or "name"
            signals[signal] = signals.get(signal, 0) + 1
            lib = library(g.name) or "unknown"
            libraries[lib] = libraries.get(lib, 0.0) + dur / 1e6
            label = collective(g.name, meta)
            if lib in EP_LIBRARIES or label in _EP_COLLECTIVES:
                ep_intervals.append((s, e))
            seconds[f"comm:{label}"] = seconds.get(f"comm:{label}", 0.0) + dur / 1e6
            c = comms.setdefault(label, {"calls": 0, "seconds": 0.0})
            c["calls"] += 1
            c["seconds"] += dur / 1e6
            size = _message_bytes(meta)
            if size is not None:
                c["bytes"] = c.get("bytes", 0) + size
                c["timed_seconds"] = c.get("timed_seconds", 0.0) + dur / 1e6
                group = meta.get("Group size") if meta else None
                if isinstance(group, int) and group > 1:
                    c["group_size"] = group
        comm_u, ep_u, other_u = _union(comm_intervals), _union(ep_intervals), _union(other_intervals)
        overlapped = _intersection(comm_u, other_u)
        ep_overlapped = _intersection(ep_u, other_u)
        busy_u = _union(comm_u + other_u)
        seconds["comm_overlapped"] = overlapped / 1e6
        seconds["comm_exposed"] = (_length(comm_u) - overlapped) / 1e6
        seconds["comm_ep_overlapped"] = ep_overlapped / 1e6
        seconds["comm_ep_exposed"] = (_length(ep_u) - ep_overlapped) / 1e6
        seconds["gpu_busy"] = _length(busy_u) / 1e6
        if window is not None:
            seconds["gpu_idle"] = (window[1] - window[0] - _intersection(device_u, [window])) / 1e6
        else:
            seconds["gpu_idle"] = 0.0
        seconds["cpu_launch"] = launch_us / 1e6
        seconds["step"] = durations[number] / 1e6
        for label, c in comms.items():
            if c.get("bytes") and c.get("timed_seconds"):
                algbw = c["bytes"] / c["timed_seconds"]
                c["algbw_GBps"] = algbw / 1e9
                factor = _BUS_FACTOR.get(label)
                if factor and c.get("group_size"):
                    c["busbw_GBps"] = algbw * factor(c["group_size"]) / 1e9
        result.append(StepTiming(number, start, seconds, comms))
    raw_info, raw_props = header.get("distributedInfo"), header.get("deviceProperties")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    props: list[Any] = raw_props if isinstance(raw_props, list) else []
    device = None
    if device_pid is not None:
        device = next((p.get("name") for p in props if isinstance(p, dict) and p.get("id") == device_pid), None)
    base = header.get("baseTimeNanoseconds")
    listed = sorted(((n, v[0], int(v[1])) for n, v in unclassified.items()), key=lambda x: (-x[1], x[0]))
    timing = TraceTiming(
        steps=result, rank=_int(info.get("rank")), world_size=_int(info.get("world_size")), device=device,
        events=count, gpu_events=len(gpu), unattributed=unattributed,
        base_s=base / 1e9 if isinstance(base, int | float) else 0.0,
        unclassified=listed, signals=signals, libraries=libraries,
    )
    share = timing.unclassified_share
    if listed and share is not None:
        total = sum(x[1] for x in listed)
        top = ", ".join(f"{n} ({sec * 1e3:.3g} ms)" for n, sec, _ in listed[:3])
        timing.notes.append(f"{sum(x[2] for x in listed)} kernel(s) of {len(listed)} kind(s) matched no kernel class "
                            f"(other): {total * 1e3:.4g} ms, {share:.1%} of GPU kernel time; the largest: {top}")
    return timing


def _gpu_windows(per_step: list[list[tuple[float, float, Any, Any]]]) -> list[tuple[float, float] | None]:
    """Each step's GPU window: from its first kernel to the next step's first kernel (the last step's: to the
    end of the last attributed kernel); None for a step without GPU work."""
    firsts = [min((s for s, _e, *_ in events), default=None) for events in per_step]
    last_end = max((e for events in per_step for _s, e, *_ in events), default=None)
    windows: list[tuple[float, float] | None] = []
    for i, first in enumerate(firsts):
        if first is None or last_end is None:
            windows.append(None)
            continue
        later = [f for f in firsts[i + 1:] if f is not None]
        end = min(later) if later else last_end
        windows.append((first, max(first, end)))
    return windows


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _message_bytes(meta: dict[str, Any] | None) -> int | None:
    if not meta:
        return None
    size = _DTYPE_BYTES.get(str(meta.get("dtype") or "").lower())
    counts = [n for n in (meta.get("In msg nelems"), meta.get("Out msg nelems"))
              if isinstance(n, int) and not isinstance(n, bool)]
    if size is None or not counts:
        return None
    return max(counts) * size


def finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


__all__ = ["CATEGORIES", "EP_LIBRARIES", "LIBRARIES", "SIGNALS", "StepTiming", "TraceError", "TraceTiming", "analyse",
           "category", "classify", "collective", "iter_trace", "library", "short_name"]
