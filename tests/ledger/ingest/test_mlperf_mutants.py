"""An MLPerf result log written event by event, imported whole: every table row, event, timing row, workload
field, stack field and note checked against values worked out by hand from the events written here; the system
description's readings (CPUs, bytes, software as text) and the rules' edges one by one (issue 23: mutation
testing of the ingest parsers)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import BadInput
from ledger.ingest import mlperf
from ledger.ingest.common import LineError
from schemas import QualityGate

SYSTEM: dict[str, Any] = {
    "submitter": "Acme", "division": "open", "system_name": "Acme-8", "host_processor_vcpu_count": "64",
    "host_processors_per_node": "2", "host_processor_core_count": "32", "host_processor_model_name": "EPYC",
    "host_memory_capacity": "1.5 TiB", "accelerator_model_name": "H200", "accelerators_per_node": "8",
    "number_of_nodes": "2", "framework": "PyTorch 2.5", "operating_system": "Ubuntu 22.04",
    "accelerator_interconnect": "NVLink", "host_networking": "N/A", "nvidia_kernel_driver": "550.1",
    "other_software_stack": [{"cuda_version": "12.4", "nccl_version": "2.21"},
                             {"cudnn_version": "9.1", "apex": "0.1", "empty": ""}, "not an object"],
}
RULE = """- KEY:
    NAME: submission_benchmark
    REQ: EXACTLY_ONE
- KEY:
    NAME: eval_accuracy
    REQ: AT_LEAST_ONE
    CHECK:
        - "'epoch_num' in v['metadata']"
    ATLEAST_ONE_CHECK: "v['value'] >= 0.72 and v['value'] < 1.0"
- KEY:
    NAME: run_stop
