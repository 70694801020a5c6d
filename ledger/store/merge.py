"""Read what the ranks of a run wrote into its staging directory, one metric table at a time.

Two formats are accepted per rank directory: the SDK's Arrow IPC streams (``<table>.arrows``) and JSON
lines (``<table>.jsonl``, one object per line, for producers in any language). Damage never loses the
rest of the run: a stream truncated by a crash keeps every complete batch, and a malformed JSON line is
skipped; both are reported as :class:`schemas.Problem` entries naming the file and line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Container, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import pyarrow as pa

from ledger.store.layout import JSONL_SUFFIX, STREAM_SUFFIX, rank_of_dir
from ledger.store.routing import as_lists
from schemas import Problem
from schemas.tables import EXTRA, EXTRA_CODED, ROUTING_LONG, TABLES

_Batch = TypeVar("_Batch", pa.RecordBatch, pa.Table)

MAX_LINES_LISTED = 10
MAX_LINE_BYTES = 1 << 20
"""A JSON line longer than this (1 MiB) is not a metric row: it is skipped and reported."""


def rank_dirs(run_dir: Path) -> Iterator[tuple[int, Path]]:
    """(rank, directory) of every rank directory in a staging directory, wrapper last."""
    found = []
    if run_dir.is_dir():
        for child in run_dir.iterdir():
            rank = rank_of_dir(child.name)
            if rank is not None and child.is_dir():
                found.append((rank if rank >= 0 else 1 << 30, rank, child))
    for _, rank, path in sorted(found):
        yield rank, path


def odd_rank_dirs(run_dir: Path) -> list[Problem]:
    """A problem for each directory of a staging directory named like a rank's but not one (``rank--1``,
    ``rank-99999999999``, ``rank-¹``): its files are left out of the receipt, and the receipt says so."""
    odd = []
    if run_dir.is_dir():
        for child in sorted(run_dir.iterdir()):
            if child.name.startswith("rank-") and rank_of_dir(child.name) is None and child.is_dir():
                odd.append(Problem(source=f"{child.name}/", message="not a rank directory (rank-N, N from 0 to "
                                   "999999999, as the SDK names them): its files were left out"))
    return odd


def read_table(
    run_dir: Path, name: str, ranks: Container[int] | None = None, *, coded: bool = False,
    dirs: Sequence[tuple[int, Path]] | None = None,
) -> tuple[pa.Table, list[Problem]]:
    """All rows of one metric table over every rank (or only ``ranks``; -1: the wrapper's), in the table's
    schema, and what was damaged.

    ``coded``: when every file holds the steps table's custom names dictionary-coded (the SDK's streams),
    they stay so (:data:`schemas.tables.STEPS_STREAM`): the publisher writes them to Parquet as they are,
    without a string per value (:func:`ledger.store.publish.write_parquet`). Otherwise the table's own
    schema, the names decoded. ``dirs``: the run's :func:`rank_dirs`, when the caller listed them already (a
    publisher reads every table of one run)."""
    schema = TABLES[name]
    keep = coded and _coded(schema) is not schema
    parts: list[pa.Table] = []
    problems: list[Problem] = []
    for rank, directory in rank_dirs(run_dir) if dirs is None else dirs:
        if ranks is not None and rank not in ranks:
            continue
        stream = directory / f"{name}{STREAM_SUFFIX}"
        if stream.exists():
            with _contained(stream, run_dir, problems):
                table, problem = _read_stream(stream, schema, run_dir, keep)
                parts.append(table)
                if problem:
                    problems.append(problem)
        lines = directory / f"{name}{JSONL_SUFFIX}"
        if lines.exists():
            with _contained(lines, run_dir, problems):
                table, bad = _read_jsonl(lines, schema, rank, run_dir)
                parts.append(table)
                problems.extend(bad)
    if not parts:
        return empty(schema), problems
    if len({p.schema for p in parts}) > 1:  # coded streams beside rows of decoded names: all decoded
        parts = [_decode(p, schema) for p in parts]
    return pa.concat_tables(parts), problems


def empty(schema: pa.Schema) -> pa.Table:
    """A table of no rows in ``schema`` (``Schema.empty_table`` imports pandas, when installed: 0.5 s)."""
    return pa.Table.from_batches([], schema=schema)


@contextmanager
def _contained(path: Path, root: Path, problems: list[Problem]) -> Iterator[None]:
    """Whatever one rank's file holds, the rest of the run is kept: an error nobody foresaw while reading
    it becomes a problem naming the file, and the file's rows are left out."""
    try:
        yield
    except Exception as exc:  # the last line of defence: a training run is never lost to its own output
        problems.append(Problem(source=_rel(path, root),
                                message=f"unreadable ({type(exc).__name__}: {_first_line(exc)}); file left out"))


