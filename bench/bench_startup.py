"""Start-up of the CLI: `ledger --help` against `python -c "import click"`, and `ledger ls` against the
imports it cannot avoid (`python -c "import duckdb, pyarrow"`: the index is DuckDB, its rows come as Arrow).

Each command runs N times, interleaved (the order rotates every round), in one run; medians of wall time.
`ledger ls` lists a small real ledger: three receipts published by `ledger ingest golden` from a Megatron CI
golden-values file written here, so its index is built before the timing starts.

Targets: `ledger --help` <= 2 x `import click` (the command line must start fast: nothing but click and the
standard library before a command runs); `ledger ls` <= 1.5 x `import duckdb, pyarrow`. Ratio = ours /
reference (lower is better). A stricter floor is printed beside it without a target: `import duckdb` alone,
all that `ledger ls` loads of the two when the index is up to date (it then reads it without Arrow, numpy or
the receipt models).

    .venv/bin/python bench/bench_startup.py [-n 15]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELP_TARGET = 2.0
LS_TARGET = 1.5


def ledger_command() -> list[str]:
    script = Path(sys.executable).with_name("ledger")
    if script.exists():
        return [str(script)]
    found = shutil.which("ledger")
    return [found] if found else [sys.executable, "-m", "ledger.cli"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr.decode(errors='replace')[-3000:]}")
    return elapsed


def interleaved(commands: dict[str, list[str]], env: dict[str, str], n: int) -> dict[str, float]:
    """Median wall time of each command over ``n`` rounds, the order rotating every round."""
    times: dict[str, list[float]] = {k: [] for k in commands}
    names = list(commands)
    for r in range(n):
        for name in names[r % len(names):] + names[: r % len(names)]:
            times[name].append(timed(commands[name], env))
    return {k: statistics.median(v) for k, v in times.items()}


def golden(path: Path, loss: float) -> None:
    steps = {str(s): loss - 0.01 * s for s in range(1, 51)}
    path.write_text(json.dumps({"lm loss": {"start_step": 1, "end_step": 50, "step_interval": 1, "values": steps}}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=15, help="repetitions of each command (interleaved)")
    args = p.parse_args()
    ledger = ledger_command()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LEDGER_DIR=str(Path(tmp) / "receipts"),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        for i, loss in enumerate((3.0, 3.1, 3.2)):
            path = Path(tmp) / f"golden-{i}.json"
            golden(path, loss)
            timed([*ledger, "ingest", "golden", str(path), "--name", f"run-{i}"], env)
        timed([*ledger, "ls"], env)  # the index is built once, outside the timing
        commands = {
            "help": [*ledger, "--help"],
            "click": [sys.executable, "-c", "import click"],
            "ls": [*ledger, "ls"],
            "duckdb": [sys.executable, "-c", "import duckdb, pyarrow"],
            "duckdb_only": [sys.executable, "-c", "import duckdb"],
        }
        med = interleaved(commands, env, args.n)
    help_ratio, ls_ratio = med["help"] / med["click"], med["ls"] / med["duckdb"]
    print(f"ledger --help {med['help'] * 1e3:.0f} ms, python -c 'import click' {med['click'] * 1e3:.0f} ms "
          f"(x{help_ratio:.2f}); ledger ls (3 receipts) {med['ls'] * 1e3:.0f} ms, "
          f"python -c 'import duckdb, pyarrow' {med['duckdb'] * 1e3:.0f} ms (x{ls_ratio:.2f}), "
          f"python -c 'import duckdb' {med['duckdb_only'] * 1e3:.0f} ms (x{med['ls'] / med['duckdb_only']:.2f}); "
          f"medians of {args.n}")
    print(json.dumps({
        "figure": "cli_help_startup", "value": round(med["help"] * 1e3, 1), "unit": "ms",
        "reference": round(med["click"] * 1e3, 1), "ratio": round(help_ratio, 3), "target": HELP_TARGET,
        "met": help_ratio <= HELP_TARGET,
        "note": f"`ledger --help` / `python -c 'import click'`, medians of {args.n} interleaved runs; a ceiling",
    }))
    print(json.dumps({
        "figure": "cli_ls_startup", "value": round(med["ls"] * 1e3, 1), "unit": "ms",
        "reference": round(med["duckdb"] * 1e3, 1), "ratio": round(ls_ratio, 3), "target": LS_TARGET,
        "met": ls_ratio <= LS_TARGET,
        "note": f"`ledger ls` of 3 receipts / `python -c 'import duckdb, pyarrow'`, medians of {args.n}; a ceiling",
    }))


if __name__ == "__main__":
    main()
