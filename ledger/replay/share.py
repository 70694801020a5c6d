"""Sharing a ledger through a remote (S3 or any other DVC remote, or a URL): receipt by receipt.

A receipt is immutable and content-addressed, so a remote is a set of receipts that only grows::

    <remote>/receipts/<id>/receipt.json, <table>.parquet, output.log   the receipt's files
    <remote>/ids/<id>                                                  empty: "<id> is complete here"
    <remote>/annotations/<id>/<sha256>.json                            a note or archive flag about <id>

`push` lists ``ids/`` (one request per 1,000 receipts on S3), uploads the files of each local receipt that
is not listed, and writes its ``ids/<id>`` marker only after its files: a push cut short leaves files
without a marker, which the next push uploads again. Two clones pushing at once write disjoint keys, or the
same bytes under the same key, so nothing is lost and nothing needs merging. `pull` lists ``ids/``, fetches
the receipts it does not hold into a temporary directory inside the ledger, verifies each against its own
digests and publishes it with one rename; a damaged receipt, one nested too deeply to be a receipt, or a marker
whose files are gone is reported and left out, and the others come over. The records a team added beside the
receipts (notes, archive flags: :mod:`ledger.store.annotation`) travel the same way, each named by its digest and
checked against it on arrival.

Where the remote is: a DVC remote of the repository that holds the ledger (``dvc remote add -d team
s3://bucket/ledger``; the default one unless named; an S3-compatible store takes ``dvc remote modify team
endpointurl URL``), or a URL (``s3://bucket/prefix``, a local path). Credentials come from the environment
and the AWS configuration, as DVC and boto find them; nothing here writes them anywhere. The DVC extra
(``dvc``, ``dvc-s3``) is imported by these functions only, never by the CLI at start-up.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.errors import BadInput, LedgerError, MissingExtra
from ledger.store.layout import ID_RE, RECEIPT_FILE, TMP_PREFIX
from ledger.store.receipts import Ledger

RECEIPTS = "receipts"
"""On the remote: one folder of files per receipt."""
IDS = "ids"
"""On the remote: one empty marker per complete receipt (written after its files)."""
ANNOTATIONS = "annotations"
"""On the remote: ``annotations/<id>/<sha256>.json``, the records a team added beside each receipt (notes, archive
flags: :mod:`ledger.store.annotation`), each named by the digest of its bytes: a set that only grows, like the
receipts."""


@dataclass
class Remote:
    """A remote's file system (fsspec) and the path of the ledger on it."""

    fs: Any
    base: str
    label: str

    def receipt(self, receipt_id: str) -> str:
        return f"{self.base}/{RECEIPTS}/{receipt_id}"

    def marker(self, receipt_id: str) -> str:
        return f"{self.base}/{IDS}/{receipt_id}"

    def annotation(self, receipt_id: str, name: str) -> str:
        return f"{self.base}/{ANNOTATIONS}/{receipt_id}/{name}"


@dataclass
class Shared:
    """What a push or pull did."""

    moved: list[str] = field(default_factory=list)
    """Receipts uploaded (push) or fetched and published (pull)."""
    already: int = 0
    """Receipts the other side held already (not moved)."""
    damaged: dict[str, str] = field(default_factory=dict)
    """Receipts left out, with the reason (damaged locally for a push, on the remote for a pull)."""
    message: str = ""
    annotations: int = 0
    """Annotation records (notes, archive flags) uploaded or fetched."""


def _is_url(remote: str) -> bool:
    return "://" in remote or remote.startswith(("/", "./", "../"))


def _repo_root(path: Path) -> Path:
    for candidate in [path.resolve(), *path.resolve().parents]:
        if (candidate / ".dvc").is_dir():
            return candidate
    raise BadInput(f"no DVC repository contains {path}: run `dvc init` and `dvc remote add -d NAME URL` "
                   "in the repository that holds the ledger, or give the remote as a URL (--remote s3://...)")


