"""(a) Wrapper overhead: what `ledger record -- python -c pass` adds to a launch, side by side with what
MLflow's ``mlflow.start_run(); mlflow.end_run()`` adds (local sqlite tracking backend).

Each figure is a median wall time minus the median of a bare ``python -c pass``, all three measured N
times interleaved (the order rotates every round) in one run. Both sides get the same treatment:
- ours: a fresh temporary ledger directory ($LEDGER_DIR); the launch runs in a small temporary git
  repository, so the wrapper's stack capture does the work it does in a real training repository;
- MLflow: ``MLFLOW_TRACKING_URI=sqlite:///<tmp>/mlflow.db``, same working directory.
The first call of each (MLflow creates and migrates its database, ours creates the ledger) is timed
separately, reported, and not counted in the medians. Every command may write Python's
bytecode cache (into a temporary ``PYTHONPYCACHEPREFIX``, even under ``PYTHONDONTWRITEBYTECODE``): an
installed package has its modules compiled, so neither side is timed compiling its own source.

``--mlflow-python`` runs MLflow from another interpreter (a virtual environment that has it, when the
project's must stay without pandas); that side's overhead is then measured against a bare ``-c pass`` of
the same interpreter. The CPU time of each command (its own and its children's) is printed beside the wall
time: on a loaded machine, the ratio of CPU times is the one to expect on a quiet one.

`ledger record` does not sync the DuckDB index: the next reader adds the receipts published since. That cost
is not in our figure, so it is measured and printed beside it: after the timed runs, one `ledger ls` (which
catches up every receipt recorded here) and then a second one (the index already current); their difference,
per receipt, is what each recorded run leaves to its first reader.

Target: our overhead <= 0.15 x MLflow's; ratio = ours / MLflow (lower is better).

Beside it, how long the launch itself waits for the wrapper (``record_launch_delay``): the launch prints the
clock as its first statement; the time from starting the command to that clock, ``ledger record -- python -c
...`` against the same ``python -c ...`` started bare (its interpreter's start-up), medians of N interleaved
pairs, and what comes after the launch's line (publishing) as the rest of the wall time. No target: the wrapper
starts the launch before it loads what publishing needs, so for a launch longer than those imports, they cost
its wall time nothing; this says how much of the overhead above a real training launch waits for.

    .venv/bin/python bench/bench_record_overhead.py [-n 7] [--mlflow-python PATH]
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

TARGET = 0.15
MLFLOW_CODE = "import mlflow; mlflow.start_run(); mlflow.end_run()"


def ledger_command() -> list[str]:
    script = Path(sys.executable).with_name("ledger")
    if script.exists():
        return [str(script)]
    found = shutil.which("ledger")
    if found:
        return [found]
    return [sys.executable, "-m", "ledger.cli"]


def make_repo(path: Path) -> str:
    """A one-commit git repository to launch from (plain directory when git is missing)."""
    path.mkdir()
    (path / "train.py").write_text("print('train')\n")
    if shutil.which("git") is None:
        return "plain directory (git not found)"
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
           "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "."], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], cwd=path, check=True)
    return "a one-commit git repository"


CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system, the command and its children) of every timed call, by command."""


