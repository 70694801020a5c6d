"""(b) Metric ingest: 1,000,000 points (10 metrics x 100,000 steps) through the SDK, side by side with
MLflow's ``MlflowClient().log_batch`` (sqlite backend) and with one raw pyarrow Parquet write.

Ours: ``ledger.sdk.Run(tmp, rank=0)`` (background flush thread on, as in training), 100,000
``log_step(step, **metrics)`` calls, ``close()``, then finalized the way publish does it:
``ledger.store.merge.read_table(..., coded=True)`` + ``ledger.store.publish.write_parquet`` (zstd; the
custom names stay dictionary-coded from the SDK's stream to the Parquet file).

References, all starting from the same Python data (a list of 100,000 dicts, built before timing):
- raw Parquet: ``pa.Table.from_pylist(rows)`` + ``pq.write_table(..., compression="zstd")`` (one wide
  table: step and one float column per metric — the least any writer has to do);
- MLflow: ``Metric`` objects + ``MlflowClient().log_batch`` in batches of 1,000 metrics (MLflow's limit),
  into a sqlite tracking store created before timing. It runs in a child process (importing MLflow
  does not slow the Python heap our side is timed in), one chunk of calls after each of our repetitions,
  so both sides see the same stretch of machine load. All 1,000,000 points take MLflow over a minute,
  so by default about 50,000 are logged and the total extrapolated linearly from the median chunk (said
  in the output and in "note"); ``--mlflow-points 0`` logs them all.

Two variants: the 10 standard numeric step metrics of ``schemas.tables.STEPS`` (fixed columns), and 10
custom names (the ``extra`` MAP column). Ratios are reference time / our time (higher is better).

The figures are wall times. Beside them, the output prints the CPU time of ours (the whole process: the
calling thread and the SDK's flush thread) and of raw Parquet, and the note holds the CPU-time ratio: on a
loaded machine, that is the ratio to expect on a quiet one. ``--mlflow-python PATH`` runs MLflow's child
from another interpreter (a virtual environment that has MLflow, when the project's must stay without it).

    .venv/bin/python bench/bench_sdk_ingest.py [--steps 100000] [--reps 7] [--mlflow-points 50000]
                                               [--mlflow-python PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STANDARD = ("tokens", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "flops_per_s",
            "aux_loss", "z_loss", "loss_scale")
CUSTOM = tuple(f"moe/layer{i}_load_cv" for i in range(10))
MLFLOW_BATCH = 1000  # MLflow's MAX_METRICS_PER_BATCH
MLFLOW_POINTS = 50_000
TARGET_VS_MLFLOW = 300.0
TARGET_VS_RAW = 0.5


def make_rows(names: tuple[str, ...], steps: int, seed: int = 0) -> list[dict[str, Any]]:
    """Per step one dict of metric values (tokens is an int, everything else a float)."""
    rnd = random.Random(seed)
    rows = []
    for step in range(1, steps + 1):
        row: dict[str, Any] = {}
        for name in names:
            row[name] = step * 4096 if name == "tokens" else rnd.random()
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------- ours
def time_ours(rows: list[dict[str, Any]], workdir: Path) -> dict[str, float]:
    from ledger.sdk import Run
    from ledger.store.merge import read_table
    from ledger.store.publish import write_parquet

    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    run = Run(workdir, rank=0)
    log_step = run.log_step
    for step, metrics in enumerate(rows, 1):
        log_step(step, **metrics)
    t1 = time.perf_counter()
    run.close()
    t2 = time.perf_counter()
    table, problems = read_table(workdir, "steps", coded=True)  # as publish reads it
    t3 = time.perf_counter()
    write_parquet(table, workdir / "steps.parquet")
    t4 = time.perf_counter()
    cpu = time.process_time() - c0
    _check(table, rows, problems)
    return {"total": t4 - t0, "log_step": t1 - t0, "close": t2 - t1, "read": t3 - t2, "write": t4 - t3,
            "cpu": cpu}


def _check(table: Any, rows: list[dict[str, Any]], problems: list[Any]) -> None:
    """The figure only counts if every point arrived, unchanged (checked outside the timing)."""
    if problems or table.num_rows != len(rows):
        raise SystemExit(f"SDK lost data: {table.num_rows} rows of {len(rows)}, problems {problems}")
    if table.column("step").to_pylist() != list(range(1, len(rows) + 1)):
        raise SystemExit("SDK wrote different steps")
    names = list(rows[0])
    if names[0] in STANDARD:
        for name in names:
            if table.column(name).to_pylist() != [r[name] for r in rows]:
                raise SystemExit(f"SDK wrote different values for {name!r}")
    elif table.column("extra").to_pylist() != [list(r.items()) for r in rows]:
        raise SystemExit("SDK wrote different custom metrics")


# --------------------------------------------------------------------------------------- raw Parquet
def time_raw(raw_rows: list[dict[str, Any]], workdir: Path) -> tuple[float, float]:
    """Wall and CPU seconds of the raw Parquet write."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    workdir.mkdir(parents=True)
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    table = pa.Table.from_pylist(raw_rows)
    pq.write_table(table, workdir / "raw.parquet", compression="zstd")
    return time.perf_counter() - t0, time.process_time() - c0


