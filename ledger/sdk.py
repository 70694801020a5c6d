"""The in-process writer for training code.

    import ledger.sdk
    run = ledger.sdk.current()          # a no-op sink when not under `ledger record`
    run.set_workload(workload)           # schemas.Workload (or a dict of its fields)
    run.report_runtime()                 # versions and devices as this process sees them
    for step in ...:
        run.log_step(step, loss=..., lr=..., tokens=..., step_time_s=...)
        run.log_routing(step, layer, tokens_per_expert, dropped=..., entropy=...)
        run.log_timing(step, "attention", 0.012)
    run.log_eval(step, 2.31, metric="loss", split="val", source="rare")
    run.event("checkpoint_save_end", step=step, path=...)

Each rank writes its own files under ``$LEDGER_RUN_DIR/rank-NNNNN/`` (no locks). Rows are buffered in
memory and appended to Arrow IPC streams when a table's buffer is large, every ``flush_interval`` seconds
(a daemon thread), and at exit: a crash loses at most about a second of metrics. The SDK never raises into
the training loop because of I/O: a failed flush is written to ``sdk_errors.log`` and warned once.

``log_step`` is called once per step of a training loop, so it does the least it can: it keeps the
step, the time and the keyword dict as they are, and the flush turns a whole buffer into columns at once
(pyarrow converts the dicts in C++; see ``bench/bench_sdk_ingest.py``).
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (imported now: see _warm_up)
import itertools
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.mfu import model_flops_per_token
from ledger.store.layout import (
    ENV_RUN_DIR,
    RUNTIME_FILE,
    STREAM_SUFFIX,
    WORKLOAD_FILE,
    rank_dir,
)
from schemas.receipt import Workload
from schemas.tables import EXTRA, EXTRA_CODED, STEPS_STREAM, TABLES

_STEP_COLUMNS = tuple(f.name for f in TABLES["steps"] if f.name not in ("rank", "step", "time", "extra"))
_STEP_GIVEN = tuple(TABLES["steps"].field(name) for name in ("time", *_STEP_COLUMNS))
"""The keyword arguments of ``log_step`` that fill a column of their own (``time`` overrides the clock)."""
_STEP_KNOWN = frozenset(f.name for f in _STEP_GIVEN)
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError)
_now = time.time


def _rank_from_env(env: Mapping[str, str]) -> int:
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = env.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


class NullRun:
    """The sink used when not running under `ledger record`: every call does nothing."""

    active = False
    rank = 0

    def log_step(self, step: int, **metrics: Any) -> None:
        """Record one optimizer step's metrics."""

    def log_eval(self, step: int, value: float, **kwargs: Any) -> None:
        """Record one eval value."""

    def log_routing(self, step: int, layer: int, tokens_per_expert: Sequence[int], **kwargs: Any) -> None:
        """Record one MoE layer's routing counts."""

    def log_timing(self, step: int, phase: str, seconds: float) -> None:
        """Record the time one phase of a step took."""

    def log_telemetry(self, device: str, **kwargs: Any) -> None:
        """Record one telemetry sample."""

    def event(self, kind: str, *, step: int | None = None, **detail: Any) -> None:
        """Record an event."""

    def set_workload(self, workload: Workload | Mapping[str, Any]) -> None:
        """Describe what this run computes."""

    def report_runtime(self) -> None:
        """Report versions and devices as this process sees them."""

    def flush(self) -> None:
        """Write buffered rows."""

    def close(self) -> None:
        """Flush and close the files."""


