"""A/A calibration on real runner receipts: how often `ledger compare` calls a difference between runs that
differ only in the seed.

Records ``--pairs`` pairs of ``runners.moe --config tiny`` runs under `ledger record`, each pair two seeds of
one configuration (seeds 2k and 2k + 1: every pair its own; pair k uses a no-op override ``--set
delay_s=<tiny k-dependent value>`` so that the pairs are distinct configurations and each pair's runs are
replicates of each other), interleaved so that the machine's drift falls on all pairs alike. Then, for every
pair, `compare` judges its two runs (a comparison of one configuration is tested like any other: two replicates
that differ are a finding), one run per side, with the noise floor the ledger learned from the *other* pairs
(each a replicate group of two runs). A false alarm is a "better"/"worse" verdict on throughput, step time
(median or p90) or loss at matched tokens.

Run twice: on the machine as it is, and with a CPU-bound load process beside it (``--load``), because real
ledgers are recorded on shared machines.

Figures: ``aa_false_alarm_rate`` (target <= 0.05) per condition; the reference is the nominal alpha.

**Wrapped runs** (``aa_false_alarm_rate_wrapped``): ``--wrapped-pairs`` pairs (40 by default) of a plain Python
loop that never imports the SDK and only prints ``step N | loss X | lr Y``, sleeping between its lines for step
times drawn as :mod:`tests/calibration.py` draws them (an AR(1) series around a per-run offset, between-run SD
5%), recorded with `ledger record` (so each step is timed by when its line reached the wrapper), each pair two
seeds of one ``--variant``. A false alarm is a "better"/"worse" verdict on any row of the speed or loss families
compare gives such runs (steps/s, step time, loss at matched wall time and steps), the noise floor learned from
the other pairs, as above.

    .venv/bin/python bench/bench_aa.py [--pairs 12] [--steps 30] [--wrapped-pairs 40] [--condition as-is]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 0.05
HEADLINES = ("tokens/s per device", "step time (median)", "step time (p90)", "loss @ matched tokens")


def _burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) % 2**31


def record(ledger: Path, name: str, seed: int, pair: int, steps: int) -> str:
    cmd = [sys.executable, "-m", "ledger.cli", "record", "--name", name, "--telemetry-interval", "0", "--",
           sys.executable, "-m", "runners.moe", "--config", "tiny", "--set", f"steps={steps}", "--set",
           "eval_every=1000", "--set", f"seed={seed}", "--set", f"delay_s={pair * 1e-6:.6f}", "--set", "threads=1"]
    env = dict(os.environ, LEDGER_DIR=str(ledger), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"{name} failed: {proc.stderr[-2000:]}")
    return name


def run(pairs: int, steps: int, load: bool) -> dict[str, object]:
    from ledger.analyses.compare import CompareOptions, Ref, compare
    from ledger.store import index
    from ledger.store.receipts import Ledger

    tmp = Path(tempfile.mkdtemp(prefix="bench-aa-"))
    ledger = tmp / "receipts"
    burner = None
    if load:
        burner = multiprocessing.Process(target=_burn, args=(time.time() + 3600,), daemon=True)
        burner.start()
    try:
        start = time.time()
        for seed in (0, 1):  # interleaved: every pair's first run, then every pair's second run
            for k in range(pairs):  # each pair its own seeds: on a CPU the loss and routing are functions of the
                # seed, and pairs that all used seeds 0 and 1 would measure one seed difference, not twelve
                record(ledger, f"p{k}-s{seed}", 2 * k + seed, k + 1, steps)
        recorded = time.time() - start
    finally:
        if burner is not None:
            burner.terminate()
    alarms = 0
    per_metric = dict.fromkeys(HEADLINES, 0)
    judged = 0
    with index.reader(Ledger(ledger)) as con:
        for k in range(pairs):
            c = compare(con, Ref(f"p{k}-s0"), Ref(f"p{k}-s1"),
                        CompareOptions(plugins=False, attribution=False))
            rows = {r.name: r for r in c.metrics if r.name in HEADLINES}
            judged += all(r.test is not None for r in rows.values())
            hit = {n for n, r in rows.items() if r.verdict in ("better", "worse")}
            alarms += bool(hit)
            for n in hit:
                per_metric[n] += 1
    return {"pairs": pairs, "false_alarm_pairs": alarms, "judged_pairs": judged, "per_metric": per_metric,
            "record_s": round(recorded, 1), "ledger": str(ledger)}


WRAPPED = """
import argparse, time
import numpy as np
parser = argparse.ArgumentParser()
parser.add_argument("--variant", type=int)
parser.add_argument("--seed", type=int)
parser.add_argument("--steps", type=int)
args = parser.parse_args()
seed, steps = args.seed, args.steps
rng = np.random.default_rng([args.variant, seed])
phi = rng.uniform(0.6, 0.8)
z = np.empty(steps)
z[0] = rng.standard_normal()
for i in range(1, steps):
    z[i] = phi * z[i - 1] + np.sqrt(1 - phi ** 2) * rng.standard_normal()
