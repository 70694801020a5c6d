"""What a team adds to a receipt after it is sealed: notes and archive flags, as append-only records beside it.

A sealed receipt never changes (its id is its digest), so a note ("this run was on a degraded node") or an
archive flag (a mistyped launch, hidden from `ledger ls` and the web view) is a record of its own::

    <ledger>/annotations/<id[:2]>/<id>/<sha256>.json    one record: {"v", "receipt_id", "kind", "text",
                                                         "author", "at"}, named by the sha256 of its bytes

``kind`` is ``note``, ``archive`` or ``unarchive``; a receipt is archived when its latest archive or unarchive
record (by time) is ``archive``. Records are only ever added, each in one file written once (a temporary file
renamed into place), so two people annotating at once never collide, and `ledger push`/`pull` share them as a set
that only grows, exactly like receipts (:mod:`ledger.replay.share`). A record whose bytes do not match its name is
damaged and ignored. Nothing here touches a receipt's directory.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from ledger.errors import BadInput
from ledger.store.layout import ID_RE, SHARD_CHARS, listdir

ANNOTATIONS = "annotations"
"""In the ledger directory: the records, sharded by receipt id like the receipts."""
VERSION = 1
KINDS = ("note", "archive", "unarchive")
MAX_TEXT = 4000
"""Characters of one note."""
ENV_AUTHOR = "LEDGER_AUTHOR"
"""Who annotates, when ``--author`` is not given."""

Kind = Literal["note", "archive", "unarchive"]


@dataclass(frozen=True)
class Annotation:
    """One record about one receipt."""

    receipt_id: str
    kind: Kind
    text: str
    author: str
    at: str
    """UTC time, ISO 8601."""

    def to_bytes(self) -> bytes:
        """The record's file content (canonical JSON: sorted keys, no spaces)."""
        data = {"v": VERSION, **asdict(self)}
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def digest(self) -> str:
        """The sha256 of its bytes: its file name."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def to_json(self) -> dict[str, str]:
        """As JSON data (what `ledger show --json` and the API give)."""
        return asdict(self)


def directory(root: Path, receipt_id: str) -> Path:
    """Where a receipt's records live."""
    return root / ANNOTATIONS / receipt_id[:SHARD_CHARS] / receipt_id


def default_author() -> str:
    """``$LEDGER_AUTHOR``, else the login name and host (``alice@node17``)."""
    author = os.environ.get(ENV_AUTHOR, "").strip()
    if author:
        return author
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def add(root: Path, receipt_id: str, kind: Kind, text: str = "", author: str | None = None,
        redact: Callable[[str], str] | None = None, at: datetime | None = None) -> Annotation:
    """Append one record about a published receipt (``redact``: applied to the text and the author, as to every
    string a receipt holds)."""
    if kind not in KINDS:
        raise BadInput(f"unknown annotation kind {kind!r}; use one of: {', '.join(KINDS)}")
    if not ID_RE.match(receipt_id):
        raise BadInput(f"not a receipt id: {receipt_id!r}")
    text = text.strip()
    if kind == "note" and not text:
        raise BadInput("empty note: give the text, e.g. ledger note REF 'ran on a degraded node'")
    if len(text) > MAX_TEXT:
        raise BadInput(f"a note holds at most {MAX_TEXT} characters (this one has {len(text)})")
    who = (author or default_author()).strip() or "unknown"
    if redact is not None:
        text, who = redact(text), redact(who)
    when = (at or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="microseconds")
    record = Annotation(receipt_id, kind, text, who, when)
    write(root, record.to_bytes())
    return record


def write(root: Path, data: bytes) -> Path:
    """Place one record's bytes under its name (written once: a temporary file renamed into place); the record
    is parsed first, so only well-formed records of a valid receipt id are ever placed."""
    record = parse(data)
    folder = directory(root, record.receipt_id)
    target = folder / f"{hashlib.sha256(data).hexdigest()}.json"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{uuid.uuid4().hex}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return target


def parse(data: bytes) -> Annotation:
    """A record from its bytes; malformed ones are a :class:`BadInput` naming what is wrong."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"annotation is not JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("v") != VERSION:
        raise BadInput(f"annotation of an unknown version (expected v={VERSION})")
    fields = ("receipt_id", "kind", "text", "author", "at")
    if set(raw) != {"v", *fields} or not all(isinstance(raw[k], str) for k in fields):
        raise BadInput(f"annotation fields must be v and {', '.join(fields)} (strings)")
    if raw["kind"] not in KINDS or not ID_RE.match(raw["receipt_id"]):
        raise BadInput(f"annotation of kind {raw['kind']!r} about {raw['receipt_id']!r}")
    return Annotation(raw["receipt_id"], raw["kind"], raw["text"], raw["author"], raw["at"])


def _read(path: Path) -> Annotation | None:
    """The record in a file whose bytes match its name; None for a damaged or foreign file."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != path.stem:
        return None
    try:
        return parse(data)
    except BadInput:
        return None


def _ordered(records: Iterable[Annotation]) -> list[Annotation]:
    return sorted(records, key=lambda a: (a.at, a.digest))


def of(root: Path, receipt_id: str) -> list[Annotation]:
    """A receipt's records, oldest first."""
    folder = directory(root, receipt_id)
    found = (_read(folder / n) for n in listdir(folder) if n.endswith(".json"))
    return _ordered(a for a in found if a is not None and a.receipt_id == receipt_id)


def files(root: Path) -> list[tuple[str, Path]]:
    """(receipt id, file) of every record in the ledger (for push), in a stable order."""
    base = root / ANNOTATIONS
    out = []
    for shard in sorted(listdir(base)):
        for receipt_id in sorted(listdir(base / shard)):
            if ID_RE.match(receipt_id):
                out += [(receipt_id, base / shard / receipt_id / n)
                        for n in sorted(listdir(base / shard / receipt_id)) if n.endswith(".json")]
    return out


def everything(root: Path) -> dict[str, list[Annotation]]:
    """Every annotated receipt's records, oldest first (one listing per annotated receipt: the cost follows the
    annotations, not the ledger)."""
    out: dict[str, list[Annotation]] = {}
    for receipt_id, path in files(root):
        record = _read(path)
        if record is not None and record.receipt_id == receipt_id:
            out.setdefault(receipt_id, []).append(record)
    return {k: _ordered(v) for k, v in out.items()}


def is_archived(records: Iterable[Annotation]) -> bool:
    """Whether the latest archive/unarchive record says archived."""
    flags = [a.kind for a in _ordered(records) if a.kind in ("archive", "unarchive")]
    return bool(flags) and flags[-1] == "archive"


def notes(records: Iterable[Annotation]) -> list[Annotation]:
    """The notes among a receipt's records, oldest first."""
    return [a for a in _ordered(records) if a.kind == "note"]


def archived_ids(root: Path) -> set[str]:
    """Ids of the archived receipts."""
    return {rid for rid, records in everything(root).items() if is_archived(records)}


def describe(record: Annotation) -> str:
    """One line: ``2026-12-02 10:31 alice@node17: ran on a degraded node`` (archive flags in words)."""
    when = record.at[:16].replace("T", " ")
    what = record.text if record.kind == "note" else {"archive": "archived", "unarchive": "unarchived"}[record.kind]
    if record.kind != "note" and record.text:
        what += f" ({record.text})"
    return f"{when} {record.author}: {what}"
