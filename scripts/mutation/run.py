"""Mutation testing of the modules whose bugs mislead or lose data, with mutmut (the ``mutation`` extra).

Each module is mutated in its own throw-away copy of the tree and its mutants run against a small set of
targeted tests (mutmut runs, for each mutant, only the tests that reach the mutated function). Prints one
bench-style JSON line per module::

    {"figure": "mutation_kill_rate:stats", "value": 0.91, "target": 0.85, "met": true, "killed": ...,
     "mutants": ..., "sampled": "1 in 4", ...}

A mutant is *killed* when a test fails (or times out) with it; one that no targeted test reaches counts as
surviving. ``--sample K`` runs every mutant whose mutmut number ends in one of K chosen digits (K of 10, a
fixed choice, so runs are comparable); the figure says so. Survivors are listed with ``--survivors``, and
``docs/mutation.md`` holds the review of those that remain (equivalent mutants, with the reason).

Usage: ``python scripts/mutation/run.py [--only NAME ...] [--sample K] [--max-children N] [--survivors]``
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

TARGET = 0.85


@dataclass(frozen=True)
class Module:
    """A module (or a few) and the targeted tests its mutants run against."""

    name: str
    paths: tuple[str, ...]
    tests: tuple[str, ...]
    sample: int = 10
    """Default share of mutants run, in tenths (10: all)."""


A = "tests/ledger/analyses/"
MODULES: tuple[Module, ...] = (
    Module("stats", ("ledger/analyses/stats.py",), (A + "test_stats.py", A + "test_exact_stats.py")),
    Module("verdicts", ("ledger/analyses/metrics.py", "ledger/analyses/builtin_metrics.py",
                        "ledger/analyses/evidence.py"),
           (A + "test_evidence.py", A + "test_compare_units.py", A + "test_metrics_mutants.py",
            A + "test_evidence_mutants.py"), 3),
    Module("attribution", ("ledger/analyses/attribution.py",),
           (A + "test_attribution.py", A + "test_exact_attribution.py", A + "test_attribution_mutants.py"), 5),
    Module("goodput", ("ledger/analyses/goodput.py",),
           (A + "test_goodput.py", A + "test_exact_goodput.py", A + "test_goodput_mutants.py"), 3),
    Module("gates", ("ledger/analyses/gates.py", "ledger/analyses/km.py"),
           (A + "test_gates.py", A + "test_km.py", A + "test_exact_goodput.py", A + "test_gates_mutants.py"), 3),
    # in-process tests only: a `ledger` CLI started by a test would import mutmut's trampolines outside its
    # runner and fail (test_secrets.py and test_integrity.py start the CLI)
    Module("redaction", ("ledger/redact.py",),
           ("tests/ledger/record/test_redact.py", "tests/ledger/record/test_redact_exact.py",
            "tests/ledger/record/test_redact_mutants.py", "tests/ledger/record/test_redact_stream.py"), 5),
    Module("publish", ("ledger/store/publish.py", "ledger/store/receipts.py"),
           ("tests/ledger/store/test_stored_columns.py", "tests/ledger/store/test_publish_mutants.py",
            "tests/ledger/store/test_receipts_mutants.py"), 5),
    Module("mlperf", ("ledger/ingest/mlperf.py",),
           ("tests/ledger/ingest/test_mlperf.py", "tests/ledger/ingest/test_mlperf_exact.py",
            "tests/ledger/ingest/test_mlperf_mutants.py"), 3),
    Module("megatron", ("ledger/ingest/megatron.py",),
           ("tests/ledger/ingest/test_megatron_parser.py", "tests/ledger/ingest/test_megatron_mutants.py"), 3),
    Module("template", ("ledger/ingest/formats/template.py",), ("tests/ledger/ingest/test_formats.py",), 5),
    Module("tee", ("ledger/record/tee.py",), ("tests/ledger/record/test_tee.py",), 5),
)

DIGITS = "0516273849"
"""The last digits a sample of K tenths takes: the first K of these (spread over the numbers)."""


def config(module: Module) -> str:
    """The ``[tool.mutmut]`` table for one module's run."""
    def toml_list(items: tuple[str, ...] | list[str]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["ledger/"]',
        f"only_mutate = {toml_list(module.paths)}",
        'also_copy = ["schemas/", "tests/", "runners/", "pyproject.toml"]',
        f"pytest_add_cli_args_test_selection = {toml_list(module.tests)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]',
        "",
    ])