def timed(cmd: list[str], env: dict[str, str], cwd: Path, name: str = "") -> float:
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    after = os.times()
    if out.returncode != 0:
        err = out.stderr.decode(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{err}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    CPU.setdefault(name, []).append(cpu)
    return elapsed


CLOCK = "import time; print(repr(time.time()), flush=True)"


def launch_delay(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Seconds from starting ``cmd`` to the clock its launch prints first, and from then to its end."""
    t0 = time.time()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, check=True)
    end = time.time()
    printed = float(out.stdout.decode().split()[0])
    return printed - t0, end - printed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=7, help="repetitions of each command (interleaved)")
    p.add_argument("--mlflow-python", default=sys.executable,
                   help="the interpreter that runs MLflow (default: this one)")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        root = Path(tmp)
        cwd = root / "repo"
        where = make_repo(cwd)
        base_env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("LEDGER_", "MLFLOW_")) and k != "PYTHONDONTWRITEBYTECODE"}
        base_env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        cmds = {
            "python -c pass": ([sys.executable, "-c", "pass"], base_env),
            "ledger record -- python -c pass": (
                [*ledger_command(), "record", "--", sys.executable, "-c", "pass"],
                base_env | {"LEDGER_DIR": str(root / "receipts")},
            ),
            "mlflow start_run/end_run": (
                [args.mlflow_python, "-c", MLFLOW_CODE],
                base_env | {"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"},
            ),
        }
        other = args.mlflow_python != sys.executable
        if other:
            cmds["mlflow's python -c pass"] = ([args.mlflow_python, "-c", "pass"], base_env)
        names = list(cmds)
        first = {name: timed(*cmds[name], cwd) for name in names[1:]}  # one-time setup, not counted
        CPU.clear()
        times: dict[str, list[float]] = {name: [] for name in names}
        for i in range(args.n):
            for name in names[i % len(names):] + names[:i % len(names)]:
                times[name].append(timed(*cmds[name], cwd, name))
        delays: dict[str, list[tuple[float, float]]] = {"bare": [], "record": []}
        for _ in range(args.n):
            delays["bare"].append(launch_delay([sys.executable, "-c", CLOCK], base_env, cwd))
            delays["record"].append(launch_delay([*ledger_command(), "record", "--", sys.executable, "-c", CLOCK],
                                                 base_env | {"LEDGER_DIR": str(root / "receipts")}, cwd))
        from ledger.store.receipts import Ledger

        receipts = len(Ledger(root / "receipts").ids())
        ls_env = base_env | {"LEDGER_DIR": str(root / "receipts")}
        ls = [*ledger_command(), "ls", "--json"]
        catch_up = timed(ls, ls_env, cwd, "ls (catching up)")
        current = timed(ls, ls_env, cwd, "ls (index current)")
        deferred = (catch_up - current) / receipts
        deferred_cpu = (CPU["ls (catching up)"][0] - CPU["ls (index current)"][0]) / receipts

    med = {name: statistics.median(t) for name, t in times.items()}
    cpu = {name: statistics.median(c) for name, c in CPU.items()}
    base = med["python -c pass"]
    their_base = "mlflow's python -c pass" if other else "python -c pass"
    ours = med["ledger record -- python -c pass"] - base
    theirs = med["mlflow start_run/end_run"] - med[their_base]
    ratio = ours / theirs
    cpu_ours = cpu["ledger record -- python -c pass"] - cpu["python -c pass"]
    cpu_theirs = cpu["mlflow start_run/end_run"] - cpu[their_base]
    print(f"Wrapper overhead, {args.n} interleaved runs each, medians; python {sys.version.split()[0]}; "
          f"launched from {where}")
    print(f"{'command':<34} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'overhead ms':>12} "
          f"{'first run ms':>13} {'CPU ms':>8}")
    for name in names:
        t = times[name]
        floor = med[their_base] if name.startswith("mlflow start") else base
        over = f"{(med[name] - floor) * 1e3:12.1f}" if not name.endswith("-c pass") or "record" in name else f"{'':>12}"
        fr = f"{first[name] * 1e3:13.1f}" if name in first else f"{'':>13}"
        print(f"{name:<34} {med[name] * 1e3:10.1f} {min(t) * 1e3:8.1f} {max(t) * 1e3:8.1f} {over} {fr} "
              f"{cpu[name] * 1e3:8.1f}")
    first_mlflow, first_ours = first["mlflow start_run/end_run"], first["ledger record -- python -c pass"]
    print(f"first run: MLflow creates and migrates its sqlite database ({first_mlflow * 1e3:.0f} ms), ours "
          f"creates the ledger directory ({first_ours * 1e3:.0f} ms); done once before timing, "
          "not counted")
    print(f"receipts published: {receipts} of {2 * args.n + 1} wrapped runs")
    print(f"left to the index's next reader: `ledger ls` catching up {receipts} receipts {catch_up * 1e3:.0f} ms, "
          f"then with the index current {current * 1e3:.0f} ms: {deferred * 1e3:.0f} ms per receipt "
          f"({deferred_cpu * 1e3:.0f} ms CPU), once, by whoever reads the index first")
    print(f"ours / MLflow = {ours * 1e3:.1f} ms / {theirs * 1e3:.1f} ms = {ratio:.3f} (target <= {TARGET}); "
          f"CPU time: {cpu_ours * 1e3:.1f} ms / {cpu_theirs * 1e3:.1f} ms = {cpu_ours / cpu_theirs:.3f}; "
          f"load average {os.getloadavg()[0]:.1f}")
    wait = {k: statistics.median(d for d, _ in v) for k, v in delays.items()}
    rest = {k: statistics.median(r for _, r in v) for k, v in delays.items()}
    held = wait["record"] - wait["bare"]
    print(f"the launch's first line came {wait['record'] * 1e3:.0f} ms after `ledger record` started, "
          f"{wait['bare'] * 1e3:.0f} ms after a bare start (its interpreter): held back {held * 1e3:.0f} ms; "
          f"after that line, {rest['record'] * 1e3:.0f} ms to the end under `ledger record` "
          f"(bare {rest['bare'] * 1e3:.0f} ms): publishing")
    print()
    print(json.dumps({
        "figure": "record_launch_delay", "value": round(held * 1e3, 1), "unit": "ms",
        "reference": round(wait["bare"] * 1e3, 1), "ratio": round(wait["record"] / wait["bare"], 2),
        "note": (f"median of {args.n}: the time from starting `ledger record -- python -c CLOCK` to the clock the "
                 f"launch prints, minus the same for a bare `python -c CLOCK` (the reference, its start-up); ratio "
                 f"= with the wrapper / bare; after the launch's line, {rest['record'] * 1e3:.0f} ms to the end "
                 f"(bare {rest['bare'] * 1e3:.0f} ms); no target"),
    }))
    print(json.dumps({
        "figure": "record_wrapper_overhead", "value": round(ours * 1e3, 1), "unit": "ms",
        "reference": round(theirs * 1e3, 1), "ratio": round(ratio, 3), "target": TARGET,
        "met": ratio <= TARGET,
        "note": (f"median of {args.n} minus python -c pass; reference: mlflow start_run+end_run, sqlite, "
                 f"database created before timing (that first run: {first_mlflow:.2f} s); CPU-time ratio "
                 f"{cpu_ours / cpu_theirs:.3f} ({cpu_ours * 1e3:.0f} / {cpu_theirs * 1e3:.0f} ms); load average "
                 f"{os.getloadavg()[0]:.1f}; the index sync is left to the next reader: "
                 f"{deferred * 1e3:.0f} ms per receipt ({deferred_cpu * 1e3:.0f} ms CPU) in the first `ledger ls` "
                 "after the runs; "
                 "ratio = ours / reference, target <="),
    }))


if __name__ == "__main__":
    main()
