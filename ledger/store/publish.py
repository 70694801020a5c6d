"""Turn a run's staging directory into a published receipt, exactly once.

Order of operations (each step survives a crash of the publisher at any point):

1. lock the staging directory (``flock`` on its ``lock`` file, held by the wrapper for the whole run and
   released by the kernel if the holder dies);
2. merge every rank's files into Parquet under ``<root>/.tmp-<uuid>/``, hash them, build and validate
   the receipt, seal its id;
3. mark the staging directory with the id: write it into the lock's file (``lock``) and flush it to disk;
4. rename ``.tmp-<uuid>`` to ``<root>/<id[:2]>/<id>`` — the one atomic step that makes the receipt visible;
5. append the id to the journal (:mod:`ledger.store.journal`), so that syncing the index lists nothing;
6. remove the staging directory.

A publisher killed before 4 leaves an invisible temporary directory and a staging directory that
``ledger recover`` publishes again (a mark that names no receipt is written over); killed after 4, recover
finds the mark naming an existing receipt and only appends it to the journal (again: a duplicate line is
harmless) and removes the staging directory. Readers only ever see complete receipts. (Until 2026-12-02 the
mark was a file of its own, ``PUBLISHED_AS``: still honoured, for a staging directory a publisher of an older
version left; the lock's file already exists, so the mark creates no file: each file created cost a bulk
publish the search for a free inode, :func:`_write_table`.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from ledger.errors import LinkRefused
from ledger.store import journal
from ledger.store.energy import energy_summary
from ledger.store.faults import fault
from ledger.store.integrity import recorded_sha256, seal_json, sha256_file
from ledger.store.layout import (
    ARGUMENTS_FILE,
    CAPTURE_FILE,
    ID_RE,
    JSONL_SUFFIX,
    LOCK_FILE,
    LOG_DIGEST_FILE,
    LOG_FILE,
    RUNTIME_FILE,
    STACK_FILE,
    STREAM_SUFFIX,
    TMP_PREFIX,
    WORKLOAD_FILE,
    WRAPPER_FILE,
)
from ledger.store.merge import empty, odd_rank_dirs, rank_dirs, read_json, read_table
from ledger.store.receipts import Ledger, write_receipt
from ledger.store.staging import PROBLEMS_FILE, Outcome, staging_lock
from ledger.store.summary import summarize
from schemas import Artifact, Capture, Failure, Links, Problem, Receipt, Stack, Workload
from schemas.tables import EXTRA, TABLES

Redact = Callable[[str], str]
RuntimeMerge = Callable[[Stack, dict[int, dict[str, Any]]], tuple[Stack, list[str]]]
"""Folds the ranks' runtime facts into a stack; returns it and notes (see ``publish``)."""

PUBLISHED_MARK = "PUBLISHED_AS"
"""The file that marked a staging directory with the id it was published as before 2026-12-02 (now the lock's
file holds the mark: :func:`published_as`)."""

def _read_problems(run_dir: Path) -> list[Problem]:
    path = run_dir / PROBLEMS_FILE
    if not path.exists():
        return []
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:  # the launch put something else there (a folder): the run is published all the same
        return [Problem(source=PROBLEMS_FILE, message=f"the notes could not be read ({exc.strerror or exc})")]
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
            out.append(Problem(source=str(item["source"]), message=str(item["message"])))
        except (ValueError, KeyError, TypeError):
            out.append(Problem(source=PROBLEMS_FILE, message=f"unreadable note: {line[:200]}"))
    return out


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _workload(
    run_dir: Path, problems: list[Problem], redact: Redact, dirs: list[tuple[int, Path]] | None = None,
) -> Workload:
    """The workload the training process described, else the launch's own arguments (``arguments``)."""
    workload = _reported_workload(run_dir, problems, redact, dirs)
    if workload != Workload():
        return workload
    data, problem = read_json(run_dir / ARGUMENTS_FILE)
    if problem:
        problems.append(problem)
    if not isinstance(data, dict) or not data:
        return workload
    arguments = {str(k): str(v) for k, v in _redact_json(data, redact).items()}
    seed, arguments = _seed_of(arguments)
    return workload.model_copy(update={"arguments": arguments, "seed": seed})


