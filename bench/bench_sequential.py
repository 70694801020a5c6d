"""Calibration of `ledger ab --until-verdict` under optional stopping, at scale (the tests run 100-200 sequences;
this runs ``--sequences`` of each).

Every sequence goes through :func:`ledger.replay.until_verdict.until_verdict`, the function the command calls,
fed simulated runs (``tests/calibration.py``: AR(1) step times around a per-run offset with a between-run SD of
5%) instead of recorded ones, with the command's default cap: the runs per side that give a fixed design 80%
power for the 5% minimum change at that noise (19 rounds).

Figures:
- ``sequential_aa_false_alarm_rate``: A/A sequences called different (speed or loss) at any round; target <= 0.05;
- ``sequential_power_15pct``: a 15% speed-up found within the cap; target >= 0.80;
- ``sequential_mean_rounds_15pct`` and ``_30pct``: rounds to a verdict (no target; the fixed design's 19 is the
  reference);
- ``sequential_issue_case``: the issue's 18% slowdown on a noisy machine (0.83x [0.68, 0.99] at 7 vs 7 implies a
  16% between-run SD): how often it is called worse within the cap (50 rounds there: the fixed design would need
  more than 200), and in how many rounds.

    .venv/bin/python bench/bench_sequential.py [--sequences 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
sys.path.append(str(ROOT / "tests"))

import numpy as np  # noqa: E402


def sequences(n: int, speed: float, seed: int, between_sd: float = 0.05) -> list[Any]:
    import calibration as cal

    from ledger.replay.until_verdict import Options, until_verdict

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        def record_round(k: int) -> tuple[Any, Any]:
            return (cal.run_data(cal.series(rng, "a", k, steps=60, between_sd=between_sd)),
                    cal.run_data(cal.series(rng, "b", k, speed, steps=60, between_sd=between_sd)))

        out.append(until_verdict(record_round, Options(noise_sd=between_sd)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=1000)
    args = parser.parse_args()
    n = args.sequences
    start = time.time()
    aa = sequences(n, 1.0, 1)
    alarms = sum(any(h.verdict in ("better", "worse") for h in r.headlines) for r in aa) / n
    verdicts = {v: sum(r.verdict == v for r in aa) for v in sorted({r.verdict for r in aa})}
    print(f"A/A: {verdicts}; cap {aa[0].cap}; mean rounds {np.mean([r.rounds for r in aa]):.2f}")
    print(json.dumps({"figure": "sequential_aa_false_alarm_rate", "value": round(alarms, 4), "unit": "sequences",
                      "reference": 0.05, "ratio": round(alarms / 0.05, 3), "target": 0.05, "met": alarms <= 0.05,
                      "n": n, "note": f"cap {aa[0].cap} rounds ({aa[0].cap_from})"}))
    rounds = {}
    for pct, speed in ((15, 1.15), (30, 1.30)):
        got = sequences(n, speed, 2 + pct)
        found = sum(r.verdict == "better" for r in got) / n
        rounds[pct] = float(np.mean([r.rounds for r in got]))
        if pct == 15:
            print(json.dumps({"figure": "sequential_power_15pct", "value": round(found, 4), "unit": "sequences",
                              "reference": 0.80, "ratio": round(found / 0.80, 3), "target": 0.80,
                              "met": found >= 0.80, "n": n}))
        print(json.dumps({"figure": f"sequential_mean_rounds_{pct}pct", "value": round(rounds[pct], 2),
                          "unit": "rounds", "reference": got[0].fixed_rounds,
                          "ratio": round(rounds[pct] / (got[0].fixed_rounds or 1), 3), "target": None, "met": None,
                          "n": n, "note": f"found {found:.3f}; reference: the fixed design's rounds (80% power for "
                                          "the 5% minimum change)"}))
    issue = sequences(max(50, n // 10), 1 / 1.18, 99, between_sd=0.16)
    worse = sum(r.verdict == "worse" for r in issue) / len(issue)
    decided = [r.rounds for r in issue if r.verdict == "worse"]
    print(json.dumps({"figure": "sequential_issue_case", "value": round(worse, 4), "unit": "sequences",
                      "reference": None, "ratio": None, "target": None, "met": None, "n": len(issue),
                      "note": f"18% slower at a 16% between-run SD: called worse within the cap of {issue[0].cap} "
                              f"rounds, in {np.mean(decided) if decided else float('nan'):.1f} rounds on average"}))
    print(f"took {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
