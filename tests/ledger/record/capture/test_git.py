"""The code probe against real repositories made with the git CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ledger.record.capture.git import MAX_UNTRACKED_FILE, capture_code
from ledger.redact import Redactor

REDACTOR = Redactor({})
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository on branch main with one commit of a text file and a binary file."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "train.py").write_text("print('hello')\n")
    (root / "weights.bin").write_bytes(bytes(range(256)) * 4)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_clean_repository(repo: Path) -> None:
    code = capture_code(repo, REDACTOR)
    assert code.is_repo and code.error is None
    assert code.commit == git(repo, "rev-parse", "HEAD")
    assert code.branch == "main"
    assert code.dirty is False
    assert code.diff_digest is None
    assert code.remote is None
    assert code.path == str(repo)


def test_tracked_changes_are_digested_deterministically(repo: Path) -> None:
    (repo / "train.py").write_text("print('changed')\n")
    first = capture_code(repo, REDACTOR)
    assert first.dirty is True and first.diff_digest is not None
    assert capture_code(repo, REDACTOR).diff_digest == first.diff_digest
    (repo / "train.py").write_text("print('changed again')\n")
    assert capture_code(repo, REDACTOR).diff_digest != first.diff_digest
    git(repo, "add", "train.py")  # staged or not, the change against HEAD is the same
    (repo / "train.py").write_text("print('changed')\n")
    assert capture_code(repo, REDACTOR).diff_digest == first.diff_digest


def test_binary_changes_are_distinguished(repo: Path) -> None:
    (repo / "weights.bin").write_bytes(bytes(range(256)) * 3 + b"\x00" * 256)
    one = capture_code(repo, REDACTOR).diff_digest
    (repo / "weights.bin").write_bytes(bytes(range(256)) * 3 + b"\x01" * 256)
    two = capture_code(repo, REDACTOR).diff_digest
    assert one and two and one != two


def test_untracked_files_alone_make_the_tree_dirty_and_change_the_digest(repo: Path) -> None:
    (repo / "notes").mkdir()
    (repo / "notes" / "a.txt").write_text("one")
    one = capture_code(repo, REDACTOR)
    assert one.dirty is True and one.diff_digest is not None
    (repo / "notes" / "a.txt").write_text("two")
    two = capture_code(repo, REDACTOR)
    assert two.diff_digest not in (None, one.diff_digest)
    (repo / "notes" / "a.txt").rename(repo / "notes" / "b.txt")
    assert capture_code(repo, REDACTOR).diff_digest not in (one.diff_digest, two.diff_digest)


def test_ignored_files_do_not_count(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore logs")
    (repo / "run.log").write_text("noise")
    assert capture_code(repo, REDACTOR).dirty is False


def test_dvc_bookkeeping_is_not_code(repo: Path) -> None:
    """dvc.lock, *.dvc pointers and .dvc/ change while `dvc repro` runs a pipeline's stages: not code."""
    (repo / "dvc.lock").write_text("schema: '2.0'\n")
    (repo / "receipts.dvc").write_text("outs: []\n")
    (repo / ".dvc").mkdir()
    (repo / ".dvc" / "config").write_text("[core]\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "dvc")
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "dvc.lock").write_text("x")
    (repo / ".dvc" / "config").write_text("[core]\nanalytics = false\n")
    code = capture_code(repo, REDACTOR)
    assert code.dirty is False and code.diff_digest is None
    (repo / "train.py").write_text("print('changed')\n")  # real code still counts
    assert capture_code(repo, REDACTOR).dirty is True


def test_large_untracked_files_enter_by_path_and_size(repo: Path) -> None:
    big = repo / "big.bin"
    big.write_bytes(b"\x00" * (MAX_UNTRACKED_FILE + 1))
    one = capture_code(repo, REDACTOR).diff_digest
    big.write_bytes(b"\x01" * (MAX_UNTRACKED_FILE + 1))
    assert capture_code(repo, REDACTOR).diff_digest == one  # same path and size: content not read
    big.write_bytes(b"\x01" * (MAX_UNTRACKED_FILE + 2))
    assert capture_code(repo, REDACTOR).diff_digest != one


def test_remote_credentials_are_stripped(repo: Path) -> None:
    git(repo, "remote", "add", "upstream", "git@github.com:org/up.git")
    assert capture_code(repo, REDACTOR).remote == "git@github.com:org/up.git"  # the first remote
    git(repo, "remote", "add", "origin", "https://alice:ghp_secretsecret@github.com/org/repo.git")
    code = capture_code(repo, REDACTOR)
    assert code.remote == "https://github.com/org/repo.git"
    assert "secret" not in code.model_dump_json()


def test_detached_head_has_no_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    code = capture_code(repo, REDACTOR)
    assert code.branch is None and code.commit == git(repo, "rev-parse", "HEAD")


def test_subdirectory_finds_its_repository(repo: Path) -> None:
    sub = repo / "pkg"
    sub.mkdir()
    (sub / "m.py").write_text("x = 1\n")
    code = capture_code(sub, REDACTOR)
    assert code.is_repo and code.path == str(sub) and code.dirty is True


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_a_tree_owned_by_another_user_is_still_read(repo: Path) -> None:
    """Code bind-mounted into a container is often owned by another uid: git calls that 'dubious'."""
    (repo / "train.py").write_text("print('changed')\n")
    expected = capture_code(repo, REDACTOR)
    for path in [repo, *repo.rglob("*")]:
        os.chown(path, 4321, 4321, follow_symlinks=False)
    code = capture_code(repo, REDACTOR)
    assert code.error is None and code.commit and code.dirty is True
    assert code.diff_digest == expected.diff_digest


def test_not_a_repository(tmp_path: Path) -> None:
    code = capture_code(tmp_path, REDACTOR)
    assert code.is_repo is False and code.path == str(tmp_path)
    assert code.commit is None and code.error is None


def test_missing_directory_is_not_a_repository(tmp_path: Path) -> None:
    assert capture_code(tmp_path / "gone", REDACTOR).is_repo is False


def test_repository_without_commits(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "trunk")
    empty = capture_code(tmp_path, REDACTOR)
    assert empty.is_repo and empty.commit is None and empty.branch == "trunk" and empty.error is None
    assert empty.dirty is False and empty.diff_digest is None
    (tmp_path / "a.py").write_text("a = 1\n")
    git(tmp_path, "add", "a.py")
    staged = capture_code(tmp_path, REDACTOR)
    assert staged.error is None and staged.dirty is True and staged.diff_digest is not None


def test_a_bare_repository_has_its_commit_and_branch_but_no_work_tree(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    code = capture_code(bare, REDACTOR)
    assert code.is_repo and code.error is None
    assert code.commit == git(repo, "rev-parse", "HEAD") and code.branch == "main"
    assert code.dirty is None and code.diff_digest is None


def test_a_rename_is_a_tracked_change(repo: Path) -> None:
    git(repo, "mv", "train.py", "renamed.py")
    code = capture_code(repo, REDACTOR)
    assert code.dirty is True and code.diff_digest is not None and code.error is None


def test_without_git_the_probe_says_so(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo))  # no git executable there
    code = capture_code(repo, REDACTOR)
    assert code.commit is None and code.error is not None and "git not found" in code.error