SEED_NAMES = ("seed", "random_seed")
"""A launch argument or config key named so (its last component: ``--seed``, ``train.yaml:training.seed``) is the
run's seed (``workload.seed``, factor ``seed``), not an argument: two runs that differ only in it are replicates of
one configuration, as two seeds of an SDK run are."""


def _seed_of(arguments: dict[str, str]) -> tuple[int | None, dict[str, str]]:
    """The seed among a launch's arguments, and the arguments without it; None (arguments untouched) when no key
    names one, or the keys that do disagree or hold no whole number."""
    keys = [k for k in arguments if k.replace(":", ".").rsplit(".", 1)[-1].lstrip("-").lower() in SEED_NAMES]
    values = {arguments[k].strip() for k in keys}
    if len(values) != 1:
        return None, arguments
    (value,) = values
    if not value.lstrip("-").isdigit():
        return None, arguments
    return int(value), {k: v for k, v in arguments.items() if k not in keys}


def _reported_workload(
    run_dir: Path, problems: list[Problem], redact: Redact, dirs: list[tuple[int, Path]] | None = None,
) -> Workload:
    """The workload reported by the lowest rank (ranks that disagree are noted)."""
    found: list[tuple[int, dict[str, Any]]] = []
    for rank, directory in rank_dirs(run_dir) if dirs is None else dirs:
        data, problem = read_json(directory / WORKLOAD_FILE)
        if problem:
            problems.append(problem.model_copy(update={"source": f"{directory.name}/{problem.source}"}))
        if data is not None:
            found.append((rank, data))
    if not found:
        return Workload()
    rank, data = found[0]
    if any(other != data for _, other in found[1:]):
        problems.append(
            Problem(source=WORKLOAD_FILE, message=f"ranks reported different workloads; kept rank {rank}'s")
        )
    try:
        return Workload.model_validate(_redact_json(data, redact))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        problems.append(Problem(source=f"rank-{rank:05d}/{WORKLOAD_FILE}",
                                message=f"field {field}: {err['msg']}; workload not recorded"))
        return Workload()


def _capture(run_dir: Path, problems: list[Problem], redact: Redact) -> Capture | None:
    """Where `ledger record` took the tables and configuration from (hook of :mod:`ledger.ingest.launch`), its
    strings redacted: the metric names it lists and its sentence come from the launch (an SDK metric named by a
    token was kept here while ``steps.parquet`` redacted it)."""
    data, problem = read_json(run_dir / CAPTURE_FILE)
    if problem:
        problems.append(problem)
    if not isinstance(data, dict):
        return None
    try:
        return Capture.model_validate(_redact_json(data, redact))
    except ValidationError as exc:
        problems.append(Problem(source=CAPTURE_FILE, message=f"invalid: {exc.errors()[0]['msg']}"))
        return None


def _stack(
    run_dir: Path, problems: list[Problem], redact: Redact, merge_facts: RuntimeMerge | None,
    dirs: list[tuple[int, Path]] | None = None,
) -> Stack:
    data, problem = read_json(run_dir / STACK_FILE)
    if problem:
        problems.append(problem)
    if data is None:
        problems.append(Problem(source=STACK_FILE, message="the stack was not captured (the wrapper ended first)"))
        stack = Stack()
    else:
        try:
            stack = Stack.model_validate(data)
        except ValidationError as exc:
            problems.append(Problem(source=STACK_FILE, message=f"invalid: {exc.errors()[0]['msg']}"))
            stack = Stack()
    facts: dict[int, dict[str, Any]] = {}
    for rank, directory in rank_dirs(run_dir) if dirs is None else dirs:
        runtime, problem = read_json(directory / RUNTIME_FILE)
        if problem:
            problems.append(problem)
        if runtime is not None and rank >= 0:
            facts[rank] = _redact_json(runtime, redact)
    if facts and merge_facts is None:
        problems.append(Problem(source=RUNTIME_FILE, message="runtime facts of the ranks were not merged"))
    elif facts and merge_facts is not None:
        stack, notes = merge_facts(stack, facts)
        problems.extend(Problem(source=RUNTIME_FILE, message=n) for n in notes)
    return stack


