"""MLPerf Training result logs -> an imported receipt.

A result log holds ``:::MLLOG {json}`` lines (mlperf-logging's format: ``key``, ``time_ms``, ``value``,
``event_type``, ``metadata``), possibly ``:::SYSJSON {json}`` lines with the system description, and the
rest of the job's stdout interleaved, with or without rank prefixes such as ``  0: ``, ``\\r\\n`` line ends,
and no final newline. What becomes what:

- ``submission_*`` -> the receipt's source (submitter, division, benchmark); a placeholder the submission's code
  left (``SUBMISSION_ORG_PLACEHOLDER``, ``8xSUBMISSION_PLATFORM_PLACEHOLDER``) loses to the system description's
  ``submitter``; the system description (``:::SYSJSON`` or ``--system SYSTEM.json``) -> stack: hardware (system,
  accelerator model and count per node, CPU and its logical CPUs per node, host memory, interconnect), launcher
  nodes, software framework and ``other_software_stack`` (an object, a list of objects, or text as in the rules'
  own example and AMD's and Habana's descriptions), drivers (``nvidia_kernel_driver`` -> gpu_driver,
  ``cuda_driver_version`` -> cuda_driver, CUDA, NCCL, cuDNN);
- hyperparameters -> workload (seed, batch, sequence length, optimizer); every config key is also kept in
  an ``mlperf_config`` event, so nothing the log states is lost;
- ``eval_accuracy`` -> evals (split ``eval``; step = ``samples_count``, else ``epoch_num``: MLPerf counts
  progress in samples); ``tracked_stats`` with a ``step`` -> steps (``reduced_train_loss``/``train_loss``
  -> loss, ``train_step_time`` -> step_time_s, the rest in ``extra``) when they carry the step's loss;
  per-block stats (without a ``step``, or without a loss, such as mlperf_common's block throughput logged with
  ``"step": 0`` for the first block) -> ``tracked_stats`` events; stats logged inside an eval (which number its
  own batches as ``step``) and start-up timers (``warmup_time``) -> timing rows, summed per eval at the eval's
  samples_count;
  ``init_*``/``run_*``/``block_*``/``eval_*`` -> events; init time (``init_stop`` - first ``init_start``)
  -> a timing row ``init`` at step 0;
- ``run_stop``'s ``status`` -> summary.outcome; time to train = ``run_stop.time_ms - run_start.time_ms``
  (seconds) -> summary.time_to_train_s. Without run_stop both stay null and a problem says so;
- the quality target, from the benchmark's compliance rules (``--rules`` file or folder: the
  ``<division>_<benchmark>.yaml`` rule's ``ATLEAST_ONE_CHECK`` on eval_accuracy, e.g. ``v['value'] <= 0.925``)
  -> a :class:`schemas.QualityGate` in the task; ``target_accuracy`` logged by newer benchmarks is checked
  against it. Without rules the direction of the target is unknown, so no gate is guessed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.errors import BadInput
from ledger.ingest.common import (
    Evidence,
    Issues,
    LineError,
    WrongKind,
    check_file,
    describe,
    numbered_lines,
    sha256_of,
    table,
)
from schemas import (
    Batch,
    Data,
    Drivers,
    Hardware,
    Launcher,
    Optimizer,
    Package,
    QualityGate,
    Software,
    Stack,
    Task,
    Workload,
)

MLLOG = ":::MLLOG"
SYSJSON = ":::SYSJSON"
EVENT_KEYS = frozenset({"init_start", "init_stop", "run_start", "run_stop", "block_start", "block_stop",
                        "epoch_start", "epoch_stop", "eval_start", "eval_stop", "cache_clear"})
SUBMISSION_KEYS = frozenset({"submission_benchmark", "submission_org", "submission_division", "submission_status",
                             "submission_platform", "submission_poc_name", "submission_poc_email"})
_DECODER = json.JSONDecoder()
_STEP_KEYS = frozenset({"reduced_train_loss", "train_loss", "loss", "train_step_time"})
_LOSS_KEYS = frozenset({"reduced_train_loss", "train_loss", "loss"})
"""A tracked_stats value is one training step only when it carries the step's loss."""


