"""What every importer shares: line-level parse errors, the problems of one evidence file, recognising
what kind of file something is, and turning parsed evidence into a published receipt.

An importer parses its file into :class:`Evidence` (tables, workload, stack, facts) and hands it to
:func:`publish_evidence`, which lays out a staging directory exactly as ``ledger record`` would (wrapper
facts, ``stack.json``, ``rank-00000/<table>.arrows``, ``workload.json``, ``output.log``) and publishes it
with status ``imported`` through :func:`ledger.store.publish.publish`; the facts only the evidence knows (its
source, times, outcome, time to train, parse problems) are set by the publish ``amend`` hook before the id
is sealed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa

from ledger.errors import BadInput
from schemas import ImportSource, Links, Problem, Receipt, Stack, Workload
from schemas.tables import TABLES

if TYPE_CHECKING:
    from ledger.store.publish import Staged
    from ledger.store.receipts import Ledger

MAX_LISTED = 10
"""Line numbers listed in one problem message; the count is always complete."""


class LineError(BadInput, ValueError):
    """A line that looks like evidence but does not parse; the message says what was wrong with it (a
    LedgerError, so that whatever the parsers are fed, only LedgerErrors escape them)."""


class WrongKind(BadInput):
    """A file of another kind than the command expects; the message says what was expected and found."""


# --------------------------------------------------------------------------------------------- problems
@dataclass
class Issues:
    """Problems found while parsing one file, grouped so a million bad lines make one message each."""

    source: str
    unparsed: list[tuple[int, str]] = field(default_factory=list)
    fields: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def line(self, lineno: int, why: str) -> None:
        """A line that looked like evidence and did not parse."""
        self.unparsed.append((lineno, why))

    def field(self, lineno: int, why: str) -> None:
        """A field of an otherwise parsed line that was not kept."""
        self.fields.append((lineno, why))

    def note(self, message: str) -> None:
        """Anything else the receipt should say about its evidence."""
        self.notes.append(message)

    def problems(self) -> list[Problem]:
        """The issues as receipt problems (one per kind, listing the first line numbers)."""
        out = []
        if self.unparsed:
            out.append(Problem(source=self.source,
                               message=f"{len(self.unparsed)} line(s) did not parse: {_listing(self.unparsed)}"))
        if self.fields:
            out.append(Problem(source=self.source,
                               message=f"{len(self.fields)} field(s) were not kept: {_listing(self.fields)}"))
        out.extend(Problem(source=self.source, message=n) for n in self.notes)
        return out


def _listing(items: Sequence[tuple[int, str]]) -> str:
    shown = "; ".join(f"line {n}: {why}" for n, why in items[:MAX_LISTED])
    more = f" (and {len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return shown + more


# ------------------------------------------------------------------------------------------ reading
def open_text(path: Path) -> IO[str]:
    """A text file, gunzipped when it is gzip, decoded as UTF-8 with bad bytes replaced, newlines kept
    exactly as written (``\\r\\n`` is stripped by the parsers, never silently merged)."""
    with path.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return path.open("r", encoding="utf-8", errors="replace", newline="")


def numbered_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without its line end, whether it had a line end), streaming."""
    with open_text(path) as f:
        for n, line in enumerate(f, start=1):
            ended = line.endswith("\n")
            yield n, line.rstrip("\r\n"), ended


def sha256_of(path: Path) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_file(path: Path) -> None:
    """A readable regular file, or a one-line BadInput."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if not path.is_file():
        raise BadInput(f"{path}: not a file")


_RANK_PREFIX = re.compile(r"^\s*(?:\[(?:default|rank)?(\d+)\]:|(\d+):(?=\s|:::)|\[\d+,(\d+)\]<std(?:out|err)>:)\s?")


def strip_rank(line: str) -> tuple[int | None, str]:
    """Remove a launcher's rank prefix (``0: ``, ``[default3]:``, ``[rank3]:``, ``[1,3]<stdout>:``)."""
    m = _RANK_PREFIX.match(line)
    if not m:
        return None, line
    rank = next(g for g in m.groups() if g is not None)
    return int(rank), line[m.end():]