def _energy(telemetry: pa.Table) -> tuple[float | None, str]:
    if not telemetry.num_rows:
        return None, "not measured"
    return energy_summary(telemetry)




LIST_ROW_GROUP = 1 << 16
"""Rows per Parquet row group of a table with list columns (routing: 65,536 rows of a layer's counts), so
that a reader scans one file on every core (a row group is the unit DuckDB and Arrow read in parallel)."""

DICTIONARY_PAGE = 64 << 10
"""Bytes of a Parquet column's dictionary page after which the writer falls back to plain encoding."""


UNCOMPRESSED_BYTES = 4 << 10
"""A table of up to this many bytes in Arrow is written to Parquet uncompressed (:func:`write_parquet`)."""


def write_parquet(table: pa.Table, path: Path | pa.NativeFile) -> None:
    """One metric table as a receipt's Parquet file (zstd).

    - The custom metrics of the steps table (the ``extra`` MAP) are written without a dictionary or
      statistics: their names repeat in a pattern zstd packs as small as a dictionary would, and min/max of
      names or of mixed metrics prune no query, while hashing a million names cost as much as writing every
      other column. The names are compressed with LZ4 (Parquet's LZ4_RAW), every other column with zstd:
      on 1,000,000 names (10 a row), LZ4 packs their repeating pattern smaller than zstd (the MAP column 2%
      smaller) in a quarter less CPU time for the whole MAP column. Names that come dictionary-coded (the
      SDK's, :func:`ledger.store.merge.read_table` with ``coded``) are written as they are, Parquet's
      dictionary encoding without hashing a name: a dictionary page and a few bits a value (zstd), never a
      string per value. The file's MAP is the same to any Parquet reader (DuckDB reads MAP(VARCHAR, DOUBLE));
      the Arrow schema stored beside it says the names are dictionary-coded, which pyarrow then returns.
    - A column's dictionary stops at :data:`DICTIONARY_PAGE` bytes, after which the rest of its row group is
      written plain: columns of few values (rank, a constant learning rate, phases, kinds) keep their
      dictionary, while a column of unique values (step, time, loss) stops hashing after 8,192 of them instead
      of hashing a whole row group into a dictionary that packs nothing (Arrow's default limit is 1 MiB).
      Measured on 100,000 steps of 10 standard metrics: the steps file written in a third of the CPU time and
      23% smaller (10 custom names, the MAP unchanged: 0.85x the CPU time, 4% smaller).
    - Lists of integers (routing's per-expert counts) are delta-bit-packed (Parquet's DELTA_BINARY_PACKED)
      instead of plain 8-byte values: counts of a few million need about 21 bits. Measured on 58 x 256
      routing: 10% smaller after zstd, written 2.6x and read (a DuckDB scan) 2.7-3.7x faster in CPU time.
    - A table of up to :data:`UNCOMPRESSED_BYTES` in Arrow is written uncompressed: compressing a few rows
      saves nothing (each column chunk's zstd frame costs more than its values: 5 steps of 19 columns, 6.7 kB
      with zstd, 6.5 kB without), and creating a zstd context for every column chunk was half of writing such
      a table (5 steps: 1.8 ms of CPU with zstd, 0.8 ms without).
    """
    fields = list(table.schema)
    packed = [f.name for f in fields if pa.types.is_list(f.type) and pa.types.is_integer(f.type.value_type)]
    plain = [f.name for f in fields if not pa.types.is_map(f.type) and f.name not in packed]
    coded = [f"{f.name}.key_value.key" for f in fields if pa.types.is_map(f.type) and _coded_keys(f.type)]
    compression = _compression(table.schema) if table.nbytes > UNCOMPRESSED_BYTES else "none"
    pq.write_table(table, path, compression=compression, use_dictionary=plain + coded,
                   write_statistics=[f.name for f in fields if not pa.types.is_map(f.type)],
                   column_encoding={f"{name}.list.element": "DELTA_BINARY_PACKED" for name in packed} or None,
                   dictionary_pagesize_limit=DICTIONARY_PAGE, row_group_size=LIST_ROW_GROUP if packed else None)