step_time = 0.02 * np.exp(0.05 * rng.standard_normal()) * np.exp(0.03 * z)
offset = 0.01 * rng.standard_normal()
for i in range(steps):
    time.sleep(step_time[i])
    print(f"step {i + 1} | loss {3 + 2 / np.sqrt(i + 1) + offset + 0.02 * rng.standard_normal():.4f} | lr 0.001",
          flush=True)
"""
WRAPPED_ROWS = ("throughput", "step time", "loss")


def run_wrapped(pairs: int, steps: int, load: bool) -> dict[str, object]:
    """Record ``pairs`` pairs of the wrapped loop (:data:`WRAPPED`) and judge each pair as two configurations."""
    from ledger.analyses.compare import CompareOptions, Ref, compare
    from ledger.store import index
    from ledger.store.receipts import Ledger

    tmp = Path(tempfile.mkdtemp(prefix="bench-aa-wrapped-"))
    ledger = tmp / "receipts"
    script = tmp / "train.py"
    script.write_text(WRAPPED)
    env = dict(os.environ, LEDGER_DIR=str(ledger), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    burner = None
    if load:
        burner = multiprocessing.Process(target=_burn, args=(time.time() + 3600,), daemon=True)
        burner.start()
    try:
        start = time.time()
        for seed in (0, 1):
            for k in range(pairs):
                cmd = [sys.executable, "-m", "ledger.cli", "record", "--name", f"w{k}-s{seed}",
                       "--telemetry-interval", "0", "--", sys.executable, str(script), "--variant", str(k + 1),
                       "--seed", str(seed), "--steps", str(steps)]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp)
                if proc.returncode:
                    raise SystemExit(f"w{k}-s{seed} failed: {proc.stderr[-2000:]}")
        recorded = time.time() - start
    finally:
        if burner is not None:
            burner.terminate()
    alarms = judged = 0
    per_metric: dict[str, int] = {}
    with index.reader(Ledger(ledger)) as con:
        for k in range(pairs):
            c = compare(con, Ref(f"w{k}-s0"), Ref(f"w{k}-s1"),
                        CompareOptions(plugins=False, attribution=False))
            rows = {r.name: r for r in c.metrics if r.family in WRAPPED_ROWS and r.verdict != "unavailable"}
            judged += bool(rows) and all(r.test is not None for r in rows.values())
            hit = {n for n, r in rows.items() if r.verdict in ("better", "worse")}
            alarms += bool(hit)
            for n in hit:
                per_metric[n] = per_metric.get(n, 0) + 1
    return {"pairs": pairs, "false_alarm_pairs": alarms, "judged_pairs": judged, "per_metric": per_metric,
            "record_s": round(recorded, 1), "ledger": str(ledger)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--condition", choices=("both", "as-is", "loaded"), default="both",
                        help="which conditions to measure (default both)")
    parser.add_argument("--wrapped-pairs", type=int, default=40,
                        help="pairs of wrapped runs (a printing loop without the SDK); 0: none")
    args = parser.parse_args()
    conditions = [(c, load) for c, load in (("as is", False), ("with a CPU load beside it", True))
                  if args.condition == "both" or (args.condition == "loaded") == load]
    for condition, load in conditions:
        got = run(args.pairs, args.steps, load)
        rate = got["false_alarm_pairs"] / got["pairs"]  # type: ignore[operator]
        # a pair that was not judged between runs (e.g. the stack changed while recording, so the runs are
        # not replicates and no floor exists) is no evidence of calibration: the figure is only met when
        # every pair was judged
        assessed = got["judged_pairs"] == got["pairs"]
        print(f"{condition}: {got['false_alarm_pairs']} of {got['pairs']} seed-only pairs alarmed on a headline "
              f"metric ({got['judged_pairs']} judged between runs); per metric {got['per_metric']}; "
              f"recording took {got['record_s']} s")
        figure = "aa_false_alarm_rate" + ("_loaded" if load else "")
        print(json.dumps({"figure": figure, "value": round(rate, 4), "unit": "pairs", "reference": 0.05,
                          "ratio": round(rate / 0.05, 3), "target": TARGET, "met": assessed and rate <= TARGET,
                          "n": got["pairs"], "judged": got["judged_pairs"]}))
        if args.wrapped_pairs:
            got = run_wrapped(args.wrapped_pairs, args.steps, load)
            rate = got["false_alarm_pairs"] / got["pairs"]  # type: ignore[operator]
            assessed = got["judged_pairs"] == got["pairs"]
            print(f"{condition}, wrapped runs: {got['false_alarm_pairs']} of {got['pairs']} seed-only pairs of a "
                  f"printing loop alarmed on a speed or loss row ({got['judged_pairs']} judged between runs); per "
                  f"metric {got['per_metric']}; recording took {got['record_s']} s")
            figure = "aa_false_alarm_rate_wrapped" + ("_loaded" if load else "")
            print(json.dumps({"figure": figure, "value": round(rate, 4), "unit": "pairs", "reference": 0.05,
                              "ratio": round(rate / 0.05, 3), "target": TARGET, "met": assessed and rate <= TARGET,
                              "n": got["pairs"], "judged": got["judged_pairs"]}))


if __name__ == "__main__":
    main()
