"""The code probe: which commit a launch ran, and a digest of whatever differed from it.

Read with the git CLI, three processes for a clean tree: ``rev-parse`` (is it a repository, where its work
tree is), ``status --porcelain=v2 --branch`` (HEAD's commit and branch, then what changed) and ``config``
(the remotes' URLs); then ``diff`` only when tracked files changed. (GitPython, which this probe used before,
took longer to import than these processes take to run.) Never raises: a failure is recorded in
:attr:`schemas.receipt.Code.error` with whatever was learnt before it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
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
NOT_A_REPOSITORY = b"not a git repository"
"""What git says (in the C locale) outside any repository."""


class GitFailed(Exception):
    """A git command of the probe exited non-zero (its message is git's last line of stderr)."""


def capture_code(cwd: Path, redactor: Redactor) -> Code:
    """Commit, branch, dirty flag, diff digest and credential-free remote of the repository holding
    ``cwd``; ``Code(is_repo=False)`` outside a repository."""
    found: dict[str, Any] = {"path": str(cwd)}
    if not cwd.is_dir():
        return Code(**found)
    if shutil.which("git") is None:
        return Code(**found, error="git not found on PATH: the code was not captured")
    try:
        where = _run(cwd, "rev-parse", "--is-bare-repository", "--show-toplevel", check=False)
    except Exception as exc:
        return Code(**found, error=_oneline(exc, redactor))
    lines = where.stdout.decode("utf-8", "surrogateescape").splitlines()
    if not lines:
        if NOT_A_REPOSITORY in where.stderr:
            return Code(**found)
        return Code(**found, error=_oneline(GitFailed(_last_line(where.stderr)), redactor))
    found["is_repo"] = True
    try:
        found["remote"] = _remote_url(cwd, redactor)
        if where.returncode != 0 or len(lines) < 2:  # a bare repository, or inside .git: no work tree
            head = _run(cwd, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
            found["commit"] = head.stdout.decode().strip() or None
            ref = _run(cwd, "symbolic-ref", "-q", "--short", "HEAD", check=False)
            found["branch"] = ref.stdout.decode("utf-8", "surrogateescape").strip() or None
            return Code(**found)
        root = Path(lines[1])
        commit, branch, tracked, untracked = _status(root)
        found["commit"], found["branch"] = commit, branch
        found["dirty"] = bool(tracked or untracked)
        if found["dirty"]:
            base = "HEAD" if commit is not None else EMPTY_TREE
            diff = _run(root, "diff", base, "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                        *NOT_CODE).stdout if tracked else b""
            found["diff_digest"] = _digest(diff, root, untracked)
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


_GIT_ENV = {"LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"}
"""Git's messages in English (:data:`NOT_A_REPOSITORY` is matched), and never a prompt."""


def _run(where: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """One read-only git command run in ``where``; raises :class:`GitFailed` on a non-zero exit when
    ``check``."""
    out = subprocess.run(["git", *READ_ONLY, *args], cwd=where, env=os.environ | _GIT_ENV, capture_output=True,
                         stdin=subprocess.DEVNULL, check=False)
    if check and out.returncode != 0:
        raise GitFailed(f"git {args[0]} exited {out.returncode}: {_last_line(out.stderr)}")
    return out


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "(no message)"


def _status(root: Path) -> tuple[str | None, str | None, bool, list[bytes]]:
    """(HEAD's commit, its branch, any tracked change against HEAD, untracked paths relative to the work tree)
    from one ``git status --porcelain=v2 --branch -z``: the commit is None before the first commit, the
    branch None on a detached HEAD."""
    out = _run(root, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all",
               "--ignore-submodules=none", *NOT_CODE).stdout
    commit: str | None = None
    branch: str | None = None
    tracked = False
    untracked: list[bytes] = []
    entries = iter(out.split(b"\0"))
    for entry in entries:
        if entry.startswith(b"# branch.oid "):
            oid = entry[len(b"# branch.oid "):].decode()
            commit = None if oid == "(initial)" else oid
        elif entry.startswith(b"# branch.head "):
            head = entry[len(b"# branch.head "):].decode("utf-8", "surrogateescape")
            branch = None if head == "(detached)" else head
        elif entry.startswith(b"? "):
            untracked.append(entry[2:])
        elif entry[:2] in (b"1 ", b"2 ", b"u "):
            tracked = True
            if entry.startswith(b"2 "):
                next(entries, None)  # the rename's or copy's source path
    return commit, branch, tracked, untracked


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


def _remote_url(cwd: Path, redactor: Redactor) -> str | None:
    """URL of `origin`, else of the first remote (in the order of git's configuration), without
    credentials."""
    out = _run(cwd, "config", "-z", "--get-regexp", r"^remote\..+\.url$", check=False)
    urls: dict[str, str] = {}
    for entry in out.stdout.decode("utf-8", "surrogateescape").split("\0"):
        key, _, url = entry.partition("\n")
        if key.startswith("remote.") and key.endswith(".url"):
            urls.setdefault(key[len("remote."):-len(".url")], url)
    if not urls:
        return None
    return redactor.url(urls.get("origin", next(iter(urls.values()))))


def _oneline(exc: BaseException, redactor: Redactor) -> str:
    """An exception as one redacted line (git errors quote commands and paths)."""
    return redactor.text(error_text(exc))


__all__ = ["capture_code"]