def _compression(schema: pa.Schema) -> str | dict[str, str]:
    """zstd for every column, except the keys of a MAP column (LZ4_RAW); per leaf column path, as the Parquet
    writer names them (a codec per column leaves every column not named uncompressed, so all are named)."""
    if not any(pa.types.is_map(f.type) for f in schema):
        return "zstd"
    codecs = {}
    for f in schema:
        if pa.types.is_map(f.type):
            codecs[f"{f.name}.key_value.key"] = "zstd" if _coded_keys(f.type) else "lz4_raw"
            codecs[f"{f.name}.key_value.value"] = "zstd"
        elif pa.types.is_list(f.type):
            codecs[f"{f.name}.list.element"] = "zstd"
        elif pa.types.is_nested(f.type):  # no table has one: one codec for all rather than a path guessed
            return "zstd"
        else:
            codecs[f.name] = "zstd"
    return codecs


def _coded_keys(type_: pa.MapType) -> bool:
    """True when a MAP's keys are dictionary-coded."""
    return bool(pa.types.is_dictionary(type_.key_type))


def _redact_strings(table: pa.Table, redact: Redact) -> pa.Table:
    """Apply the redactor to every string column (event details, eval sources, phases, extra keys...):
    the training process may log anything, and nothing it logs may carry a secret into the ledger.
    Dictionary-coded names are read in their dictionaries, and decoded only when one must change."""
    for i, f in enumerate(table.schema):
        if pa.types.is_map(f.type) and _coded_keys(f.type):
            names = {n for chunk in table.column(i).chunks for n in chunk.keys.dictionary.to_pylist()}
            if all(redact(n) == n for n in names if n is not None):
                continue
            f = f.with_type(EXTRA)
            table = table.set_column(i, f, table.column(i).cast(EXTRA))
        if pa.types.is_string(f.type):
            values = table.column(i).to_pylist()
            done = {v: redact(v) for v in set(values) if v is not None}  # phases, kinds: few distinct values
            cleaned = [None if v is None else done[v] for v in values]
            if cleaned != values:
                table = table.set_column(i, f, pa.array(cleaned, f.type))
        elif pa.types.is_map(f.type) and table.num_rows:
            import pyarrow.compute as pc

            distinct = {k for chunk in table.column(i).chunks for k in pc.unique(chunk.keys).to_pylist()}
            keys = {k: redact(k) for k in distinct if k is not None}  # metric names: a few, on many rows
            if all(k == v for k, v in keys.items()):
                continue
            rows = table.column(i).to_pylist()
            cleaned_rows = [None if r is None else [(keys[k], v) for k, v in r] for r in rows]
            table = table.set_column(i, f, pa.array(cleaned_rows, f.type))
    return table


def _redact_json(data: Any, redact: Redact) -> Any:
    """Every string through ``redact``, and values under secret-named keys dropped (``seed_secret``)."""
    from ledger.redact import redact_json

    return redact_json(data, redact)


Amend = Callable[[Receipt, dict[str, pa.Table]], Receipt]