def parse_mllog_line(raw: str) -> tuple[str, dict[str, Any]] | None:
    """One line: ("mllog", event) or ("sysjson", system) or None for a line that is neither; a line that
    carries ``:::MLLOG``/``:::SYSJSON`` but no valid payload raises :class:`LineError`."""
    for marker, kind in ((MLLOG, "mllog"), (SYSJSON, "sysjson")):
        at = raw.find(marker)
        if at < 0:
            continue
        payload = raw[at + len(marker):].lstrip()
        try:
            obj, _ = _DECODER.raw_decode(payload)
        except ValueError as exc:
            raise LineError(f"{marker} payload is not JSON ({str(exc.args[0])[:60]})") from exc
        except RecursionError as exc:
            raise LineError(f"{marker} payload nests too deeply") from exc
        if not isinstance(obj, dict):
            raise LineError(f"{marker} payload is not a JSON object")
        if kind == "mllog":
            _check_event(obj)
        return kind, obj
    return None


_PLACEHOLDER = re.compile(r"PLACEHOLDER|^(?:UNDEFINED|UNKNOWN|N/?A|TBD)$", re.I)


def placeholder(value: str) -> bool:
    """True for a value a submission's code left for the submitter to fill in (``SUBMISSION_ORG_PLACEHOLDER``,
    ``8xSUBMISSION_PLATFORM_PLACEHOLDER``, ``UNDEFINED``)."""
    return bool(_PLACEHOLDER.search(value.strip()))


def _check_event(obj: dict[str, Any]) -> None:
    key, when = obj.get("key"), obj.get("time_ms")
    if not isinstance(key, str) or not key:
        raise LineError("MLLOG event without a 'key'")
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        raise LineError(f"MLLOG event {key!r} without a numeric 'time_ms'")
    if "value" not in obj:
        raise LineError(f"MLLOG event {key!r} without a 'value'")
    meta = obj.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise LineError(f"MLLOG event {key!r}: metadata is not an object")


@dataclass
class MlperfLog:
    """The events of one result log, in order."""

    events: list[dict[str, Any]] = field(default_factory=list)
    system: dict[str, Any] | None = None
    lines: int = 0
    foreign: int = 0
    issues: Issues = field(default_factory=lambda: Issues("log"))

    def first(self, key: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["key"] == key), None)

    def value(self, key: str) -> Any:
        e = self.first(key)
        return None if e is None else e.get("value")


def parse_lines(lines: Iterable[tuple[int, str, bool]], source: str = "log") -> MlperfLog:
    """Parse numbered lines of a result log."""
    log = MlperfLog(issues=Issues(source))
    lineno = 0
    ended = True
    for lineno, raw, ended in lines:  # noqa: B007 (ended: of the last line, read after the loop)
        if ":::" not in raw:
            if raw.strip():
                log.foreign += 1
            continue
        try:
            parsed = parse_mllog_line(raw)
        except LineError as exc:
            log.issues.line(lineno, str(exc))
            continue
        if parsed is None:
            log.foreign += 1
            continue
        kind, obj = parsed
        if kind == "sysjson":
            if log.system is None:
                log.system = obj
            elif obj != log.system:
                log.issues.note(f"line {lineno}: a :::SYSJSON line differs from the first one; kept the first")
        else:
            obj["_line"] = lineno
            log.events.append(obj)
    log.lines = lineno
    if not ended and lineno:
        log.issues.note(f"line {lineno} has no line end (the log may have been cut off)")
    return log


def parse_log(path: Path) -> MlperfLog:
    """Parse a result log file, streaming."""
    return parse_lines(numbered_lines(path), path.name)


# ------------------------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class Target:
    """A quality target read from compliance rules."""

    gate: QualityGate
    rules_file: str
    check: str


_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_TARGET = re.compile(r"v\[['\"]value['\"]\]\s*(<=|>=|<|>)\s*([-+0-9.eE]+)")


