"""Real (small) training on CPU: determinism, learning, EP=2 == EP=1, crash + resume, what reaches the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runners.moe.configs import get_config
from runners.moe.train import train
from schemas.receipt import Workload


def test_same_config_and_seed_give_bit_identical_curves(kit: Any) -> None:
    micro = kit.MICRO
    cfg = get_config("tiny", [*micro, "steps=20", "eval_every=100"])
    a, b = train(cfg), train(cfg)
    assert len(a.losses) == 20
    assert a.losses == b.losses  # exact, not approximate
    assert a.evals == b.evals
    c = train(get_config("tiny", [*micro, "steps=20", "eval_every=100", "seed=1"]))
    assert c.losses != a.losses
    assert a.losses[-1][1] < a.losses[0][1] - 0.3  # it learns


def test_ep2_under_torchrun_equals_ep1(kit: Any, tmp_path: Path) -> None:
    read_table = kit.read
    overrides = [*kit.MICRO_MODEL, "steps=6", "eval_every=6", "threads=1"]
    ep2 = kit.run(
        ["--config", "tiny", *kit.set_args([*overrides, "parallel.ep=2"])], run_dir=tmp_path / "ep2", procs=2
    )
    assert ep2.returncode == 0, ep2.stderr[-3000:]
    ep1 = train(get_config("tiny", overrides))
    steps = read_table(tmp_path / "ep2", "steps").to_pylist()
    assert [r["step"] for r in steps] == list(range(1, 7))
    for row, (step, loss) in zip(steps, ep1.losses, strict=True):
        assert row["step"] == step
        assert row["loss"] == pytest.approx(loss, rel=1e-5, abs=1e-6)
    assert steps[-1]["tokens"] == 6 * 8 * 32  # cumulative over both ranks
    # experts 0,1 on rank 0 and 2,3 on rank 1; rank 1 logs timing (its own) but no steps
    workload = Workload.model_validate_json((tmp_path / "ep2" / "rank-00000" / "workload.json").read_text())
    assert workload.parallelism.expert_placement == (0, 0, 1, 1)
    assert (workload.parallelism.ep, workload.parallelism.world_size, workload.kernels.dispatcher) == (
        2,
        2,
        "alltoall",
    )
    assert read_table(tmp_path / "ep2", "timing", rank=1).num_rows > 0
    assert not (tmp_path / "ep2" / "rank-00001" / "steps.arrows").exists()
    phases = set(read_table(tmp_path / "ep2", "timing")["phase"].to_pylist())
    assert {"all_to_all", "dispatch", "expert", "combine", "backward", "optimizer"} <= phases


# --------------------------------------------------------------- one uninterrupted run, then crash + resume
@pytest.fixture(scope="module")
def run_args(kit: Any) -> list[str]:
    return ["--config", "tiny", *kit.set_args([*kit.MICRO, "moe.capacity_factor=1.0", "checkpoint_every=4"])]


@pytest.fixture(scope="module")
def full_run(kit: Any, run_args: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 steps with capacity 1.0 (so tokens get dropped), checkpoints every 4, under a ledger run dir."""
    root = tmp_path_factory.mktemp("full")
    proc = kit.run([*run_args, "--checkpoint-dir", str(root / "ckpt")], run_dir=root / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_per_source_evals_are_written_rare_included(kit: Any, full_run: Path) -> None:
    read_table = kit.read
    evals = read_table(full_run / "run", "evals").to_pylist()
    at_end = {r["source"]: r["value"] for r in evals if r["step"] == 12}
    assert set(at_end) == {None, "markov", "copy", "reverse", "arith"}
    assert all(r["metric"] == "loss" and r["split"] == "val" for r in evals)
    assert sorted({r["step"] for r in evals}) == [6, 12]
    workload = Workload.model_validate_json((full_run / "run" / "rank-00000" / "workload.json").read_text())
    assert workload.task.sources == ("markov", "copy", "reverse", "arith")
    assert len(workload.task.dataset_fingerprint or "") == 64
    assert {g.source for g in workload.task.quality_gates} == {None, "arith"}
    assert workload.data.generator["rare_source"] == "arith"
    assert workload.launch.runner == "runners.moe" and workload.launch.config == "tiny"
    assert (
        workload.router.capacity_factor == 1.0 and workload.model.active_params < workload.model.total_params
    )


def test_routing_rows_add_up(kit: Any, full_run: Path) -> None:
    read_table = kit.read
    routing = read_table(full_run / "run", "routing").to_pylist()
    T, K, E = 8 * 32, 2, 4
    assert sorted((r["step"], r["layer"]) for r in routing) == [(s, lay) for s in range(1, 13) for lay in (0, 1)]
    total_dropped = 0
    for r in routing:  # a row per (step, layer), counts by expert
        assert len(r["tokens"]) == len(r["dropped"]) == E
        assert sum(r["tokens"]) == T * K
        C = r["capacity"]
        assert C == -(-T * K // E)  # ceil(1.0 * T * K / E)
        for n, d in zip(r["tokens"], r["dropped"], strict=True):
            kept = n - d
            assert 0 <= kept <= C and kept == min(n, C)
        assert 0 <= r["entropy"] <= 1
        total_dropped += sum(r["dropped"])
    assert total_dropped > 0


def test_steps_events_and_timing_are_recorded(kit: Any, full_run: Path) -> None:
    read_table = kit.read
    steps = read_table(full_run / "run", "steps").to_pylist()
    assert [r["step"] for r in steps] == list(range(1, 13))
    last = steps[-1]
    assert last["tokens"] == 12 * 8 * 32
    for key in (
        "loss",
        "aux_loss",
        "z_loss",
        "lr",
        "grad_norm",
        "step_time_s",
        "tokens_per_s",
        "flops_per_s",
    ):
        assert last[key] is not None and last[key] > 0, key
    assert dict(last["extra"])["cpu_time_s"] > 0  # the step's own CPU time, beside its wall time
    kinds = read_table(full_run / "run", "events")["kind"].to_pylist()
    assert kinds[0] == "init_start" and "init_end" in kinds
    assert kinds.count("checkpoint_save_end") == 3 and kinds.count("eval_end") == 2
    timing = read_table(full_run / "run", "timing")
    assert {"attention", "router", "dispatch", "expert", "combine", "backward", "optimizer", "other"} <= set(
        timing["phase"].to_pylist()
    )
    assert json.loads((full_run / "run" / "rank-00000" / "runtime.json").read_text())["torch"]


def test_crash_then_resume_continues_the_same_curve(
    kit: Any, run_args: list[str], full_run: Path, tmp_path: Path
) -> None:
    runner, read, RUN_ARGS = kit.run, kit.read, run_args
    ckpt = str(tmp_path / "ckpt")
    crashed = runner([*RUN_ARGS, "--checkpoint-dir", ckpt, "--fail-at-step", "7"], run_dir=tmp_path / "a1")
    assert crashed.returncode != 0
    assert "deliberate failure at step 7" in crashed.stderr
    events = read(tmp_path / "a1", "events").to_pylist()
    assert events[-1]["kind"] == "failure" and events[-1]["step"] == 7
    assert [r["step"] for r in read(tmp_path / "a1", "steps").to_pylist()] == list(range(1, 7))

    resumed = runner([*RUN_ARGS, "--checkpoint-dir", ckpt, "--resume"], run_dir=tmp_path / "a2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    kinds = read(tmp_path / "a2", "events")["kind"].to_pylist()
    assert "checkpoint_restore_start" in kinds and "checkpoint_restore_end" in kinds
    resumed_steps = read(tmp_path / "a2", "steps").to_pylist()
    assert [r["step"] for r in resumed_steps] == list(range(5, 13))  # from the step-4 checkpoint
    full = {r["step"]: r["loss"] for r in read(full_run / "run", "steps").to_pylist()}
    for r in resumed_steps:
        assert r["loss"] == full[r["step"]], r["step"]  # bit-identical continuation
    assert r["tokens"] == 12 * 8 * 32


@pytest.mark.parametrize(
    "variant",
    [
        ["precision=bf16"],
        ["moe.score_function=sigmoid", "moe.expert_bias=true", "moe.aux_loss_coeff=0"],
        ["moe.shared_experts=1", "moe.layer_freq=2", "model.layers=3"],
        ["moe.capacity_factor=1.25", "moe.pad_to_capacity=true", "moe.drop_policy=position"],
        ["moe.num_experts=1", "moe.top_k=1"],
    ],
    ids=["bf16", "sigmoid-auxfree", "shared-freq2", "padded", "dense"],
)
def test_variants_train(kit: Any, variant: list[str]) -> None:
    result = train(get_config("tiny", [*kit.MICRO_MODEL, "steps=4", "eval_every=4", *variant]))
    losses = [loss for _, loss in result.losses]
    assert len(losses) == 4 and all(3.0 < v < 4.5 for v in losses)
    assert set(result.evals) == {"markov", "copy", "reverse", "arith", "all"}


def test_delay_and_timing_switch(kit: Any) -> None:
    slow = train(get_config("tiny", [*kit.MICRO_MODEL, "steps=3", "eval_every=100", "delay_s=0.05"]))
    assert slow.step_time_s >= 3 * 0.05
    untimed = train(get_config("tiny", [*kit.MICRO_MODEL, "steps=3", "eval_every=100", "timing=off"]))
    assert untimed.timing == {} and len(untimed.losses) == 3


def test_delay_rank_plants_one_slow_rank_and_is_validated(kit: Any) -> None:
    from runners.moe.configs import ConfigError

    # this process is rank 0: delay_rank=0 sleeps in it, delay_rank=1 does not (the 2-node job test shows the
    # other side: only rank 3 of 4 is slow)
    slow = train(get_config("tiny", [*kit.MICRO_MODEL, "steps=2", "eval_every=100", "delay_s=0.05", "delay_rank=0"]))
    assert slow.step_time_s >= 2 * 0.05
    with pytest.raises(ConfigError, match="delay_rank"):
        get_config("tiny", ["delay_rank=-2"])
