"""The code probe: which commit a launch ran, and a digest of whatever differed from it.

Two git processes at most (``status``, then ``diff`` only when tracked files changed); HEAD, the branch
and the remotes are read from the repository files by gitpython without spawning git. Never raises: a
failure is recorded in :attr:`schemas.receipt.Code.error` with whatever was learnt before it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from ledger.record.capture._util import error_text
from ledger.redact import Redactor
from schemas.receipt import Code

MAX_UNTRACKED_FILE = 16 * 2**20
"""Untracked files larger than this enter the digest by path and size only."""
UNTRACKED_BUDGET = 256 * 2**20
"""At most this many bytes of untracked content are hashed; later files (in path order) enter by path and
size only, so a stray dataset or virtual environment cannot stall the launch."""
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's empty tree (sha1 object format): the base of the diff in a repository without commits."""


def capture_code(cwd: Path, redactor: Redactor) -> Code:
    """Commit, branch, dirty flag, diff digest and credential-free remote of the repository holding
    ``cwd``; ``Code(is_repo=False)`` outside a repository."""
    found: dict[str, Any] = {"path": str(cwd)}
    try:
        import git
    except Exception as exc:  # gitpython refuses to import without a git executable
        return Code(**found, error=f"gitpython unavailable: {_oneline(exc, redactor)}")
    try:
        repo = git.Repo(cwd, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return Code(**found)
    except Exception as exc:
        return Code(**found, error=_oneline(exc, redactor))
    found["is_repo"] = True
    try:
        with repo:
            found["remote"] = _remote_url(repo, redactor)
            try:  # from the ref files: reading the commit object would start a git cat-file process
                found["commit"] = git.SymbolicReference.dereference_recursive(repo, "HEAD")
            except ValueError:  # no commit yet
                pass
            has_commit = found.get("commit") is not None
            found["branch"] = None if repo.head.is_detached else repo.head.reference.name
            if repo.bare:
                return Code(**found)
            tracked, untracked = _status(repo)
            found["dirty"] = bool(tracked or untracked)
            if found["dirty"]:
                base = "HEAD" if has_commit else EMPTY_TREE
                diff = _git_bytes(repo, "diff", base, "--binary", "--no-color", "--no-ext-diff",
                                  "--no-textconv", *NOT_CODE) if tracked else b""
                found["diff_digest"] = _digest(diff, Path(repo.working_tree_dir or cwd), untracked)
            return Code(**found)
    except Exception as exc:
        return Code(**found, error=_oneline(exc, redactor))


NOT_CODE = ("--", ".", ":(exclude,glob)**/dvc.lock", ":(exclude,glob)**/*.dvc", ":(exclude,glob).dvc/**")
"""Pathspec of what counts as code: the work tree except DVC's bookkeeping (dvc.lock, *.dvc pointers, .dvc/),
which describes data and changes while `dvc repro` runs the stages of one pipeline; counting it would make
every stage of a pipeline look like a code change."""

READ_ONLY = ("--no-optional-locks", "-c", "safe.directory=*", "-c", "core.fsmonitor=false")
"""Options of every git command the probe runs: take no index lock (the user's own git commands must not
fail because a launch started), read trees owned by another user (code bind-mounted into a container),
and run no fsmonitor hook (which such a tree could configure)."""


def _git_bytes(repo: Any, *args: str) -> bytes:
    """Run one read-only git command in the work tree; stdout as raw bytes."""
    out: bytes = repo.git.execute(["git", *READ_ONLY, *args], stdout_as_string=False,
                                  strip_newline_in_stdout=False)
    return out


def _status(repo: Any) -> tuple[bool, list[bytes]]:
    """(any tracked change against HEAD, untracked paths relative to the work tree) from one
    ``git status --porcelain -z``."""
    out = _git_bytes(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
                     "--ignore-submodules=none", *NOT_CODE)
    tracked = False
    untracked: list[bytes] = []
    entries = iter(out.split(b"\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code == b"??":
            untracked.append(path)
        else:
            tracked = True
            if code[:1] in (b"R", b"C"):
                next(entries, None)  # the rename's source path
    return tracked, untracked


def _digest(diff: bytes, root: Path, untracked: list[bytes]) -> str:
    """sha256 over the binary diff, then each untracked path (sorted) with its size and bytes."""
    h = hashlib.sha256(b"diff\0")
    h.update(diff)
    budget = UNTRACKED_BUDGET
    for rel in sorted(untracked):
        h.update(b"\0untracked\0" + rel + b"\0")
        path = root / os.fsdecode(rel)
        try:
            st = path.lstat()
        except OSError as exc:
            h.update(f"unreadable {exc.errno}".encode())
            continue
        if stat.S_ISLNK(st.st_mode):
            h.update(b"link\0" + os.fsencode(os.readlink(path)))
        elif not stat.S_ISREG(st.st_mode):
            h.update(b"not-a-file")  # e.g. a nested repository, listed as a directory
        elif st.st_size > MAX_UNTRACKED_FILE or st.st_size > budget:
            h.update(f"size {st.st_size}, not hashed".encode())
        else:
            budget -= st.st_size
            h.update(f"size {st.st_size}\0".encode())
            try:
                h.update(path.read_bytes())
            except OSError as exc:
                h.update(f"unreadable {exc.errno}".encode())
    return h.hexdigest()


def _remote_url(repo: Any, redactor: Redactor) -> str | None:
    """URL of `origin`, else of the first remote, without credentials."""
    remotes = list(repo.remotes)
    if not remotes:
        return None
    remote = next((r for r in remotes if r.name == "origin"), remotes[0])
    try:
        url = str(remote.url)
    except Exception:  # a remote section without a url
        return None
    return redactor.url(url)


def _oneline(exc: BaseException, redactor: Redactor) -> str:
    """An exception as one redacted line (git errors quote commands and paths)."""
    return redactor.text(error_text(exc))


__all__ = ["capture_code"]