def find_rules(rules: Sequence[Path], benchmark: str, division: str | None) -> tuple[Path | None, list[str]]:
    """The rules file for a benchmark: ``<division>_<benchmark>.yaml`` (files named by folder, e.g.
    ``training_4.0.0__closed_llama2_70b_lora.yaml``, are matched on their last part), the newest version
    when several match. Returns it and notes."""
    candidates: list[Path] = []
    for r in rules:
        if r.is_dir():
            candidates.extend(sorted(r.rglob("*.yaml")))
        elif r.exists():
            candidates.append(r)
        else:
            raise BadInput(f"--rules {r}: no such file or folder")
    divisions = (division,) if division else ("closed", "open")
    wanted = {f"{d}_{benchmark}.yaml" for d in divisions}
    matches = [p for p in candidates if any(p.name == w or p.name.endswith(f"_{w}") or p.name.endswith(f"/{w}")
                                            for w in wanted)]
    if not matches:
        return None, [f"no compliance rules for {benchmark} ({'/'.join(divisions)}) in "
                      f"{', '.join(str(r) for r in rules)}: no quality gate recorded"]

    def version(p: Path) -> tuple[int, ...]:
        m = _VERSION.search(str(p))
        return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)

    matches.sort(key=version)
    notes = []
    if len(matches) > 1:
        notes.append(f"several rule sets match {benchmark}: used {matches[-1].name} (the newest); the log does "
                     "not say which ruleset it was checked against")
    return matches[-1], notes


def quality_target(path: Path, benchmark: str) -> Target | None:
    """The eval_accuracy target of a rules file (its ``ATLEAST_ONE_CHECK``), or None."""
    text = path.read_text(errors="replace")
    block = re.search(r"NAME:\s*eval_accuracy\b(.*?)(?=^\s*-\s*KEY:|\Z)", text, re.S | re.M)
    if not block:
        return None
    check = re.search(r"ATLEAST_ONE_CHECK:\s*[\"']?(.*?)[\"']?\s*$", block.group(1), re.M)
    if not check:
        return None
    for op, number in _TARGET.findall(check.group(1)):
        if op in ("<=", ">="):
            gate = QualityGate(name=f"mlperf {benchmark}", metric="eval_accuracy", threshold=float(number),
                               direction="min" if op == "<=" else "max", split="eval")
            return Target(gate, path.name, check.group(1).strip())
    return None


def gate_met(gate: QualityGate, evals: Iterable[tuple[int, float]]) -> int | None:
    """The step (samples) of the first eval that meets the gate, or None."""
    for step, value in evals:
        if value is None or not math.isfinite(value):
            continue
        if (value <= gate.threshold) if gate.direction == "min" else (value >= gate.threshold):
            return step
    return None


# ------------------------------------------------------------------------------------------- system
def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return s if s and s.upper() not in ("N/A", "NA") else None


def _count(v: Any) -> int | None:
    s = _text(v)
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(v: Any) -> int | None:
    """``81559 MiB`` / ``2.0 TB`` / ``1.024 TB`` read literally (MB/GB/TB decimal, MiB/GiB/TiB binary)."""
    s = _text(v)
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]i?B|B)", s or "", re.I)
    if not m:
        return None
    return int(round(float(m.group(1)) * _UNITS[m.group(2).upper()]))


DRIVER_KEYS = {"cuda_version": "cuda_runtime", "nccl_version": "nccl", "cudnn_version": "cudnn",
               "cuda_driver_version": "cuda_driver", "nvidia_kernel_driver": "gpu_driver"}
"""other_software_stack keys (and top-level keys) that are driver or runtime versions -> Drivers fields. NVIDIA's
descriptions give both ``nvidia_kernel_driver`` (the kernel module, 535.129.03) and ``cuda_driver_version`` (the
user-mode CUDA driver in the container, 550.54.15): different things, kept apart."""
_STRING_DRIVERS = {"cuda": "cuda_runtime", "nccl": "nccl", "cudnn": "cudnn", "cuda_driver": "cuda_driver",
                   "nvidia_kernel_driver": "gpu_driver", "nvidia_driver": "gpu_driver"}
