"""Every file of ../shared/fixtures/megatron parsed: counts and values checked against the files by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ledger.ingest.megatron import parse_log
from ledger.ingest.megatron_args import workload_from_args

# file -> (lines, iteration lines, last iteration, last lm loss or None, unparsed lines)
EXPECTED = {
    "issue_excerpt__Megatron-Bridge_2403__dsv3_1024xH100_gradnorm_spike.log": (3, 1, 10, 11.89217, 0),
    "issue_excerpt__Megatron-DeepSpeed_396__gradnorm_nan_no_lm_loss.log": (5, 3, 5428, None, 0),
    "issue_excerpt__ms-swift_7371__qwen_next_moe_lora.log": (2, 1, 1, 0.8659112, 0),
    "ling_v2_moe_pretrain_mtp_zloss.log": (11, 10, 10, 2.557783, 0),
    "mcore_dense_baseline_a100_seo.log": (22, 10, 200, 6.760830, 0),
    "mcore_moe64_top1_ep4_a100_seo.log": (42, 15, 300, 6.147610, 0),
}


def test_every_megatron_fixture_is_covered(megatron_dir: Path) -> None:
    assert sorted(p.name for p in megatron_dir.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_and_last_values(megatron_dir: Path, name: str) -> None:
    lines, iterations, last_step, last_loss, unparsed = EXPECTED[name]
    log = parse_log(megatron_dir / name)
    steps = log.tables()["steps"]
    assert log.lines == lines and log.iteration_lines == iterations and steps.num_rows == iterations
    assert len(log.issues.unparsed) == unparsed and not log.issues.fields
    assert steps["step"].to_pylist()[-1] == last_step
    assert steps["loss"].to_pylist()[-1] == last_loss


def test_ling_v2_mtp_zloss_and_warmup(megatron_dir: Path) -> None:
    rows = parse_log(megatron_dir / "ling_v2_moe_pretrain_mtp_zloss.log").tables()["steps"].to_pylist()
    assert [r["step"] for r in rows] == list(range(1, 11))
    assert rows[0]["step_time_s"] == pytest.approx(79.4899) and rows[1]["step_time_s"] == pytest.approx(11.182)
    assert rows[-1]["z_loss"] == 10.95377 and dict(rows[-1]["extra"])["mtp_1 loss"] == 2.779469
    assert rows[-1]["tflops_per_device"] == 133.7  # printed per GPU: a column of its own, not in extra
    assert "throughput per GPU (TFLOP/s/GPU)" not in dict(rows[-1]["extra"])
    assert rows[-1]["grad_norm"] == 0.144 and rows[-1]["lr"] == 2.999833e-05 and rows[-1]["skipped"] is False
    # "[Rank 0] (after 1 iterations) memory (MB) | ... | max allocated: 63359.77001953125" belongs to step 1
    assert rows[0]["memory_bytes"] == int(63359.77001953125 * 2**20)
    # timestamps are read (as UTC): 16:08:14 -> 16:09:51
    assert rows[-1]["time"] - rows[0]["time"] == 97.0


def test_bridge_spike_without_trailing_bar(megatron_dir: Path) -> None:
    row = parse_log(megatron_dir / "issue_excerpt__Megatron-Bridge_2403__dsv3_1024xH100_gradnorm_spike.log"
                    ).tables()["steps"].to_pylist()[0]
    assert row["grad_norm"] == 224119.688 and row["aux_loss"] is None
    extra = dict(row["extra"])
    assert extra["seq_load_balancing_loss"] == 1.000194 and extra["number of nan iterations"] == 0.0


def test_deepspeed_variant_nan_grad_norm_and_tokens(megatron_dir: Path) -> None:
    rows = parse_log(megatron_dir / "issue_excerpt__Megatron-DeepSpeed_396__gradnorm_nan_no_lm_loss.log"
                     ).tables()["steps"].to_pylist()
    assert [r["step"] for r in rows] == [5426, 5427, 5428]
    assert all(math.isnan(r["grad_norm"]) and r["loss"] is None for r in rows)
    assert rows[0]["tokens"] == 88899584  # "consumed tokens"
    extra = dict(rows[0]["extra"])
    assert extra["samples per second"] == 1.883 and rows[0]["tflops_per_device"] == 78.36
    assert extra["actual seqlen"] == 2048 and rows[0]["global_batch"] == 8
    # tokens/s = global batch 8 x actual seqlen 2048 / 4.2479 s
    assert rows[0]["tokens_per_s"] == pytest.approx(8 * 2048 / 4.2479)


def test_ms_swift_extra_fields(megatron_dir: Path) -> None:
    row = parse_log(megatron_dir / "issue_excerpt__ms-swift_7371__qwen_next_moe_lora.log"
                    ).tables()["steps"].to_pylist()[0]
    assert row["memory_bytes"] == int(24.9 * 2**30) and row["aux_loss"] == 3.304209
    extra = dict(row["extra"])
    assert extra["elapsed time"] == 112.0 and extra["remaining time"] == 7 * 3600 + 6 * 60 + 43
    assert extra["mtp_1 loss"] == 0.6761752


def test_moe64_argument_fragment_and_dense_pair(megatron_dir: Path) -> None:
    moe = parse_log(megatron_dir / "mcore_moe64_top1_ep4_a100_seo.log")
    w = workload_from_args(moe.args)
    assert w.parallelism.ep == 4 and w.model.ffn_hidden == 1792 and w.model.top_k == 1
    assert w.router.aux_loss_coeff == 0.01 and w.router.capacity_factor == 1.0 and w.router.drop_policy == "probs"
    assert w.router.pad_to_capacity is True and w.router.load_balancing == "aux_loss"
    assert w.router.z_loss_coeff is None and w.kernels.dispatcher == "alltoall" and w.kernels.grouped_gemm is False
    assert w.model.num_experts is None  # the fragment does not print num_experts: not guessed
    first = moe.tables()["steps"].to_pylist()[0]
    assert first["aux_loss"] == 1.436231 and dict(first["extra"])["num zeros"] == 328659928.0
    dense = parse_log(megatron_dir / "mcore_dense_baseline_a100_seo.log")
    assert dense.args == {} and dense.tables()["steps"]["aux_loss"].null_count == 10