def clean_text(value: str) -> str:
    """``value`` as valid Unicode: each lone surrogate (``"\\ud800"`` in JSON) becomes one U+FFFD, since
    neither Arrow nor a UTF-8 file can hold them (a high and low surrogate in a row are the character they code).
    UTF-16, not UTF-8, is the round trip: its decoder replaces a lone surrogate's two bytes by one U+FFFD, UTF-8's
    replaced its three by three."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def clean_json(data: Any) -> Any:
    """:func:`clean_text` applied to every string (keys included) of a decoded JSON document."""
    if isinstance(data, str):
        return clean_text(data)
    if isinstance(data, list):
        return [clean_json(v) for v in data]
    if isinstance(data, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in data.items()}
    return data


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _read_stream(
    path: Path, schema: pa.Schema, root: Path, keep: bool = False,
) -> tuple[pa.Table, Problem | None]:
    """Every complete record batch of an IPC stream (several streams may be appended back to back, one
    per process that opened the file), in ``schema``, or with the custom names of the SDK's steps stream
    (:data:`schemas.tables.STEPS_STREAM`) still coded when ``keep`` and every stream of the file codes them."""
    batches: list[pa.RecordBatch] = []
    long_rows: list[pa.RecordBatch] = []  # routing of an SDK from before the list layout
    problem = None
    with pa.OSFile(str(path), "rb") as f:
        size = f.size()
        while f.tell() < size:
            start = f.tell()
            try:
                reader = pa.ipc.open_stream(f)
                found = _decoded(reader.schema)
                coded = found is not reader.schema
                older = not found.equals(schema)
                long = older and schema.equals(TABLES["routing"]) and found.equals(ROUTING_LONG)
                if older and not long and not _is_older(found, schema):
                    raise ValueError(f"schema differs from {schema.names}")
                while True:
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        break
                    batch.validate(full=True)  # offsets, UTF-8, dictionary indices of garbage that parsed
                    if coded and (older or not keep):  # (an older schema is widened with decoded names)
                        batch = _decode(batch, found)
                    if long:
                        long_rows.append(batch)
                    else:
                        batches.append(_widen(batch, schema) if older else batch)
            except (pa.ArrowException, OSError, ValueError) as exc:
                rows = sum(b.num_rows for b in batches)
                problem = Problem(
                    source=_rel(path, root),
                    message=f"unreadable from byte {start} ({_first_line(exc)}); kept the {rows} rows before it",
                )
                break
            if f.tell() == start:  # pragma: no cover - defensive: no progress
                break
    kept = _coded(schema)
    if not (keep and batches and all(b.schema.equals(kept) for b in batches)):
        batches, kept = [_decode(b, schema) for b in batches], schema
    table = pa.Table.from_batches(batches, schema=kept)
    if long_rows:
        table = pa.concat_tables([table, as_lists(pa.Table.from_batches(long_rows, schema=ROUTING_LONG))])
    return table, problem


def _decoded(found: pa.Schema) -> pa.Schema:
    """``found`` with the custom names of the SDK's steps stream decoded (``found`` itself when none is
    coded)."""
    if not any(f.type == EXTRA_CODED for f in found):
        return found
    return pa.schema([f.with_type(EXTRA) if f.type == EXTRA_CODED else f for f in found], metadata=found.metadata)


def _coded(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its custom names dictionary-coded (``schema`` itself when it has none)."""
    if not any(f.type == EXTRA for f in schema):
        return schema
    return pa.schema([f.with_type(EXTRA_CODED) if f.type == EXTRA else f for f in schema], metadata=schema.metadata)