_ITEM = re.compile(r"^(?P<name>[A-Za-z][\w.+/ ()-]*?)[\s:=_-]+v?(?P<version>\d[\w.+~:-]*)$")


def software_items(text: str) -> list[tuple[str, str]]:
    """``other_software_stack`` written as text, the form of the MLPerf submission rules' own example
    (``cuda 10.2.0.163, cudnn 7.6.0.64, gcc 5.4.0``) and of AMD's and Habana's descriptions
    (``hipblaslt-1.1.0.70000-crdcbr.91~22.04, Nemo 2.3.0, megatron_lm-bc0be960``): (name, version) per
    comma-separated item; an item without a version that starts with a digit keeps its text as the name and
    an empty version."""
    out = []
    for raw in re.split(r",|;|\n", text):
        item = raw.strip()
        if not item:
            continue
        m = _ITEM.match(item)
        out.append((m.group("name").strip(), m.group("version")) if m else (item, ""))
    return out


def _cpu_cores(system: Mapping[str, Any], notes: list[str]) -> int | None:
    """Logical CPUs of one node. The MLPerf submission rules' system description table gives
    ``host_processor_core_count`` per processor (26 for two Xeon Platinum 8164) and ``host_processor_vcpu_count``
    for the host (96 vCPUs for a cloud host); submitters write the vCPU count both per processor (AMD EPYC 9575F:
    64 cores, 128) and per host (the same CPU: 256). A vCPU count above what one processor can run (2 threads
    per core) is the host's; one within it, with more than one processor, is per processor."""
    vcpus, sockets = _count(system.get("host_processor_vcpu_count")), _count(system.get("host_processors_per_node"))
    cores = _count(system.get("host_processor_core_count"))
    if not vcpus:
        return None
    if not sockets or sockets == 1:
        return vcpus
    if cores and vcpus <= 2 * cores:
        return vcpus * sockets
    if not cores:
        notes.append(f"host_processor_vcpu_count {vcpus} with {sockets} processors and no core count: read as the "
                     "host's vCPUs (the MLPerf rules' reading), not per processor")
    return vcpus


def stack_from_system(system: Mapping[str, Any], notes: list[str]) -> Stack:
    """A Stack from an MLPerf system description (``systems/<system>.json`` or ``:::SYSJSON``)."""
    other = system.get("other_software_stack") or {}
    if isinstance(other, list):
        merged: dict[str, Any] = {}
        for item in other:
            if isinstance(item, dict):
                merged.update(item)
        other = merged
    items: list[tuple[str, str]] = []
    if isinstance(other, str):
        items = software_items(other)
        other = {}
    if not isinstance(other, dict):
        notes.append("other_software_stack is neither text, an object nor a list of objects: not recorded")
        other = {}
    stack_versions = {str(k): str(v) for k, v in other.items() if _text(v)}
    for key in ("cuda_driver_version", "nvidia_kernel_driver"):  # also given at the top level (Dell)
        if key not in stack_versions and _text(system.get(key)):
            stack_versions[key] = str(system[key])
    drivers = {field: stack_versions.pop(key) for key, field in DRIVER_KEYS.items() if key in stack_versions}
    packages = [Package(name=k.removesuffix("_version"), version=v) for k, v in sorted(stack_versions.items())]
    for name, version in items:
        field = _STRING_DRIVERS.get(name.lower().replace(" ", "_"))
        if field and version and field not in drivers:
            drivers[field] = version
        else:
            packages.append(Package(name=name, version=version))
    if _text(system.get("operating_system")):
        packages.append(Package(name="operating-system", version=str(system["operating_system"])))
    interconnect = "; ".join(
        f"{label}{text}" for label, text in (
            ("", _text(system.get("accelerator_interconnect"))),
            ("host: ", _text(system.get("host_networking"))),
        ) if text
    ) or None
    hardware = Hardware(
        system=_text(system.get("system_name")),
        interconnect=interconnect,
        cpu_model=_text(system.get("host_processor_model_name")),
        cpu_cores=_cpu_cores(system, notes),
        memory_bytes=parse_bytes(system.get("host_memory_capacity")),
        gpu_model=_text(system.get("accelerator_model_name")),
        gpu_count=_count(system.get("accelerators_per_node")) or 0,
    )
    return Stack(
        software=Software(framework=_text(system.get("framework")),
                          packages=tuple(sorted(packages, key=lambda p: (p.name.lower(), p.version)))),
        drivers=Drivers(**drivers),
        hardware=hardware,
        launcher=Launcher(nodes=_count(system.get("number_of_nodes"))),
    )