class _Table:
    """Buffered rows of one metric table and its open IPC stream.

    ``rows`` is appended to without a lock (``list.append`` and ``list.extend`` are atomic) and only
    :meth:`take` removes from it, always from the front, under the run's I/O lock: a row appended while a
    flush runs stays in the buffer for the next one."""

    compression: str | None = None
    """The codec of the stream's buffers (None: uncompressed); the reader needs no setting to read either."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.schema = TABLES[name]
        self.path = path
        self.rows: list[Any] = []
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.sink: Any = None

    def take(self) -> list[Any]:
        """Remove and return the buffered rows."""
        rows = self.rows
        n = len(rows)
        taken = rows[:n]
        del rows[:n]
        return taken

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        arrays = [_array([row[i] for row in rows], f.type) for i, f in enumerate(self.schema)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    items_per_row = 1
    """Items of :attr:`rows` that make one row."""

    def write(self, rows: list[Any]) -> None:
        """Append the rows to the stream in batches of :data:`PIECE_ROWS`: on a disk that fills up meanwhile,
        the batches written before are kept (20,000 rows written as one batch had all been lost)."""
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.sink = pa.OSFile(str(self.path), "ab")
            options = pa.ipc.IpcWriteOptions(compression=self.compression) if self.compression else None
            self.writer = pa.ipc.new_stream(self.sink, self.schema, options=options)
        size = PIECE_ROWS * self.items_per_row
        for start in range(0, len(rows), size):
            self.writer.write_batch(self.to_batch(rows[start:start + size]))
            self.sink.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = None


PIECE_ROWS = 4096
"""Rows per record batch of a stream (:meth:`_Table.write`)."""


class _Steps(_Table):
    """The steps table. Its buffer is flat, three items a row: step, clock time and the keyword dict of
    ``log_step``. A row is then appended by one atomic ``extend`` and leaves no tuple behind: a tuple that
    holds a dict stays tracked by the garbage collector, and 100,000 of them made its full collections
    cost more than the rest of ``log_step``.

    Its stream (:data:`schemas.tables.STEPS_STREAM`) holds the custom names dictionary-coded: per row the
    names are int32 indices into the batch's dictionary, so no string is made per value, neither here nor in
    the file (the reader decodes them once). The stream is LZ4-compressed: a null column is a buffer of zeros
    and the indices repeat row after row (100,000 rows of 10 custom names: 9 MB, 43 MB as uncompressed
    strings)."""

    compression = "lz4" if pa.Codec.is_available("lz4") else None
    items_per_row = 3

    def __init__(self, path: Path, rank: int) -> None:
        super().__init__("steps", path)
        self.schema = STEPS_STREAM
        self.rank = rank

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        steps, clock, given = rows[0::3], rows[1::3], rows[2::3]
        n = len(given)
        try:
            uniform = _uniform_columns(given)
        except _ARROW_ERRORS:  # the general path below coerces what the fast one refuses
            uniform = None
        try:
            if uniform is not None:
                filled, extra = uniform
            else:
                filled, extra = _general_columns(given)
        except _ARROW_ERRORS:  # e.g. torch scalars: coerce value by value
            return super().to_batch(self._tuples(steps, clock, given))
        given_time = filled.get("time")
        if given_time is None or given_time.null_count == n:
            times = pa.array(clock, type=pa.float64())
        else:
            times = _array([g or c for g, c in zip(given_time.to_pylist(), clock, strict=True)], pa.float64())
        arrays = [
            pa.repeat(pa.scalar(self.rank, pa.int32()), n),
            _array(steps, pa.int64()),
            times,
            *[filled[f.name] if f.name in filled else pa.nulls(n, f.type) for f in _STEP_GIVEN[1:]],
            extra if extra.type == EXTRA_CODED else extra.cast(EXTRA_CODED),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _tuples(self, steps: list[Any], clock: list[Any], given: list[dict[str, Any]]) -> list[Any]:
        return [
            (self.rank, step, metrics.get("time") or now, *[metrics.get(c) for c in _STEP_COLUMNS],
             {k: v for k, v in metrics.items() if k not in _STEP_KNOWN} or None)
            for step, now, metrics in zip(steps, clock, given, strict=True)
        ]


class _Routing(_Table):
    """The routing table: a row per (step, layer) whose counts are lists. The flush converts every row's
    lists in one C++ pass; only when that refuses (a float or a string among the counts) does it coerce
    row by row, leaving out (and naming) the rows whose counts are not integers."""

    def __init__(self, path: Path) -> None:
        super().__init__("routing", path)
        self.refused: list[str] = []

    def to_batch(self, rows: list[Any]) -> pa.RecordBatch:
        try:
            return self._fast(rows) or super().to_batch(rows)
        except _ARROW_ERRORS:
            good = []
            for row in rows:
                try:
                    good.append((*row[:3], _int_list(row[3]), None if row[4] is None else _int_list(row[4]),
                                 *row[5:]))
                except (TypeError, ValueError, OverflowError) as exc:
                    self.refused.append(f"step {row[1]} layer {row[2]}: {exc}")
            return super().to_batch(good)

    def _fast(self, rows: list[Any]) -> pa.RecordBatch | None:
        """Rows whose counts are all integer numpy arrays: one concatenation per list column, no Python int
        per count (None when some row holds something else)."""
        import numpy as np

        counts = [row[3] for row in rows]
        drops = [row[4] for row in rows]
        if not all(isinstance(c, np.ndarray) and c.dtype.kind in "iu" for c in counts):
            return None
        if not (all(d is None for d in drops) or all(isinstance(d, np.ndarray) and d.dtype.kind in "iu"
                                                     for d in drops)):
            return None
        n = len(rows)
        lengths = np.fromiter(map(len, counts), dtype=np.int32, count=n)
        offsets = pa.array(np.concatenate(([0], np.cumsum(lengths, dtype=np.int32))))
        tokens = pa.ListArray.from_arrays(offsets, pa.array(np.concatenate(counts).astype(np.int64, copy=False)))
        dropped = pa.nulls(n, tokens.type) if drops[0] is None else \
            pa.ListArray.from_arrays(offsets, pa.array(np.concatenate(drops).astype(np.int64, copy=False)))
        rest = [_array([row[i] for row in rows], f.type) for i, f in ((5, self.schema.field("capacity")),
                                                                       (6, self.schema.field("entropy")))]
        arrays = [_array([row[0] for row in rows], pa.int32()), _array([row[1] for row in rows], pa.int64()),
                  _array([row[2] for row in rows], pa.int32()), tokens, dropped, *rest]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _int_list(values: list[Any]) -> list[int]:
    return [int(v) if float(v).is_integer() else _not_integer(v) for v in values]


def _not_integer(value: Any) -> int:
    raise ValueError(f"count {value!r} is not an integer")


def _columns(given: list[dict[str, Any]], fields: list[pa.Field]) -> dict[str, pa.Array]:
    """The known columns, by name, filled from the dicts in one C++ pass (pyarrow converts each field as
    ``pa.array`` would, and raises the same errors). Only fields some row has: a key missing from a dict
    costs pyarrow several times a present one."""
    if not fields:
        return {}
    return dict(zip([f.name for f in fields], pa.array(given, type=pa.struct(fields)).flatten(), strict=True))


def _uniform_columns(given: list[dict[str, Any]]) -> tuple[dict[str, pa.Array], pa.Array] | None:
    """The known columns and the ``extra`` column when every row holds the same names in the same order,
    some of them custom, each with a value, as a training loop logs them (None otherwise). The values are
    read row by row straight into one numpy array (custom names only), or converted by one C++ pass into
    a struct whose custom columns numpy interleaves row by row: the MAP's values, with no Python object
    per value and nothing kept per row for the garbage collector to track."""
    names = tuple(given[0])
    width = len(names)
    if _STEP_KNOWN.issuperset(names):  # known names only: the general path costs no more
        return None
    n = len(given)
    keys = list(itertools.chain.from_iterable(given))  # every row's names, in order, one after the other
    if len(keys) != n * width or keys != list(names) * n:  # (no row may repeat a name: they are dict keys)
        return None
    del keys
    import numpy as np

    if _STEP_KNOWN.isdisjoint(names):  # custom names only: the values, row by row, are the MAP's values
        values = np.fromiter(itertools.chain.from_iterable(map(dict.values, given)), np.float64, n * width)
        if np.isnan(values).any():  # None or NaN among them: the general path keeps them as they are
            return None
        return {}, _uniform_map(names, n, pa.array(values))
    known = {f.name: f for f in _STEP_GIVEN}
    struct = pa.array(given, type=pa.struct([known.get(k) or pa.field(k, pa.float64()) for k in names]))
    columns = struct.flatten()
    if any(c.null_count for c in columns):  # None values: the general path keeps them as they are
        return None
    filled = {k: c for k, c in zip(names, columns, strict=True) if k in known}
    custom = [(k, c) for k, c in zip(names, columns, strict=True) if k not in known]
    values = np.column_stack([c.to_numpy() for _, c in custom]).ravel()
    return filled, _uniform_map(tuple(k for k, _ in custom), n, pa.array(values))


def _uniform_map(names: tuple[str, ...], n: int, values: pa.Array) -> pa.Array:
    """The ``extra`` MAP of ``n`` rows that each hold ``names``, in order, with ``values`` row by row, the
    names dictionary-coded (:data:`schemas.tables.EXTRA_CODED`)."""
    import numpy as np

    width = len(names)
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    return pa.MapArray.from_arrays(offsets, _coded_names(names, n), values)


def _coded_names(names: Sequence[str], n: int) -> pa.Array:
    """``names`` repeated ``n`` times, as indices into a dictionary of ``names``."""
    import numpy as np

    return pa.DictionaryArray.from_arrays(pa.array(np.tile(np.arange(len(names), dtype=np.int32), n)),
                                          pa.array(names, type=pa.string()))


def _general_columns(given: list[dict[str, Any]]) -> tuple[dict[str, pa.Array], pa.Array]:
    """The known columns and the ``extra`` column of rows whose names or order differ, or hold None."""
    n = len(given)
    fields = [f for f in _STEP_GIVEN if f.name in given[0]]
    filled = _columns(given, fields)
    if sum(map(len, given)) == sum(len(a) - a.null_count for a in filled.values()):
        return filled, pa.nulls(n, EXTRA)  # every key of every row filled a known column with a value
    # other metrics, None values, or rows with different keys
    shapes = set(map(tuple, given))
    present = set().union(*shapes)
    wider = [f for f in _STEP_GIVEN if f.name in present]
    if len(wider) != len(fields):
        filled = _columns(given, wider)
    return filled, _extra_column(given, shapes)


def _extra_column(given: list[dict[str, Any]], shapes: set[tuple[str, ...]]) -> pa.Array:
    """The ``extra`` MAP column: per row, its metrics without a column of their own, in the row's order."""
    n = len(given)
    other = {keys: [k for k in keys if k not in _STEP_KNOWN] for keys in shapes}
    if not any(other.values()):
        return pa.nulls(n, EXTRA)
    if len(other) == 1:  # every row has the same keys, as a training loop logs them: build it whole
        ((keys, names),) = other.items()
        if len(names) == len(keys):
            values = list(itertools.chain.from_iterable(map(dict.values, given)))
        else:
            values = [metrics[k] for metrics in given for k in names]
        offsets = pa.array(list(range(0, n * len(names) + 1, len(names))), type=pa.int32())
        return _map_array(offsets, _coded_names(names, n), values, None)
    return _extra_array([{k: v for k, v in m.items() if k not in _STEP_KNOWN} or None for m in given])


