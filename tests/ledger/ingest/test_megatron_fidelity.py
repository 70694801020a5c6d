"""Megatron-DeepSpeed MoE arguments, per-device TFLOP/s and global batch as step columns, and logs that stop
before train_iters: a real Megatron-DeepSpeed MoE log plus a synthetic case per rule."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ledger.ingest.api import ENDED_EARLY, ingest_megatron, megatron_evidence
from ledger.ingest.common import numbered_lines
from ledger.ingest.megatron import parse_lines
from ledger.ingest.megatron_args import args_from_dump_lines, args_from_flags, workload_from_args
from ledger.store.receipts import Ledger
from schemas import Workload

DS_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "megatron" / "megatron_deepspeed_moe8_ep4_gpt125m.log"


def test_megatron_deepspeed_moe_log() -> None:
    ev, log = megatron_evidence(DS_LOG)
    text = DS_LOG.read_text()
    # what the log itself says, read here with plain regexes
    created = re.findall(r"Creating MoE layer with num_experts: (\d+) \| num_local_experts: (\d+) \| "
                         r"expert_parallel_size: (\d+)", text)
    assert created and set(created) == {("8", "2", "4")}
    world = int(re.search(r"using world size: (\d+)", text).group(1))
    w = ev.workload
    assert w is not None
    assert (w.parallelism.ep, w.parallelism.tp, w.parallelism.pp, w.parallelism.dp) == (4, 1, 1, 4)
    assert w.parallelism.world_size == world == 4
    assert (w.model.num_experts, w.model.top_k, w.model.moe_layers) == (8, 1, len(created))
    assert w.model.expert_hidden == w.model.ffn_hidden == 3072 and w.model.moe_layer_freq == 2
    assert (w.router.aux_loss_coeff, w.router.capacity_factor) == (0.01, 1.0)
    assert w.precision.compute == "fp16" and w.batch.global_batch == 256
    rows = ev.tables["steps"].to_pylist()
    printed = [float(x) for x in re.findall(r"\| TFLOPs: ([\d.]+) \|", text)]
    assert [r["tflops_per_device"] for r in rows] == printed and len(printed) == 9
    assert [r["flops_per_s"] for r in rows] == [pytest.approx(x * 1e12 * 4) for x in printed]
    assert {r["global_batch"] for r in rows} == {256}
    assert not any("TFLOPs" in dict(r["extra"]) or "global batch size" in dict(r["extra"]) for r in rows)
    assert rows[0]["aux_loss"] == 7.197503e-02  # "moe loss"
    assert ev.outcome == ENDED_EARLY and log.last_step == 90
    assert any("stops at iteration 90 of 1716613" in n for n in log.issues.notes)


def test_deepspeed_moe_names_synthetic() -> None:
    def workload(flags: str) -> Workload:
        return workload_from_args(args_from_flags(flags.split()), complete=False)

    w = workload("--num-layers 13 --ffn-hidden-size 64 --num-experts 64 64 128 --ep-size 8 --moe-top-k 2 "
                 "--expert-interval 2 --mlp-type residual --moe-train-capacity-factor 1.25 "
                 "--disable-moe-token-dropping")
    assert (w.model.num_experts, w.parallelism.ep, w.model.top_k) == (128, 8, 2)  # pyramid: the largest layer
    assert w.model.moe_layers == 6  # layers 2, 4, ... 12 of 13
    assert (w.model.shared_experts, w.model.shared_expert_hidden, w.model.expert_hidden) == (1, 64, 64)
    assert w.router.capacity_factor is None  # no capacity while tokens are not dropped
    dense = workload_from_args(args_from_dump_lines(["  num_experts ..... [1]", "  moe_expert_parallel_size ..... 1"]))
    assert dense.model.num_experts is None and dense.model.expert_hidden is None
    # Megatron-LM's own names win over DeepSpeed's
    both = workload("--expert-model-parallel-size 2 --moe-expert-parallel-size 4 --moe-router-topk 4 --topk 1 "
                    "--num-experts 8")
    assert (both.parallelism.ep, both.model.top_k) == (2, 4)


def _log(tmp_path: Path, last: int, total: int, extra: str = "", args: str = "") -> Path:
    lines = [f"  {a} ........ {v}" for a, v in (x.split("=") for x in args.split())]
    lines += [f" iteration {i:8d}/{total:8d} | lm loss: 1.0E+00 | global batch size: 8 |" for i in range(1, last + 1)]
    path = tmp_path / "run.log"
    path.write_text("\n".join([*lines, *([extra] if extra else [])]) + "\n")
    return path


@pytest.mark.parametrize(("last", "total", "extra", "args", "early"), [
    (50, 100, "", "", True),
    (100, 100, "", "", False),
    (50, 100, "[after training is done] datetime: 2024-01-01 00:00:00", "", False),
    (50, 100, "[exiting program after 230.1 minutes] datetime: 2024-01-01 00:00:00", "", False),
    (50, 100, "", "exit_interval=50", False),
    (98, 100, "", "log_interval=7", False),
    (50, 100, "", "log_interval=7", True),
])
def test_a_log_that_stops_before_train_iters(tmp_path: Path, last: int, total: int, extra: str, args: str,
                                             early: bool) -> None:
    log = parse_lines(numbered_lines(_log(tmp_path, last, total, extra, args)))
    assert (log.stopped_early() is not None) == early


def test_ended_early_reaches_the_receipt_and_new_columns_the_parquet(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "receipts")
    receipt = ingest_megatron(ledger, _log(tmp_path, 3, 10)).receipt
    assert receipt.summary.outcome == ENDED_EARLY
    assert any("stops at iteration 3 of 10" in p.message for p in receipt.problems)
    steps = pq.read_table(ledger.path(receipt.id) / "steps.parquet")
    assert steps.column("global_batch").to_pylist() == [8, 8, 8]