# ----------------------------------------------------------------------------------------- evidence
@dataclass
class MlperfResult:
    """What an MLPerf import found, besides the receipt itself."""

    evidence: Evidence
    target: Target | None
    met_at: int | None
    """samples_count of the first eval that met the target (None: not met, or no target)."""


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None and f.is_integer() else None


def _progress(meta: Mapping[str, Any]) -> int | None:
    for key in ("samples_count", "epoch_num", "step", "epoch_count"):
        v = _int(meta.get(key))
        if v is not None:
            return v
    return None


def read_system(path: Path) -> dict[str, Any]:
    """An MLPerf system description file."""
    check_file(path)
    try:
        data = json.loads(path.read_text(errors="replace"))
    except ValueError as exc:
        raise WrongKind(f"{path}: expected an MLPerf system description (JSON), found {describe(path)}") from exc
    if not isinstance(data, dict) or not ({"system_name", "accelerator_model_name"} & set(data)):
        raise WrongKind(f"{path}: expected an MLPerf system description (system_name, accelerator_model_name...), "
                        f"found {describe(path)}")
    return data


def evidence(path: Path, system_path: Path | None = None, rules: Sequence[Path] = ()) -> MlperfResult:
    """Parse a result log (and its system description and rules) into :class:`Evidence`."""
    check_file(path)
    log = parse_log(path)
    if not log.events:
        raise WrongKind(f"{path}: expected an MLPerf result log (':::MLLOG {{json}}' lines), found {describe(path)}"
                        + (f"; {len(log.issues.unparsed)} :::MLLOG line(s) did not parse" if log.issues.unparsed
                           else ""))
    issues = log.issues
    notes: list[str] = []
    system = log.system
    if system_path is not None:
        given = read_system(system_path)
        if system is not None and given.get("system_name") != system.get("system_name"):
            notes.append(f"--system {system_path.name} names {given.get('system_name')!r} but the log's :::SYSJSON "
                         f"names {system.get('system_name')!r}; used --system")
        system = given
    stack = stack_from_system(system, notes) if system else Stack()
    if system is None:
        notes.append("no system description (:::SYSJSON or --system): hardware and software not recorded")
    benchmark = _text(log.value("submission_benchmark"))
    division = _text(log.value("submission_division")) or (_text(system.get("division")) if system else None)
    described = _text(system.get("submitter")) if system else None
    submitter = _text(log.value("submission_org"))
    if submitter and placeholder(submitter):
        notes.append(f"the log's submission_org is a placeholder ({submitter!r}): "
                     + (f"the submitter is the system description's {described!r}" if described else
                        "submitter unknown (give --system)"))
        submitter = described
    elif submitter and described and submitter != described:
        notes.append(f"the log's submission_org {submitter!r} differs from the system description's submitter "
                     f"{described!r}; kept the log's")
    submitter = submitter or described
    platform = _text(log.value("submission_platform"))
    if platform and placeholder(platform):
        notes.append(f"the log's submission_platform is a placeholder ({platform!r}): not used")
        platform = None
    if platform and stack.hardware.system is None:
        stack = stack.model_copy(update={"hardware": stack.hardware.model_copy(update={"system": platform})})

    # --- target
    target = None
    if benchmark and rules:
        rules_file, rule_notes = find_rules(rules, benchmark, division)
        notes.extend(rule_notes)
        if rules_file is not None:
            target = quality_target(rules_file, benchmark)
            if target is None:
                notes.append(f"{rules_file.name} has no eval_accuracy target: no quality gate recorded")
    logged_target = _num(log.value("target_accuracy"))
    if target is None and logged_target is not None:
        notes.append(f"the log states target_accuracy {logged_target} but not whether lower or higher is better; "
                     "give --rules to record the quality gate")
    elif target is not None and logged_target is not None and logged_target != target.gate.threshold:
        notes.append(f"the log's target_accuracy {logged_target} differs from the rules' {target.gate.threshold}")

    # --- tables
    steps: dict[int, dict[str, Any]] = {}
    evals: dict[str, list[Any]] = {n: [] for n in ("step", "time", "split", "metric", "value")}
    events: dict[str, list[Any]] = {n: [] for n in ("time", "kind", "step", "detail")}
    config: dict[str, Any] = {}
    timing_rows: dict[tuple[int, str], float] = {}
    in_eval: int | None = None
    for e in log.events:
        key, t, meta = e["key"], e["time_ms"] / 1000.0, e.get("metadata") or {}
        if key == "eval_accuracy":
            step = _progress(meta)
            value = _num(e.get("value"))
            if step is None or value is None:
                issues.field(e["_line"], "eval_accuracy without a numeric value and samples_count/epoch_num")
                continue
            for name, v in zip(evals, (step, t, "eval", "eval_accuracy", value), strict=True):
                evals[name].append(v)
        elif key == "tracked_stats":
            step = _int(meta.get("step"))
            value = e.get("value")
            if not isinstance(value, dict):
                issues.field(e["_line"], "tracked_stats without a value object")
                continue
            if step is None:  # per-block statistics (samples_count only): kept as an event, not a step
                events["time"].append(t)
                events["kind"].append("tracked_stats")
                events["step"].append(_progress(meta))
                events["detail"].append(json.dumps(value, sort_keys=True, default=str))
                continue
            numbers = {str(k): _num(v) for k, v in value.items() if _num(v) is not None}
            timers = all(("time" in k or k.endswith("_finished")) for k in numbers)
            if in_eval is not None or (numbers and timers and not _STEP_KEYS & set(numbers)):
                # stats of an eval (its own batch index as "step") or of start-up: phase times, not steps
                at = in_eval if in_eval is not None else step
                for name, seconds in numbers.items():
                    timing_rows[(at, name)] = timing_rows.get((at, name), 0.0) + (seconds or 0.0)
                continue
            if not _LOSS_KEYS & set(numbers):
                # per-block statistics (mlperf_common's throughput / mean train_step_time / max_memory_usage at
                # the block's first sample, "step": 0 for the first block) or start-up markers: not a step
                events["time"].append(t)
                events["kind"].append("tracked_stats")
                events["step"].append(step)
                events["detail"].append(json.dumps(value, sort_keys=True, default=str))
                continue
            row = steps.setdefault(step, {"time": t, "extra": {}})
            row["time"] = max(row["time"], t)
            for name, v in value.items():
                number = _num(v)
                if number is None:
                    continue
                if name in ("reduced_train_loss", "train_loss", "loss"):
                    row["loss"] = number
                elif name == "train_step_time":
                    row["step_time_s"] = number
                else:
                    row["extra"][name] = number
            samples = _num(meta.get("samples_count"))
            if samples is not None:
                row["extra"]["samples_count"] = samples
        elif key in EVENT_KEYS:
            if key == "eval_start":
                in_eval = _progress(meta) if _progress(meta) is not None else -1
            elif key == "eval_stop":
                in_eval = None
            detail = {k: v for k, v in meta.items() if k not in ("file", "lineno")}
            if e.get("value") is not None:
                detail["value"] = e["value"]
            events["time"].append(t)
            events["kind"].append(key)
            events["step"].append(_progress(meta))
            events["detail"].append(json.dumps(detail, sort_keys=True) if detail else None)
        elif key not in SUBMISSION_KEYS and key not in config:
            config[key] = e.get("value")
    if config:
        events["time"].append(log.events[0]["time_ms"] / 1000.0)
        events["kind"].append("mlperf_config")
        events["step"].append(None)
        events["detail"].append(json.dumps(config, sort_keys=True, default=str))
    order = sorted(steps)
    step_cols = {
        "step": order,
        "time": [steps[s]["time"] for s in order],
        "loss": [steps[s].get("loss") for s in order],
        "step_time_s": [steps[s].get("step_time_s") for s in order],
        "extra": [list(steps[s]["extra"].items()) or None for s in order],
        "rank": [0] * len(order),
    }
    tables: dict[str, pa.Table] = {
        "steps": table("steps", step_cols),
        "evals": table("evals", {**evals, "rank": [0] * len(evals["step"])}),
        "events": table("events", {**events, "rank": [0] * len(events["kind"])}),
    }

    # --- times, outcome
    run_start, run_stop = log.first("run_start"), log.first("run_stop")
    init_start, init_stop = log.first("init_start"), log.first("init_stop")
    if init_start and init_stop:
        timing_rows[(0, "init")] = (init_stop["time_ms"] - init_start["time_ms"]) / 1000.0
    if timing_rows:
        keys = list(timing_rows)
        tables["timing"] = table("timing", {"rank": [0] * len(keys), "step": [k[0] for k in keys],
                                            "phase": [k[1] for k in keys], "seconds": list(timing_rows.values())})
    for key in ("run_start", "run_stop"):
        n = sum(1 for e in log.events if e["key"] == key)
        if n > 1:
            notes.append(f"{n} {key} events: used the first")
    outcome = time_to_train = None
    if run_stop is None:
        notes.append("no run_stop: the run did not finish or the log is cut off; outcome unknown, "
                     "time to train not computed")
    else:
        outcome = _text((run_stop.get("metadata") or {}).get("status"))
        if outcome is None:
            notes.append("run_stop without a status: outcome unknown")
        if run_start is None:
            notes.append("run_stop without run_start: time to train not computed")
        else:
            time_to_train = (run_stop["time_ms"] - run_start["time_ms"]) / 1000.0
    first = init_start or run_start or log.events[0]
    last = run_stop or log.events[-1]

    # --- workload
    g = log.value
    gbs, seq = _int(g("global_batch_size")), _int(g("max_sequence_length"))
    workload = Workload(
        task=Task(quality_gates=(target.gate,) if target else ()),
        data=Data(sequence_length=seq),
        batch=Batch(global_batch=gbs, tokens_per_step=gbs * seq if gbs and seq else None,
                    steps=_int(g("max_steps")) or _int(g("opt_learning_rate_training_steps"))),
        optimizer=Optimizer(name=_text(g("opt_name")), lr=_num(g("opt_base_learning_rate")),
                            warmup_steps=_int(g("opt_learning_rate_warmup_steps")),
                            schedule=_text(g("opt_learning_rate_decay_schedule")),
                            weight_decay=_num(g("opt_adamw_weight_decay")),
                            grad_clip=_num(g("opt_gradient_clip_norm"))),
        seed=_int(g("seed")),
    )
    for note in notes:
        issues.note(note)
    ev = Evidence(
        kind="mlperf", path=path, sha256=sha256_of(path), tables=tables, workload=workload, stack=stack,
        issues=issues, lines=log.lines, outcome=outcome, time_to_train_s=time_to_train,
        started_at=datetime.fromtimestamp(first["time_ms"] / 1000.0, UTC),
        ended_at=datetime.fromtimestamp(last["time_ms"] / 1000.0, UTC),
        submitter=submitter, division=division, benchmark=benchmark, log=path,
    )
    met = gate_met(target.gate, zip(evals["step"], evals["value"], strict=True)) if target else None
    return MlperfResult(ev, target, met)


__all__ = ["MlperfLog", "MlperfResult", "Target", "evidence", "find_rules", "gate_met", "parse_lines", "parse_log",
           "parse_mllog_line", "placeholder", "quality_target", "read_system", "software_items", "stack_from_system"]