# -------------------------------------------------------------------------------------------- MLflow
def mlflow_child(steps: int, workdir: Path) -> None:
    """Runs in a child process: logs the standard rows through MlflowClient.log_batch, 1,000 metrics a
    call, in the chunks the parent asks for on stdin (a number of calls per line; "end" to stop), and
    answers each with one JSON line: points logged and seconds taken."""
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{workdir / 'mlflow.db'}"
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    rows = make_rows(STANDARD, steps)
    t = time.perf_counter()
    client = MlflowClient()
    experiment = client.create_experiment("bench")  # creates and migrates the database: not timed
    run_id = client.create_run(experiment).info.run_id
    print(json.dumps({"setup_s": time.perf_counter() - t}), flush=True)

    per_batch = MLFLOW_BATCH // len(STANDARD)  # 100 steps of 10 metrics
    start = 0
    for line in sys.stdin:
        if line.strip() == "end":
            break
        gc.collect()
        points = 0
        t0 = time.perf_counter()
        for _ in range(int(line)):
            if start >= steps:
                break
            ts = int(time.time() * 1000)
            batch = [Metric(k, float(v), ts, step)
                     for step, row in enumerate(rows[start:start + per_batch], start + 1) for k, v in row.items()]
            client.log_batch(run_id, metrics=batch)
            points += len(batch)
            start += per_batch
        print(json.dumps({"points": points, "seconds": time.perf_counter() - t0}), flush=True)
    client.set_terminated(run_id)


