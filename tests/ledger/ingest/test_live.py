"""Live capture of Megatron launches: ledger.ingest.live.augment on a staging directory, and `ledger record`
wrapping a fake Megatron launch once the wrapper calls it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from helpers import ids_in, load_receipt

from ledger.ingest.live import augment
from ledger.sdk import Run
from ledger.store.publish import publish
from ledger.store.receipts import Ledger
from ledger.store.staging import Outcome, write_wrapper_facts

LING = "ling_v2_moe_pretrain_mtp_zloss.log"


def _staging(tmp_path: Path, log_text: str) -> tuple[Ledger, Path]:
    ledger = Ledger(tmp_path / "receipts")
    ledger.ensure_writable()
    run_dir = ledger.staging / "run1"
    run_dir.mkdir()
    write_wrapper_facts(run_dir, {"run_uuid": "run1", "name": "live", "started_at": "2025-01-01T00:00:00+00:00",
                                  "cwd": str(tmp_path)})
    (run_dir / "output.log").write_text(log_text)
    return ledger, run_dir


def test_augment_fills_a_megatron_launch(tmp_path: Path, megatron_dir: Path) -> None:
    ledger, run_dir = _staging(tmp_path, (megatron_dir / LING).read_text())
    command = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-experts", "16", "--moe-router-topk",
               "2", "--seq-length", "4096", "--bf16", "--moe-grouped-gemm"]
    notes = augment(run_dir, command, run_dir / "output.log")
    assert notes[0].startswith("Megatron log: 10 iteration line(s) parsed") and "wrote steps" in notes[0]
    receipt = publish(ledger, run_dir, Outcome(status="succeeded", exit_code=0))
    assert receipt.summary.steps == 10 and receipt.summary.final_loss == 2.557783
    w = receipt.workload
    assert w.model.num_experts == 16 and w.model.top_k == 2 and w.kernels.grouped_gemm is True
    assert w.parallelism.world_size == 8 and w.precision.compute == "bf16" and w.batch.steps == 2000
    assert w.task.objective == "causal-lm"


def test_the_output_alone_is_enough(tmp_path: Path, megatron_dir: Path) -> None:
    _, run_dir = _staging(tmp_path, (megatron_dir / LING).read_text())
    notes = augment(run_dir, ["python", "my_train.py"], run_dir / "output.log")
    assert "10 iteration line(s)" in notes[0] and (run_dir / "rank-00000" / "steps.arrows").exists()


def test_sdk_steps_win_and_other_launches_are_left_alone(tmp_path: Path, megatron_dir: Path) -> None:
    _, run_dir = _staging(tmp_path, (megatron_dir / LING).read_text())
    run = Run(run_dir, rank=0, background=False)
    run.log_step(1, loss=1.0)
    run.close()
    notes = augment(run_dir, ["python", "pretrain_gpt.py"], run_dir / "output.log")
    assert notes == ["Megatron launch: steps were logged through the SDK, so the log was not parsed"]
    _, other = _staging(tmp_path / "b", "epoch 1 loss 2.0\n")
    assert augment(other, ["python", "train.py"], other / "output.log") == []
    assert not (other / "rank-00000").exists()


def test_routing_dumps_of_this_run(tmp_path: Path, megatron_dir: Path) -> None:
    _, run_dir = _staging(tmp_path, (megatron_dir / LING).read_text())
    dumps = run_dir / "tokens_per_expert"
    dumps.mkdir()
    (dumps / "rank0.jsonl").write_text(json.dumps({"iteration": 10, "layer": 0, "tokens_per_expert": [1, 2, 3]}))
    notes = augment(run_dir, ["pretrain_gpt.py"], run_dir / "output.log")
    assert "1 routing" in notes[0]  # a row per (step, layer): its 3 counts in one list


def test_ledger_record_of_a_fake_megatron_launch(ledger_cli, ledger_dir: Path, megatron_dir: Path,
                                                 tmp_path: Path) -> None:
    script = tmp_path / "fake_megatron.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        for line in open({str(megatron_dir / LING)!r}):
            sys.stdout.write(line)
        print("  moe_router_topk ................................. 2", flush=True)
    """))
    proc = ledger_cli("record", "--name", "fake-megatron", "--", "python", str(script), "--num-experts", "16")
    assert proc.returncode == 0, proc.stderr
    (rid,) = ids_in(ledger_dir)
    r = load_receipt(ledger_dir, rid)
    assert r["status"] == "succeeded" and r["summary"]["steps"] == 10 and r["summary"]["final_loss"] == 2.557783
    assert r["workload"]["model"]["top_k"] == 2 and r["workload"]["model"]["num_experts"] == 16
