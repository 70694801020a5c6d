"""Ingest parsers against plain reading of the same file, in one run.

1. Megatron log parsing: a large log built by repeating the lines of ../shared/fixtures/megatron (iteration
   lines, argument dump, memory reports, warnings; iteration numbers renumbered so the log is one run),
   parsed by ``ledger.ingest.megatron.parse_log`` (streaming; every iteration line becomes a row) versus
   ``for line in f: pass`` over the same file opened the same way. Figure: lines/s; ratio = ours / plain
   (a floor).
2. A ~100 MB PyTorch profiler trace synthesised from the events of
   ../shared/fixtures/traces/hta__trace_diff_control_control.json.gz (its 6 ProfilerSteps repeated with
   shifted timestamps and correlation ids), analysed by ``ledger.ingest.trace.analyse`` (streaming decoder)
   versus reading the file's bytes, and versus ``json.load`` of it. Each side runs in a child process so
   its peak memory (VmHWM minus the resident size after imports) is its own. Figures: MB/s (ratio = ours / plain read,
   a floor) and peak memory (ratio = ours / json.load's, a ceiling).

Targets (floors unless said): Megatron parsing >= 0.01x plain line reading (a plain read does nothing per
line, ~2-5 M lines/s here; ours splits and converts ~15 fields per iteration line in pure Python, ~40-65 k
lines/s: a 1 GB log of 4 M lines in about a minute and a half); trace analysis >= 0.002x plain reading of the bytes (a
read from the page cache is a memcpy: json.load itself reaches ~0.003x), at most 1.5x json.load's time
(json.load only decodes; ours decodes and analyses) and at most 0.25x json.load's peak memory.

    .venv/bin/python bench/bench_ingest.py [--log-lines 300000] [--trace-mb 100] [--reps 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STACKRECEIPT_SHARED", ROOT.parent / "shared"))
FIXTURES = SHARED / "fixtures"
TARGET_LOG = 0.01
TARGET_TRACE_SPEED = 0.002
TARGET_TRACE_MEMORY = 0.25
TARGET_TRACE_VS_JSON = 1.5


def emit(figure: str, value: float, unit: str, reference: float, ratio: float, target: float, met: bool,
         note: str) -> None:
    print(json.dumps({"figure": figure, "value": round(value, 4), "unit": unit, "reference": round(reference, 4),
                      "ratio": round(ratio, 4), "target": target, "met": met, "note": note}), flush=True)


# --------------------------------------------------------------------------------------------- log
def build_log(path: Path, lines: int) -> int:
    source: list[str] = []
    for f in sorted((FIXTURES / "megatron").glob("*.log")):
        source.extend(f.read_text().splitlines())
    it = re.compile(r"iteration\s+\d+/")
    written = step = 0
    with path.open("w") as out:
        while written < lines:
            for line in source:
                if it.search(line):
                    step += 1
                    line = it.sub(f"iteration {step:8d}/", line, count=1)
                out.write(line + "\n")
                written += 1
    return written


def bench_log(lines: int, reps: int) -> None:
    from ledger.ingest.common import open_text
    from ledger.ingest.megatron import parse_log

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "megatron.log"
        n = build_log(path, lines)
        ours, plain = [], []
        rows = 0
        for _ in range(reps):
            t = time.perf_counter()
            with open_text(path) as f:
                for _line in f:
                    pass
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            log = parse_log(path)
            rows = log.tables()["steps"].num_rows
            ours.append(time.perf_counter() - t)
        ours_rate, plain_rate = n / statistics.median(ours), n / statistics.median(plain)
        ratio = ours_rate / plain_rate
        emit("megatron_log_parse", ours_rate, "lines/s", plain_rate, ratio, TARGET_LOG, ratio >= TARGET_LOG,
             f"{n} lines ({path.stat().st_size / 1e6:.0f} MB, {rows} iteration rows incl. building the steps "
             f"table); reference: plain line reading of the same file; ratio = ours / plain (floor); median of {reps}")


# ------------------------------------------------------------------------------------------- trace
def build_trace(path: Path, megabytes: float) -> int:
    data = json.load(gzip.open(FIXTURES / "traces" / "hta__trace_diff_control_control.json.gz"))
    events = data.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events if "ts" in e)
    target = megabytes * 1e6
    count = 0
    with path.open("w") as out:
        out.write(json.dumps(data)[:-1] + ', "traceEvents": [\n')
        copy = 0
        first = True
        while out.tell() < target:
            shift, corr_shift = copy * (span + 1000), copy * 10_000_000
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e2["ts"] + shift
                if e2.get("name", "").startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e2['name'].split('#')[1]) + copy * 10}"
                args = e2.get("args")
                if isinstance(args, dict) and "correlation" in args:
                    e2["args"] = dict(args, correlation=args["correlation"] + corr_shift)
                out.write(("" if first else ",\n") + json.dumps(e2))
                first = False
                count += 1
            copy += 1
        out.write("\n]}\n")
    return count


CHILD = """
import json, sys, time
mode, path = sys.argv[1], sys.argv[2]
from ledger.ingest import trace  # imports before the baseline, for every side