def _decode(batch: _Batch, schema: pa.Schema) -> _Batch:
    """A batch or table in ``schema``, its dictionary-coded custom names decoded (as it is when none is)."""
    if not any(c.type == EXTRA_CODED for c in batch.columns):
        return batch
    columns = [c.cast(EXTRA) if c.type == EXTRA_CODED else c for c in batch.columns]
    return type(batch).from_arrays(columns, schema=schema)


def _is_older(found: pa.Schema, schema: pa.Schema) -> bool:
    """True when ``found`` is the table's schema of an earlier version: every column it has is in today's
    schema with the same type, and every column it lacks may be null (columns are only ever added)."""
    names = set(found.names)
    return all(f.name in schema.names and schema.field(f.name).type.equals(f.type) for f in found) and \
        all(f.nullable for f in schema if f.name not in names)


def _widen(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of an earlier schema in today's: the columns added since are null."""
    n = batch.num_rows
    have = set(batch.schema.names)
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name) if f.name in have else pa.nulls(n, f.type) for f in schema], schema=schema)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _read_jsonl(path: Path, schema: pa.Schema, rank: int, root: Path) -> tuple[pa.Table, list[Problem]]:
    columns: dict[str, list[Any]] = {f.name: [] for f in schema}
    known = set(columns)
    routing = schema.equals(TABLES["routing"])
    long_columns: dict[str, list[Any]] = {f.name: [] for f in ROUTING_LONG}
    long_known = set(long_columns)
    plan, long_plan = _plan(schema), _plan(ROUTING_LONG) if routing else ()
    bad: list[tuple[int, str]] = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(_lines(f), start=1):
            if raw is None:
                bad.append((lineno, f"longer than {MAX_LINE_BYTES} bytes"))
                continue
            if not raw.strip():
                continue
            try:
                obj = clean_json(json.loads(raw))
                if routing and isinstance(obj, dict) and "expert" in obj:  # a row per expert: the long layout
                    row, into = _coerce_row(obj, long_plan, long_known, rank), long_columns
                else:
                    row, into = _coerce_row(obj, plan, known, rank), columns
            except (ValueError, TypeError, OverflowError, UnicodeDecodeError, RecursionError) as exc:
                bad.append((lineno, _first_line(exc)))
                continue
            for key, value in row.items():
                into[key].append(value)
    table = _table(columns, schema)
    if routing and long_columns["step"]:
        long = _table(long_columns, ROUTING_LONG)
        table = pa.concat_tables([table, as_lists(long)])
    problems = []
    if bad:
        listed = ", ".join(f"line {n}: {msg}" for n, msg in bad[:MAX_LINES_LISTED])
        more = f" (and {len(bad) - MAX_LINES_LISTED} more)" if len(bad) > MAX_LINES_LISTED else ""
        problems.append(
            Problem(source=_rel(path, root), message=f"{len(bad)} malformed line(s) skipped: {listed}{more}")
        )
    return table, problems


def _lines(f: BinaryIO) -> Iterator[bytes | None]:
    """The lines of a file, each read with a bounded buffer: a line longer than :data:`MAX_LINE_BYTES`
    is skipped (None) without ever being held in memory whole."""
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(1 << 20)
            yield None
            continue
        yield raw


