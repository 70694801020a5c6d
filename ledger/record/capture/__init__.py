"""Stack capture: everything about how a run was executed, probed from outside the training process.

One module per probe (:mod:`.git`, :mod:`.software`, :mod:`.container`, :mod:`.hardware`,
:mod:`.launcher`), each returning its schema model and never raising: a probe that fails records why in
its model's ``error`` field, because capture must never fail the run it describes.

:func:`capture_stack` runs them all when ``ledger record`` starts; :func:`merge_runtime` then folds in what
the training processes reported about themselves through the SDK (``runtime.json``), which the wrapper
cannot see from outside: the packages of the interpreter that actually trained, the CUDA runtime, NCCL and
cuDNN torch loaded, and the devices of nodes other than the launching one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ledger.record.capture._util import error_text
from ledger.record.capture.container import capture_container
from ledger.record.capture.git import capture_code
from ledger.record.capture.hardware import capture_hardware, gpu_model
from ledger.record.capture.launcher import capture_launcher
from ledger.record.capture.software import capture_software, software_from_runtime
from ledger.redact import Redactor
from schemas.receipt import Code, Container, Drivers, Gpu, Hardware, Software, Stack

M = TypeVar("M")

RUNTIME_DRIVERS = ("cuda_runtime", "nccl", "cudnn")
"""Drivers fields only the training process knows (runtime.json keys of the same names)."""


def capture_stack(cwd: Path, env: Mapping[str, str], argv: Sequence[str], redactor: Redactor) -> Stack:
    """The stack of a launch from ``cwd`` with environment ``env`` running command ``argv``.

    The git probe (which spawns git) runs in a thread while the in-process probes run here.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-capture") as pool:
        code_future = pool.submit(
            _guard, lambda: capture_code(cwd, redactor), lambda e: Code(path=str(cwd), error=e)
        )
        software = _guard(capture_software, lambda e: Software(error=e))
        hardware, drivers = _guard(capture_hardware, lambda e: (Hardware(error=e), Drivers()))
        container = _guard(lambda: capture_container(env), lambda e: Container(error=e))
        launcher = capture_launcher(env, argv)
        code = code_future.result()
    return Stack(code=code, container=container, software=software, drivers=drivers, hardware=hardware,
                 launcher=launcher, environment=redactor.environment())


def _guard(probe: Callable[[], M], failed: Callable[[str], M]) -> M:
    """probe(), or the model ``failed`` builds from the error text if a probe breaks its no-raise promise."""
    try:
        return probe()
    except Exception as exc:
        return failed(error_text(exc))


def merge_runtime(stack: Stack, facts_by_rank: Mapping[int, Mapping[str, Any]]) -> tuple[Stack, list[str]]:
    """Fold the SDK's per-rank ``runtime.json`` facts (:func:`ledger.sdk.runtime_facts`) into ``stack``.

    - software: rank 0's (source="process") replaces the wrapper's listing: it is the interpreter that
      trained;
    - drivers: cuda_runtime, nccl and cudnn from rank 0;
    - GPUs: from the devices a rank on the launching host saw (else rank 0's), when NVML saw none;
    - hardware.nodes_observed: the launching host and every rank's host.

    Returns the new stack and notes: facts that differ between ranks (package digest, Python, CUDA
    runtime, NCCL, cuDNN, GPU model), each naming which ranks saw which value.
    """
    notes: list[str] = []
    facts = {r: f for r, f in sorted(facts_by_rank.items()) if r >= 0 and isinstance(f, Mapping)}
    notes += [f"rank {r}: runtime facts are not an object" for r, f in sorted(facts_by_rank.items())
              if r >= 0 and not isinstance(f, Mapping)]
    if not facts:
        return stack, notes
    first = facts[min(facts)]
    software = software_from_runtime(first)
    drivers = stack.drivers.model_copy(update={k: str(first[k]) for k in RUNTIME_DRIVERS if first.get(k)})
    hardware = stack.hardware
    hosts = {str(f["host"]) for f in facts.values() if f.get("host")} | set(hardware.nodes_observed)
    if hardware.hostname:
        hosts.add(hardware.hostname)
    update: dict[str, Any] = {"nodes_observed": tuple(sorted(hosts))}
    if hardware.gpu_count == 0:
        local = [r for r, f in facts.items() if f.get("host") == hardware.hostname and f.get("devices")]
        source = local[0] if local else next((r for r, f in facts.items() if f.get("devices")), None)
        if source is not None:
            gpus = _gpus(facts[source]["devices"])
            update.update(gpus=gpus, gpu_count=len(gpus), gpu_model=gpu_model(g.name for g in gpus))
            if not local:
                notes.append(f"GPUs described from rank {source} on host {facts[source].get('host')}: the "
                             f"launching host {hardware.hostname} saw none")
    stack = stack.model_copy(update={"software": software, "drivers": drivers,
                                     "hardware": hardware.model_copy(update=update)})
    return stack, notes + _differences(facts)


def _gpus(devices: Sequence[Mapping[str, Any]]) -> tuple[Gpu, ...]:
    """Gpu models from runtime.json's devices list (torch's view: no uuid, no power limit)."""
    return tuple(
        Gpu(index=int(d["index"]), name=d.get("name"), memory_bytes=d.get("memory_bytes"),
            compute_capability=d.get("compute_capability"))
        for d in devices
    )


_COMPARED: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "packages": lambda f: (software_from_runtime(f).packages_digest or "")[:12] or None,
    "python": lambda f: f.get("python"),
    "CUDA runtime": lambda f: f.get("cuda_runtime"),
    "NCCL": lambda f: f.get("nccl"),
    "cuDNN": lambda f: f.get("cudnn"),
    "GPU model": lambda f: gpu_model(d.get("name") for d in f.get("devices") or ()),
}
"""What must agree between ranks, and how to read it from one rank's facts."""


def _differences(facts: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """One note per compared fact on which the ranks disagree."""
    notes = []
    for what, read in _COMPARED.items():
        by_value: dict[Any, list[int]] = defaultdict(list)
        for rank, f in facts.items():
            try:
                by_value[read(f)].append(rank)
            except Exception as exc:
                by_value[f"unreadable ({error_text(exc)})"].append(rank)
        if len(by_value) > 1:
            parts = [f"{value if value is not None else 'unknown'} on ranks {_ranges(ranks)}"
                     for value, ranks in sorted(by_value.items(), key=lambda kv: kv[1][0])]
            notes.append(f"ranks disagree on {what}: " + "; ".join(parts))
    return notes


def _ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


__all__ = [
    "capture_code",
    "capture_container",
    "capture_hardware",
    "capture_launcher",
    "capture_software",
    "capture_stack",
    "merge_runtime",
    "software_from_runtime",
]
