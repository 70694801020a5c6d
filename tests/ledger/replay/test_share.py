"""Sharing a ledger through a DVC remote: recorded in one clone, pushed to a local directory remote, pulled in
a second clone, then listed, verified and compared there. An unreachable remote leaves the ledger untouched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, child_env

TINY = ["python", "-m", "runners.moe", "--config", "tiny", "--set", "steps=10", "--set", "model.layers=1"]


def _sh(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _git_commit(repo: Path, message: str) -> None:
    _sh(["git", "add", "-A"], repo)
    _sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message], repo)


@pytest.mark.slow  # over 5 s on a loaded 2-core machine (CI durations)
def test_push_pull_between_clones(tmp_path: Path) -> None:
    first, second, remote = tmp_path / "first", tmp_path / "second", tmp_path / "remote"
    first.mkdir()
    _sh(["git", "init", "-q"], first)
    _sh([str(BIN / "dvc"), "init", "-q"], first)
    _sh([str(BIN / "dvc"), "remote", "add", "-d", "team", str(remote)], first)
    (first / ".gitignore").write_text("/receipts/\n")  # the ledger is shared through DVC, not git
    _git_commit(first, "init")
    ledger = [str(BIN / "ledger")]
    _sh([*ledger, "record", "--name", "a", "--", *TINY], first)
    _sh([*ledger, "record", "--name", "b", "--", *TINY, "--set", "precision=bf16"], first)
    pushed = _sh([*ledger, "push"], first)
    assert "pushed" in pushed.stdout and (first / "receipts.dvc").is_file()
    _git_commit(first, "ledger snapshot")

    _sh(["git", "clone", "-q", str(first), str(second)], tmp_path)
    assert not (second / "receipts").exists()
    pulled = _sh([*ledger, "pull"], second)
    assert "pulled" in pulled.stdout
    listed = json.loads(_sh([*ledger, "ls", "--json"], second).stdout)
    assert [r["name"] for r in listed] == ["a", "b"]
    assert not (second / "receipts" / ".staging").exists()
    verified = _sh([*ledger, "verify"], second)
    assert "2 receipt(s) checked, 0 damaged" in verified.stdout
    compared = json.loads(_sh([*ledger, "compare", "a", "b", "--json"], second).stdout)
    assert [c["factor"] for c in compared["changed_factors"]] == ["precision"]


def test_unreachable_remote_leaves_the_ledger_untouched(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _sh(["git", "init", "-q"], repo)
    _sh([str(BIN / "dvc"), "init", "-q"], repo)
    blocker = tmp_path / "file"
    blocker.write_text("")
    _sh([str(BIN / "dvc"), "remote", "add", "-d", "gone", str(blocker / "remote")], repo)
    ledger = [str(BIN / "ledger")]
    _sh([*ledger, "record", "--name", "a", "--", *TINY], repo)
    before = {p.relative_to(repo / "receipts"): p.read_bytes() for p in (repo / "receipts").rglob("*")
              if p.is_file() and "index.duckdb" not in p.name}
    failed = _sh([*ledger, "push"], repo, check=False)
    assert failed.returncode == 1 and failed.stderr.startswith("Error: dvc push to the default remote failed")
    assert "the local ledger is untouched" in failed.stderr
    after = {p.relative_to(repo / "receipts"): p.read_bytes() for p in (repo / "receipts").rglob("*")
             if p.is_file() and "index.duckdb" not in p.name}
    assert after == before
    assert "1 receipt(s) checked, 0 damaged" in _sh([*ledger, "verify"], repo).stdout
    no_repo = _sh([*ledger, "push", "--ledger", str(tmp_path / "elsewhere")], tmp_path, check=False)
    assert no_repo.returncode == 2
