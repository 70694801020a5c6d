"""What the output tee of `ledger record` costs a launch that prints a lot.

* wall time of ``ledger record -- cat LOG`` (stdout to /dev/null) against ``cat LOG | tee copy.log >/dev/null``,
  the floor for anything that keeps a log (target: ratio <= 1.5); and the same less ``ledger record -- true``
  (the wrapper's fixed cost: start-up, stack capture, publishing), i.e. what the output itself costs, in wall
  time and in CPU seconds per MB (load-independent: a loaded machine's wall time counts waiting for others);
* the child's own run time (``cat`` timed inside the child) under ``ledger record`` against the same child
  writing into a pipe drained by ``cat >/dev/null`` (target: ratio <= 1.1): the child is never held back;
* peak memory (RSS, GNU time's %M) of the wrapper for the log and for a newline-less stream of the same
  size, against ``ledger record -- true`` (target: < 100 MB above it, for any line length);
* the redaction of the log alone, in process: :meth:`ledger.redact.StreamRedactor.feed_bytes` over the log
  in the tee's batches, MB/s of CPU time (best of 2), against ``cat LOG >/dev/null`` (no target: the
  part of the first figure that redaction takes).

* at a terminal: wall time of ``ledger record -- cat`` of the first ``--terminal-mb`` MB (default 50) of LOG with
  the wrapper's stdout a pseudo-terminal (which the bench drains), against ``cat`` alone into one (no target: a
  terminal reads far slower than a pipe; the launch then gets a pseudo-terminal too, which hands the wrapper 4 KiB
  a read);
* the end of a launch whose output comes at a steady rate (``--paced-mb-s``, default 40 MB/s: the same log over
  5 s, far more than a training run prints): how much later ``ledger record`` ends than ``PACED | tee copy.log``,
  against the wrapper's fixed cost (``ledger record -- true``). The figure a user waits for: the tee keeps up
  while the launch runs, so the end of a run costs the fixed part and the last second's output, not the whole
  log again (no target of its own).

LOG is a generic training log of ``--mb`` megabytes (default 200), 20,000 steps repeated; ``--megatron`` repeats the
Megatron logs of ../shared/fixtures instead, which `ledger record` then also parses as a Megatron launch (issue 13's
part). Without ``--megatron`` the per-byte figure is also given for a log of the same lines with every step printed
once (about 1.47 million steps in 200 MB): a long run's log, whose capture merges, stages and publishes every step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STACKRECEIPT_SHARED", ROOT.parent / "shared"))
BIN = Path(sys.executable).parent
TIME = shutil.which("time") or "/usr/bin/time"


def _line(i: int) -> str:
    return (f"2026-12-01 10:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d} INFO train.py:212] step {i} | loss "
            f"{4.0 / (1 + i / 500):.5f} | lr {3e-4 * min(1.0, i / 200):.3e} | "
            f"grad_norm {0.5 + (i * 7919 % 1000) / 997:.4f} | tokens/s {51234 + i * 37 % 4096} | "
            f"step_time {0.181 + (i * 31 % 97) / 9700:.4f} s\n")


def make_unique_log(path: Path, mb: int) -> int:
    """The same generic step lines, every step printed once (a long run: about 1.47 million steps in 200 MB)
    where :func:`make_log` repeats 20,000 steps: what the capture merges and publishes grows with the steps.
    Returns the number of steps."""
    size, written, i = mb << 20, 0, 0
    with open(path, "w") as f:
        while written < size:
            chunk = "".join(_line(k) for k in range(i, i + 10_000))
            f.write(chunk)
            written += len(chunk)
            i += 10_000
    return i


def make_log(path: Path, mb: int, megatron: bool) -> None:
    """A training log of ``mb`` megabytes: generic step lines (Python logging style, varied numbers; 20,000 steps
    repeated), or the Megatron logs of ../shared/fixtures repeated (which also makes `ledger record` parse them as
    Megatron)."""
    if megatron:
        sample = b"".join(p.read_bytes() for p in sorted((SHARED / "fixtures" / "megatron").glob("*.log")))
    else:
        sample = "".join(_line(i) for i in range(20000)).encode()
    size = mb << 20
    with open(path, "wb") as f:
        while f.tell() < size:
            f.write(sample[: size - f.tell()])


def run(cmd: str, env: dict[str, str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a shell command's top process."""
    wall, rss, _ = run_cpu(cmd, env, cwd)
    return wall, rss


