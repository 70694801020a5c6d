"""Sharing a ledger through DVC: `ledger push` snapshots the ledger directory with `dvc add` and pushes it
to a DVC remote; `ledger pull` fetches it and reindexes. DVC runs as a subprocess (the `dvc` extra), so the
CLI never imports it. The derived index and runs in progress are never shared (a .dvcignore in the ledger).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import BadInput, LedgerError, MissingExtra
from ledger.store.receipts import Ledger

IGNORED = ("index.duckdb", "index.duckdb.*", "index.readers", "journal", ".staging/", ".tmp-*")
"""Inside a ledger, never shared: the derived index and its readers' lock, the journal (what this clone
published; receipts pulled in are found by the index's shard check), runs and publishes in progress."""


@dataclass
class Shared:
    """What a push or pull did."""

    pointer: Path
    message: str


def _dvc(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("dvc")
    if exe is None:
        raise MissingExtra("dvc", "dvc")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)


def _repo_root(path: Path) -> Path:
    for candidate in [path.resolve(), *path.resolve().parents]:
        if (candidate / ".dvc").is_dir():
            return candidate
    raise BadInput(f"no DVC repository contains {path}: run `dvc init` in your git repository and add a remote "
                   "with `dvc remote add -d NAME URL`")


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {proc.returncode}"


def _ignore(repo: Path, ledger_root: Path) -> None:
    """Add the ledger's never-shared paths to the repository's .dvcignore (DVC refuses one inside the
    tracked directory)."""
    prefix = ledger_root.resolve().relative_to(repo).as_posix()
    path = repo / ".dvcignore"
    lines = path.read_text().splitlines() if path.exists() else []
    wanted = [f"/{prefix}/{pattern}" for pattern in IGNORED]
    missing = [w for w in wanted if w not in lines]
    if missing:
        path.write_text("\n".join([*lines, *missing]) + "\n")


def push(ledger: Ledger, remote: str | None = None) -> Shared:
    """Snapshot the ledger (`dvc add`) and push it; an unreachable remote leaves the ledger untouched."""
    if not ledger.root.is_dir():
        raise BadInput(f"no ledger at {ledger.root}")
    root = _repo_root(ledger.root)
    _ignore(root, ledger.root)
    added = _dvc(["add", "--quiet", str(ledger.root.resolve())], root)
    if added.returncode != 0:
        raise LedgerError(f"dvc add {ledger.root} failed: {_last_line(added)}")
    pointer = ledger.root.with_name(ledger.root.name + ".dvc")
    pushed = _dvc(["push", "--quiet", *(["-r", remote] if remote else []), str(pointer.resolve())], root)
    if pushed.returncode != 0:
        raise LedgerError(f"dvc push to {remote or 'the default remote'} failed: {_last_line(pushed)}; "
                          "the local ledger is untouched")
    return Shared(pointer, f"pushed {ledger.root}; commit {pointer.name} (git add {pointer} && git commit) "
                           "so that others can `ledger pull`")


def pull(ledger: Ledger, remote: str | None = None) -> Shared:
    """Fetch the ledger snapshot named by <ledger>.dvc from the remote."""
    pointer = ledger.root.with_name(ledger.root.name + ".dvc")
    if not pointer.is_file():
        raise BadInput(f"{pointer} not found: pull needs the pointer file that `ledger push` created "
                       "(commit it to git on the pushing side)")
    root = _repo_root(pointer.parent)
    pulled = _dvc(["pull", "--quiet", *(["-r", remote] if remote else []), str(pointer.resolve())], root)
    if pulled.returncode != 0:
        raise LedgerError(f"dvc pull from {remote or 'the default remote'} failed: {_last_line(pulled)}; "
                          "the local ledger is untouched")
    return Shared(pointer, f"pulled {ledger.root}")
