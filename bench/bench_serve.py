"""(f) `ledger serve`: the receipts table page of a 1,000-receipt ledger, as served, against reading the same
rows from the index with DuckDB directly.

Setup (not timed): ``--receipts`` small runs (20 steps each, 4 precisions, tags) are published through
staging directories with :func:`ledger.store.publish.publish`, as a run publishes them, and indexed.

**Ours** (timed): ``GET /`` from a real ``ledger serve --port 0`` (uvicorn, a child process) over HTTP on
127.0.0.1: the index sync check, every receipt's summary row and tags, and the whole HTML page with 1,000
rows; the body is read to the end. Also ``GET /?where=precision=bf16`` (the ``--where`` filter evaluated
on every receipt's JSON). Median of ``--reps`` requests after one warm-up request (reported separately).

**Reference**: the same rows (the columns of ``ledger ls``, and each receipt's JSON the filter reads) with
one DuckDB query on a read-only connection to the same ``index.duckdb``, fetched into Python; median of
``--reps``. Target: the page under 1 s. ``ratio`` = ours / DuckDB (what the page costs over the raw read).

    .venv/bin/python bench/bench_serve.py [--receipts 1000] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0
PRECISIONS = ("fp32", "bf16", "fp8", "mxfp8")


def build(ledger: Any, i: int) -> None:
    """Publish one small synthetic run (20 steps) through a staging directory."""
    import numpy as np
    import pyarrow as pa

    from ledger.store.layout import WORKLOAD_FILE, WRAPPER_FILE, rank_dir
    from ledger.store.publish import publish
    from ledger.store.staging import Outcome
    from schemas.tables import TABLES

    run_dir = ledger.staging / uuid.uuid4().hex
    rank = rank_dir(run_dir, 0)
    rank.mkdir(parents=True)
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
    precision = PRECISIONS[i % len(PRECISIONS)]
    (rank / WORKLOAD_FILE).write_text(json.dumps({
        "precision": {"compute": precision}, "model": {"num_experts": 8, "top_k": 2}, "seed": i,
        "batch": {"steps": 20}}))
    (run_dir / WRAPPER_FILE).write_text(json.dumps({
        "name": f"run-{i:04d}", "run_uuid": run_dir.name, "started_at": started.isoformat(), "attempt": 1,
        "command": ["python", "train.py", "--seed", str(i)], "tags": {"sweep": precision, "i": str(i)}}))
    n = 20
    step = np.arange(1, n + 1, dtype=np.int64)
    given = {
        "rank": pa.array(np.zeros(n, dtype=np.int32)), "step": step, "time": started.timestamp() + 0.5 * step,
        "tokens": step * 4096, "loss": 4.0 / step + 0.001 * i, "lr": np.full(n, 3e-4),
        "grad_norm": np.ones(n), "step_time_s": np.full(n, 0.5), "tokens_per_s": np.full(n, 8192.0 + i),
        "skipped": np.zeros(n, dtype=bool),
    }
    schema = TABLES["steps"]  # every other column of the current schema is null, as a run that does not log it
    table = pa.table({f.name: given.get(f.name, pa.nulls(n, f.type)) for f in schema}, schema=schema)
    with pa.ipc.new_stream(str(rank / "steps.arrows"), table.schema) as writer:
        writer.write_table(table)
    publish(ledger, run_dir, Outcome("succeeded", 0, None, started + timedelta(seconds=10)))


def fetch(url: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body: bytes = response.read()
    return time.perf_counter() - t0, body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--receipts", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import duckdb

    from ledger.store import index
    from ledger.store.reading import LIST_COLUMNS
    from ledger.store.receipts import Ledger

    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp) / "receipts")
        ledger.ensure_writable()
        t0 = time.perf_counter()
        for i in range(args.receipts):
            build(ledger, i)
        with index.reader(ledger):
            pass
        print(f"setup: {args.receipts} receipts published and indexed in {time.perf_counter() - t0:.1f} s")

        server = subprocess.Popen([sys.executable, "-m", "ledger.cli", "--ledger", str(ledger.root), "serve",
                                   "--port", "0"], stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            assert server.stderr is not None
            line = server.stderr.readline()
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if not match:
                print(f"server did not start: {line}{server.stderr.read()}", file=sys.stderr)
                return 1
            base = f"http://127.0.0.1:{match.group(1)}"
            results = {}
            for label, path in (("table", "/"), ("filtered", "/?where=precision%3Dbf16")):
                first, body = fetch(base + path)
                rows = body.count(b"<tr data-id=")
                times = [fetch(base + path)[0] for _ in range(args.reps)]
                results[label] = (first, statistics.median(times), rows, len(body))
        finally:
            server.terminate()
            server.wait(timeout=30)
            if server.stderr is not None:
                server.stderr.close()

        cols = ", ".join(f'"{c}"' for c in LIST_COLUMNS)

        def direct() -> float:
            t = time.perf_counter()
            con = duckdb.connect(str(ledger.index_path), read_only=True)
            try:
                con.execute(f"SELECT {cols}, receipt FROM receipts ORDER BY started_at, id").fetchall()
            finally:
                con.close()
            return time.perf_counter() - t

        direct()
        reference = statistics.median(direct() for _ in range(args.reps))

    for label, (first, value, rows, size) in results.items():
        print(f"{label}: first request {first:.3f} s, median {value:.3f} s, {rows} rows, {size / 1024:.0f} KiB; "
              f"DuckDB direct {reference * 1000:.1f} ms")
    for label, (first, value, rows, _size) in results.items():
        print(json.dumps({
            "figure": f"serve: {label} page, {args.receipts:,} receipts",
            "value": round(value, 4),
            "unit": "s",
            "reference": round(reference, 4),
            "ratio": round(value / reference, 2),
            "target": TARGET_S,
            "met": value < TARGET_S,
            "note": f"ours = GET {'/' if label == 'table' else '/?where=precision=bf16'} from `ledger serve` "
                    f"({rows} rows, median of {args.reps} after a warm-up of {first:.3f} s); reference = one DuckDB "
                    "query of the same rows and receipt JSON on the same index; ratio = ours / DuckDB; target: "
                    "under 1 s",
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