def build(
    ledger: Ledger, run_dir: Path, outcome: Outcome, tmp: Path, redact: Redact, amend: Amend | None = None,
    runtime: RuntimeMerge | None = None, empties: dict[str, Path] | None = None,
) -> Receipt:
    """Merge the staging directory into ``tmp`` and return the sealed receipt (not yet published).
    Every string the training process wrote passes through ``redact``. ``amend`` may change the
    receipt (not its artifacts) before it is sealed: importers set ``source``, times and summary facts
    that only the evidence knows; it receives the merged tables. ``empties``: shared by the receipts of one
    group (:func:`publish_many`): an empty table's file is a hard link to the group's first one (see
    :func:`_write_table`)."""
    problems: list[Problem] = []
    wrapper, problem = read_json(run_dir / WRAPPER_FILE)
    if problem:
        problems.append(problem)
    wrapper = wrapper or {}
    tables: dict[str, pa.Table] = {}
    artifacts: list[Artifact] = []
    attempt = int(wrapper.get("attempt") or 1)
    dirs = list(rank_dirs(run_dir))  # listed once for every table and fact of the run
    problems.extend(odd_rank_dirs(run_dir))
    present = _listed(dirs)  # the ranks' files: a table none of them wrote is empty, without a look for it
    for name in TABLES:
        if present is None or f"{name}{STREAM_SUFFIX}" in present or f"{name}{JSONL_SUFFIX}" in present:
            table, bad = read_table(run_dir, name, coded=True, dirs=dirs)
        else:
            table, bad = empty(TABLES[name]), []
        if table.num_rows:  # an empty table holds no string to redact
            table = _redact_strings(table, redact)
        problems.extend(bad)
        if name == "events" and table.num_rows:
            table = table.set_column(
                table.schema.get_field_index("attempt"), "attempt", pa.array([attempt] * table.num_rows, pa.int32())
            )
        tables[name] = table
        path = tmp / f"{name}.parquet"
        digest, size = _write_table(table, path, name, empties)
        artifacts.append(Artifact(path=path.name, kind="table", sha256=digest, bytes=size, rows=table.num_rows))
    log = run_dir / LOG_FILE
    if log.exists():
        recorded = recorded_sha256(log, run_dir / LOG_DIGEST_FILE)  # as the output tee wrote it, when it did
        copied = _link_or_copy(log, tmp / LOG_FILE)
        artifacts.append(
            Artifact(path=LOG_FILE, kind="log", sha256=recorded or sha256_file(copied), bytes=copied.stat().st_size)
        )
    for _, directory in dirs:
        errors = directory / "sdk_errors.log"
        if errors.exists():
            lines = [line for line in errors.read_text(errors="replace").splitlines() if line.strip()]
            said = "; ".join(lines[:5]) or ("the SDK failed to write some rows and could not say why (its error "
                                            "log is empty: the disk was full, or not writable)")
            problems.append(Problem(source=f"{directory.name}/sdk_errors.log", message=redact(said)))
    problems.extend(p.model_copy(update={"message": redact(p.message)}) for p in _read_problems(run_dir))
    energy, method = _energy(tables["telemetry"])
    started = _parse_time(wrapper.get("started_at"))
    ended = outcome.ended_at or datetime.now(UTC)
    links = wrapper.get("links") or {}
    captured = _capture(run_dir, problems, redact)
    receipt = Receipt(
        run_uuid=str(wrapper.get("run_uuid") or run_dir.name),
        name=wrapper.get("name"),
        tags=wrapper.get("tags") or {},
        status=outcome.status,  # type: ignore[arg-type]
        started_at=started,
        ended_at=ended,
        duration_s=(ended - started).total_seconds() if started else None,
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        command=tuple(wrapper.get("command") or ()),
        attempt=attempt,
        links=Links(**{k: links.get(k) for k in ("attempt_of", "replicates", "baseline")}),
        stack=_stack(run_dir, problems, redact, runtime, dirs),
        workload=_workload(run_dir, problems, redact, dirs),
        artifacts=tuple(artifacts),
        summary=summarize(tables, energy, method),
        capture=captured,
        problems=tuple(problems),
        failure=_failure(log, outcome, redact),
    )
    if amend is not None:
        # model_copy(update=...) does not validate: validate the amended receipt as a whole
        receipt = Receipt.model_validate(amend(receipt, tables).model_dump(mode="json"))
        if receipt.artifacts != tuple(artifacts):
            raise ValueError("amend must not change the artifacts")
    receipt_id, text = seal_json(receipt.model_dump(mode="json"))  # one dump: the id and receipt.json's text
    receipt = receipt.model_copy(update={"id": receipt_id})
    write_receipt(tmp, text)
    return receipt