class MlflowReference:
    """The MLflow child process, asked for one chunk of log_batch calls between our repetitions, so that
    both sides are measured over the same stretch of time (the machine's load drifts)."""

    def __init__(self, steps: int, points: int, chunks: int, workdir: Path, python: str) -> None:
        workdir.mkdir(parents=True)
        self.total_points = steps * len(STANDARD)
        todo = self.total_points if points <= 0 else min(points, self.total_points)
        calls = -(-todo // MLFLOW_BATCH)
        self.per_chunk = -(-calls // chunks)
        self.chunks: list[dict[str, float]] = []
        self.log = workdir / "stderr.log"  # a file, not a pipe: a full pipe would stall the child
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(
                [python, __file__, "--mlflow-child", "--steps", str(steps), "--workdir", str(workdir)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            )
        self.setup_s = self._answer()["setup_s"]

    def _answer(self) -> dict[str, float]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise SystemExit(f"MLflow child failed ({code}):\n{self.log.read_text(errors='replace')[-3000:]}")
        return dict(json.loads(line))

    def chunk(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{self.per_chunk}\n")
        self.proc.stdin.flush()
        answer = self._answer()
        if answer["points"]:
            self.chunks.append(answer)

    def finish(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("end\n")
        self.proc.stdin.close()
        self.proc.wait()
        measured = sum(c["points"] for c in self.chunks)
        measured_s = sum(c["seconds"] for c in self.chunks)
        if measured >= self.total_points:
            total_s = measured_s
        else:  # the median chunk's time per point, times all the points
            total_s = statistics.median(c["seconds"] / c["points"] for c in self.chunks) * self.total_points
        return {"measured_points": measured, "measured_s": measured_s, "total_points": self.total_points,
                "total_s": total_s, "extrapolated": measured < self.total_points, "setup_s": self.setup_s,
                "chunks": len(self.chunks)}


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--mlflow-points", type=int, default=MLFLOW_POINTS,
                   help="points logged through MLflow, the rest extrapolated linearly (0: all of them)")
    p.add_argument("--mlflow-python", default=sys.executable,
                   help="the interpreter that runs MLflow's child (one with MLflow installed; default: this one)")
    p.add_argument("--skip-mlflow", action="store_true", help="only ours vs raw Parquet (no MLflow needed)")
    p.add_argument("--mlflow-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mlflow_child:
        mlflow_child(args.steps, args.workdir)
        return

    points = args.steps * len(STANDARD)
    print(f"SDK ingest: {points:,} points = {len(STANDARD)} metrics x {args.steps:,} steps, "
          f"{args.reps} interleaved repetitions, medians; python {sys.version.split()[0]}")
    variants = {"standard": STANDARD, "custom": CUSTOM}
    data = {}
    for variant, names in variants.items():
        rows = make_rows(names, args.steps)
        data[variant] = (rows, [{"step": s, **r} for s, r in enumerate(rows, 1)])

    import pyarrow as pa

    pa.array([0.0])  # pyarrow's one-time lazy imports (pandas, when installed) happen here, not in a timing
    ours: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    raw: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        root = Path(tmp)
        reference = None
        if not args.skip_mlflow:
            reference = MlflowReference(args.steps, args.mlflow_points, args.reps, root / "mlflow",
                                        args.mlflow_python)
        for rep in range(args.reps):
            for variant in variants:
                rows, raw_rows = data[variant]
                ours[variant].append(time_ours(rows, root / f"ours-{variant}-{rep}"))
                raw[variant].append(time_raw(raw_rows, root / f"raw-{variant}-{rep}"))
            if reference is not None:
                reference.chunk()
        mlflow = reference.finish() if reference is not None else None

    results = []
    print()
    print(f"{'':<10} {'ours':>8} {'':>7} {'log_step':>9} {'close':>7} {'read':>7} {'write':>7} "
          f"{'raw':>8} {'':>7} {'':>9} {'ours':>7} {'raw':>7} {'raw/ours':>9}")
    print(f"{'variant':<10} {'s':>8} {'(min)':>7} {'us/call':>9} {'s':>7} {'s':>7} {'s':>7} "
          f"{'parquet s':>8} {'(min)':>7} {'raw/ours':>9} {'cpu s':>7} {'cpu s':>7} {'cpu':>9}")
    for variant in variants:
        med = {k: statistics.median(r[k] for r in ours[variant]) for k in ours[variant][0]}
        raw_s = statistics.median(w for w, _ in raw[variant])
        raw_cpu = statistics.median(c for _, c in raw[variant])
        print(f"{variant:<10} {med['total']:>8.3f} {min(r['total'] for r in ours[variant]):>7.3f} "
              f"{med['log_step'] / args.steps * 1e6:>9.2f} {med['close']:>7.3f} {med['read']:>7.3f} "
              f"{med['write']:>7.3f} {raw_s:>8.3f} {min(w for w, _ in raw[variant]):>7.3f} "
              f"{raw_s / med['total']:>9.2f} {med['cpu']:>7.3f} {raw_cpu:>7.3f} {raw_cpu / med['cpu']:>9.2f}")
        results.append(_result(f"sdk_ingest_{variant}_vs_raw_parquet", med["total"], raw_s, TARGET_VS_RAW,
                               f"{len(variants[variant])} {variant} metric names; reference: from_pylist + "
                               "write_table zstd of the same dicts; CPU time: ours (whole process) "
                               f"{med['cpu']:.3f} s, raw {raw_cpu:.3f} s, ratio {raw_cpu / med['cpu']:.2f}; "
                               f"load average {os.getloadavg()[0]:.1f}; ratio = reference / ours (wall), "
                               "target >="))
        if mlflow is not None:
            results.append(_result(f"sdk_ingest_{variant}_vs_mlflow", med["total"], mlflow["total_s"],
                                   TARGET_VS_MLFLOW, _mlflow_note(mlflow, variant)))
    if mlflow is not None:
        measured = (f"{mlflow['measured_points']:,} points in {mlflow['chunks']} chunks between our "
                    f"repetitions, {mlflow['measured_s']:.2f} s")
        how = (f"extrapolated linearly from the median chunk; {measured}" if mlflow["extrapolated"]
               else f"all measured: {measured}")
        print(f"\nMLflow log_batch (sqlite, {MLFLOW_BATCH} metrics per call): {mlflow['total_s']:.2f} s for "
              f"{mlflow['total_points']:,} points ({how}); database creation before timing: "
              f"{mlflow['setup_s']:.2f} s, not counted")
    print()
    for r in results:
        print(json.dumps(r))


def _mlflow_note(mlflow: dict[str, Any], variant: str) -> str:
    how = (f"MLflow extrapolated linearly from {mlflow['measured_points']:,} of {mlflow['total_points']:,} "
           f"points ({mlflow['measured_s']:.2f} s, median of {mlflow['chunks']} chunks timed between our "
           "repetitions)" if mlflow["extrapolated"]
           else f"MLflow measured on all {mlflow['total_points']:,} points")
    return (f"{how}; log_batch of 1000 into sqlite, measured once with the standard names; "
            f"ours: {variant} names; load average {os.getloadavg()[0]:.1f}; ratio = reference / ours, target >=")


def _result(figure: str, ours_s: float, ref_s: float, target: float, note: str) -> dict[str, Any]:
    ratio = ref_s / ours_s
    return {"figure": figure, "value": round(ours_s, 4), "unit": "s", "reference": round(ref_s, 4),
            "ratio": round(ratio, 3), "target": target, "met": ratio >= target, "note": note}


if __name__ == "__main__":
    main()