def rank_prefix_end(line: str) -> int:
    """Where a launcher's rank prefix ends in the line (0 without one)."""
    m = _RANK_PREFIX.match(line)
    return m.end() if m else 0


def describe(path: Path) -> str:
    """What a file looks like, in words, for "expected X, found Y" messages."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
    except OSError as exc:
        return f"an unreadable file ({exc.strerror or exc})"
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as g:
                head = g.read(1 << 16)
        except (OSError, EOFError):
            return "a damaged gzip file"
        prefix = "gzip-compressed "
    else:
        prefix = ""
    if not head:
        return "an empty file"
    if b"\x00" in head[:4096]:
        return prefix + "binary data"
    text = head.decode("utf-8", "replace")
    stripped = text.lstrip()
    if ":::MLLOG" in text:
        return prefix + "an MLPerf result log (:::MLLOG lines)"
    if stripped.startswith("{"):
        if '"traceEvents"' in text:
            return prefix + "a PyTorch profiler trace (traceEvents)"
        if '"start_step"' in text and '"values"' in text:
            return prefix + "Megatron-LM golden values (JSON)"
        keys = re.findall(r'^\s{0,4}"([^"]{1,40})"\s*:', text, re.M)[:5]
        return prefix + "a JSON document" + (f" (keys {', '.join(keys)})" if keys else "")
    if stripped.startswith("["):
        return prefix + "a JSON array"
    if re.search(r"iteration\s+\d+\s*/\s*\d+\s*\|", text):
        return prefix + "a Megatron-LM log (iteration lines)"
    if re.search(r"^\s*MODEL_ARGS\s*:", text, re.M):
        return prefix + "a Megatron-LM CI model_config.yaml"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return prefix + f"text starting {first[:60]!r}"


# ------------------------------------------------------------------------------------------- tables
def table(name: str, columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """A metric table in its schema from columns by name (missing columns are null)."""
    schema = TABLES[name]
    n = max((len(v) for v in columns.values()), default=0)
    arrays = []
    for f in schema:
        values = columns.get(f.name)
        if values is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(values, pa.Array):
            arrays.append(values.cast(f.type))
        else:
            arrays.append(pa.array(list(values), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """A table read back from a receipt, in today's schema: columns added since it was written are null."""
    n = t.num_rows
    arrays = [t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_tables(rank_dir: Path, tables: Mapping[str, pa.Table], skip_existing: bool = False) -> list[str]:
    """Write tables as Arrow IPC streams (``<table>.arrows``, what the SDK writes) into a rank directory;
    returns the names written. ``skip_existing`` leaves a table alone when its file is already there."""
    from ledger.store.layout import STREAM_COMPRESSION, STREAM_SUFFIX

    rank_dir.mkdir(parents=True, exist_ok=True)
    written = []
    options = pa.ipc.IpcWriteOptions(compression=STREAM_COMPRESSION)
    for name, t in tables.items():
        if not t.num_rows:
            continue
        path = rank_dir / f"{name}{STREAM_SUFFIX}"
        if skip_existing and path.exists():
            continue
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, TABLES[name], options=options) as writer:
            writer.write_table(t.cast(TABLES[name]))
        written.append(name)
    return written


# ------------------------------------------------------------------------------------------ publish
@dataclass
class Evidence:
    """Everything one imported file says, ready to publish as a receipt."""

    kind: str
    path: Path
    sha256: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    workload: Workload | None = None
    stack: Stack = field(default_factory=Stack)
    issues: Issues | None = None
    lines: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    time_to_train_s: float | None = None
    submitter: str | None = None
    division: str | None = None
    benchmark: str | None = None
    command: Sequence[str] = ()
    log: Path | None = None
    """A text file to keep as the receipt's output.log (the evidence itself, for logs)."""
    extra_problems: Sequence[Problem] = ()
    links: Links = field(default_factory=Links)
    attempt: int = 1
    exit_code: int | None = None
    signal: str | None = None
    duration_s: float | None = None

    @property
    def unparsed(self) -> int:
        return len(self.issues.unparsed) if self.issues else 0