def _failure(log: Path, outcome: Outcome, redact: Redact) -> Failure | None:
    """Why a failed or interrupted run ended, as the end of its log says (:mod:`ledger.store.failure`)."""
    if outcome.status not in ("failed", "interrupted"):
        return None
    from ledger.store.failure import failure_of

    found = failure_of(log)
    if found is None:
        return None
    return found.model_copy(update={"exception": redact(found.exception) if found.exception else None,
                                    "lines": tuple(redact(line) for line in found.lines)})


def _listed(dirs: list[tuple[int, Path]]) -> set[str] | None:
    """The names of the files in the ranks' directories; None when one cannot be listed (then each table is
    looked for, and read_table says what is wrong)."""
    names: set[str] = set()
    for _, directory in dirs:
        try:
            names.update(os.listdir(directory))
        except OSError:
            return None
    return names


IN_MEMORY_TABLE = 16 << 20
"""A table of up to this many bytes in Arrow is written to Parquet in memory, hashed there and written with one
``write`` (a small table's Parquet writer otherwise makes a system call per page); a larger one is written to
its file and hashed from it (a receipt's routing may be gigabytes)."""


def _write_table(table: pa.Table, path: Path, name: str, empties: dict[str, Path] | None) -> tuple[str, int]:
    """Write one metric table as its Parquet file; return its sha256 and size.

    An empty table (most runs leave most tables empty) has the same bytes in every receipt: they come from
    memory (:func:`_empty_parquet`), and within a group (``empties``, :func:`publish_many`) the file is a hard
    link to the group's first copy. A link allocates no inode: on this project's ext4 without a journal,
    creating a file searched past every inode freed in the last minute (each published staging directory
    frees its own), which was most of a bulk publish's system time. Receipts never change their files (every
    reader only reads them; :mod:`ledger.store.integrity` checks each file's digest, whichever directory it is
    reached from), so a shared inode holds exactly what each receipt lists. Where links are refused (a file
    system without them, a link count at its limit), the bytes are written."""
    if table.num_rows:
        if table.nbytes > IN_MEMORY_TABLE:
            write_parquet(table, path)
            return sha256_file(path), path.stat().st_size
        sink = pa.BufferOutputStream()
        write_parquet(table, sink)
        data = sink.getvalue()
        _write_new(path, data)
        return hashlib.sha256(data).hexdigest(), data.size
    data, digest = _empty_parquet(table.schema)
    first = empties.get(name) if empties is not None else None
    if first is not None:
        try:
            os.link(first, path)
            return digest, len(data)
        except OSError:
            pass
    _write_new(path, data)
    if empties is not None:
        empties[name] = path
    return digest, len(data)


def _link_or_copy(source: Path, target: Path) -> Path:
    """``source``'s bytes at ``target``: a hard link (no copy; the staging directory's name goes when it is
    removed) or, where the file system refuses one, a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def _write_new(path: Path, data: bytes | pa.Buffer) -> None:
    """Create a file with these bytes (one ``write``, continued if the kernel writes fewer)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)  # as open() does
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


_EMPTY_PARQUET: dict[bytes, tuple[bytes, str]] = {}