def pattern(sample: int) -> list[str]:
    """mutmut name patterns selecting ``sample`` tenths of the mutants (none: all of them)."""
    return [] if sample >= 10 else [f"*__mutmut_*[{DIGITS[:sample]}]"]


def run_module(module: Module, sample: int, max_children: int, keep: bool) -> dict[str, object]:
    """Run one module's mutants; the figure as a dict."""
    from mutmut.stats import status_by_exit_code

    tree = copy_tree()
    start = time.monotonic()
    try:
        with (tree / "pyproject.toml").open("a") as f:
            f.write(config(module))
        subprocess.run(["git", "init", "-q", str(tree)], check=True)  # mutmut reads git for change detection
        env = dict(os.environ)
        env.setdefault("STACKRECEIPT_SHARED", str(ROOT.parent / "shared"))
        env.pop("LEDGER_DIR", None)
        mutmut = Path(sys.executable).with_name("mutmut")
        proc = subprocess.run([str(mutmut), "run", "--max-children", str(max_children), *pattern(sample)],
                              cwd=tree, env=env, capture_output=True, text=True)
        statuses: dict[str, str] = {}
        for path in module.paths:
            meta = tree / "mutants" / f"{path}.meta"
            if meta.exists():
                for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
                    statuses[key] = status_by_exit_code[code]
        chosen = {k: s for k, s in statuses.items() if s not in ("not checked", "skipped")}
        killed = sum(s in ("killed", "timeout", "caught by type check") for s in chosen.values())
        survivors = sorted(k for k, s in chosen.items() if s in ("survived", "no tests", "suspicious"))
        n = len(chosen)
        rate = killed / n if n else 0.0
        out: dict[str, object] = {
            "figure": f"mutation_kill_rate:{module.name}", "value": round(rate, 4), "unit": "mutants killed",
            "target": TARGET, "met": bool(n) and rate >= TARGET, "killed": killed, "mutants": n,
            "no_tests": sum(s == "no tests" for s in chosen.values()),
            "sampled": "all" if sample >= 10 else f"{sample} in 10 (mutant numbers ending in {DIGITS[:sample]})",
            "modules": list(module.paths), "seconds": round(time.monotonic() - start), "survivors": survivors,
        }
        if n == 0:
            out["error"] = (proc.stdout + proc.stderr)[-2000:]
        if keep:
            out["tree"] = str(tree)
        return out
    finally:
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ", ".join(m.name for m in MODULES)
    parser.add_argument("--only", nargs="*", default=None, help=f"modules by name: {names}")
    parser.add_argument("--sample", type=int, default=None, help="run K tenths of each module's mutants (1-10)")
    parser.add_argument("--max-children", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--survivors", action="store_true", help="list the surviving mutants of each module")
    parser.add_argument("--keep", action="store_true", help="keep each module's tree (for `mutmut show NAME` there)")
    args = parser.parse_args()
    try:
        import mutmut  # noqa: F401
    except ImportError:
        print("mutation testing needs the mutation extra: pip install -e '.[mutation]'", file=sys.stderr)
        return 2
    chosen = [m for m in MODULES if args.only is None or m.name in args.only]
    if args.only and len(chosen) != len(args.only):
        print(f"unknown module; known: {', '.join(m.name for m in MODULES)}", file=sys.stderr)
        return 2
    all_met = True
    for module in chosen:
        sample = module.sample if args.sample is None else max(1, min(10, args.sample))
        figure = run_module(module, sample, args.max_children, args.keep)
        survivors = figure.pop("survivors")
        all_met &= bool(figure["met"])
        print(json.dumps(figure), flush=True)
        if args.survivors:
            for name in survivors:  # type: ignore[attr-defined]
                print(f"  survived: {name}", flush=True)
    return 0 if all_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
