"""The performance model, its calibration, hardware profiles and rank correlations."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ledger.planning import hardware
from ledger.planning.calibrate import fit_profile, held_out_phrase
from ledger.planning.errors import TooFewReceipts, UnknownHardware
from ledger.planning.geometry import Geometry
from ledger.planning.hardware import BUILTIN
from ledger.planning.observations import PerfObs
from ledger.planning.perf import Calibration, Plan, predict
from ledger.planning.ranks import kendall, ranks, spearman
from schemas import Receipt

B200, CPU = BUILTIN["B200"], BUILTIN["CPU"]


def llm(**kw: float) -> Geometry:
    base = dict(layers=32, hidden=4096, ffn_hidden=16384, experts=64, top_k=8, granularity=4, seq_len=4096,
                vocab=128000)
    return Geometry.of(**(base | kw))


def test_geometry_counts_match_the_runner() -> None:
    pytest.importorskip("torch", reason="the runner needs torch (the torch extra; `make test` installs it)")
    from runners.moe.configs import get_config
    from runners.moe.model import flops_per_token, param_counts

    for ov in (["moe.num_experts=16", "moe.top_k=4", "moe.granularity=4"], ["moe.num_experts=1", "moe.top_k=1"]):
        cfg = get_config("tiny", ov)
        g = Geometry.of(layers=2, hidden=64, heads=4, ffn_hidden=256, experts=cfg.moe.num_experts,
                        top_k=cfg.moe.top_k, granularity=cfg.moe.granularity, seq_len=64, vocab=64,
                        moe_layers=len(cfg.moe_layer_ids))
        counts = param_counts(cfg, 64)
        assert g.total_params[0] == counts.total and g.active_params[0] == counts.active
        assert g.flops_per_token[0] == flops_per_token(cfg, 64)


def test_breakdown_adds_up_and_memory_responds_to_sharding() -> None:
    g = llm()
    plans = Plan.of(tp=[1, 2, 1, 1, 1], pp=[1, 1, 4, 1, 1], ep=[8, 8, 8, 32, 8], dp=[256, 128, 64, 256, 256],
                    micro_batch=1, global_batch=1024, recompute=[0, 0, 0, 0, 1])
    est = predict(g.take(np.zeros(5, dtype=int)), plans, B200)
    total = sum(est.breakdown.values())
    np.testing.assert_allclose(total, est.step_s, rtol=1e-9)
    mem = est.memory_bytes
    assert mem[1] < mem[0] and mem[2] < mem[0] and mem[3] < mem[0]  # tp, pp, ep each shard weights
    assert mem[4] < mem[0] and est.step_s[4] > est.step_s[0]  # recomputation: less memory, more time
    assert np.all((est.mfu > 0.05) & (est.mfu < 0.7))


def test_mfu_falls_as_experts_get_sparser_and_finer() -> None:
    """With each geometry's best plan on 32 B200 nodes: at the same active parameters (k x expert width
    constant), more experts (sparser) or smaller ones (finer, at the same sparsity) lower the MFU."""
    from ledger.planning.plan import Space, enumerate_candidates

    sparser = llm(experts=np.array([16, 32, 64, 128, 256]), top_k=8, granularity=4)
    finer = llm(experts=np.array([32, 64, 128, 256]), top_k=np.array([2, 4, 8, 16]),
                granularity=np.array([1, 2, 4, 8]))
    for g in (sparser, finer):
        c = enumerate_candidates(Space(), B200, 256, geometry=g)
        assert c.feasible.all()
        assert np.all(np.diff(c.estimate.mfu) < 0), c.estimate.mfu


def test_a_loop_over_experts_pays_launches_on_a_cpu() -> None:
    g = Geometry.of(layers=2, hidden=64, heads=4, ffn_hidden=256, experts=np.array([4, 16, 64]),
                    top_k=np.array([1, 4, 16]), granularity=np.array([1, 4, 16]), seq_len=64, vocab=64)
    loop = predict(g, Plan.of(tp=1, pp=1, ep=1, dp=1, micro_batch=16, global_batch=16, grouped=0,
                              precision="fp32"), CPU)
    grouped = predict(g, Plan.of(tp=1, pp=1, ep=1, dp=1, micro_batch=16, global_batch=16, grouped=1,
                                 precision="fp32"), CPU)
    assert np.all(np.diff(loop.step_s) > 0)
    assert np.all(loop.step_s > grouped.step_s)


def _obs(truth: Calibration, noise: float, seed: int = 0) -> list[PerfObs]:
    rng = np.random.default_rng(seed)
    out = []
    for i, (e, k, gr, bs) in enumerate([(4, 2, 1, 16), (8, 2, 2, 16), (16, 2, 2, 8), (32, 4, 4, 16), (32, 2, 2, 32),
                                        (64, 8, 8, 16), (8, 1, 1, 8)]):
        g = Geometry.of(layers=2, hidden=64, heads=4, ffn_hidden=256, experts=e, top_k=k, granularity=gr,
                        seq_len=64, vocab=64)
        p = Plan.of(tp=1, pp=1, ep=1, dp=1, micro_batch=bs, global_batch=bs, grouped=0, precision="fp32")
        step = float(predict(g, p, CPU, truth).step_s[0]) * float(np.exp(rng.normal(0, noise)))
        out.append(PerfObs(f"id{i}", f"E{e}k{k}G{gr}", g, p, CPU, step, float(g.flops_per_token[0]), bs * 64.0))
    return out


def test_calibration_recovers_known_factors_and_ranks() -> None:
    truth = Calibration(compute=1.4, memory=0.7, comm=1.0, launch=2.5)
    fit = fit_profile(_obs(truth, noise=0.01))
    assert "comm" in fit.fixed  # one device: no collective to learn it from
    for f in ("compute", "memory", "launch"):
        assert getattr(fit.calibration, f) == pytest.approx(getattr(truth, f), rel=0.2), f
    m = fit.metrics
    assert m["mape_nominal_pct"] > 20
    assert m["mape_in_sample_pct"] < 3 and m["mape_held_out_pct"] < 5
    assert m["kendall_held_out"] == 1.0 and m["spearman_held_out"] == 1.0


def test_too_few_perf_receipts() -> None:
    from ledger.planning.calibrate import fit_perf

    with pytest.raises(TooFewReceipts, match=r"2 usable \(CPU: 2\); at least 3 on one hardware profile"):
        fit_perf(_obs(Calibration(), 0.0)[:2])


def test_ranks() -> None:
    assert list(ranks([3, 1, 2, 2])) == [4.0, 1.0, 2.5, 2.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(2 / 3)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_hardware_profiles(tmp_path) -> None:
    assert hardware.resolve("b200") is BUILTIN["B200"]
    with pytest.raises(UnknownHardware, match="known: B200, CPU, H100, H200; or give a JSON or TOML"):
        hardware.resolve("TPUv9")
    toml = tmp_path / "mi300x.toml"
    toml.write_text('name = "MI300X"\npeak_flops = { bf16 = 1.307e15, fp8 = 2.615e15 }\nhbm_bytes = 192e9\n'
                    "hbm_bw = 5.3e12\nnvlink_bw = 64e9\nnetwork_bw = 50e9\n")
    hw = hardware.resolve(str(toml))
    assert hw.name == "MI300X" and hw.peak("fp8") == 2.615e15 and hw.peak("fp32") == 1.307e15
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "X", "peak_flops": {"bf17": 1e15}, "hbm_bytes": 1, "hbm_bw": 1,
                               "nvlink_bw": 1, "network_bw": 1}))
    with pytest.raises(UnknownHardware, match="unknown precision"):
        hardware.resolve(str(bad))
    with pytest.raises(UnknownHardware, match="cannot read"):
        hardware.resolve(str(tmp_path / "missing.toml"))

    def receipt(gpu: str | None, device: str | None) -> Receipt:
        return Receipt.model_validate({"run_uuid": "u", "status": "succeeded", "workload": {"device": device},
                                       "stack": {"hardware": {"gpu_model": gpu}}})

    assert hardware.for_receipt(receipt("NVIDIA H200", "cuda")) is BUILTIN["H200"]
    assert hardware.for_receipt(receipt("NVIDIA H200", None)) is BUILTIN["H200"]
    assert hardware.for_receipt(receipt(None, "cpu")) is CPU
    assert hardware.for_receipt(receipt(None, None)) is CPU  # no device and no GPU: it ran on the CPU
    assert hardware.for_receipt(receipt("NVIDIA A100-SXM4-80GB", "cuda")) is None


def test_near_identical_receipts_are_refused_with_the_runs_that_fix_it() -> None:
    """Many receipts of one geometry and plan (step times that differ by noise alone) cannot identify four
    calibration factors: the fit refuses and names the runs that would vary the split of the step time."""
    from ledger.planning.errors import DegenerateDesign

    one = _obs(Calibration(), 0.0)[1]
    rng = np.random.default_rng(3)
    same = [PerfObs(f"id{i}", f"copy{i}", one.geometry, one.plan, CPU, one.step_s * float(np.exp(rng.normal(0, 0.03))),
                    one.flops_per_token, one.tokens_per_step) for i in range(12)]
    with pytest.raises(DegenerateDesign) as err:
        fit_profile(same)
    msg = str(err.value)
    assert "1 distinct (geometry, plan) points for 3 free calibration factors (at least 5 needed)" in msg
    assert "`ledger rerun id0 --scale batch=x4`" in msg and "--scale experts=x4" in msg


def test_a_loop_pays_full_size_gradients_streamed_from_cache_or_memory() -> None:
    """A loop over experts slices 3 stacked weights and the permuted rows once per expert; the backward of
    each slice zero-fills a buffer as large as the whole and adds it into the gradient (4 passes). Hand
    computation on a profile of round numbers: memory 1 GB/s, a 1 MB cache 4x faster."""
    hw = CPU.model_copy(update={"hbm_bw": 1e9, "memory_efficiency": 1.0, "cache_bytes": 1e6, "cache_bw": 4e9})

    def loop_s(experts: int, top_k: int, micro_batch: int, profile: hardware.Hardware) -> float:
        g = Geometry.of(layers=1, hidden=64, heads=4, ffn_hidden=256, experts=experts, top_k=top_k, granularity=1,
                        seq_len=64, vocab=64)
        step = {}
        for grouped in (0, 1):
            p = Plan.of(tp=1, pp=1, ep=1, dp=1, micro_batch=micro_batch, global_batch=micro_batch, grouped=grouped,
                        precision="fp32")
            step[grouped] = float(predict(g, p, profile).breakdown["memory_bound"][0])
        return step[0] - step[1]

    # 4 experts of 64 x 256, 64 tokens, top-1: a weight buffer of 4*64*256*4 = 262,144 B and rows of
    # 64*64*4 = 16,384 B, both with working sets (x2) inside the cache, so at 4 GB/s:
    # 4 experts x 4 passes x (3 x 262,144 + 16,384) B / 4e9 B/s
    assert loop_s(4, 1, 1, hw) == pytest.approx(4 * 4 * (3 * 262_144 + 16_384) / 4e9, rel=1e-9)
    # 16 experts, 1,024 tokens, top-4: weights 16*64*256*4 = 1,048,576 B and rows 1,024*4*64*4 = 1,048,576 B,
    # working sets of 2,097,152 B: 1e6 / 2,097,152 of each (500,000 B) at 4 GB/s, the rest at 1 GB/s
    each = (1_048_576 - 500_000) / 1e9 + 500_000 / 4e9
    assert loop_s(16, 4, 16, hw) == pytest.approx(16 * 4 * (3 + 1) * each, rel=1e-9)
    # no cache in the profile (the GPU profiles): everything at the memory's rate
    flat = hw.model_copy(update={"cache_bytes": 0.0})
    assert loop_s(16, 4, 16, flat) == pytest.approx(16 * 4 * 4 * 1_048_576 / 1e9, rel=1e-9)


SWEEP12 = [(4, 2, 1, 16), (8, 2, 2, 16), (16, 2, 2, 16), (32, 4, 4, 16), (64, 8, 8, 16), (64, 2, 2, 16),
           (8, 1, 1, 8), (16, 4, 4, 32), (32, 2, 2, 8), (8, 2, 2, 32), (16, 1, 1, 16), (32, 8, 8, 32)]
"""The design of bench/bench_perf_cpu.py."""


def _planted(truth: Calibration, points: list[tuple[int, int, int, int]], scale: list[float]) -> list[PerfObs]:
    """Receipts whose step time is the model's under ``truth``, times ``scale[i]`` (one receipt per entry of
    ``scale``, cycling over ``points``)."""
    out = []
    for i, s in enumerate(scale):
        e, k, gr, bs = points[i % len(points)]
        g = Geometry.of(layers=2, hidden=64, heads=4, ffn_hidden=256, experts=e, top_k=k, granularity=gr,
                        seq_len=64, vocab=64)
        p = Plan.of(tp=1, pp=1, ep=1, dp=1, micro_batch=bs, global_batch=bs, grouped=0, precision="fp32")
        step = float(predict(g, p, CPU, truth).step_s[0]) * s
        out.append(PerfObs(f"id{i}", f"E{e}k{k}G{gr}b{bs}", g, p, CPU, step, float(g.flops_per_token[0]), bs * 64.0))
    return out


def test_the_loop_terms_are_identified_when_the_design_varies_them() -> None:
    """Over the bench's 12 points the loop's gradient traffic (experts x (experts x weights + rows)) goes from a
    small to the largest share of the step, apart from compute (tokens x active width) and launches (experts):
    planted factors come back, and the design check passes with 12 points for 3 free factors."""
    truth = Calibration(compute=4.0, memory=2.0, launch=2.0)
    rng = np.random.default_rng(5)
    obs = _planted(truth, SWEEP12, list(np.exp(rng.normal(0, 0.01, len(SWEEP12)))))
    loop_share = []
    for o in obs:
        grouped = replace(o.plan, grouped=np.ones(1))
        est, est_grouped = predict(o.geometry, o.plan, CPU, truth), predict(o.geometry, grouped, CPU, truth)
        loop_share.append(float((est.breakdown["memory_bound"] - est_grouped.breakdown["memory_bound"])[0]
                                / est.step_s[0]))
    assert min(loop_share) < 0.15 and max(loop_share) > 0.4
    fit = fit_profile(obs)
    for f in ("compute", "memory", "launch"):
        assert getattr(fit.calibration, f) == pytest.approx(getattr(truth, f), rel=0.05), f
    assert fit.design is not None and fit.design.problems == [] and fit.design.points == 12
    assert fit.metrics["mape_held_out_pct"] < 3


def test_replicates_are_left_out_with_their_point() -> None:
    """Two runs per point; one point's runs both 30% slower than the model (a point the model misses). Held out,
    that point is predicted from the other points alone, so at the planted truth, not pulled towards its own
    replicate; a point's measured step time is the median of its runs; the replicates' spread is reported."""
    truth = Calibration(compute=3.0, memory=1.5, launch=2.0)
    points = SWEEP12[:7]
    scale = [1.0] * 14
    scale[7:14] = [1.05, 0.95, 1.0, 1.0, 1.0, 1.0, 1.0]  # second round: point 0 at +5%, point 1 at -5%
    scale[6] = scale[13] = 1.3  # point 6 (E8k1G1b8): both runs 30% slow
    obs = _planted(truth, points, scale)
    fit = fit_profile(obs)
    m = fit.metrics
    assert (m["receipts"], m["points"], m["held_out_n"], m["replicated_points"]) == (14, 7, 7, 7)
    assert m["replicate_spread_max_pct"] == pytest.approx(100 * (1.0 / 0.95 - 1), rel=1e-6)  # point 1: 1.0 vs 0.95
    exact = float(predict(obs[6].geometry, obs[6].plan, CPU, truth).step_s[0])
    for i in (6, 13):
        assert fit.rows[i]["held_out_step_s"] == pytest.approx(exact, rel=0.01)
    # point 6 held out misses its measurement by |exact - 1.3 exact| / 1.3 exact = 23.1%, one seventh of the MAPE
    # over points at least (the other points, held out in turn, are fitted with point 6 in: they miss too)
    assert abs(fit.rows[6]["held_out_step_s"] / fit.rows[6]["measured_step_s"] - 1) == pytest.approx(0.3 / 1.3,
                                                                                                     rel=0.05)
    assert m["mape_held_out_pct"] > 100 * (0.3 / 1.3) / 7 * 0.95
    assert "leave-one-point-out, n = 7 points of 14 receipts" in held_out_phrase(m)