def _array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Build a column, coercing numpy/torch scalars when the fast path refuses them."""
    if type_ == EXTRA or type_ == EXTRA_CODED:
        return _extra_array(values).cast(type_)
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        return pa.array([_scalar(v, type_) for v in values], type=type_)


def _scalar(value: Any, type_: pa.DataType) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):  # numpy and torch scalars
        value = value.item()
    if pa.types.is_integer(type_):
        return int(value)
    if pa.types.is_floating(type_):
        return float(value)
    if pa.types.is_boolean(type_):
        return bool(value)
    return str(value)


def _extra_array(values: Sequence[Mapping[str, Any] | None]) -> pa.Array:
    offsets = pa.array(list(itertools.accumulate((len(row) if row else 0 for row in values), initial=0)),
                       type=pa.int32())
    keys = pa.array([k for row in values if row for k in row], type=pa.string())
    nulls = [row is None for row in values]
    mask = pa.array(nulls, type=pa.bool_()) if any(nulls) else None
    return _map_array(offsets, keys, [v for row in values if row for v in row.values()], mask)


def _map_array(offsets: pa.Array, keys: pa.Array, items: list[Any], mask: pa.Array | None) -> pa.Array:
    try:
        floats = pa.array(items, type=pa.float64())
    except _ARROW_ERRORS:
        floats = pa.array([_float_or_none(v) for v in items], type=pa.float64())
    return pa.MapArray.from_arrays(offsets, keys, floats, mask=mask)


def _float_or_none(value: Any) -> float | None:
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    return float(value)


class Run:
    """A live run: buffers rows per table and appends them to this rank's files."""

    active = True

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        rank: int | None = None,
        *,
        flush_interval: float = 1.0,
        flush_rows: int = 200_000,
        background: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.rank = _rank_from_env(os.environ) if rank is None else rank
        self.dir = rank_dir(self.run_dir, self.rank)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.flush_interval = flush_interval
        self.flush_rows = flush_rows
        self._io_lock = threading.Lock()
        self._tables = {
            name: _Steps(path, self.rank) if name == "steps" else _Routing(path) if name == "routing"
            else _Table(name, path)
            for name, path in ((name, self.dir / f"{name}{STREAM_SUFFIX}") for name in TABLES)
        }
        self._step_rows = self._tables["steps"].rows
        self._step_limit = 3 * flush_rows  # the steps buffer holds three items a row (_Steps)
        self._routing_rows = self._tables["routing"].rows
        self._routing_flush_rows = max(1, flush_rows // 50)  # a routing row holds E counts
        self._closed = False
        self._warned = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background and flush_interval > 0:
            self._thread = threading.Thread(target=self._flush_loop, name="ledger-sdk-flush", daemon=True)
            self._thread.start()
        self.log_step = _step_logger(self._step_rows, self._step_limit, self.flush)  # type: ignore[method-assign]
        _warm_up()
        atexit.register(self.close)

    # ------------------------------------------------------------------------------------ logging
    def log_step(self, step: int, **metrics: Any) -> None:
        """Record one optimizer step. Known names (``loss``, ``lr``, ``tokens``, ``grad_norm``,
        ``step_time_s``, ``tokens_per_s``, ``flops_per_s``, ``aux_loss``, ``z_loss``, ``loss_scale``,
        ``memory_bytes``, ``skipped``) fill their columns; any other numeric metric goes to ``extra``.

        (Each run's ``log_step`` is the closure :func:`_step_logger` made for it, which does the same.)"""
        rows = self._step_rows
        rows.extend((step, _now(), metrics))  # split into columns at flush time (_Steps.to_batch)
        if len(rows) >= self._step_limit:
            self.flush()

    def log_eval(
        self,
        step: int,
        value: float,
        *,
        metric: str = "loss",
        split: str | None = "val",
        source: str | None = None,
        tokens: int | None = None,
    ) -> None:
        """Record one eval value (``source`` restricts it to one data source)."""
        self._append("evals", (self.rank, step, time.time(), tokens, split, source, metric, value))

    def log_routing(
        self,
        step: int,
        layer: int,
        tokens_per_expert: Sequence[int],
        *,
        dropped: Sequence[int] | None = None,
        capacity: int | None = None,
        entropy: float | None = None,
    ) -> None:
        """Record one MoE layer's routing for one logging interval: token-assignments per expert (a list,
        numpy array or CPU tensor, indexed by expert), how many of them were dropped by capacity, the
        capacity per expert, and the mean router entropy / log E. One row per call, the counts kept as a
        list (``schemas.tables.ROUTING``): a call costs a copy of the counts, whatever the number of
        experts. (Counts on a GPU: move all layers' counts to the host once per step, not one per call.)"""
        counts = _counts(tokens_per_expert)
        drops = None if dropped is None else _counts(dropped)
        if drops is not None and len(drops) != len(counts):
            raise ValueError(f"dropped has {len(drops)} entries, tokens_per_expert {len(counts)}")
        buffer = self._routing_rows
        buffer.append((self.rank, step, layer, counts, drops, capacity, entropy))
        if len(buffer) >= self._routing_flush_rows:
            self.flush()

    def log_timing(self, step: int, phase: str, seconds: float) -> None:
        """Record the time one phase of a step took."""
        self._append("timing", (self.rank, step, phase, seconds))

    def log_telemetry(
        self,
        device: str,
        *,
        power_w: float | None = None,
        energy_j: float | None = None,
        utilization: float | None = None,
        memory_bytes: int | None = None,
        time_s: float | None = None,
        sm_clock_mhz: float | None = None,
        memory_clock_mhz: float | None = None,
        temperature_c: float | None = None,
        ecc_corrected: int | None = None,
        ecc_uncorrected: int | None = None,
    ) -> None:
        """Record one telemetry sample of a device (energy_j: the device's cumulative counter; ecc_*: the
        volatile error counts since the driver loaded)."""
        row = (self.rank, time_s or time.time(), socket.gethostname(), device, power_w, energy_j,
               utilization, memory_bytes, sm_clock_mhz, memory_clock_mhz, temperature_c, ecc_corrected,
               ecc_uncorrected)
        self._append("telemetry", row)

    def event(self, kind: str, *, step: int | None = None, **detail: Any) -> None:
        """Record an event: init_start/init_end, data_wait, checkpoint_save_start/end,
        checkpoint_restore_start/end, eval_start/eval_end, failure, restart, or any other kind."""
        text = json.dumps(detail, default=str, sort_keys=True) if detail else None
        self._append("events", (self.rank, time.time(), kind, step, None, text))

    def set_workload(self, workload: Workload | Mapping[str, Any]) -> None:
        """Describe what this run computes (validated against :class:`schemas.Workload`)."""
        model = workload if isinstance(workload, Workload) else Workload.model_validate(workload)
        _write_json(self.dir / WORKLOAD_FILE, model.model_dump(mode="json"))

    def report_runtime(self) -> None:
        """Write the versions and devices this process sees: Python packages, torch, CUDA runtime,
        NCCL, cuDNN, Transformer Engine, Megatron-Core, and each visible device's properties."""
        _write_json(self.dir / RUNTIME_FILE, runtime_facts())

    # ---------------------------------------------------------------------------------- flushing
    def _append(self, table: str, row: tuple[Any, ...]) -> None:
        rows = self._tables[table].rows
        rows.append(row)
        if len(rows) >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Append every buffered row to this rank's files."""
        with self._io_lock:
            for table in self._tables.values():
                if not table.rows:
                    continue
                rows = table.take()
                try:
                    table.write(rows)
                except Exception as exc:  # never break the training loop over metrics
                    self._report_error(f"{table.name}: {type(exc).__name__}: {exc}")
                if isinstance(table, _Routing) and table.refused:
                    refused, table.refused = table.refused, []
                    self._report_error(f"routing: {len(refused)} row(s) left out ({refused[0]})")

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            if any(table.rows for table in self._tables.values()):
                self.flush()

    def _report_error(self, message: str) -> None:
        try:
            with open(self.dir / "sdk_errors.log", "a") as f:
                f.write(message + "\n")
        except OSError:
            pass
        if not self._warned:
            self._warned = True
            print(f"ledger.sdk: could not write metrics ({message}); training continues", file=sys.stderr)

    def close(self) -> None:
        """Flush and close the files (also called at exit)."""
        if self._closed:
            return
        self._stop.set()
        self.flush()
        with self._io_lock:
            for table in self._tables.values():
                try:
                    table.close()
                except Exception as exc:
                    self._report_error(f"{table.name}: {exc}")
            self._closed = True


def _step_logger(rows: list[Any], limit: int, flush: Callable[[], None]) -> Callable[..., None]:
    """:meth:`Run.log_step` as a closure over the run's steps buffer: the same three items a row, without the
    bound method's attribute lookups on every step (``self._step_rows``, ``self._step_limit``, the buffer's
    ``extend``). 100,000 calls of 10 metrics took 254 ms of CPU as a method, 200 ms as this closure, 157 ms
    as a bare function of the same signature (2026-12-02, load average about 25)."""
    extend = rows.extend
    now = _now

    def log_step(step: int, **metrics: Any) -> None:
        extend((step, now(), metrics))  # split into columns at flush time (_Steps.to_batch)
        if len(rows) >= limit:
            flush()

    log_step.__doc__ = Run.log_step.__doc__
    return log_step


def _warm_up() -> None:
    """Let pyarrow do its lazy imports (pandas, when installed: about 0.4 s) now rather than in the first
    flush, so that the first flush is as quick as the others and a crash soon after start loses no more
    than a flush interval. (The last flush may run in an atexit handler, where importing a module that
    registers an exit hook of its own, as concurrent.futures does, fails: it is imported at the top.)"""
    pa.array([0.0], type=pa.float64())


def _counts(values: Any) -> Any:
    """A copy of per-expert counts the caller may reuse at once: a numpy array stays one (a copy costs well
    under a microsecond and the flush concatenates them), a CPU tensor becomes one, anything else a list."""
    if type(values).__module__ == "numpy" and getattr(values, "ndim", 0) == 1:
        return values.copy()
    if hasattr(values, "detach") and hasattr(values, "numpy"):  # a torch tensor
        return values.detach().cpu().numpy().copy()
    if hasattr(values, "tolist"):
        out = values.tolist()
        return out if isinstance(out, list) else [out]
    return list(values)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def runtime_facts() -> dict[str, Any]:
    """Versions and devices as this process sees them. Imports nothing that is not already importable;
    every probe that fails records its error instead of raising."""
    from importlib import metadata

    facts: dict[str, Any] = {
        "host": socket.gethostname(),
        "node_name": os.environ.get("SLURMD_NODENAME") or None,
        "node_rank": _node_rank(os.environ),
        "python": platform.python_version(),
        "executable": sys.executable,
        "errors": {},
    }
    dists = sorted(
        {(d.metadata["Name"] or "").lower().replace("_", "-"): d.version for d in metadata.distributions()}.items()
    )
    facts["packages"] = [{"name": n, "version": v} for n, v in dists if n]
    facts["transformer_engine"] = _dist_version("transformer-engine") or _dist_version("transformer_engine")
    facts["megatron_core"] = _dist_version("megatron-core") or _dist_version("megatron_core")
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["cuda_runtime"] = torch.version.cuda
        devices = []
        if torch.cuda.is_available():
            facts["cudnn"] = _cudnn_version(torch.backends.cudnn.version())  # type: ignore[no-untyped-call]
            try:
                facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
            except Exception as exc:
                facts["errors"]["nccl"] = f"{type(exc).__name__}: {exc}"
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                devices.append(
                    {"index": i, "name": p.name, "memory_bytes": int(p.total_memory),
                     "compute_capability": f"{p.major}.{p.minor}"}
                )
        facts["devices"] = devices
    except Exception as exc:
        facts["errors"]["torch"] = f"{type(exc).__name__}: {exc}"
    return facts


def _node_rank(env: Mapping[str, str]) -> int | None:
    """This process's node rank: Slurm's SLURM_NODEID, else torchrun's GROUP_RANK (None when neither)."""
    for name in ("SLURM_NODEID", "GROUP_RANK"):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _cudnn_version(v: int | None) -> str | None:
    if not v:
        return None
    major, rest = divmod(v, 10000 if v >= 10000 else 1000)  # cuDNN 9: 90100 is 9.1.0; cuDNN 8: 8902 is 8.9.2
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


_current: Run | NullRun | None = None
_current_lock = threading.Lock()


def current() -> Run | NullRun:
    """The run of this process: a :class:`Run` under `ledger record` ($LEDGER_RUN_DIR set), else a
    :class:`NullRun` so the same script runs unwrapped."""
    global _current
    with _current_lock:
        if _current is None:
            run_dir = os.environ.get(ENV_RUN_DIR)
            _current = Run(run_dir) if run_dir else NullRun()
        return _current


def set_current(run: Run | NullRun | None) -> Run | NullRun | None:
    """Make ``run`` what :func:`current` returns in this process (None: decide again from the environment);
    returns the previous one. Used by :func:`ledger.record.inprocess.recording` (recording from Python)."""
    global _current
    with _current_lock:
        previous, _current = _current, run
        return previous


def _reset_for_tests() -> None:
    """Forget the process's run (tests only)."""
    global _current
    with _current_lock:
        if isinstance(_current, Run):
            _current.close()
        _current = None


__all__ = ["NullRun", "Run", "current", "model_flops_per_token", "runtime_facts", "set_current"]