def status(key):
    # VmHWM (peak resident) is per address space: reset by exec, unlike ru_maxrss, which a child inherits
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024


base = status("VmRSS")
t = time.perf_counter()
if mode == "ours":
    result = trace.analyse(__import__("pathlib").Path(path))
    detail = len(result.steps)
elif mode == "json":
    with open(path) as f:
        detail = len(json.load(f)["traceEvents"])
else:
    with open(path, "rb") as f:
        detail = sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))
elapsed = time.perf_counter() - t
print(json.dumps({"seconds": elapsed, "peak_mb": status("VmHWM") - base, "detail": detail}))
"""


def child(mode: str, path: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_trace(megabytes: float, reps: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        events = build_trace(path, megabytes)
        size = path.stat().st_size / 1e6
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "json": [], "plain": []}
        for _ in range(reps):
            for mode in runs:
                runs[mode].append(child(mode, path))
        med = {m: statistics.median(r["seconds"] for r in rs) for m, rs in runs.items()}
        peak = {m: max(r["peak_mb"] for r in rs) for m, rs in runs.items()}
        steps = int(runs["ours"][0]["detail"])
        ours_rate, plain_rate = size / med["ours"], size / med["plain"]
        note = f"{size:.0f} MB trace, {events} events, {steps} ProfilerSteps; median of {reps}, each in a child process"
        emit("trace_analyse_speed", ours_rate, "MB/s", plain_rate, ours_rate / plain_rate, TARGET_TRACE_SPEED,
             ours_rate / plain_rate >= TARGET_TRACE_SPEED, note + "; reference: reading the bytes; ratio = ours / "
             "plain (floor)")
        emit("trace_analyse_vs_json_load", med["ours"], "s", med["json"], med["ours"] / med["json"],
             TARGET_TRACE_VS_JSON, med["ours"] / med["json"] <= TARGET_TRACE_VS_JSON,
             note + "; reference: json.load of the same file (no analysis); ratio = ours / json.load (ceiling)")
        emit("trace_analyse_peak_memory", peak["ours"], "MB", peak["json"], peak["ours"] / peak["json"],
             TARGET_TRACE_MEMORY, peak["ours"] / peak["json"] <= TARGET_TRACE_MEMORY,
             note + f"; peak RSS above the imports (plain read: {peak['plain']:.0f} MB); reference: json.load; "
             "ratio = ours / json.load (ceiling)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log-lines", type=int, default=300_000)
    p.add_argument("--trace-mb", type=float, default=100.0)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    if not FIXTURES.is_dir():
        print(f"shared fixtures not found at {FIXTURES} (set STACKRECEIPT_SHARED)", file=sys.stderr)
        return 1
    bench_log(args.log_lines, args.reps)
    bench_trace(args.trace_mb, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