def resolve(ledger: Ledger, remote: str | None) -> Remote:
    """The remote named (a DVC remote or a URL), else the default DVC remote of the ledger's repository."""
    if remote and _is_url(remote):
        from fsspec.core import url_to_fs

        try:
            fs, base = url_to_fs(remote)
        except Exception as exc:  # an unknown protocol, a backend not installed, the backend's own configuration
            if isinstance(exc, ImportError) and remote.startswith(("s3://", "s3a://")):  # the dvc extra brings s3fs
                raise MissingExtra("s3fs", "dvc") from exc
            raise LedgerError(f"remote {remote} cannot be opened: {_first_line(exc)}; the local ledger is "
                              "untouched") from exc
        return Remote(_local_mkdirs(fs), str(base).rstrip("/"), remote)
    root = _repo_root(ledger.root if ledger.root.exists() else ledger.root.parent)
    try:
        from dvc.exceptions import DvcException
        from dvc.repo import Repo
    except ImportError as exc:
        raise MissingExtra("dvc", "dvc") from exc
    try:
        with Repo(str(root)) as repo:
            found = repo.cloud.get_remote(remote)
            base = str(found.path).rstrip("/")
            if found.fs.protocol == "local":  # a directory (or a mount): fsspec's own local file system
                from fsspec.implementations.local import LocalFileSystem

                fs = LocalFileSystem()
            else:
                fs = found.fs.fs  # the fsspec file system under DVC's wrapper (s3fs for s3://)
    except DvcException as exc:
        raise BadInput(f"DVC remote {remote or '(default)'}: {exc}; add one with `dvc remote add -d NAME URL`") \
            from exc
    except Exception as exc:  # a plugin not installed (DVC names it), the backend's own configuration errors
        if isinstance(exc, ImportError) and "'dvc-s3'" in str(exc):  # the dvc extra brings dvc-s3
            raise MissingExtra("dvc-s3", "dvc") from exc
        raise LedgerError(f"DVC remote {remote or '(default)'} cannot be opened: {_first_line(exc)}") from exc
    return Remote(_local_mkdirs(fs), base, f"DVC remote {remote}" if remote else "the default DVC remote")