def _table(columns: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    """The rows read, as a table of ``schema``: a column no row gave a value is made as nulls at once (most of a
    table's columns in most runs; ``pa.array`` of a list of None costs twice as much)."""
    arrays = []
    for f in schema:
        values = columns[f.name]
        if values.count(None) == len(values):
            arrays.append(pa.nulls(len(values), f.type))
        else:
            arrays.append(pa.array(values, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


_LIST, _INT, _FLOAT, _BOOL, _TEXT, _MAP = range(6)
_Plan = tuple[tuple[str, int, pa.Field], ...]


def _plan(schema: pa.Schema) -> _Plan:
    """(name, kind, field) of each column of ``schema``: made once for a file's lines, so that each kind is looked
    up once, not once per value (a JSON line's row went through every column's type tests: 60 us a row of the
    steps table)."""
    return tuple((f.name, _kind(f), f) for f in schema)


def _kind(field: pa.Field) -> int:
    t = field.type
    if t == EXTRA:
        return _MAP
    if pa.types.is_list(t):
        return _LIST
    if pa.types.is_integer(t):
        return _INT
    if pa.types.is_floating(t):
        return _FLOAT
    if pa.types.is_boolean(t):
        return _BOOL
    return _TEXT


def _coerce_row(obj: Any, plan: _Plan, known: set[str], rank: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
    row: dict[str, Any] = {}
    extra: dict[str, float] = {}
    for key, value in obj.items():
        if key not in known:
            if isinstance(value, int | float) and not isinstance(value, bool):
                extra[str(key)] = float(value)
            continue
    for name, kind, field in plan:
        value = obj.get(name)
        if name == "rank" and value is None:
            value = rank
        if kind == _MAP:
            given = value if isinstance(value, dict) else {}
            merged = {str(k): float(v) for k, v in given.items() if _is_number(v)} | extra
            row[name] = list(merged.items()) or None
        elif value is None:
            if not field.nullable:
                raise ValueError(f"field {name!r} is required")
            row[name] = None
        else:
            row[name] = _coerce_value(field, value, kind)
    return row


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _coerce_value(field: pa.Field, value: Any, kind: int | None = None) -> Any:
    """``value`` as a value of ``field`` (``kind``: :func:`_kind` of it, when the caller knows it)."""
    if value is None:
        if not field.nullable:
            raise ValueError(f"field {field.name!r} is required")
        return None
    t = field.type
    if kind is None:
        kind = _kind(field)
    if kind == _LIST:
        if not isinstance(value, list):
            raise ValueError(f"field {field.name!r} must be a list, got {value!r}")
        item = pa.field(field.name, t.value_type, nullable=False)
        return [_coerce_value(item, v) for v in value]
    if kind == _INT:
        if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
            raise ValueError(f"field {field.name!r} must be an integer, got {value!r}")
        bound = 1 << (t.bit_width - 1)
        if not -bound <= int(value) < bound:
            raise ValueError(f"field {field.name!r}: {value!r} is out of range for {t}")
        return int(value)
    if kind == _FLOAT:
        if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "+inf"):
            return float(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"field {field.name!r} must be a number, got {value!r}")
        return float(value)
    if kind == _BOOL:
        if not isinstance(value, bool):
            raise ValueError(f"field {field.name!r} must be true or false, got {value!r}")
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def read_json(path: Path) -> tuple[dict[str, Any] | None, Problem | None]:
    """A small JSON file written by the SDK or the wrapper; a damaged one is a problem, not a crash."""
    if not path.exists():
        return None, None
    try:
        data = clean_json(json.loads(path.read_bytes()))
    except (OSError, ValueError, RecursionError) as exc:
        return None, Problem(source=path.name, message=f"unreadable: {_first_line(exc)}")
    if not isinstance(data, dict):
        return None, Problem(source=path.name, message="expected a JSON object")
    return data, None


def finite_or_none(value: float | None) -> float | None:
    """Receipts hold JSON: a NaN or infinite headline figure becomes None (the table keeps the raw value)."""
    if value is None or not math.isfinite(value):
        return None
    return value