"""


def ev(key: str, t: int, value: Any = None, **meta: Any) -> str:
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": t, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": value, "metadata": {"file": "train.py", "lineno": 7, **meta}})


LINES = [
    ev("submission_benchmark", 100, "bert"),
    ev("submission_org", 100, "SUBMISSION_ORG_PLACEHOLDER"),
    ev("submission_division", 100, "closed"),
    ev("submission_platform", 100, "8xSUBMISSION_PLATFORM_PLACEHOLDER"),
    ":::SYSJSON " + json.dumps(SYSTEM),
    "some stdout of the job",
    ev("init_start", 1000, "start"),
    ev("global_batch_size", 1100, 16), ev("max_sequence_length", 1100, 512), ev("seed", 1100, 42),
    ev("opt_name", 1100, "lamb"), ev("opt_base_learning_rate", 1100, 0.001),
    ev("opt_learning_rate_warmup_steps", 1100, 10), ev("opt_learning_rate_decay_schedule", 1100, "linear"),
    ev("opt_adamw_weight_decay", 1100, 0.01), ev("opt_gradient_clip_norm", 1100, 1.0), ev("max_steps", 1100, 100),
    ev("target_accuracy", 1100, 0.75), ev("seed", 1200, 43),
    ":::SYSJSON " + json.dumps({**SYSTEM, "system_name": "other"}),  # line 20: a second, different one
    ev("init_stop", 3000),
    ev("run_start", 3500),
    ev("tracked_stats", 4000, {"reduced_train_loss": 5.0, "train_step_time": 0.5, "lr": 0.001, "flag": True},
       step=1, samples_count=16),
    ev("tracked_stats", 4500, {"train_loss": 4.0, "name": "x"}, step=2),
    ev("tracked_stats", 4600, {"loss": 3.5}, step=2),
    ev("tracked_stats", 5000, {"throughput": 10}, samples_count=32),
    ev("tracked_stats", 5100, {"throughput": 9.0, "train_step_time": 0.4}, step=0),
    ev("tracked_stats", 5200, {"warmup_time": 2.0, "init_finished": 1.0}, step=3),
    ev("tracked_stats", 5300, [1, 2], step=4),  # line 29
    ":::MLLOG {broken",  # line 30
    ev("eval_start", 6000, samples_count=32, epoch_num=1),
    ev("tracked_stats", 6100, {"validation_time": 1.5}, step=1),
    ev("tracked_stats", 6200, {"validation_time": 0.5}, step=2),
    ev("eval_accuracy", 6300, 0.70, samples_count=32),
    ev("eval_stop", 6400, samples_count=32),
    ev("eval_start", 7000, epoch_num=2),
    ev("eval_accuracy", 7100, "bad", epoch_num=2),  # line 37
    ev("eval_accuracy", 7200, 0.72, epoch_num=2),
    ev("eval_stop", 7300, epoch_num=2),
    ev("eval_start", 7400),
    ev("tracked_stats", 7450, {"validation_time": 3.0}, step=1),
    ev("eval_stop", 7500),
    ev("run_stop", 9500, status="success"),
    ev("run_stop", 9600, status="aborted"),
]


@pytest.fixture
def imported(tmp_path: Path) -> mlperf.MlperfResult:
    # function scope: mutmut runs only the tests that reached a mutated function (a module-scoped fixture
    # reaches it in the first test only)
    d = tmp_path
    (d / "rules").mkdir()
    (d / "rules" / "closed_bert.yaml").write_text(RULE)
    (d / "rules" / "open_bert.yaml").write_text(RULE.replace("0.72", "0.5"))
    log = d / "result_0.txt"
    log.write_text("\n".join(LINES))  # no final newline
    return mlperf.evidence(log, rules=[d / "rules"])


def test_the_source_outcome_and_times(imported: mlperf.MlperfResult) -> None:
    e = imported.evidence
    assert (e.kind, e.benchmark, e.division, e.submitter, e.outcome) == ("mlperf", "bert", "closed", "Acme", "success")
    assert e.time_to_train_s == (9500 - 3500) / 1000 and e.lines == len(LINES)
    assert e.started_at == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)  # init_start
    assert e.ended_at == datetime(1970, 1, 1, 0, 0, 9, 500000, tzinfo=UTC)  # the first run_stop
    assert e.log == e.path and e.unparsed == 1


def test_the_quality_target_comes_from_the_closed_rules(imported: mlperf.MlperfResult) -> None:
    t = imported.target
    assert t is not None and t.rules_file == "closed_bert.yaml"
    assert t.check == "v['value'] >= 0.72 and v['value'] < 1.0"
    assert t.gate == QualityGate(name="mlperf bert", metric="eval_accuracy", threshold=0.72, direction="max",
                                 split="eval")
    assert imported.met_at == 2  # the eval at epoch 2 (0.72 >= 0.72); the one at 32 samples (0.70) does not


def test_the_notes_and_the_unusable_lines(imported: mlperf.MlperfResult) -> None:
    issues = imported.evidence.issues
    assert issues is not None
    assert issues.notes == [
        "line 20: a :::SYSJSON line differs from the first one; kept the first",
        f"line {len(LINES)} has no line end (the log may have been cut off)",
        "the log's submission_org is a placeholder ('SUBMISSION_ORG_PLACEHOLDER'): the submitter is the system "
        "description's 'Acme'",
        "the log's submission_platform is a placeholder ('8xSUBMISSION_PLATFORM_PLACEHOLDER'): not used",
        "the log's target_accuracy 0.75 differs from the rules' 0.72",
        "2 run_stop events: used the first",
    ]
    why = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"[:60]  # json's, cut at 60
    assert issues.unparsed == [(30, f":::MLLOG payload is not JSON ({why})")]
    assert issues.fields == [(29, "tracked_stats without a value object"),
                             (37, "eval_accuracy without a numeric value and samples_count/epoch_num")]


def test_the_steps_evals_and_timing_rows(imported: mlperf.MlperfResult) -> None:
    tables = imported.evidence.tables
    steps = tables["steps"].to_pylist()
    assert [(s["rank"], s["step"], s["time"], s["loss"], s["step_time_s"], s["extra"]) for s in steps] == [
        (0, 1, 4.0, 5.0, 0.5, [("lr", 0.001), ("samples_count", 16.0)]),
        (0, 2, 4.6, 3.5, None, None)]
    evals = tables["evals"].to_pylist()
    assert [(e["rank"], e["step"], e["time"], e["split"], e["metric"], e["value"]) for e in evals] == [
        (0, 32, 6.3, "eval", "eval_accuracy", 0.70), (0, 2, 7.2, "eval", "eval_accuracy", 0.72)]
    timing = [(r["rank"], r["step"], r["phase"], r["seconds"]) for r in tables["timing"].to_pylist()]
    assert timing == [(0, 3, "warmup_time", 2.0), (0, 3, "init_finished", 1.0), (0, 32, "validation_time", 2.0),
                      (0, -1, "validation_time", 3.0), (0, 0, "init", 2.0)]


def test_the_events(imported: mlperf.MlperfResult) -> None:
    events = imported.evidence.tables["events"].to_pylist()
    config = {"global_batch_size": 16, "max_sequence_length": 512, "seed": 42, "opt_name": "lamb",
              "opt_base_learning_rate": 0.001, "opt_learning_rate_warmup_steps": 10,
              "opt_learning_rate_decay_schedule": "linear", "opt_adamw_weight_decay": 0.01,
              "opt_gradient_clip_norm": 1.0, "max_steps": 100, "target_accuracy": 0.75}
    assert [(e["rank"], e["time"], e["kind"], e["step"], e["detail"]) for e in events] == [
        (0, 1.0, "init_start", None, '{"value": "start"}'),
        (0, 3.0, "init_stop", None, None),
        (0, 3.5, "run_start", None, None),
        (0, 5.0, "tracked_stats", 32, '{"throughput": 10}'),
        (0, 5.1, "tracked_stats", 0, '{"throughput": 9.0, "train_step_time": 0.4}'),
        (0, 6.0, "eval_start", 32, '{"epoch_num": 1, "samples_count": 32}'),  # keys sorted
        (0, 6.4, "eval_stop", 32, '{"samples_count": 32}'),
        (0, 7.0, "eval_start", 2, '{"epoch_num": 2}'),
        (0, 7.3, "eval_stop", 2, '{"epoch_num": 2}'),
        (0, 7.4, "eval_start", None, None),
        (0, 7.5, "eval_stop", None, None),
        (0, 9.5, "run_stop", None, '{"status": "success"}'),
        (0, 9.6, "run_stop", None, '{"status": "aborted"}'),
        (0, 0.1, "mlperf_config", None, json.dumps(config, sort_keys=True)),
    ]


def test_the_workload(imported: mlperf.MlperfResult) -> None:
    w = imported.evidence.workload
    assert w is not None and w.seed == 42  # the first seed logged
    assert (w.data.sequence_length, w.batch.global_batch, w.batch.tokens_per_step, w.batch.steps) == (
        512, 16, 16 * 512, 100)
    o = w.optimizer
    assert (o.name, o.lr, o.warmup_steps, o.schedule, o.weight_decay, o.grad_clip) == (
        "lamb", 0.001, 10, "linear", 0.01, 1.0)
    assert imported.target is not None and w.task.quality_gates == (imported.target.gate,)


def test_the_stack_from_the_log_s_system_description(imported: mlperf.MlperfResult) -> None:
    s = imported.evidence.stack
    assert (s.hardware.system, s.hardware.cpu_model, s.hardware.cpu_cores) == ("Acme-8", "EPYC", 128)
    assert (s.hardware.memory_bytes, s.hardware.gpu_model, s.hardware.gpu_count) == (
        int(1.5 * 2**40), "H200", 8)
    assert s.hardware.interconnect == "NVLink" and s.launcher.nodes == 2
    assert s.software.framework == "PyTorch 2.5"
    assert [(p.name, p.version) for p in s.software.packages] == [("apex", "0.1"),
                                                                  ("operating-system", "Ubuntu 22.04")]
    d = s.drivers
    assert (d.cuda_runtime, d.nccl, d.cudnn, d.gpu_driver, d.cuda_driver) == ("12.4", "2.21", "9.1", "550.1", None)


# ------------------------------------------------------------------------------------------ variants
def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "result_0.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_without_a_system_description_and_rules(tmp_path: Path) -> None:
    path = _log(tmp_path, ev("submission_benchmark", 100, "gpt3"), ev("submission_org", 100, "Acme"),
                ev("submission_platform", 100, "8xH100"), ev("target_accuracy", 150, 2.69),
                ev("opt_learning_rate_training_steps", 150, 50),
                ev("run_start", 200), ev("run_stop", 1200))
    result = mlperf.evidence(path)
    e = result.evidence
    assert (result.target, result.met_at, e.outcome, e.time_to_train_s) == (None, None, None, 1.0)
    assert (e.submitter, e.division, e.stack.hardware.system) == ("Acme", None, "8xH100")
    assert e.issues is not None and e.issues.notes == [
        "no system description (:::SYSJSON or --system): hardware and software not recorded",
        "the log states target_accuracy 2.69 but not whether lower or higher is better; give --rules to record "
        "the quality gate",
        "run_stop without a status: outcome unknown"]
    assert e.started_at == datetime.fromtimestamp(0.2, UTC) and e.ended_at == datetime.fromtimestamp(1.2, UTC)
    assert "timing" not in e.tables and e.tables["steps"].num_rows == 0
    w = e.workload
    assert w is not None and w.batch.tokens_per_step is None and w.seed is None
    assert w.batch.steps == 50  # no max_steps: the schedule's training steps


def test_run_stop_without_run_start_and_no_run_stop(tmp_path: Path) -> None:
    e = mlperf.evidence(_log(tmp_path, ev("seed", 50, 1), ev("run_stop", 900, status="success"))).evidence
    assert (e.outcome, e.time_to_train_s) == ("success", None)
    assert e.issues is not None and e.issues.notes[-1] == "run_stop without run_start: time to train not computed"
    assert e.started_at == datetime.fromtimestamp(0.05, UTC)  # no init_start, no run_start: the first event
    e = mlperf.evidence(_log(tmp_path, ev("run_start", 50), ev("block_start", 60))).evidence
    assert e.ended_at == datetime.fromtimestamp(0.06, UTC) and e.issues is not None
    assert e.issues.notes[-1] == ("no run_stop: the run did not finish or the log is cut off; outcome unknown, "
                                  "time to train not computed")
    e = mlperf.evidence(_log(tmp_path, ev("run_start", 50), ev("run_start", 60), ev("run_stop", 90))).evidence
    assert e.time_to_train_s == 0.04 and e.issues is not None and "2 run_start events: used the first" in e.issues.notes


def test_the_system_file_wins_over_the_log_s_and_says_so(tmp_path: Path) -> None:
    given = tmp_path / "sys.json"
    given.write_text(json.dumps({"system_name": "Given", "submitter": "Acme", "division": "closed"}))
    path = _log(tmp_path, ev("submission_org", 10, "Other"), ":::SYSJSON " + json.dumps(SYSTEM), ev("run_start", 20))
    e = mlperf.evidence(path, given).evidence
    assert e.stack.hardware.system == "Given" and e.stack.hardware.gpu_model is None
    assert (e.submitter, e.division) == ("Other", "closed")
    assert e.issues is not None and e.issues.notes[:3] == [
        "--system sys.json names 'Given' but the log's :::SYSJSON names 'Acme-8'; used --system",
        "the log's submission_org 'Other' differs from the system description's submitter 'Acme'; kept the log's",
        "no run_stop: the run did not finish or the log is cut off; outcome unknown, time to train not computed"]


def test_the_same_system_given_twice_is_not_noted(tmp_path: Path) -> None:
    given = tmp_path / "sys.json"
    given.write_text(json.dumps(SYSTEM))
    e = mlperf.evidence(_log(tmp_path, ":::SYSJSON " + json.dumps(SYSTEM), ev("run_start", 20)), given).evidence
    assert e.issues is not None and not any(n.startswith("--system") for n in e.issues.notes)


def test_a_placeholder_submitter_without_a_description(tmp_path: Path) -> None:
    e = mlperf.evidence(_log(tmp_path, ev("submission_org", 10, " tbd "), ev("run_start", 20))).evidence
    assert e.submitter is None and e.issues is not None
    assert e.issues.notes[1] == "the log's submission_org is a placeholder ('tbd'): submitter unknown (give --system)"


def test_rules_without_a_target_or_a_match(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "closed_bert.yaml").write_text("- KEY:\n    NAME: eval_accuracy\n    REQ: AT_LEAST_ONE\n")
    path = _log(tmp_path, ev("submission_benchmark", 10, "bert"), ev("submission_division", 10, "closed"))
    result = mlperf.evidence(path, rules=[rules])
    assert result.target is None and result.evidence.issues is not None
    assert "closed_bert.yaml has no eval_accuracy target: no quality gate recorded" in result.evidence.issues.notes
    path = _log(tmp_path, ev("submission_benchmark", 10, "gpt3"))
    notes = mlperf.evidence(path, rules=[rules]).evidence.issues.notes  # type: ignore[union-attr]
    assert f"no compliance rules for gpt3 (closed/open) in {rules}: no quality gate recorded" in notes


def test_a_file_without_mllog_events_is_the_wrong_kind(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"expected an MLPerf result log .*; 2 :::MLLOG line\(s\) did not parse$"):
        mlperf.evidence(_log(tmp_path, ":::MLLOG {", "text", ':::MLLOG {"key": 1}'))
    from ledger.ingest.common import describe

    plain = _log(tmp_path, "plain text")
    with pytest.raises(BadInput) as exc:
        mlperf.evidence(plain)
    expected = f"{plain}: expected an MLPerf result log (':::MLLOG {{json}}' lines), found {describe(plain)}"
    assert str(exc.value) == expected


def test_system_descriptions_that_are_not_one(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("[1]")
    with pytest.raises(BadInput, match="expected an MLPerf system description .system_name, accelerator_model_name"):
        mlperf.read_system(path)
    path.write_text("{")
    with pytest.raises(BadInput, match=r"expected an MLPerf system description \(JSON\), found"):
        mlperf.read_system(path)
    path.write_text('{"accelerator_model_name": "X"}')
    assert mlperf.read_system(path) == {"accelerator_model_name": "X"}


# ------------------------------------------------------------------------------------------ pieces
def test_mllog_line_messages() -> None:
    cases = {
        ":::MLLOG [1]": ":::MLLOG payload is not a JSON object",
        ":::SYSJSON 3": ":::SYSJSON payload is not a JSON object",
        ":::MLLOG " + "[" * 100000: ":::MLLOG payload nests too deeply",
        ':::MLLOG {"key": ""}': "MLLOG event without a 'key'",
        ':::MLLOG {"key": "k", "time_ms": true}': "MLLOG event 'k' without a numeric 'time_ms'",
        ':::MLLOG {"key": "k", "time_ms": NaN}': "MLLOG event 'k' without a numeric 'time_ms'",
        ':::MLLOG {"key": "k", "time_ms": 1}': "MLLOG event 'k' without a 'value'",
        ':::MLLOG {"key": "k", "time_ms": 1, "value": 1, "metadata": []}': "MLLOG event 'k': metadata is not an object",
    }
    for line, message in cases.items():
        with pytest.raises(LineError) as exc:
            mlperf.parse_mllog_line(line)
        assert str(exc.value) == message
    assert mlperf.parse_mllog_line("no marker") is None
    assert mlperf.parse_mllog_line(':::SYSJSON {"a": 1} trailing') == ("sysjson", {"a": 1})
    assert mlperf.parse_mllog_line('0: :::MLLOG {"key": "k", "time_ms": 1.5, "value": null, "metadata": null}') == (
        "mllog", {"key": "k", "time_ms": 1.5, "value": None, "metadata": None})


def test_a_line_with_the_marker_inside_other_text_is_foreign_or_parsed(tmp_path: Path) -> None:
    log = mlperf.parse_lines([(1, "a ::: b", True), (2, "", True), (3, "  ", True), (4, "x", True)])
    assert (log.foreign, log.lines, log.events) == (2, 4, [])


@pytest.mark.parametrize(("value", "placeholder"), [
    ("SUBMISSION_ORG_PLACEHOLDER", True), ("8xsubmission_platform_placeholder", True), ("UNDEFINED", True),
    (" unknown ", True), ("N/A", True), ("NA", True), ("tbd", True), ("NVIDIA", False), ("UNKNOWN-X", False),
    ("TBD2", False)])
def test_placeholders(value: str, placeholder: bool) -> None:
    assert mlperf.placeholder(value) is placeholder


@pytest.mark.parametrize(("text", "number"), [
    ("81559 MiB", 81559 * 2**20), ("2.0 TB", 2 * 10**12), ("1.024 TB", 1_024_000_000_000), ("512GB", 512 * 10**9),
    ("12 B", 12), ("1.5 kib", 1536), ("3 KB", 3000), ("2 PB", 2 * 10**15), ("1 GiB", 2**30), ("1 TiB", 2**40),
    ("4 MB", 4 * 10**6), ("5 XB", None), ("abc", None), (None, None), ("N/A", None), ("", None)])
def test_bytes(text: str | None, number: int | None) -> None:
    assert mlperf.parse_bytes(text) == number


def test_software_written_as_text() -> None:
    text = ("cuda 12.4, NCCL 2.21; cudnn-9.1\ngcc: v11.4, hipblaslt-1.1.0.70000-crdcbr.91~22.04, "
            "megatron_lm-bc0be960, 12345, , cuda 12.5, nvidia driver 550.2")
    assert mlperf.software_items(text) == [
        ("cuda", "12.4"), ("NCCL", "2.21"), ("cudnn", "9.1"), ("gcc", "11.4"),
        ("hipblaslt", "1.1.0.70000-crdcbr.91~22.04"), ("megatron_lm-bc0be960", ""), ("12345", ""), ("cuda", "12.5"),
        ("nvidia driver", "550.2")]
    s = mlperf.stack_from_system({"other_software_stack": text}, [])
    d = s.drivers
    assert (d.cuda_runtime, d.nccl, d.cudnn, d.gpu_driver) == ("12.4", "2.21", "9.1", "550.2")
    assert [(p.name, p.version) for p in s.software.packages] == [
        ("12345", ""), ("cuda", "12.5"), ("gcc", "11.4"), ("hipblaslt", "1.1.0.70000-crdcbr.91~22.04"),
        ("megatron_lm-bc0be960", "")]


def test_other_software_stack_of_another_shape_is_not_recorded() -> None:
    notes: list[str] = []
    s = mlperf.stack_from_system({"other_software_stack": 5, "cuda_driver_version": "535.1"}, notes)
    assert notes == ["other_software_stack is neither text, an object nor a list of objects: not recorded"]
    assert s.drivers.cuda_driver == "535.1" and s.software.packages == ()
    s = mlperf.stack_from_system({"other_software_stack": {"cuda_driver_version": "1"}, "cuda_driver_version": "2",
                                  "accelerator_interconnect": "NVLink", "host_networking": "IB"}, [])
    assert s.drivers.cuda_driver == "1" and s.hardware.interconnect == "NVLink; host: IB"
    empty = mlperf.stack_from_system({}, [])
    assert (empty.hardware.interconnect, empty.hardware.gpu_count, empty.launcher.nodes) == (None, 0, None)


@pytest.mark.parametrize(("vcpus", "sockets", "cores", "expected", "noted"), [
    (None, "2", "32", None, False),
    ("96", None, None, 96, False),
    ("96", "1", "48", 96, False),
    ("64", "2", "32", 128, False),  # within one processor's 2 threads per core: per processor
    ("65", "2", "32", 65, False),  # above it: the host's
    ("128", "2", None, 128, True),
])
def test_logical_cpus_per_node(vcpus: str | None, sockets: str | None, cores: str | None, expected: int | None,
                               noted: bool) -> None:
    notes: list[str] = []
    system = {"host_processor_vcpu_count": vcpus, "host_processors_per_node": sockets,
              "host_processor_core_count": cores}
    assert mlperf.stack_from_system(system, notes).hardware.cpu_cores == expected
    assert notes == ([f"host_processor_vcpu_count {vcpus} with {sockets} processors and no core count: read as the "
                      "host's vCPUs (the MLPerf rules' reading), not per processor"] if noted else [])


def test_finding_rules(tmp_path: Path) -> None:
    single = tmp_path / "training_4.0.0__closed_bert.yaml"
    single.write_text(RULE)
    assert mlperf.find_rules([single], "bert", "closed") == (single, [])
    assert mlperf.find_rules([single], "bert", None) == (single, [])
    assert mlperf.find_rules([single], "bert", "open")[0] is None
    other = tmp_path / "xclosed_bert.yaml"  # not <division>_<benchmark>.yaml, nor ending in _<that>
    other.write_text(RULE)
    assert mlperf.find_rules([other], "bert", "closed")[0] is None
    with pytest.raises(BadInput, match=f"^--rules {tmp_path / 'missing'}: no such file or folder$"):
        mlperf.find_rules([tmp_path / "missing"], "bert", None)
    unversioned = tmp_path / "d"
    unversioned.mkdir()
    (unversioned / "open_bert.yaml").write_text(RULE)
    for version in ("9.0.0", "10.0.0"):  # by version, not by name ("training_10" sorts before "training_9")
        folder = tmp_path / f"training_{version}"
        folder.mkdir()
        (folder / "closed_bert.yaml").write_text(RULE)
    assert mlperf.find_rules([tmp_path / "training_9.0.0", tmp_path / "training_10.0.0"], "bert", "closed")[0] == (
        tmp_path / "training_10.0.0" / "closed_bert.yaml")
    assert mlperf.find_rules([tmp_path / "training_10.0.0", tmp_path / "training_9.0.0"], "bert", "closed")[0] == (
        tmp_path / "training_10.0.0" / "closed_bert.yaml")
    found, notes = mlperf.find_rules([unversioned, single], "bert", None)
    assert found == single and notes == ["several rule sets match bert: used training_4.0.0__closed_bert.yaml (the "
                                         "newest); the log does not say which ruleset it was checked against"]


def test_reading_targets(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    for text, expected in [
        ("- KEY:\n    NAME: eval_accuracy\n    ATLEAST_ONE_CHECK: \"v['value'] > 0.9\"\n", None),
        ("- KEY:\n    NAME: eval_accuracy_x\n    ATLEAST_ONE_CHECK: \"v['value'] >= 0.9\"\n", None),
        ("- KEY:\n    NAME: eval_accuracy\n    REQ: X\n- KEY:\n    NAME: y\n    ATLEAST_ONE_CHECK: \"v['value'] "
         ">= 0.9\"\n", None),
        ("- KEY:\n    NAME: eval_accuracy\n    ATLEAST_ONE_CHECK: 'v[\"value\"] <= 2.5E+0'\n", (2.5, "min")),
        ("- KEY:\n    NAME: eval_accuracy\n    ATLEAST_ONE_CHECK: v['value']>=-1e-1\n", (-0.1, "max")),
    ]:
        path.write_text(text)
        target = mlperf.quality_target(path, "b")
        assert (None if target is None else (target.gate.threshold, target.gate.direction)) == expected, text
        if target is not None:
            assert target.gate.name == "mlperf b" and target.gate.metric == "eval_accuracy"
            assert target.gate.split == "eval" and target.rules_file == "r.yaml"


def test_a_gate_is_never_met_by_a_missing_value() -> None:
    gate = QualityGate(name="g", metric="eval_accuracy", threshold=1.0, direction="min")
    assert mlperf.gate_met(gate, [(1, None), (2, float("inf")), (3, 1.0)]) == 3  # type: ignore[list-item]
    assert mlperf.gate_met(gate, []) is None
