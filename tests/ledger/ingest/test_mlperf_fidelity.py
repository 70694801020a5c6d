"""MLPerf results of submitters other than NVIDIA: placeholder orgs, per-block tracked_stats, software stacks as
text, CUDA driver versions and vCPU counts; real results plus a synthetic case per rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.ingest import mlperf
from ledger.ingest.common import numbered_lines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mlperf"
CISCO = FIXTURES / "llama31_8b__Cisco__hpf_n8__result_0_excerpt.txt"
AMD = FIXTURES / "llama2_70b_lora__AMD__MI355X_EPYC_9575F_pytorch__result_0.txt"


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line.split(":::MLLOG", 1)[1]) for _, line, _ in numbered_lines(path) if ":::MLLOG" in line]


def test_cisco_result_with_placeholders_and_block_stats() -> None:
    ev = mlperf.evidence(CISCO, FIXTURES / "systems" / "Cisco__hpf_n8.json").evidence
    raw = _events(CISCO)
    assert ev.submitter == "Cisco" and ev.stack.hardware.system == "hpf_n8"
    assert ev.issues is not None and any("SUBMISSION_ORG_PLACEHOLDER" in n for n in ev.issues.notes)
    # steps: the per-step stats that carry a loss, and only those (hand-picked from the file)
    per_step = [e for e in raw if e["key"] == "tracked_stats" and "reduced_train_loss" in e["value"]]
    rows = ev.tables["steps"].to_pylist()
    assert [r["step"] for r in rows] == [int(e["metadata"]["step"]) for e in per_step] and len(rows) == 12
    assert [r["step_time_s"] for r in rows] == [e["value"]["train_step_time"] for e in per_step]
    assert all(r["loss"] is not None for r in rows) and 0 not in [r["step"] for r in rows]
    blocks = [e for e in raw if e["key"] == "tracked_stats" and "max_memory_usage" in e["value"]]
    assert blocks[0]["metadata"]["step"] == 0 and len(blocks) == 10
    events = ev.tables["events"].to_pylist()
    tracked = [json.loads(e["detail"]) for e in events if e["kind"] == "tracked_stats"]
    assert [d["throughput"] for d in tracked if "throughput" in d] == [b["value"]["throughput"] for b in blocks]
    start = next(e for e in raw if e["key"] == "run_start")["time_ms"]
    stop = next(e for e in raw if e["key"] == "run_stop")["time_ms"]
    assert ev.time_to_train_s == (stop - start) / 1000.0
    system = json.loads((FIXTURES / "systems" / "Cisco__hpf_n8.json").read_text())["other_software_stack"]
    d = ev.stack.drivers
    assert (d.gpu_driver, d.cuda_driver) == (system["nvidia_kernel_driver"], system["cuda_driver_version"])
    assert ev.stack.hardware.cpu_cores is None  # the description gives no vCPU count


def test_amd_result_with_a_text_software_stack() -> None:
    ev = mlperf.evidence(AMD, FIXTURES / "systems" / "AMD__MI355X_EPYC_9575F_pytorch.json").evidence
    assert ev.submitter == "AMD" and ev.outcome == "success"
    # AMD's per-block stats carry a throughput and a "step", no loss: events, not loss-less steps
    blocks = [e for e in _events(AMD) if e["key"] == "tracked_stats"]
    assert len(blocks) == 6 and all(set(e["value"]) == {"throughput"} for e in blocks)
    assert ev.tables["steps"].num_rows == 0
    assert sum(1 for k in ev.tables["events"].column("kind").to_pylist() if k == "tracked_stats") == 6
    packages = {(p.name, p.version) for p in ev.stack.software.packages}
    # other_software_stack: "hipblaslt-1.1.0.70000-crdcbr.91~22.04, Nemo 2.3.0, megatron_lm, TransformerEngine-d0ef413b"
    assert {("hipblaslt", "1.1.0.70000-crdcbr.91~22.04"), ("Nemo", "2.3.0"), ("megatron_lm", ""),
            ("TransformerEngine-d0ef413b", "")} <= packages
    # 2 x EPYC 9575F = 2 x 64 cores x 2 threads = 256 logical CPUs; the description's 256 is the host's count
    assert ev.stack.hardware.cpu_cores == 256


def _log(tmp_path: Path, *events: dict[str, Any], system: dict[str, Any] | None = None) -> Path:
    lines = [":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1000 + i, "event_type": "POINT_IN_TIME", **e})
             for i, e in enumerate(events)]
    if system is not None:
        lines.insert(0, ":::SYSJSON " + json.dumps(system))
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _ev(key: str, value: Any, **meta: Any) -> dict[str, Any]:
    return {"key": key, "value": value, "metadata": meta}


def test_placeholder_org_loses_to_the_system_description(tmp_path: Path) -> None:
    system = {"submitter": "Krai", "system_name": "x", "accelerator_model_name": "H200"}
    ev = mlperf.evidence(_log(tmp_path, _ev("submission_org", "SUBMISSION_ORG_PLACEHOLDER"),
                              _ev("submission_platform", "2xSUBMISSION_PLATFORM_PLACEHOLDER"), system=system)).evidence
    assert ev.submitter == "Krai" and ev.stack.hardware.system == "x"
    ev = mlperf.evidence(_log(tmp_path, _ev("submission_org", "SUBMISSION_ORG_PLACEHOLDER"))).evidence
    assert ev.submitter is None
    ev = mlperf.evidence(_log(tmp_path, _ev("submission_org", "Dell"), system=system)).evidence
    assert ev.submitter == "Dell" and any("differs" in n for n in ev.issues.notes if ev.issues)


def test_tracked_stats_without_a_loss_are_not_steps(tmp_path: Path) -> None:
    ev = mlperf.evidence(_log(
        tmp_path,
        _ev("tracked_stats", {"before_model_init": 1.5}, step=0),
        _ev("tracked_stats", {"throughput": 9.0, "train_step_time": 0.5, "max_memory_usage": 3.0}, step=0),
        _ev("tracked_stats", {"train_step_time": 0.4, "reduced_train_loss": 2.0}, step=64),
        _ev("tracked_stats", {"warmup_time": 12.0}, step=0),
    )).evidence
    rows = ev.tables["steps"].to_pylist()
    assert [(r["step"], r["loss"], r["step_time_s"]) for r in rows] == [(64, 2.0, 0.4)]
    assert ev.tables["events"].column("kind").to_pylist().count("tracked_stats") == 2
    timing = ev.tables["timing"].to_pylist()
    assert [(r["step"], r["phase"], r["seconds"]) for r in timing] == [(0, "warmup_time", 12.0)]


def test_software_stack_as_text_drivers_and_cpus() -> None:
    notes: list[str] = []
    # the MLPerf submission rules' own example of other_software_stack, and a cuda_driver_version
    s = mlperf.stack_from_system({"other_software_stack": "cuda 10.2.0.163, cudnn 7.6.0.64, cublas 10.2.0.163, "
                                                          "gcc 5.4.0", "cuda_driver_version": "550.54.15"}, notes)
    assert (s.drivers.cuda_runtime, s.drivers.cudnn, s.drivers.cuda_driver) == ("10.2.0.163", "7.6.0.64", "550.54.15")
    assert {(p.name, p.version) for p in s.software.packages} == {("cublas", "10.2.0.163"), ("gcc", "5.4.0")}

    def cpus(sockets: str, cores: str, vcpus: str) -> int | None:
        return mlperf.stack_from_system({"host_processors_per_node": sockets, "host_processor_core_count": cores,
                                         "host_processor_vcpu_count": vcpus}, notes).hardware.cpu_cores

    assert cpus("2", "26", "") is None  # the rules' on-premise example: cores per processor, no vCPUs
    assert cpus("1", "", "96") == 96  # the rules' cloud example: the host's vCPUs
    assert cpus("2", "64", "128") == 256  # vCPUs per processor (128 = 64 cores x 2 threads)
    assert cpus("2", "64", "256") == 256  # vCPUs of the host (more than one processor can run)
    assert cpus("2", "", "96") == 96 and any("no core count" in n for n in notes)
