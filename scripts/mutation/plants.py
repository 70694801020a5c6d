"""The hand-planted bugs of issue 23: each is planted alone in a copy of the tree and its targeted tests run;
a bug is *caught* when they fail. Prints one JSON line per bug and a summary figure (bench style).

Usage: ``python scripts/mutation/plants.py [--only NAME ...] [--list]``

Two of the issue's bugs were in code that no longer exists: the hand-written Wilcoxon and bootstrap were
replaced by scipy (verdicts now rest on a t test between runs and batch-means intervals within a run). Their
counterparts in today's code are planted instead, with the same effect on the figures: a variance term of
the between-run test halved (``stats-floor-variance-halved``, for "the Wilcoxon tie correction halved"), and
the within-run interval's spread no longer divided by the square root of its count
(``stats-interval-without-sqrt-n``, for "the bootstrap's normal limit without its /n").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tree import ROOT, copy_tree  # noqa: E402


@dataclass(frozen=True)
class Plant:
    """One planted bug: replace ``old`` (which must occur exactly once in ``path``) by ``new``."""

    name: str
    issue: str
    """The bug as issue 23 lists it."""
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    """The targeted tests (pytest node ids or files) that must catch it."""


PLANTS: tuple[Plant, ...] = (
    Plant("attribution-without-noise", "run-to-run noise never added to attribution",
          "ledger/analyses/attribution.py",
          "draws = vals.point[None, :] + deviates * (noise.sd / np.sqrt(sizes))[None, :]",
          "draws = vals.point[None, :] + 0.0 * deviates",
          ("tests/ledger/analyses/test_exact_attribution.py",)),
    Plant("mlperf-target-strict", "a boundary <= turned into < in the MLPerf quality-target check",
          "ledger/ingest/mlperf.py",
          "if (value <= gate.threshold) if gate.direction == \"min\" else (value >= gate.threshold):",
          "if (value < gate.threshold) if gate.direction == \"min\" else (value >= gate.threshold):",
          ("tests/ledger/ingest/test_mlperf_exact.py",)),
    Plant("secret-name-key-number", "a secret-name rule that lets DB_SECRET_KEY=123456 through",
          "ledger/redact.py",
          "if words <= {\"key\", \"token\"} and _NUMBER.fullmatch(value.strip()):",
          "if words & {\"key\", \"token\"} and _NUMBER.fullmatch(value.strip()):",
          ("tests/ledger/record/test_redact_exact.py",)),
    Plant("secret-min-length-off-by-one", "the minimum secret length off by one (a 6-character token leaks)",
          "ledger/redact.py", "MIN_SECRET_VALUE = 6\n", "MIN_SECRET_VALUE = 7\n",
          ("tests/ledger/record/test_redact_exact.py",)),
    Plant("map-keys-not-redacted", "map keys no longer redacted",
          "ledger/redact.py", "key = text(str(k))", "key = str(k)",
          ("tests/ledger/record/test_redact_exact.py",)),
    Plant("events-attempt-always-1", "the attempt column of events always 1",
          "ledger/store/publish.py", "attempt = int(wrapper.get(\"attempt\") or 1)", "attempt = 1",
          ("tests/ledger/store/test_stored_columns.py",)),
    Plant("goodput-overlap-clamp-removed", "the goodput step-overlap clamp removed (5.5 s becomes 7.5 s)",
          "ledger/analyses/goodput.py",
          "        start[1:] = np.maximum(start[1:], end[:-1])\n",
          "        pass\n",
          ("tests/ledger/analyses/test_exact_goodput.py",)),
    Plant("lattice-third-value", "a third value of a changed factor accepted in the ablation lattice",
          "ledger/analyses/attribution.py",
          "            elif v != ref_a[f]:\n                break\n",
          "",
          ("tests/ledger/analyses/test_exact_attribution.py",)),
    Plant("mlperf-oldest-ruleset", "the oldest MLPerf ruleset picked",
          "ledger/ingest/mlperf.py", "return matches[-1], notes", "return matches[0], notes",
          ("tests/ledger/ingest/test_mlperf_exact.py",)),
    Plant("stats-floor-variance-halved", "the Wilcoxon tie correction halved (today: a variance term of the "
          "between-run test halved)",
          "ledger/analyses/stats.py", "ss += prior_df * prior_sd**2", "ss += prior_df * prior_sd**2 / 2",
          ("tests/ledger/analyses/test_exact_stats.py",)),
    Plant("stats-interval-without-sqrt-n", "the bootstrap's normal limit without its /n (today: the batch-means "
          "interval without its /sqrt(k))",
          "ledger/analyses/stats.py", "batches.std(ddof=1) / math.sqrt(k))", "batches.std(ddof=1))",
          ("tests/ledger/analyses/test_exact_stats.py",)),
    Plant("ids-list-staging", "Ledger.ids listing the staging directory",
          "ledger/store/layout.py", "if ID_RE.match(n) and (root / n).is_dir()", "if (root / n).is_dir()",
          ("tests/ledger/store/test_stored_columns.py",)),
    Plant("gate-boundary-strict", "a goodput/gate boundary: an eval exactly at the gate no longer meets it",
          "ledger/analyses/gates.py",
          "meets = (value <= gate.threshold) if gate.direction == \"min\" else (value >= gate.threshold)",
          "meets = (value < gate.threshold) if gate.direction == \"min\" else (value >= gate.threshold)",
          ("tests/ledger/analyses/test_exact_goodput.py",)),
)


def check_anchor(plant: Plant, root: Path = ROOT) -> str | None:
    """None when ``plant.old`` occurs exactly once in its file, else why not (the code moved on)."""
    text = (root / plant.path).read_text()
    count = text.count(plant.old)
    return None if count == 1 else f"{plant.path}: the text to replace occurs {count} times, not once"


def env_for(tree: Path) -> dict[str, str]:
    """The environment of a test run in ``tree``: its code first on the path, the shared fixtures found."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("STACKRECEIPT_SHARED", str(ROOT.parent / "shared"))
    env.pop("LEDGER_DIR", None)
    env.pop("LEDGER_RUN_DIR", None)
    return env