def run_cpu(cmd: str, env: dict[str, str], cwd: Path) -> tuple[float, int, float]:
    """Wall seconds, peak RSS (KiB) of the top process, and CPU seconds (user + system) of the command and
    every process it waited for."""
    rss_file = cwd / "rss.txt"
    start = time.perf_counter()
    subprocess.run([TIME, "-f", "%M %U %S", "-o", str(rss_file), "bash", "-c", cmd], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rss, user, system = rss_file.read_text().split()[-3:]
    return wall, int(rss), float(user) + float(system)


def child_time(cwd: Path) -> float:
    return int((cwd / "child_ns.txt").read_text()) / 1e9


def redaction_mb_s(log: Path) -> float:
    """MB/s (CPU time, best of 2) of redacting the log in the tee's batches, in this process."""
    sys.path.insert(0, str(ROOT))
    from ledger.record.tee import BATCH
    from ledger.redact import Redactor, StreamRedactor

    data = log.read_bytes()
    best = float("inf")
    for _ in range(2):
        feed = StreamRedactor(Redactor(dict(os.environ))).feed_bytes
        start, i = time.process_time(), 0
        while i < len(data):
            cut = data.rfind(b"\n", i, i + BATCH) + 1 or min(len(data), i + BATCH)
            feed(data[i:cut])
            i = cut
        best = min(best, time.process_time() - start)
    return len(data) / best / 1e6


def reader() -> str:
    """Which template reader the wrapper's parser used (ledger/_native: compiled unless LEDGER_NO_EXT=1 or not
    built)."""
    sys.path.insert(0, str(ROOT))
    from ledger import _native

    return "compiled template reader" if _native.columns() is not None else "Python template reader"


PACED = """import os, sys, time
data, rate, chunk = open(sys.argv[1], "rb").read(), float(sys.argv[2]) * 1e6, 1 << 20
start, out = time.monotonic(), sys.stdout.fileno()
for i in range(0, len(data), chunk):
    delay = start + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    view = memoryview(data)[i:i + chunk]
    while view:
        view = view[os.write(out, view):]
"""
"""The paced launch: writes LOG to stdout in 1 MiB pieces at ``rate`` MB/s (on an absolute schedule)."""


def at_terminal(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of ``cmd`` with its stdout a pseudo-terminal that this process drains (stderr discarded)."""
    import pty

    master, slave = pty.openpty()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=slave, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    os.close(slave)
    while True:
        try:
            if not os.read(master, 1 << 20):
                break
        except OSError:  # every writer closed it
            break
    proc.wait()
    wall = time.perf_counter() - start
    os.close(master)
    return wall


def cat_mb_s(log: Path) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - start)
    return log.stat().st_size / best / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("-n", type=int, default=3, help="repetitions (medians)")
    ap.add_argument("--megatron", action="store_true", help="use the Megatron fixture logs (adds live parsing)")
    ap.add_argument("--paced-mb-s", type=float, default=40.0, help="rate of the paced launch (0: not measured)")
    ap.add_argument("--terminal-mb", type=int, default=50, help="output printed at a terminal (0: not measured)")
    args = ap.parse_args()
    args.terminal_mb = min(args.terminal_mb, args.mb)  # a part of LOG
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "big.log"
        make_log(log, args.mb, args.megatron)
        unique = work / "unique.log"
        unique_steps = 0 if args.megatron else make_unique_log(unique, args.mb)
        env = dict(os.environ, LEDGER_DIR=str(work / "receipts"),
                   PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
        ledger = f"{BIN / 'ledger'} record --telemetry-interval 0 --"
        timed_cat = (f"bash -c 's=$(date +%s%N); cat {log}; e=$(date +%s%N); echo $((e - s)) > {work}/child_ns.txt'")
        rows: dict[str, list[float]] = {k: [] for k in ("tee", "ours", "child_bare", "child_ours", "fixed", "cpu_tee",
                                                        "cpu_ours", "cpu_fixed", "tee_unique", "ours_unique",
                                                        "tee_paced", "ours_paced", "terminal_bare",
                                                        "terminal_ours")}
        (work / "paced.py").write_text(PACED)
        paced = f"{sys.executable} {work / 'paced.py'} {log} {args.paced_mb_s}"
        rss: dict[str, int] = {}
        for _ in range(args.n):
            wall, _, cpu = run_cpu(f"cat {log} | tee {work}/copy.log >/dev/null", env, work)
            rows["tee"].append(wall)
            rows["cpu_tee"].append(cpu)
            wall, rss["log"], cpu = run_cpu(f"{ledger} cat {log} >/dev/null", env, work)
            rows["ours"].append(wall)
            rows["cpu_ours"].append(cpu)
            run(f"{timed_cat} | cat >/dev/null", env, work)
            rows["child_bare"].append(child_time(work))
            run(f"{ledger} {timed_cat} >/dev/null", env, work)
            rows["child_ours"].append(child_time(work))
            wall, _, cpu = run_cpu(f"{ledger} true >/dev/null", env, work)
            rows["fixed"].append(wall)
            rows["cpu_fixed"].append(cpu)
            if unique_steps:
                rows["tee_unique"].append(run(f"cat {unique} | tee {work}/copy.log >/dev/null", env, work)[0])
                rows["ours_unique"].append(run(f"{ledger} cat {unique} >/dev/null", env, work)[0])
            if args.paced_mb_s > 0:
                rows["tee_paced"].append(run(f"{paced} | tee {work}/copy.log >/dev/null", env, work)[0])
                rows["ours_paced"].append(run(f"{ledger} {paced} >/dev/null", env, work)[0])
        if args.terminal_mb > 0:
            part = work / "part.log"
            with log.open("rb") as src:
                part.write_bytes(src.read(args.terminal_mb << 20))
            for _ in range(args.n):
                rows["terminal_bare"].append(at_terminal(["cat", str(part)], env, work))
                rows["terminal_ours"].append(at_terminal([str(BIN / "ledger"), "record", "--telemetry-interval", "0",
                                                          "--", "cat", str(part)], env, work))
        redaction, cat = redaction_mb_s(log), cat_mb_s(log)
        _, rss["idle"] = run(f"{ledger} true >/dev/null", env, work)
        _, rss["no_newline"] = run(f"{ledger} bash -c 'head -c {args.mb << 20} /dev/zero | tr \"\\0\" x' >/dev/null",
                                   env, work)
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items() if v}
    grow = max(rss["log"], rss["no_newline"]) - rss["idle"]
    results = [
        {"figure": f"record_cat_{args.mb}mb_vs_tee", "value": round(med["ours"], 3), "unit": "s",
         "reference": round(med["tee"], 3), "ratio": round(med["ours"] / med["tee"], 3), "target": 1.5,
         "met": med["ours"] / med["tee"] <= 1.5,
         "note": f"ledger record -- cat {args.mb} MB log vs cat | tee copy.log; ratio ours/reference, a ceiling; "
                 f"{reader()}"},
        {"figure": f"record_cat_{args.mb}mb_per_byte_vs_tee", "value": round(med["ours"] - med["fixed"], 3),
         "unit": "s", "reference": round(med["tee"], 3), "ratio": round((med["ours"] - med["fixed"]) / med["tee"], 3),
         "target": 1.5, "met": (med["ours"] - med["fixed"]) / med["tee"] <= 1.5,
         "note": f"the same minus `ledger record -- true` ({med['fixed']:.2f} s: start-up, stack capture, publish, "
                 "which do not grow with the output): the cost of the output itself against tee's; load average "
                 f"{os.getloadavg()[0]:.1f}"},
        {"figure": f"record_cat_{args.mb}mb_cpu_per_mb",
         "value": round((med["cpu_ours"] - med["cpu_fixed"]) / args.mb, 4),
         "unit": "s/MB", "reference": round(med["cpu_tee"] / args.mb, 4),
         "ratio": round((med["cpu_ours"] - med["cpu_fixed"]) / max(med["cpu_tee"], 1e-9), 3), "target": None,
         "met": None,
         "note": f"CPU seconds (user + system, the wrapper and the child) per MB of output: ledger record -- cat "
                 f"minus ledger record -- true ({med['cpu_fixed']:.2f} s), against cat | tee; what the wall figures "
                 f"become on an idle machine (CPU time does not count waiting for other processes); load average "
                 f"{os.getloadavg()[0]:.1f}"},
        *([{"figure": f"record_cat_{args.mb}mb_unique_steps_per_byte_vs_tee",
            "value": round(med["ours_unique"] - med["fixed"], 3), "unit": "s", "reference": round(med["tee_unique"], 3),
            "ratio": round((med["ours_unique"] - med["fixed"]) / med["tee_unique"], 3), "target": 1.5,
            "met": (med["ours_unique"] - med["fixed"]) / med["tee_unique"] <= 1.5,
            "note": f"the same generic lines with every step printed once ({unique_steps:,} steps, as a long run "
                    f"prints them; the log above repeats 20,000): what the capture merges, stages and publishes "
                    f"grows with the steps; less `ledger record -- true`, against cat | tee"}]
          if unique_steps else []),
        *([{"figure": f"record_paced_{args.mb}mb_end_vs_fixed_cost",
            "value": round(med["ours_paced"] - med["tee_paced"], 3), "unit": "s",
            "reference": round(med["fixed"], 3),
            "ratio": round((med["ours_paced"] - med["tee_paced"]) / med["fixed"], 3),
            "target": None, "met": None,
            "note": f"the {args.mb} MB log written at {args.paced_mb_s:g} MB/s ({med['tee_paced']:.1f} s through "
                    f"`| tee`): how much later `ledger record` ends than `| tee`, against `ledger record -- true` "
                    f"(the fixed cost); at most 1: the output was redacted, logged and parsed as it came"}]
          if args.paced_mb_s > 0 else []),
        {"figure": "child_run_time_under_record", "value": round(med["child_ours"], 3), "unit": "s",
         "reference": round(med["child_bare"], 3), "ratio": round(med["child_ours"] / med["child_bare"], 3),
         "target": 1.1, "met": med["child_ours"] / med["child_bare"] <= 1.1,
         "note": "cat's own run time under ledger record vs into a pipe drained by cat >/dev/null; a ceiling"},
        {"figure": "wrapper_peak_rss_growth", "value": round(grow / 1024, 1), "unit": "MB",
         "reference": round(rss["idle"] / 1024, 1), "ratio": None, "target": 100, "met": grow / 1024 < 100,
         "note": f"peak RSS of ledger record above `ledger record -- true` ({rss['idle'] / 1024:.0f} MB): "
                 f"{args.mb} MB log {rss['log'] / 1024:.0f} MB, {args.mb} MB without a newline "
                 f"{rss['no_newline'] / 1024:.0f} MB"},
        *([{"figure": f"record_cat_{args.terminal_mb}mb_at_a_terminal_vs_cat",
            "value": round(med["terminal_ours"], 3), "unit": "s", "reference": round(med["terminal_bare"], 3),
            "ratio": round(med["terminal_ours"] / med["terminal_bare"], 3),
            "target": None, "met": None,
            "note": f"the first {args.terminal_mb} MB of the log printed with stdout a pseudo-terminal (drained by "
                    "the bench): ledger record -- cat (the launch gets a pseudo-terminal too) vs cat alone"}]
          if args.terminal_mb > 0 else []),
        {"figure": "log_redaction_mb_s", "value": round(redaction, 1), "unit": "MB/s",
         "reference": round(cat, 1), "ratio": round(redaction / cat, 4), "target": None, "met": None,
         "note": "StreamRedactor.feed_bytes over the log in the tee's batches (CPU time, in process) vs "
                 "cat LOG >/dev/null (wall); no target of its own"},
    ]
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
