"""`ledger record` end to end: real subprocesses, real signals, real files."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
from conftest import BIN, child_env
from helpers import ids_in, load_receipt, receipt_dir


def _only(ledger_dir: Path) -> dict:
    ids = ids_in(ledger_dir)
    assert len(ids) == 1, ids
    return load_receipt(ledger_dir, ids[0])


def test_success_publishes_a_complete_validated_receipt(ledger_cli, ledger_dir, workload) -> None:
    script = workload('print("hello from training", flush=True)\n')
    proc = ledger_cli("record", "--name", "ok", "--tag", "sweep=a", "--", "python", str(script))
    assert proc.returncode == 0, proc.stderr
    assert "hello from training" in proc.stdout  # tee'd to the terminal
    r = _only(ledger_dir)
    assert f"ledger: recorded {r['id']}" in proc.stderr
    assert r["status"] == "succeeded" and r["exit_code"] == 0 and r["name"] == "ok"
    assert r["tags"] == {"sweep": "a"} and r["command"] == ["python", str(script)]
    assert r["summary"]["steps"] == 20 and r["summary"]["final_loss"] == 0.2
    assert r["summary"]["final_eval"] == {"val/rare/loss": 1.25}
    assert r["workload"]["seed"] == 7 and r["workload"]["model"]["num_experts"] == 4
    # every artifact's digest and row count matches the file
    directory = receipt_dir(ledger_dir, r["id"])
    for a in r["artifacts"]:
        data = (directory / a["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == a["sha256"] and len(data) == a["bytes"]
        if a["kind"] == "table":
            assert pq.read_table(directory / a["path"]).num_rows == a["rows"]
    assert "hello from training" in (directory / "output.log").read_text()
    steps = pq.read_table(directory / "steps.parquet").to_pylist()
    assert steps[0]["extra"] == [("custom_metric", 2.0)]
    # the stack was captured from outside
    assert r["stack"]["software"]["python"] and r["stack"]["hardware"]["cpu_cores"]
    # indexed: the metric tables are queryable
    q = ledger_cli("query", "--json", "SELECT count(*) AS n, sum(list_sum(tokens)) AS t FROM routing")
    assert json.loads(q.stdout) == [{"n": 20, "t": 20 * 512}]  # a row per (step, layer), counts by expert
    assert not (ledger_dir / ".staging").exists() or not any((ledger_dir / ".staging").iterdir())


def test_failure_propagates_the_exit_code(ledger_cli, ledger_dir, workload) -> None:
    script = workload("sys.exit(3)\n", steps=5)
    proc = ledger_cli("record", "--", "python", str(script))
    assert proc.returncode == 3
    r = _only(ledger_dir)
    assert r["status"] == "failed" and r["exit_code"] == 3 and r["summary"]["steps"] == 5


def test_child_killed_by_sigkill_keeps_its_metrics(ledger_cli, ledger_dir, workload) -> None:
    script = workload("time.sleep(1.5)\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", steps=12)
    proc = ledger_cli("record", "--name", "killed", "--", "python", str(script))
    assert proc.returncode == 128 + 9
    r = _only(ledger_dir)
    assert r["status"] == "failed" and r["signal"] == "SIGKILL" and r["exit_code"] == 137
    assert r["summary"]["steps"] == 12 and r["summary"]["routing_rows"] == 12


def test_sigterm_to_the_wrapper_is_forwarded(ledger_dir, workload, tmp_path) -> None:
    script = workload("open('started', 'w').close()\ntime.sleep(60)\n", steps=3)
    wrapper = subprocess.Popen(
        [str(BIN / "ledger"), "record", "--", "python", str(script)],
        env=child_env(LEDGER_DIR=str(ledger_dir)), cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and wrapper.poll() is None
        time.sleep(0.05)
    streams = list((ledger_dir / ".staging").glob("*/rank-00000/steps.arrows"))
    while not streams or streams[0].stat().st_size == 0:  # the SDK flushes within about a second
        assert time.monotonic() < deadline
        time.sleep(0.05)
        streams = list((ledger_dir / ".staging").glob("*/rank-00000/steps.arrows"))
    time.sleep(0.2)
    wrapper.send_signal(signal.SIGTERM)
    wrapper.communicate(timeout=30)
    assert wrapper.returncode == 128 + 15
    r = _only(ledger_dir)
    assert r["status"] == "interrupted" and r["signal"] == "SIGTERM" and r["summary"]["steps"] == 3


def test_wrapper_sigkilled_then_recover(ledger_cli, ledger_dir, workload, tmp_path) -> None:
    script = workload("time.sleep(1.5)\n", steps=6)
    proc = ledger_cli("record", "--name", "orphan", "--", "python", str(script), env={"LEDGER_FAULT_AT": "running"})
    assert proc.returncode == -9
    assert ids_in(ledger_dir) == []  # nothing half-written is visible
    staging = list((ledger_dir / ".staging").iterdir())
    assert len(staging) == 1
    facts = json.loads((staging[0] / "wrapper.json").read_text())
    out = ledger_cli("recover").stdout
    if "running" in out:  # the orphaned child may still be alive: recover leaves it alone
        assert f"pid {facts['child_pid']}" in out
        deadline = time.monotonic() + 30
        while Path(f"/proc/{facts['child_pid']}").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        out = ledger_cli("recover").stdout
    assert "published" in out
    r = _only(ledger_dir)
    assert r["status"] == "interrupted" and r["name"] == "orphan" and r["summary"]["steps"] == 6
    assert ledger_cli("recover").stdout.strip() == "nothing to recover"
    assert len(ids_in(ledger_dir)) == 1
    listed = json.loads(ledger_cli("ls", "--json").stdout)
    assert [row["id"] for row in listed] == [r["id"]]


def test_concurrent_records_are_all_published_and_indexed(ledger_dir, workload, tmp_path) -> None:
    script = workload(steps=10)
    procs = [
        subprocess.Popen(
            [str(BIN / "ledger"), "record", "--name", f"run{i}", "--", "python", str(script)],
            env=child_env(LEDGER_DIR=str(ledger_dir)), cwd=tmp_path,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for i in range(8)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert len(ids_in(ledger_dir)) == 8
    out = subprocess.run(
        [str(BIN / "ledger"), "query", "--json",
         "SELECT count(DISTINCT receipt_id) AS runs, count(*) AS rows FROM steps"],
        env=child_env(LEDGER_DIR=str(ledger_dir)), capture_output=True, text=True, check=True,
    )
    assert json.loads(out.stdout) == [{"runs": 8, "rows": 80}]
    names = sorted(r["name"] for r in json.loads(
        subprocess.run([str(BIN / "ledger"), "ls", "--json"], env=child_env(LEDGER_DIR=str(ledger_dir)),
                       capture_output=True, text=True, check=True).stdout))
    assert names == [f"run{i}" for i in range(8)]


def test_nothing_after_dashes_is_bad_input(ledger_cli, ledger_dir) -> None:
    proc = ledger_cli("record", "--name", "x", "--")
    assert proc.returncode == 2 and proc.stderr.startswith("Error: nothing to run")
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = ledger_cli("record", "--", "no-such-command-xyz")
    assert proc.returncode == 2 and "command not found" in proc.stderr
    assert ids_in(ledger_dir) == []


def test_unwritable_ledger_still_trains_and_publishes_later(ledger_cli, tmp_path, workload) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    marker = tmp_path / "ran"
    script = workload(f"open({str(marker)!r}, 'w').close()\n", steps=3)
    bad = blocker / "receipts"
    proc = ledger_cli("record", "--ledger", str(bad), "--", "python", str(script), env={"TMPDIR": str(tmp_path)})
    assert marker.exists()  # the training ran
    assert proc.returncode == 75, proc.stderr  # ... but its receipt is not published yet
    assert f"ledger directory {bad} is not writable" in proc.stderr
    fallback = tmp_path / f"ledger-staging-{os.getuid()}"  # the user's private fallback
    assert f"recover --from {fallback} --ledger" in proc.stderr
    good = tmp_path / "good"
    out = ledger_cli("recover", "--from", str(fallback), "--ledger", str(good))
    assert out.returncode == 0 and "published" in out.stdout, out.stderr
    (rid,) = ids_in(good)
    r = load_receipt(good, rid)
    assert r["status"] == "succeeded" and r["summary"]["steps"] == 3
    assert list(fallback.iterdir()) == []


def test_attempts_link_to_the_first_attempt(ledger_cli, ledger_dir, workload) -> None:
    script = workload(steps=2)
    ledger_cli("record", "--name", "job", "--", "python", str(script), check=True)
    ledger_cli("record", "--name", "job", "--attempt-of", "job", "--", "python", str(script), check=True)
    ledger_cli("record", "--name", "job", "--attempt-of", "job", "--", "python", str(script), check=True)
    rows = json.loads(ledger_cli("ls", "--json").stdout)
    first = rows[0]["id"]
    receipts = [load_receipt(ledger_dir, r["id"]) for r in rows]
    assert [r["attempt"] for r in receipts] == [1, 2, 3]
    assert [r["links"]["attempt_of"] for r in receipts] == [None, first, first]
    shown = json.loads(ledger_cli("show", "job", "--json").stdout)
    assert shown["attempt"] == 3  # a name shared by attempts of one run means its latest attempt
    bad = ledger_cli("record", "--attempt-of", "nope", "--", "python", str(script))
    assert bad.returncode == 2 and "no receipt has" in bad.stderr
