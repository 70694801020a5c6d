"""What a Megatron-LM log says about its workload outside the argument dump: the parallel sizes of its ``using world
size: ...`` line and the global batch size its iteration lines print, through both ways a log becomes a receipt
(``ledger ingest megatron``: :func:`ledger.ingest.api.megatron_evidence`; ``ledger record`` of a launch:
:func:`ledger.ingest.live.augment`). Lines of tests/fixtures/logs are written in Megatron's shape (README there);
the shared fixtures are real logs, read in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.ingest.api import megatron_evidence
from ledger.ingest.live import augment
from ledger.ingest.megatron import parse_log
from ledger.ingest.megatron_args import args_from_world_line
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome, write_wrapper_facts

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


@pytest.mark.parametrize(("line", "sizes"), [
    ("using world size: 8, data-parallel size: 2, context-parallel size: 1, hierarchical context-parallel sizes: "
     "None, tensor-model-parallel size: 2, pipeline-model-parallel size: 2",
     {"world_size": 8, "data_parallel_size": 2, "context_parallel_size": 1, "tensor_model_parallel_size": 2,
      "pipeline_model_parallel_size": 2}),
    # the encoder's version: two sizes run together (`None` + `tensor-...`), the encoder's sizes are not the model's
    ("using world size: 16, data-parallel size: 16, context-parallel size: 1, hierarchical context-parallel sizes: "
     "Nonetensor-model-parallel size: 1, encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: 1, "
     "encoder-pipeline-model-parallel size: 0",
     {"world_size": 16, "data_parallel_size": 16, "context_parallel_size": 1, "tensor_model_parallel_size": 1,
      "pipeline_model_parallel_size": 1}),
    # older: `data-parallel-size`, no context parallelism
    ("using world size: 64, data-parallel-size: 8, tensor-model-parallel size: 4, pipeline-model-parallel size: 2 ",
     {"world_size": 64, "data_parallel_size": 8, "tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2}),
])
def test_the_world_line_of_each_megatron_version(line: str, sizes: dict[str, int]) -> None:
    assert args_from_world_line(line) == sizes


def test_parallel_sizes_and_global_batch_of_a_log_without_an_argument_dump() -> None:
    """Before, the log's parallelism was unknown (the world line was not read) and its global batch, printed on
    every iteration line, was not in the workload."""
    ev, log = megatron_evidence(LOGS / "megatron_parallel.log")
    assert ev.workload is not None
    p = ev.workload.parallelism
    assert (p.world_size, p.dp, p.tp, p.pp, p.cp) == (8, 2, 2, 2, 1)
    assert ev.workload.batch.global_batch == 128 and ev.workload.batch.steps == 500
    assert log.args == {}  # no argument dump: what the other lines state is the log's arguments() only
    assert not any("batch size changes" in note for note in log.issues.notes)


def test_a_batch_size_ramp_up_is_noted_not_taken() -> None:
    ev, log = megatron_evidence(LOGS / "megatron_rampup.log")
    assert ev.workload is not None and ev.workload.batch.global_batch is None
    p = ev.workload.parallelism
    assert (p.world_size, p.dp, p.tp, p.pp, p.cp) == (16, 16, 1, 1, 1)
    note = next(note for note in log.issues.notes if "batch size changes" in note)
    assert "32 from iteration 10, 64 from iteration 20, 128 from iteration 30" in note
    assert [row["global_batch"] for row in log.tables()["steps"].to_pylist()] == [32, 64, 128, 128]


def test_the_argument_dump_wins_over_what_other_lines_say(tmp_path: Path) -> None:
    text = (LOGS / "megatron_parallel.log").read_text()
    dump = "---- arguments ----\n  global_batch_size ............................... 256\n---- end of arguments ----\n"
    (tmp_path / "x.log").write_text(dump + text)
    log = parse_log(tmp_path / "x.log")
    assert log.arguments()["global_batch_size"] == 256 and log.arguments()["tensor_model_parallel_size"] == 2


def test_a_recorded_megatron_launch_gets_its_global_batch(tmp_path: Path, megatron_dir: Path) -> None:
    """``ledger record`` of a launch whose output is the real MoE run's log (an argument fragment without
    ``global_batch_size``, 15 iteration lines of global batch size 64): the workload's global batch is 64."""
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    run_dir = ledger.staging / "run1"
    run_dir.mkdir()
    write_wrapper_facts(run_dir, {"run_uuid": "run1", "name": "live", "started_at": "2025-01-01T00:00:00+00:00",
                                  "cwd": str(tmp_path)})
    (run_dir / "output.log").write_text((megatron_dir / "mcore_moe64_top1_ep4_a100_seo.log").read_text())
    notes = augment(run_dir, ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py"], run_dir / "output.log")
    assert "15 iteration line(s) parsed" in notes[0]
    receipt = publish(ledger, run_dir, Outcome(status="succeeded", exit_code=0))
    assert receipt.workload.batch.global_batch == 64 and receipt.workload.parallelism.ep == 4
    assert receipt.workload.parallelism.world_size == 8