def _empty_parquet(schema: pa.Schema) -> tuple[bytes, str]:
    """The Parquet bytes :func:`write_parquet` writes for an empty table of ``schema``, and their sha256;
    written once per schema (its metadata included) and process."""
    key = schema.serialize().to_pybytes()
    if key not in _EMPTY_PARQUET:
        sink = pa.BufferOutputStream()
        write_parquet(empty(schema), sink)
        data = sink.getvalue().to_pybytes()
        _EMPTY_PARQUET[key] = (data, hashlib.sha256(data).hexdigest())
    return _EMPTY_PARQUET[key]


def publish(
    ledger: Ledger,
    run_dir: Path,
    outcome: Outcome,
    *,
    redact: Redact | None = None,
    locked: bool = False,
    amend: Amend | None = None,
    runtime: RuntimeMerge | None = None,
) -> Receipt:
    """Publish a staging directory as a receipt, exactly once, and remove the staging directory.
    ``redact``: the launch's redactor (default: one built from this process's environment, which still
    catches every known credential shape); ``locked``: the caller already holds the staging lock;
    ``runtime``: how the recording path folds the ranks' ``runtime.json`` facts into the stack
    (:func:`ledger.record.capture.merge_runtime`; the store does not probe stacks itself)."""
    return publish_many(ledger, [(run_dir, outcome)], redact=redact, locked=locked, amend=amend,
                        runtime=runtime)[0]


class Staged(NamedTuple):
    """A staging directory ready to publish: how its run ended, and its importer's ``amend`` (see :func:`build`)."""

    run_dir: Path
    outcome: Outcome
    amend: Amend | None = None


def publish_many(
    ledger: Ledger,
    runs: Sequence[tuple[Path, Outcome] | Staged],
    *,
    redact: Redact | None = None,
    locked: bool = False,
    amend: Amend | None = None,
    runtime: RuntimeMerge | None = None,
) -> list[Receipt]:
    """Publish many staging directories (an importer's, a generated ledger's), each exactly as :func:`publish`
    does one (the same steps, in the same order, each surviving a crash at any point), with the waits for the
    disk shared by the group: every receipt is built, then every ``PUBLISHED_AS`` is written and flushed
    together (the file system commits concurrent flushes at once), then every rename, one flush of each
    shard touched and of the ledger directory, one journal write for all the ids. A staging directory that
    fails to build raises, and none of the group is published (their staging directories stay, as a failed
    :func:`publish` leaves its own). ``amend`` applies to every run without one of its own (:class:`Staged`).
    Returns the receipts in the order of ``runs``."""
    items = [r if isinstance(r, Staged) else Staged(r[0], r[1]) for r in runs]
    if redact is None:
        from ledger.redact import Redactor

        redact = Redactor(os.environ).text
    journal.check(ledger.root)  # a linked journal: refused before anything is published (the runs stay staged)
    with ExitStack() as locks:
        locks.enter_context(journal.publishing(ledger.root))  # readers: a publish is under way
        if not locked:
            for staged in items:
                locks.enter_context(staging_lock(staged.run_dir))
        receipts: list[Receipt | None] = [None] * len(items)
        again: list[str] = []
        built: list[tuple[int, Path]] = []  # (index in items, its temporary directory)
        empties: dict[str, Path] = {}  # each empty table's first file in this group (build links the others)
        try:
            for k, (run_dir, outcome, own) in enumerate(items):
                done = _already_published(ledger, run_dir)
                if done is not None:
                    again.append(done)
                    receipts[k] = ledger.load(done)
                    continue
                tmp = ledger.root / f"{TMP_PREFIX}{run_dir.name}-{uuid.uuid4().hex[:8]}"
                tmp.mkdir(parents=True)
                built.append((k, tmp))
                receipts[k] = build(ledger, run_dir, outcome, tmp, redact, own or amend, runtime, empties)
            fault("publishing")
            _mark_all([(items[k][0], _sealed(receipts[k]).id) for k, _ in built])
            targets = []
            for k, tmp in built:
                receipt_id = _sealed(receipts[k]).id
                target = ledger.new_path(receipt_id)
                target.parent.mkdir(exist_ok=True)
                if target.parent.is_symlink():  # never published through a link (to another directory)
                    raise LinkRefused(f"{target.parent} is a symbolic link; ledger never writes through "
                                              f"one: remove it, then run `ledger recover`")
                try:
                    if (ledger.root / receipt_id).is_dir():  # identical content, published in the old layout
                        raise FileExistsError(receipt_id)
                    os.rename(tmp, target)
                except OSError:
                    if not ledger.path(receipt_id).is_dir():
                        raise
                    shutil.rmtree(tmp, ignore_errors=True)  # identical content already published
                targets.append(target)
        except BaseException:
            for _, tmp in built:
                shutil.rmtree(tmp, ignore_errors=True)  # a renamed one is no longer there
            raise
        _fsync_dirs([*dict.fromkeys(t.parent for t in targets), ledger.root])
        fault("published")  # visible, not yet in the journal: recover appends it (PUBLISHED_AS)
        journal.append_many(ledger.root, [*again, *(_sealed(receipts[k]).id for k, _ in built)])
    for staged in items:
        shutil.rmtree(staged.run_dir, ignore_errors=True)
    return [_sealed(r) for r in receipts]


