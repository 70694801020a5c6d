"""MLPerf result logs: every fixture log, system description and rules file; bad and odd inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import BadInput
from ledger.ingest import mlperf
from ledger.ingest.common import LineError

NVIDIA0 = "llama2_70b_lora__NVIDIA__eos_n8_ngc24.04_nemo__result_0.txt"
NVIDIA1 = "llama2_70b_lora__NVIDIA__eos_n8_ngc24.04_nemo__result_1.txt"
DELL = "llama2_70b_lora__Dell__XE9680x8H100-SXM-80GB__result_0.txt"
B200 = "llama31_8b__Dell__1xXE9680Lx8B200-SXM-180GB__result_0.txt"
SYSTEMS = {DELL: "Dell__XE9680x8H100-SXM-80GB.json", B200: "Dell__1xXE9680Lx8B200-SXM-180GB.json",
           NVIDIA0: "NVIDIA__eos_n8_ngc24.04_nemo.json", NVIDIA1: "NVIDIA__eos_n8_ngc24.04_nemo.json"}

# log -> (run_start ms, run_stop ms, evals, last eval, samples when the target is first met, target, seed)
# read from the files with grep (see the report of issue 6)
EXPECTED = {
    NVIDIA0: (1714861382627, 1714861725920, 6, 0.9231269359588623, 3456, 0.925, 30545),
    NVIDIA1: (1714861391431, 1714861694588, 5, 0.9241325855255127, 3072, 0.925, 24883),
    DELL: (1713994395504, 1713996161336, 5, 0.9239340424537659, 3072, 0.925, 12274),
    B200: (1759772250877, 1759777618080, 15, 3.2850470542907715, 184320, 3.3, 29585),
}


def test_every_log_is_covered(mlperf_dir: Path) -> None:
    assert sorted(p.name for p in mlperf_dir.glob("*.txt")) == sorted(EXPECTED)
    assert sorted(p.name for p in (mlperf_dir / "systems").iterdir()) == sorted(set(SYSTEMS.values()))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_time_to_train_outcome_and_quality_target(mlperf_dir: Path, name: str) -> None:
    start, stop, n_evals, last, met_at, target, seed = EXPECTED[name]
    result = mlperf.evidence(mlperf_dir / name, mlperf_dir / "systems" / SYSTEMS[name], [mlperf_dir / "rules"])
    ev = result.evidence
    assert ev.time_to_train_s == (stop - start) / 1000 and ev.outcome == "success"
    evals = ev.tables["evals"].to_pylist()
    assert len(evals) == n_evals and evals[-1]["value"] == last and evals[-1]["metric"] == "eval_accuracy"
    assert result.target is not None and result.target.gate.threshold == target
    assert result.target.gate.direction == "min" and result.met_at == met_at == evals[-1]["step"]
    assert ev.workload is not None and ev.workload.seed == seed
    assert ev.workload.task.quality_gates == (result.target.gate,)
    assert ev.unparsed == 0 and ev.benchmark == name.split("__")[0]


def test_llama31_b200_fact_from_the_readme(mlperf_dir: Path) -> None:
    result = mlperf.evidence(mlperf_dir / B200, rules=[mlperf_dir / "rules"])
    ev = result.evidence
    assert ev.outcome == "success" and result.met_at is not None
    assert ev.tables["evals"]["value"].to_pylist()[-1] <= 3.3 < ev.tables["evals"]["value"].to_pylist()[-2]
    assert result.target is not None and result.target.rules_file == "training_5.1.0__closed_llama31_8b.yaml"
    w = ev.workload
    assert w is not None and w.data.sequence_length == 8192 and w.batch.global_batch == 16
    assert w.optimizer.name == "adamw" and w.optimizer.lr == 0.0004 and w.optimizer.warmup_steps == 16
    steps = ev.tables["steps"].to_pylist()
    # 375 train_step_time stats: 360 with a step (steps 31, 63, ...), 15 per-block means without one (events)
    assert len(steps) == 360 and steps[0]["step"] == 31 and steps[0]["loss"] == 8.089431762695312
    assert steps[0]["step_time_s"] == 0.43402981758117676 and steps[-1]["step"] == 11519
    assert ev.tables["events"]["kind"].to_pylist().count("tracked_stats") == 15
    timing = {(r["step"], r["phase"]): r["seconds"] for r in ev.tables["timing"].to_pylist()}
    assert timing[(0, "init")] == (1759772250877 - 1759772202236) / 1000
    assert timing[(0, "warmup_time")] == 47.73095394100528
    assert timing[(12288, "validation_time")] == 8.688707439025166  # the first eval, at samples_count 12288
    assert len([k for k in timing if k[1] == "validation_step_time"]) == 15
    # no SYSJSON in this log and no --system: the stack stays empty but for the platform the log names
    assert ev.stack.hardware.system == "1xXE9680Lx8B200-SXM-180GB" and ev.stack.hardware.gpu_model is None


def test_system_description_to_stack(mlperf_dir: Path) -> None:
    ev = mlperf.evidence(mlperf_dir / NVIDIA0).evidence  # from the log's own :::SYSJSON
    s = ev.stack
    assert s.hardware.system == "Eos_n8" and s.hardware.gpu_model == "NVIDIA H100-SXM5-80GB"
    assert s.hardware.gpu_count == 8 and s.launcher.nodes == 8 and s.hardware.memory_bytes == 2 * 10**12
    assert s.hardware.cpu_model == "Intel(R) Xeon(R) Platinum 8480C" and s.hardware.cpu_cores is None
    assert s.software.framework == "NVIDIA NeMo Framework Release 24.04"
    assert s.drivers.gpu_driver == "535.129.03" and s.drivers.nccl == "2.21.5" and s.drivers.cudnn == "9.1.0.70"
    assert s.drivers.cuda_driver == "550.54.15"  # the container's CUDA driver, not the kernel module
    assert ev.submitter == "NVIDIA" and ev.division == "closed"
    dell = mlperf.evidence(mlperf_dir / DELL, mlperf_dir / "systems" / SYSTEMS[DELL]).evidence.stack
    assert dell.hardware.cpu_cores == 112 * 2 and dell.launcher.nodes == 1
    # cuda_driver_version is the CUDA driver (NVIDIA's own descriptions give the kernel driver apart from it)
    assert dell.drivers.cuda_driver == "535.104.12" and dell.drivers.gpu_driver is None
    assert dell.hardware.memory_bytes == 1_024_000_000_000


def test_rules_are_required_for_a_gate(mlperf_dir: Path) -> None:
    result = mlperf.evidence(mlperf_dir / B200)
    assert result.target is None and result.evidence.workload is not None
    assert result.evidence.workload.task.quality_gates == ()
    assert any("target_accuracy 3.3" in n for n in result.evidence.issues.notes if result.evidence.issues)


def _write(tmp_path: Path, text: str, name: str = "result_0.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _events(mlperf_dir: Path) -> list[str]:
    return [ln for ln in (mlperf_dir / NVIDIA1).read_text().splitlines() if ln.startswith(":::MLLOG")]


def test_rank_prefixes_interleaving_and_no_final_newline(mlperf_dir: Path, tmp_path: Path) -> None:
    lines = _events(mlperf_dir)
    mixed = []
    for i, line in enumerate(lines):
        mixed.append(f"  {i % 8}: {line}")
        mixed.append(f"{i % 8}: some stdout the training printed")
    path = _write(tmp_path, "\n".join(mixed))  # no final newline
    ev = mlperf.evidence(path).evidence
    assert ev.time_to_train_s == (1714861694588 - 1714861391431) / 1000 and ev.outcome == "success"
    assert ev.unparsed == 0 and len(ev.tables["evals"]) == 5


def test_no_run_stop_means_unknown_outcome(mlperf_dir: Path, tmp_path: Path) -> None:
    lines = [ln for ln in _events(mlperf_dir) if '"run_stop"' not in ln]
    ev = mlperf.evidence(_write(tmp_path, "\n".join(lines) + "\n")).evidence
    assert ev.outcome is None and ev.time_to_train_s is None
    assert ev.issues is not None and any("no run_stop" in n for n in ev.issues.notes)


def test_broken_mllog_lines_are_counted_with_line_numbers(mlperf_dir: Path, tmp_path: Path) -> None:
    lines = _events(mlperf_dir)
    lines[3] = lines[3][:40]  # cut inside the JSON
    lines[5] = ':::MLLOG {"key": "seed"}'  # no time_ms
    ev = mlperf.evidence(_write(tmp_path, "\n".join(lines) + "\n")).evidence
    assert ev.unparsed == 2 and ev.issues is not None
    assert [n for n, _ in ev.issues.unparsed] == [4, 6]


def test_wrong_kinds(mlperf_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="expected an MLPerf result log .* found a Megatron-LM log"):
        mlperf.evidence(_write(tmp_path, " iteration 1/ 2 | lm loss: 1.0 |\n"))
    with pytest.raises(BadInput, match="expected an MLPerf system description"):
        mlperf.evidence(mlperf_dir / NVIDIA0, mlperf_dir / NVIDIA1)
    with pytest.raises(BadInput, match="no such file"):
        mlperf.evidence(tmp_path / "missing.txt")


def is_mllog_error(message: str) -> bool:
    """One of the MLLOG parser's messages: they name the marker or the event and what it lacks."""
    return message.startswith(("MLLOG event", ":::MLLOG payload", ":::SYSJSON payload"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from(["", ":::MLLOG ", ":::SYSJSON ", "  0: :::MLLOG "]))
def test_mllog_line_parser_parses_or_raises_a_line_error(text: str, marker: str) -> None:
    try:
        mlperf.parse_mllog_line(marker + text)
    except LineError as exc:
        assert is_mllog_error(str(exc)), str(exc)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["key", "time_ms", "value", "metadata", "event_type"]),
                       st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=5),
                                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))))
def test_mllog_json_objects_of_any_shape(obj: dict[str, object]) -> None:
    import json

    try:
        kind, parsed = mlperf.parse_mllog_line(":::MLLOG " + json.dumps(obj)) or ("", {})
    except LineError as exc:
        assert str(exc).startswith("MLLOG event ") and str(exc) != "MLLOG event", str(exc)
        key = obj.get("key")
        named = isinstance(key, str) and key
        assert str(exc).startswith(f"MLLOG event {key!r}" if named else "MLLOG event without a 'key'"), str(exc)
        return
    assert kind == "mllog" and isinstance(parsed["key"], str)