def run_tests(tree: Path, tests: tuple[str, ...]) -> tuple[int, str]:
    """pytest's exit status and the tail of its output, for ``tests`` in ``tree``."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                          cwd=tree, env=env_for(tree), capture_output=True, text=True)
    return proc.returncode, (proc.stdout + proc.stderr)[-1500:]


def plant(plant: Plant, tree: Path) -> None:
    """Plant the bug in ``tree`` (a copy)."""
    path = tree / plant.path
    text = path.read_text()
    if text.count(plant.old) != 1:
        raise SystemExit(f"{plant.name}: {check_anchor(plant, tree)}")
    path.write_text(text.replace(plant.old, plant.new))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="plant only these (names)")
    parser.add_argument("--list", action="store_true", help="list the plants and exit")
    args = parser.parse_args()
    chosen = [p for p in PLANTS if args.only is None or p.name in args.only]
    if args.list:
        for p in chosen:
            print(f"{p.name}: {p.issue} ({p.path})")
        return 0
    clean = copy_tree()
    try:
        tests = tuple(sorted({t for p in chosen for t in p.tests}))
        rc, tail = run_tests(clean, tests)
        if rc != 0:  # the targeted tests must pass on the tree as it is, or a failure proves nothing
            print(tail)
            print(json.dumps({"figure": "planted_bugs_baseline", "value": rc, "met": False}))
            return 1
        caught = 0
        for p in chosen:
            tree = copy_tree()
            try:
                plant(p, tree)
                start = time.monotonic()
                rc, tail = run_tests(tree, p.tests)
                hit = rc == 1  # 1: tests failed; anything else (an error collecting them) proves nothing
                caught += hit
                print(json.dumps({"figure": f"planted_bug:{p.name}", "value": "caught" if hit else "missed",
                                  "pytest_exit": rc, "seconds": round(time.monotonic() - start, 1),
                                  "met": hit}), flush=True)
                if not hit:
                    print(tail, file=sys.stderr)
            finally:
                shutil.rmtree(tree, ignore_errors=True)
    finally:
        shutil.rmtree(clean, ignore_errors=True)
    print(json.dumps({"figure": "planted_bugs_caught", "value": caught, "unit": "bugs", "n": len(chosen),
                      "target": len(chosen), "met": caught == len(chosen)}))
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    raise SystemExit(main())