def utc(value: datetime | None) -> datetime | None:
    """A datetime in UTC (naive ones are taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def publish_evidence(ledger: Ledger, ev: Evidence, name: str | None, tags: Mapping[str, str] | None = None) -> Receipt:
    """Publish parsed evidence as an ``imported`` receipt and sync the index if its lock is free."""
    from ledger.redact import Redactor
    from ledger.store.index import try_sync
    from ledger.store.publish import publish

    staged = stage_evidence(ledger, ev, name, tags)
    receipt = publish(ledger, staged.run_dir, staged.outcome, redact=Redactor(os.environ).text, amend=staged.amend)
    try_sync(ledger)
    return receipt


def stage_evidence(ledger: Ledger, ev: Evidence, name: str | None, tags: Mapping[str, str] | None = None) -> Staged:
    """Lay parsed evidence out as a staging directory, ready for :func:`ledger.store.publish.publish_many` (an
    import of many files publishes them in groups: :func:`publish_evidence` is one of them)."""
    from ledger.redact import Redactor
    from ledger.store.layout import LOG_FILE, STACK_FILE, WORKLOAD_FILE, rank_dir
    from ledger.store.publish import Staged
    from ledger.store.staging import Outcome, write_wrapper_facts

    ledger.ensure_writable()
    redactor = Redactor(os.environ)
    run_uuid = uuid.uuid4().hex
    run_dir = ledger.staging / run_uuid
    run_dir.mkdir(parents=True)
    started, ended = utc(ev.started_at), utc(ev.ended_at)
    write_wrapper_facts(run_dir, {
        "run_uuid": run_uuid,
        "name": name,
        "tags": dict(tags or {}),
        "started_at": started.isoformat() if started else None,
        "command": redactor.argv(list(ev.command)),
        "attempt": ev.attempt,
        "links": ev.links.model_dump(),
        "import": ev.kind,
    })
    (run_dir / STACK_FILE).write_text(json.dumps(ev.stack.model_dump(mode="json"), sort_keys=True))
    rank0 = rank_dir(run_dir, 0)
    write_tables(rank0, ev.tables)
    if ev.workload is not None:
        rank0.mkdir(parents=True, exist_ok=True)
        (rank0 / WORKLOAD_FILE).write_text(json.dumps(ev.workload.model_dump(mode="json"), sort_keys=True))
    if ev.log is not None:
        from ledger import progress

        size = ev.log.stat().st_size
        with open_text(ev.log) as src, open(run_dir / LOG_FILE, "w", encoding="utf-8") as dst, \
                progress.task(f"keeping {ev.log.name} (redacted)", size, "bytes") as advance:
            for n, line in enumerate(src, start=1):
                dst.write(redactor.text(line))
                if n % 65536 == 0:
                    advance(min(size, dst.tell()))
    problems = [*ev.extra_problems, *(ev.issues.problems() if ev.issues else [])]
    source = ImportSource(kind=ev.kind, path=ev.path.name, sha256=ev.sha256, submitter=ev.submitter,
                          division=ev.division, benchmark=ev.benchmark, lines=ev.lines,
                          unparsed_lines=ev.unparsed)

    def amend(receipt: Receipt, _tables: dict[str, pa.Table]) -> Receipt:
        duration = ev.duration_s
        if duration is None and started and ended:
            duration = (ended - started).total_seconds()
        summary = receipt.summary.model_copy(update={"outcome": ev.outcome, "time_to_train_s": ev.time_to_train_s})
        return receipt.model_copy(update={
            "source": source, "started_at": started, "ended_at": ended, "duration_s": duration,
            "exit_code": ev.exit_code, "signal": ev.signal, "summary": summary,
            "problems": (*receipt.problems, *problems),
        })

    return Staged(run_dir, Outcome(status="imported", ended_at=ended), amend)


__all__ = [
    "Evidence", "Issues", "LineError", "WrongKind", "check_file", "conform", "describe", "numbered_lines", "open_text",
    "publish_evidence", "rank_prefix_end", "sha256_of", "stage_evidence", "strip_rank", "table", "utc", "write_tables",
]
