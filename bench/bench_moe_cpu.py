"""CPU benchmark of the reference MoE runner: MoE vs dense tokens/s at equal active parameters, and the
all-to-all share of step time with EP=2 (torchrun, 2 processes, gloo).

    .venv/bin/python bench/bench_moe_cpu.py [--steps 12] [--rounds 3] [--skip-ep]

Both models run in this one process, interleaved over a few rounds (the median step of each after warm-up),
so that machine noise hits both alike. The dense model is the MoE config's `dense_moe` twin: one expert
as wide as top_k experts, through the same code path. Prints where the time goes (the runner's phase
timers), then one JSON line per figure {"figure", "value", "unit", "reference", "ratio", "target", "met", "note"};
the last is the headline (MoE/dense tokens/s, target >= 0.6).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runners.moe.configs import DataConfig, ModelConfig, MoEConfig, RunConfig, dense_moe  # noqa: E402

TARGET_RATIO = 0.6
TARGET_A2A_SHARE = 0.5


def bench_config(steps: int, threads: int = 1) -> RunConfig:
    """Wide enough that the matmuls, not the Python around them, decide the speed."""
    return RunConfig(
        model=ModelConfig(layers=2, hidden=256, heads=4, ffn_hidden=1024, seq_len=64),
        moe=MoEConfig(num_experts=8, top_k=2, granularity=4.0),
        data=DataConfig(train_sequences=512, val_sequences=4),
        steps=steps,
        batch_size=16,
        eval_every=10_000,
        warmup_steps=2,
        seed=0,
        threads=threads,
    )


def shares(timing: dict[str, float], total: float) -> str:
    rest = max(0.0, total - sum(timing.values()))
    parts = sorted([*timing.items(), ("other", rest)], key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v / total:.0%}" for k, v in parts if v / total >= 0.005)


def moe_vs_dense(steps: int, rounds: int, threads: int) -> dict[str, object]:
    from runners.moe.train import train

    moe_cfg = bench_config(steps, threads)
    dense_cfg = replace(moe_cfg, moe=dense_moe(moe_cfg.moe))
    tps: dict[str, list[float]] = {"moe": [], "dense": []}
    timing: dict[str, dict[str, float]] = {"moe": {}, "dense": {}}
    total: dict[str, float] = {"moe": 0.0, "dense": 0.0}
    for _ in range(rounds):
        for name, cfg in (("moe", moe_cfg), ("dense", dense_cfg)):
            with contextlib.redirect_stdout(io.StringIO()):  # the runner's eval lines
                result = train(cfg)
            tps[name] += result.tokens_per_s[2:]  # drop the first steps (allocator and cache warm-up)
            total[name] += result.step_time_s
            for k, v in result.timing.items():
                timing[name][k] = timing[name].get(k, 0.0) + v
    med = {k: statistics.median(v) for k, v in tps.items()}
    from runners.moe.model import param_counts

    for name, cfg in (("moe", moe_cfg), ("dense", dense_cfg)):
        counts = param_counts(cfg, 64)
        print(
            f"{name:5s}: {med[name]:9.0f} tokens/s  (active {counts.active / 1e6:.2f}M"
            f" of {counts.total / 1e6:.2f}M "
            f"params)  time: {shares(timing[name], total[name])}",
            flush=True,
        )
    ratio = med["moe"] / med["dense"]
    return {
        "figure": "moe_vs_dense_tokens_per_s_cpu",
        "value": round(med["moe"], 1),
        "unit": "tokens/s",
        "reference": round(med["dense"], 1),
        "ratio": round(ratio, 3),
        "target": TARGET_RATIO,
        "met": ratio >= TARGET_RATIO,
        "note": f"ratio = MoE / dense tokens/s at equal active parameters ({moe_cfg.moe.num_experts} experts, "
        f"top-{moe_cfg.moe.top_k} vs one expert as wide as {moe_cfg.moe.top_k}), median step, same process; "
        "the target is a floor",
    }


def ep2_all_to_all(steps: int) -> dict[str, object] | None:
    import pyarrow.ipc as ipc

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LEDGER_RUN_DIR=tmp, PYTHONPATH=str(REPO))
        sets = [
            f"steps={steps}",
            "parallel.ep=2",
            "threads=1",
            "eval_every=10000",
            "model.hidden=256",
            "model.heads=4",
            "model.ffn_hidden=1024",
            "model.seq_len=64",
            "moe.granularity=4",
            "data.train_sequences=512",
            "data.val_sequences=4",
            "warmup_steps=2",
        ]
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "runners.moe",
            "--config",
            "tiny",
            *[a for s in sets for a in ("--set", s)],
        ]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"EP=2 run failed (exit {proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
            return None
        per_rank = []
        for rank in (0, 1):
            with ipc.open_stream(Path(tmp) / f"rank-{rank:05d}" / "timing.arrows") as r:
                rows = [row for row in r.read_all().to_pylist() if row["step"] > 2]
            phases: dict[str, float] = {}
            for row in rows:
                phases[row["phase"]] = phases.get(row["phase"], 0.0) + row["seconds"]
            per_rank.append(phases)
        with ipc.open_stream(Path(tmp) / "rank-00000" / "steps.arrows") as r:
            tps = statistics.median(row["tokens_per_s"] for row in r.read_all().to_pylist() if row["step"] > 2)
    step_total = statistics.mean(sum(p.values()) for p in per_rank)
    a2a = statistics.mean(p.get("all_to_all", 0.0) for p in per_rank)
    share = a2a / step_total
    n = steps - 2
    for rank, p in enumerate(per_rank):
        total = sum(p.values())
        print(
            f"EP=2 rank {rank}: time: {shares({k: v for k, v in p.items() if k != 'other'}, total)}",
            flush=True,
        )
    print(
        f"EP=2: {tps:.0f} tokens/s over both ranks; all-to-all {a2a / n * 1e3:.2f} ms of "
        f"{step_total / n * 1e3:.2f} ms per step ({share:.0%})",
        flush=True,
    )
    return {
        "figure": "ep2_all_to_all_share_cpu",
        "value": round(a2a / n, 6),
        "unit": "s/step",
        "reference": round(step_total / n, 6),
        "ratio": round(share, 3),
        "target": TARGET_A2A_SHARE,
        "met": share <= TARGET_A2A_SHARE,
        "note": "ratio = all-to-all (counts and rows, forward and backward) / step time, mean of the 2 EP ranks "
        "(torchrun, gloo); the target is a ceiling",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the MoE/dense runs (1: robust to load)")
    p.add_argument("--skip-ep", action="store_true", help="skip the EP=2 torchrun run")
    args = p.parse_args()
    figures = []
    if not args.skip_ep:
        ep = ep2_all_to_all(args.steps)
        if ep is not None:
            figures.append(ep)
    figures.append(moe_vs_dense(args.steps, args.rounds, args.threads))
    for f in figures:
        print(json.dumps(f))


if __name__ == "__main__":
    main()