def _sealed(receipt: Receipt | None) -> Receipt:
    assert receipt is not None, "every run of the group was built or found published"
    return receipt


def _already_published(ledger: Ledger, run_dir: Path) -> str | None:
    """The id a staging directory was published as, when a publisher died after the rename (recover)."""
    done = published_as(run_dir)
    return done if done is not None and ledger.path(done).is_dir() else None


def published_as(run_dir: Path) -> str | None:
    """The id a staging directory is marked with (step 3 of publishing): the content of its lock's file, or of
    the ``PUBLISHED_AS`` file an older publisher wrote; None when it holds none."""
    for name in (LOCK_FILE, PUBLISHED_MARK):
        try:
            fd = os.open(os.path.join(run_dir, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            text = os.read(fd, 256).decode(errors="replace").strip()
        finally:
            os.close(fd)
        if ID_RE.match(text):
            return text
    return None


def _mark_all(marks: list[tuple[Path, str]]) -> None:
    """Mark staging directories with their ids and flush the marks to disk, the flushes in parallel (one
    journal commit of the file system covers those that wait together)."""
    if len(marks) <= 1:  # none: every run of the group was published already (recover)
        for run_dir, receipt_id in marks:
            _mark(run_dir, receipt_id)
        return
    list(_flushers().map(lambda m: _mark(*m), marks))


def _mark(run_dir: Path, receipt_id: str) -> None:
    """Write the id into the staging directory's lock file (which the publisher holds locked) and flush it."""
    fd = os.open(run_dir / LOCK_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, receipt_id.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


_FLUSHERS: list[Any] = []
# a forked child has the pool without its threads: its first group would wait for them forever (a forked
# process that publishes: mutmut's mutant runs, a fork of the wrapper); it starts a pool of its own
os.register_at_fork(after_in_child=_FLUSHERS.clear)


def _flushers() -> Any:
    """The threads that wait for the disk for a group (:func:`publish_many`), started once per process and kept:
    a group of 64 had started 16 threads twice, 1 ms of a receipt's CPU on a loaded machine."""
    if not _FLUSHERS:
        from concurrent.futures import ThreadPoolExecutor

        _FLUSHERS.append(ThreadPoolExecutor(max_workers=16, thread_name_prefix="ledger-flush"))
    return _FLUSHERS[0]


def _fsync_dirs(paths: list[Path]) -> None:
    if len(paths) <= 2:
        for path in paths:
            _fsync_dir(path)
        return
    list(_flushers().map(_fsync_dir, paths))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
