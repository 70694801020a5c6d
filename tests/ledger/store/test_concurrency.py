"""32 concurrent `ledger record` runs while `ledger ls`, `query`, `compare` and `reindex` run on the same ledger: no
receipt lost or duplicated, no reader error, and every reader sees only complete receipts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, child_env
from helpers import ids_in

WRITERS = 32
STEPS = 5


def _ledger(args: list[str], ledger_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([str(BIN / "ledger"), *args], env=child_env(LEDGER_DIR=str(ledger_dir)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_writers_and_readers_together(ledger_dir: Path, workload) -> None:
    script = workload(steps=STEPS)
    writers = [
        _ledger(["record", "--name", f"w{i:02d}", "--telemetry-interval", "0", "--", "python", str(script)],
                ledger_dir)
        for i in range(WRITERS)
    ]
    reader_runs = 0
    compared = 0
    cycle = [["ls", "--json"], ["query", "--json", "SELECT id, steps FROM receipts"], ["reindex"],
             ["query", "--json", "SELECT receipt_id, count(*) AS n FROM steps GROUP BY 1"], ["compare"]]
    while any(w.poll() is None for w in writers) or reader_runs < len(cycle) or not compared:
        args = cycle[reader_runs % len(cycle)]
        if args == ["compare"]:
            done = ids_in(ledger_dir)
            if len(done) < 2:
                reader_runs += 1
                continue
            args = ["compare", done[0][:16], done[1][:16], "--json"]
        reader = _ledger(args, ledger_dir)
        out, err = reader.communicate(timeout=300)
        assert reader.returncode == 0, f"ledger {' '.join(args)} failed while writers ran: {err}"
        if args[0] == "ls":
            names = [r["name"] for r in json.loads(out)]
            assert len(names) == len(set(names)), "a receipt is listed twice"
        elif args[0] == "compare":
            assert json.loads(out)["comparable"] is True
            compared += 1
        elif args[0] == "query":
            rows = json.loads(out)
            assert all(r.get("steps", STEPS) == STEPS and r.get("n", STEPS) == STEPS for r in rows), rows
        reader_runs += 1
    for w in writers:
        _, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
    assert len(ids_in(ledger_dir)) == WRITERS
    final = _ledger(["ls", "--json"], ledger_dir)
    out, _ = final.communicate(timeout=120)
    assert sorted(r["name"] for r in json.loads(out)) == [f"w{i:02d}" for i in range(WRITERS)]
    count = _ledger(["query", "--json", "SELECT count(*) AS n, count(DISTINCT receipt_id) AS r FROM steps"],
                    ledger_dir)
    out, _ = count.communicate(timeout=120)
    assert json.loads(out) == [{"n": WRITERS * STEPS, "r": WRITERS}]
    assert reader_runs >= len(cycle) and compared >= 1
    assert not list((ledger_dir / ".staging").iterdir())


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_a_reader_never_waits_for_a_busy_index(ledger_dir: Path, workload) -> None:
    """While another process holds the index's write lock, `ls`, `query` and `compare` read the receipt files
    directly (and say so) instead of waiting."""
    import duckdb

    script = workload(steps=STEPS)
    for name in ("a", "b"):
        proc = _ledger(["record", "--name", name, "--telemetry-interval", "0", "--", "python", str(script)],
                       ledger_dir)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    holder = duckdb.connect(str(ledger_dir / "index.duckdb"))  # this process now holds the lock
    try:
        for args, check in ((["ls", "--json"], lambda rows: sorted(r["name"] for r in rows) == ["a", "b"]),
                            (["query", "--json", "SELECT count(*) AS n FROM steps"],
                             lambda rows: rows == [{"n": 2 * STEPS}]),
                            (["compare", "a", "b", "--json"], lambda out: out["comparable"] is True)):
            reader = _ledger(args, ledger_dir)
            out, err = reader.communicate(timeout=300)
            assert reader.returncode == 0, err
            assert check(json.loads(out)) and "is busy" in err
    finally:
        holder.close()