def _local_mkdirs(fs: Any) -> Any:
    """A local remote needs its folders made; object stores have none."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        fs.auto_mkdir = True
    return fs


def remote_ids(remote: Remote) -> set[str]:
    """Ids of the complete receipts on the remote (one listing of its markers)."""
    remote.fs.invalidate_cache()
    try:
        names = remote.fs.ls(f"{remote.base}/{IDS}", detail=False)
    except FileNotFoundError:
        return set()
    ids = (str(n).rstrip("/").rsplit("/", 1)[-1] for n in names)
    return {i for i in ids if ID_RE.match(i)}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _fail(action: str, remote: Remote, exc: Exception) -> LedgerError:
    return LedgerError(f"{action} {remote.label} failed: {_first_line(exc)}; the local ledger is untouched")


def _files(ledger: Ledger, receipt_id: str) -> list[Path]:
    directory = ledger.path(receipt_id)
    return sorted(p for p in directory.iterdir() if p.is_file())


def push(ledger: Ledger, remote: str | None = None) -> Shared:
    """Upload the receipts the remote does not hold (each verified first; a damaged one is left out)."""
    from ledger.store.integrity import verify_receipt

    if not ledger.root.is_dir():
        raise BadInput(f"no ledger at {ledger.root}")
    where = resolve(ledger, remote)
    try:
        there = remote_ids(where)
    except Exception as exc:  # every backend raises its own types (OSError, botocore, aiohttp...)
        raise _fail("listing", where, exc) from exc
    result = Shared()
    local = ledger.ids()
    todo = [i for i in local if i not in there]
    result.already = len(local) - len(todo)
    sources: list[str] = []
    targets: list[str] = []
    for receipt_id in todo:
        findings = verify_receipt(ledger, receipt_id)
        if findings:
            result.damaged[receipt_id] = str(findings[0])
            continue
        for path in _files(ledger, receipt_id):
            sources.append(str(path))
            targets.append(f"{where.receipt(receipt_id)}/{path.name}")
        result.moved.append(receipt_id)
    try:
        if sources:
            where.fs.put(sources, targets)
        for receipt_id in result.moved:  # a receipt counts as pushed once its files are all there
            where.fs.pipe_file(where.marker(receipt_id), b"")
        result.annotations = _push_annotations(ledger, where, there | set(result.moved))
    except Exception as exc:
        raise _fail("push to", where, exc) from exc
    result.message = (f"pushed {len(result.moved)} receipt(s) to {where.label} ({result.already} already there)"
                      + _annotations_note(result) + _damaged_note(result, "locally"))
    return result


def remote_annotations(remote: Remote) -> set[tuple[str, str]]:
    """(receipt id, file name) of every annotation record on the remote (one listing)."""
    remote.fs.invalidate_cache()
    try:
        found = remote.fs.find(f"{remote.base}/{ANNOTATIONS}")
    except FileNotFoundError:
        return set()
    out = set()
    for path in found:
        parts = str(path).rstrip("/").rsplit("/", 2)
        if len(parts) == 3 and ID_RE.match(parts[1]) and parts[2].endswith(".json"):
            out.add((parts[1], parts[2]))
    return out


def _push_annotations(ledger: Ledger, where: Remote, receipts_there: set[str]) -> int:
    """Upload the records of receipts the remote holds that it lacks; returns how many."""
    from ledger.store import annotation

    there = remote_annotations(where)
    todo = [(rid, path) for rid, path in annotation.files(ledger.root)
            if rid in receipts_there and (rid, path.name) not in there]
    if todo:
        where.fs.put([str(p) for _, p in todo], [where.annotation(rid, p.name) for rid, p in todo])
    return len(todo)


def _pull_annotations(ledger: Ledger, where: Remote, result: Shared) -> None:
    """Fetch the remote's records about receipts this ledger holds that it lacks; each is checked against its
    name (the sha256 of its bytes) and parsed before it is placed (a bad one is reported in ``damaged``)."""
    import hashlib

    from ledger.errors import BadInput
    from ledger.store import annotation

    here = set(ledger.ids())
    have = {(rid, p.name) for rid, p in annotation.files(ledger.root)}
    todo = sorted(k for k in remote_annotations(where) - have if k[0] in here)
    for rid, name in todo:
        try:
            data = where.fs.cat_file(where.annotation(rid, name))
        except Exception as exc:  # the receipts of this pull are published already: the ledger is not untouched
            raise LedgerError(f"pull from {where.label} failed: {_first_line(exc)}; {len(result.moved)} receipt(s) "
                              f"and {result.annotations} note/archive record(s) were pulled before it; the next "
                              "pull fetches the rest") from exc
        try:
            if hashlib.sha256(data).hexdigest() + ".json" != name or annotation.parse(data).receipt_id != rid:
                raise BadInput("its bytes do not match its name")
        except BadInput as exc:
            result.damaged[f"annotations/{rid}/{name}"] = f"annotation {name[:12]} of {rid[:12]}: {exc}"
            continue
        annotation.write(ledger.root, data)
        result.annotations += 1


def _annotations_note(result: Shared) -> str:
    return f"; {result.annotations} note/archive record(s)" if result.annotations else ""


def _damaged_note(result: Shared, where: str) -> str:
    """What was left out and why: the first three reasons, then how many more."""
    if not result.damaged:
        return ""
    reasons = list(result.damaged.values())
    more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return (f"; {len(reasons)} damaged or incomplete {where} and left out ({'; '.join(reasons[:3])}{more}; "
            "`ledger verify` checks a receipt)")


def pull(ledger: Ledger, remote: str | None = None) -> Shared:
    """Fetch the receipts this ledger does not hold; each is verified before it is published here."""
    from ledger.store.integrity import verify_receipt

    where = resolve(ledger, remote)
    try:
        there = remote_ids(where)
    except Exception as exc:
        raise _fail("listing", where, exc) from exc
    result = Shared()
    here = set(ledger.ids())
    todo = sorted(there - here)
    result.already = len(there) - len(todo)
    if not todo:
        _pull_annotations(ledger, where, result)
        result.message = (f"pulled 0 receipt(s) from {where.label} ({result.already} already here)"
                          + _annotations_note(result) + _damaged_note(result, "on the remote"))
        return result
    ledger.root.mkdir(parents=True, exist_ok=True)
    landing = Ledger(ledger.root / f"{TMP_PREFIX}pull-{uuid.uuid4().hex[:12]}")
    try:
        sources: list[str] = []
        targets: list[str] = []
        fetched = []
        try:
            for receipt_id in todo:
                names = _listing(where, receipt_id)
                if not names:  # a marker without its files: a push cut short, or files removed since
                    result.damaged[receipt_id] = (f"{receipt_id[:12]}: {IDS}/{receipt_id[:12]}... is on the remote "
                                                  f"but {RECEIPTS}/{receipt_id[:12]}... holds no file")
                    continue
                directory = landing.path(receipt_id)
                directory.mkdir(parents=True)
                for name in names:
                    sources.append(name)
                    targets.append(str(directory / name.rstrip("/").rsplit("/", 1)[-1]))
                fetched.append(receipt_id)
            if sources:
                where.fs.get(sources, targets)
        except Exception as exc:
            raise _fail("pull from", where, exc) from exc
        for receipt_id in fetched:
            findings = verify_receipt(landing, receipt_id)
            if findings or not (landing.path(receipt_id) / RECEIPT_FILE).is_file():
                result.damaged[receipt_id] = str(findings[0]) if findings else f"{receipt_id[:12]}: no {RECEIPT_FILE}"
                continue
            _place(landing.path(receipt_id), ledger.path(receipt_id))
            result.moved.append(receipt_id)
    finally:
        shutil.rmtree(landing.root, ignore_errors=True)
    _pull_annotations(ledger, where, result)
    result.message = (f"pulled {len(result.moved)} receipt(s) from {where.label} ({result.already} already here)"
                      + _annotations_note(result) + _damaged_note(result, "on the remote"))
    return result


def _listing(where: Remote, receipt_id: str) -> list[str]:
    """The files of one receipt on the remote (none when its folder is missing or empty)."""
    try:
        names = where.fs.ls(where.receipt(receipt_id), detail=False)
    except FileNotFoundError:
        return []
    return [str(n) for n in names if not str(n).rstrip("/").endswith(f"/{receipt_id}")]


def _place(source: Path, target: Path) -> None:
    """Publish a verified receipt directory with one rename (as a local publish does)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(source, target)
    except OSError:
        if not target.is_dir():
            raise
        # published meanwhile by another pull or a local run: the same content, by its id
