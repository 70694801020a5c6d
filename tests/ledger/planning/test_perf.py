"""The performance model, its calibration, hardware profiles and rank correlations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ledger.planning import hardware
from ledger.planning.calibrate import fit_profile
from ledger.planning.errors import TooFewReceipts, UnknownHardware
from ledger.planning.geometry import Geometry
from ledger.planning.hardware import BUILTIN
from ledger.planning.observations import PerfObs
from ledger.planning.perf import Calibration, Plan, predict
from ledger.planning.ranks import kendall, ranks, spearman

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
    gpu = {"stack": {"hardware": {"gpu_model": "NVIDIA H200"}}, "workload": {"device": "cuda"}}
    assert hardware.for_receipt(gpu) is BUILTIN["H200"]
    assert hardware.for_receipt({"stack": {"hardware": {}}, "workload": {"device": "cpu"}}) is CPU
    assert hardware.for_receipt({"stack": {"hardware": {"gpu_model": "NVIDIA A100-SXM4-80GB"}},
                                 "workload": {"device": "cuda"}}) is None


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
