"""Logical runs from the index, their checks, and auto-linking a resumed launch to its earlier attempt."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import BIN, child_env

from ledger.errors import AmbiguousRef, BadInput
from ledger.store import index
from ledger.store.attempts import auto_link, check_attempts, is_resume, logical_run
from ledger.store.receipts import Ledger
from schemas import Receipt
from schemas.receipt import Task, Workload


def _record(root: Path, *args: str, ckpt: str | None = None) -> None:
    """`ledger record ARGS -- python -c pass [--checkpoint-dir CKPT]` (python ignores the extra args)."""
    tail = ["--checkpoint-dir", ckpt] if ckpt else []
    proc = subprocess.run(
        [str(BIN / "ledger"), "--ledger", str(root / "receipts"), "record", *args, "--", "python", "-c", "pass",
         *tail],
        env=child_env(), cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    root = tmp_path_factory.mktemp("attempts")
    _record(root, "--name", "x", ckpt="ck")
    _record(root, "--name", "x", "--attempt-of", "x", ckpt="ck")
    _record(root, "--name", "twin", ckpt="a")
    _record(root, "--name", "twin", ckpt="b")
    _record(root, "--name", "twin", ckpt="b")
    return Ledger(root / "receipts")


def test_a_logical_run_is_the_first_attempt_and_its_restarts(ledger: Ledger) -> None:
    with index.reader(ledger) as con:
        run = logical_run(con, "x")
        first = run.attempts[0]
        assert [r.attempt for r in run.attempts] == [1, 2] and run.id == first.id
        assert run.attempts[1].links.attempt_of == first.id and run.name == "x"
        # any attempt's id (or prefix) names the same logical run
        assert logical_run(con, run.attempts[1].id[:8]).ids == run.ids


def test_auto_link_a_resumed_launch_of_the_same_name(ledger: Ledger) -> None:
    root = ledger.root.parent
    with index.reader(ledger) as con:
        first = logical_run(con, "x").id
    resume = ["python", "-m", "runners.moe", "--config", "tiny", "--checkpoint-dir", "ck", "--resume"]
    assert auto_link(ledger, "x", resume, cwd=root) == first
    assert auto_link(ledger, "x", [*resume[:-1], "--resume=true"], cwd=root) == first
    assert auto_link(ledger, "x", ["python", "train.py", "--resume"], cwd=root) == first  # no dir: by name
    assert auto_link(ledger, "x", resume[:-1], cwd=root) is None  # not a resume
    assert auto_link(ledger, "x", ["--checkpoint-dir", "elsewhere", "--resume"], cwd=root) is None
    assert auto_link(ledger, "x", ["--checkpoint-dir", str(root / "ck"), "--resume"], cwd=root) == first
    assert auto_link(ledger, "nobody", resume, cwd=root) is None
    assert auto_link(ledger, None, resume, cwd=root) is None
    assert auto_link(Ledger(root / "missing"), "x", resume, cwd=root) is None
    # the checkpoint directory tells two runs of one name apart; when it cannot, the user must say
    with index.reader(ledger) as con:
        rows = con.execute("SELECT id FROM receipts WHERE name = 'twin' ORDER BY started_at").fetchall()
    assert auto_link(ledger, "twin", ["--checkpoint-dir", "a", "--resume"], cwd=root) == rows[0][0]
    with pytest.raises(AmbiguousRef, match="matches 2 earlier runs.*--attempt-of"):
        auto_link(ledger, "twin", ["--checkpoint-dir", "b", "--resume"], cwd=root)


def test_is_resume() -> None:
    assert is_resume(["x", "--resume"]) and is_resume(["--resume=1"])
    assert not is_resume(["--resumed"]) and not is_resume([])


def _receipt(rid: str, start: float, end: float, attempt: int, task: Task) -> Receipt:
    return Receipt(id=rid, run_uuid=rid[:32], status="succeeded", attempt=attempt,
                   started_at=datetime.fromtimestamp(start, UTC), ended_at=datetime.fromtimestamp(end, UTC),
                   workload=Workload(task=task))


def test_checks() -> None:
    task = Task(dataset="d")
    check_attempts([_receipt("a" * 64, 0, 10, 1, task), _receipt("b" * 64, 10, 20, 2, task)])  # touching: fine
    with pytest.raises(BadInput, match="overlap in time"):
        check_attempts([_receipt("a" * 64, 0, 10, 1, task), _receipt("b" * 64, 5, 20, 2, task)])
    with pytest.raises(BadInput, match="different task.*dataset"):
        check_attempts([_receipt("a" * 64, 0, 10, 1, task), _receipt("b" * 64, 11, 20, 2, Task(dataset="e"))])
    with pytest.raises(BadInput, match="at least one"):
        check_attempts([])


def test_record_links_a_resumed_runner_launch_by_name(ledger_cli, ledger_dir, tmp_path) -> None:
    """`ledger record --name X -- ... --resume` continues the logical run recorded as X, without --attempt-of."""
    import json as _json

    base = ["python", "-m", "runners.moe", "--config", "tiny", "--set", "steps=8", "--set", "model.layers=1",
            "--set", "checkpoint_every=2", "--checkpoint-dir", str(tmp_path / "ck")]
    crashed = ledger_cli("record", "--name", "job", "--", *base, "--fail-at-step", "5")
    assert crashed.returncode != 0
    resumed = ledger_cli("record", "--name", "job", "--", *base, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "linked as a later attempt of" in resumed.stderr
    rows = _json.loads(ledger_cli("ls", "--json").stdout)
    assert [r["attempt"] for r in rows] == [1, 2]
    second = _json.loads((ledger_dir / rows[1]["id"] / "receipt.json").read_text())
    assert second["links"]["attempt_of"] == rows[0]["id"]
