"""`ledger ingest ...` end to end through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from helpers import ids_in, load_receipt, receipt_dir


def _receipt(ledger_dir: Path, stdout: str) -> dict:
    rid = stdout.strip().splitlines()[-1]
    assert rid in ids_in(ledger_dir)
    return load_receipt(ledger_dir, rid)


def test_ingest_megatron(ledger_cli, ledger_dir: Path, megatron_dir: Path, tmp_path: Path) -> None:
    args = tmp_path / "launch.sh"
    args.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py \\\n  --num-experts 64 --moe-router-topk 1 \\\n"
                    "  --seq-length 2048 --expert-model-parallel-size 4 --bf16  # the SEO run\n")
    proc = ledger_cli("ingest", "megatron", str(megatron_dir / "mcore_moe64_top1_ep4_a100_seo.log"),
                      "--args-from", str(args), "--name", "moe64", check=True)
    r = _receipt(ledger_dir, proc.stdout)
    assert r["status"] == "imported" and r["name"] == "moe64" and r["summary"]["steps"] == 15
    assert r["summary"]["final_loss"] == 6.14761 and r["summary"]["last_step"] == 300
    assert r["source"]["kind"] == "megatron-log" and r["source"]["lines"] == 42
    assert r["source"]["unparsed_lines"] == 0
    w = r["workload"]
    assert w["model"]["num_experts"] == 64 and w["parallelism"]["ep"] == 4 and w["parallelism"]["world_size"] == 8
    assert w["router"]["capacity_factor"] == 1.0 and w["precision"]["compute"] == "bf16"
    assert w["batch"]["steps"] == 40000  # "iteration 300/ 40000"
    steps = pq.read_table(receipt_dir(ledger_dir, r["id"]) / "steps.parquet").to_pylist()
    assert steps[0]["tokens"] == 1280 * 2048 and steps[0]["tokens_per_s"] == 64 * 2048 / 1.639
    assert (receipt_dir(ledger_dir, r["id"]) / "output.log").read_text() == (
        megatron_dir / "mcore_moe64_top1_ep4_a100_seo.log").read_text()


def test_ingest_mlperf_and_trace_into_it(ledger_cli, ledger_dir: Path, mlperf_dir: Path, traces_dir: Path) -> None:
    result = mlperf_dir / "llama2_70b_lora__NVIDIA__eos_n8_ngc24.04_nemo__result_0.txt"
    proc = ledger_cli("ingest", "mlperf", str(result),
                      "--rules", str(mlperf_dir / "rules"), "--name", "nv0", check=True)
    r = _receipt(ledger_dir, proc.stdout)
    assert r["summary"]["time_to_train_s"] == 343.293 and r["summary"]["outcome"] == "success"
    assert "met at samples_count 3456" in proc.stderr
    assert r["source"]["submitter"] == "NVIDIA" and r["source"]["benchmark"] == "llama2_70b_lora"
    proc = ledger_cli("ingest", "trace", str(traces_dir / "hta__trace_diff_control_control.json.gz"),
                      "--into", "nv0", check=True)
    t = _receipt(ledger_dir, proc.stdout)
    assert "receipts are immutable" in proc.stderr
    assert t["id"] != r["id"] and t["links"]["baseline"] == r["id"] and t["tags"]["trace_of"] == r["id"]
    assert t["name"] == "nv0+trace" and t["status"] == "imported" and t["source"]["kind"] == "profiler-trace"
    assert t["stack"] == r["stack"] and t["workload"] == r["workload"]
    assert t["summary"]["time_to_train_s"] == 343.293 and t["summary"]["steps"] == r["summary"]["steps"]
    timing = pq.read_table(receipt_dir(ledger_dir, t["id"]) / "timing.parquet").to_pylist()
    phases = {row["phase"] for row in timing if row["rank"] == 3}
    assert {"gemm", "communication", "comm_exposed", "comm_overlapped", "gpu_idle", "cpu_launch", "step"} <= phases
    assert [row for row in timing if row["rank"] == 0] == pq.read_table(
        receipt_dir(ledger_dir, r["id"]) / "timing.parquet").to_pylist()  # the original's rows, copied


def test_ingest_golden(ledger_cli, ledger_dir: Path, golden_dir: Path) -> None:
    proc = ledger_cli("ingest", "golden",
                      str(golden_dir / "8experts2parallel_dist_optimizer__golden_values_dev_dgx_gb200.json"),
                      "--config", str(golden_dir / "8experts2parallel_dist_optimizer__model_config.yaml"), check=True)
    r = _receipt(ledger_dir, proc.stdout)
    assert r["summary"]["steps"] == 100 and r["summary"]["final_loss"] == 9.76527
    assert r["stack"]["hardware"]["gpu_model"] == "GB200" and r["workload"]["model"]["num_experts"] == 8


def test_bad_input_is_one_line_and_exit_2(ledger_cli, ledger_dir: Path, megatron_dir: Path, mlperf_dir: Path,
                                          tmp_path: Path) -> None:
    log = megatron_dir / "ling_v2_moe_pretrain_mtp_zloss.log"
    cases = [
        (("ingest", "mlperf", str(log)), "expected an MLPerf result log"),
        (("ingest", "golden", str(log)), "expected Megatron-LM golden values"),
        (("ingest", "megatron", str(mlperf_dir / "systems" / "NVIDIA__eos_n8_ngc24.04_nemo.json")),
         "expected a Megatron-LM log"),
        (("ingest", "trace", str(log), "--into", "x"), "expected a PyTorch profiler chrome trace"),
        (("ingest", "megatron", str(tmp_path / "nope.log")), "no such file"),
    ]
    for args, message in cases:
        proc = ledger_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith("Error: ") and message in proc.stderr and proc.stderr.count("\n") == 1
    empty = tmp_path / "t.json"
    empty.write_text(json.dumps({"traceEvents": []}))
    ledger_cli("ingest", "megatron", str(log), "--name", "ling", check=True)
    proc = ledger_cli("ingest", "trace", str(empty), "--into", "ling")
    assert proc.returncode == 2 and "no ProfilerStep" in proc.stderr
    proc = ledger_cli("ingest", "trace", str(empty), "--into", "missing-ref")
    assert proc.returncode == 2
    assert len(ids_in(ledger_dir)) == 1  # nothing published by the failures


def test_unparsed_lines_reach_the_receipt(ledger_cli, ledger_dir: Path, megatron_dir: Path, tmp_path: Path) -> None:
    text = (megatron_dir / "ling_v2_moe_pretrain_mtp_zloss.log").read_text().splitlines()
    text.insert(3, " iteration ?? broken")
    log = tmp_path / "broken.log"
    log.write_text("\n".join(text))  # and no final newline
    r = _receipt(ledger_dir, ledger_cli("ingest", "megatron", str(log), check=True).stdout)
    assert r["source"]["unparsed_lines"] == 1 and r["summary"]["steps"] == 10
    messages = " ".join(p["message"] for p in r["problems"])
    assert "1 line(s) did not parse: line 4" in messages and "no line end" in messages


def test_ingest_many_mlperf_results_in_one_command(ledger_cli, ledger_dir: Path, mlperf_dir: Path) -> None:
    """Several results: each parsed, published through the bulk path (one group), named by its file; the
    same receipts as one at a time would give; a bad file among them publishes nothing."""
    names = [f"llama2_70b_lora__NVIDIA__eos_n8_ngc24.04_nemo__result_{k}" for k in (0, 1)]
    proc = ledger_cli("ingest", "mlperf", *(str(mlperf_dir / f"{n}.txt") for n in names),
                      "--rules", str(mlperf_dir / "rules"), check=True)
    ids = proc.stdout.split()
    assert len(ids) == 2 and sorted(ids) == ids_in(ledger_dir)
    assert (ledger_dir / "journal").read_text().split() == ids  # one write, in the order given
    receipts = [load_receipt(ledger_dir, rid) for rid in ids]
    assert [r["name"] for r in receipts] == names and proc.stderr.count("met at samples_count") == 2
    assert receipts[0]["summary"]["time_to_train_s"] == 343.293  # as the one-result import reads it
    refused = ledger_cli("ingest", "mlperf", str(mlperf_dir / f"{names[0]}.txt"),
                         str(mlperf_dir / "systems" / "NVIDIA__eos_n8_ngc24.04_nemo.json"))
    assert refused.returncode == 2 and "expected an MLPerf result log" in refused.stderr
    named = ledger_cli("ingest", "mlperf", *(str(mlperf_dir / f"{n}.txt") for n in names), "--name", "x")
    assert named.returncode == 2 and "--name names one receipt" in named.stderr
    assert sorted(ids) == ids_in(ledger_dir)  # neither refused import published anything
