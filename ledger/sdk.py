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
memory and appended to Arrow IPC streams when the buffer is large, every ``flush_interval`` seconds (a
daemon thread), and at exit: a crash loses at most about a second of metrics. The SDK never raises into
the training loop because of I/O: a failed flush is written to ``sdk_errors.log`` and warned once.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.layout import (
    ENV_RUN_DIR,
    RUNTIME_FILE,
    STREAM_SUFFIX,
    WORKLOAD_FILE,
    rank_dir,
)
from schemas.tables import EXTRA, TABLES
from schemas.receipt import Workload

_STEP_COLUMNS = tuple(f.name for f in TABLES["steps"] if f.name not in ("rank", "step", "time", "extra"))
_STEP_KNOWN = frozenset(_STEP_COLUMNS)


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
    """Buffered rows of one metric table and its open IPC stream."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.schema = TABLES[name]
        self.path = path
        self.rows: list[tuple[Any, ...]] = []
        self.writer: pa.ipc.RecordBatchStreamWriter | None = None
        self.sink: Any = None

    def to_batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        columns = list(zip(*rows, strict=True))
        arrays = [_array(col, f.type) for col, f in zip(columns, self.schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def write(self, rows: list[tuple[Any, ...]]) -> None:
        batch = self.to_batch(rows)
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.sink = pa.OSFile(str(self.path), "ab")
            self.writer = pa.ipc.new_stream(self.sink, self.schema)
        self.writer.write_batch(batch)
        self.sink.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = None


def _array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Build a column, coercing numpy/torch scalars when the fast path refuses them."""
    if type_ == EXTRA:
        return _extra_array(values)
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
    offsets = [0]
    keys: list[str] = []
    items: list[float | None] = []
    validity = []
    for row in values:
        if row:
            for k, v in row.items():
                keys.append(k)
                items.append(_float_or_none(v))
            validity.append(True)
        else:
            validity.append(row is not None)
        offsets.append(len(keys))
    mask = pa.array([not v for v in validity], type=pa.bool_())
    return pa.MapArray.from_arrays(
        pa.array(offsets, type=pa.int32()), pa.array(keys, type=pa.string()),
        pa.array(items, type=pa.float64()), mask=mask,
    )


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
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._tables = {name: _Table(name, self.dir / f"{name}{STREAM_SUFFIX}") for name in TABLES}
        self._pending = 0
        self._closed = False
        self._warned = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background and flush_interval > 0:
            self._thread = threading.Thread(target=self._flush_loop, name="ledger-sdk-flush", daemon=True)
            self._thread.start()
        atexit.register(self.close)

    # ------------------------------------------------------------------------------------ logging
    def log_step(self, step: int, **metrics: Any) -> None:
        """Record one optimizer step. Known names (``loss``, ``lr``, ``tokens``, ``grad_norm``,
        ``step_time_s``, ``tokens_per_s``, ``flops_per_s``, ``aux_loss``, ``z_loss``, ``loss_scale``,
        ``memory_bytes``, ``skipped``) fill their columns; any other numeric metric goes to ``extra``."""
        now = metrics.pop("time", None) or time.time()
        row = (self.rank, step, now, *[metrics.pop(c, None) for c in _STEP_COLUMNS], metrics or None)
        self._append("steps", row)

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
        """Record one MoE layer's routing for one logging interval: token-assignments per expert, how
        many of them were dropped by capacity, the capacity, and the mean router entropy / log E."""
        counts = _ints(tokens_per_expert)
        drops = _ints(dropped) if dropped is not None else [None] * len(counts)
        if len(drops) != len(counts):
            raise ValueError(f"dropped has {len(drops)} entries, tokens_per_expert {len(counts)}")
        ent = None if entropy is None else float(entropy)
        rows = [
            (self.rank, step, layer, e, n, d, capacity, ent)
            for e, (n, d) in enumerate(zip(counts, drops, strict=True))
        ]
        with self._lock:
            self._tables["routing"].rows.extend(rows)
            self._pending += len(rows)
        self._maybe_flush()

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
    ) -> None:
        """Record one telemetry sample of a device (energy_j: the device's cumulative counter)."""
        row = (self.rank, time_s or time.time(), socket.gethostname(), device, power_w, energy_j,
               utilization, memory_bytes)
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
        with self._lock:
            self._tables[table].rows.append(row)
            self._pending += 1
        if self._pending >= self.flush_rows:
            self.flush()

    def _maybe_flush(self) -> None:
        if self._pending >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Append every buffered row to this rank's files."""
        with self._io_lock:
            with self._lock:
                taken = [(t, t.rows) for t in self._tables.values() if t.rows]
                for t, _ in taken:
                    t.rows = []
                self._pending = 0
            for table, rows in taken:
                try:
                    table.write(rows)
                except Exception as exc:  # never break the training loop over metrics
                    self._report_error(f"{table.name}: {type(exc).__name__}: {exc}")

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            if self._pending:
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


def _ints(values: Any) -> list[int]:
    if hasattr(values, "tolist"):  # numpy arrays and torch tensors
        values = values.tolist()
    return [int(v) for v in values]


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
            facts["cudnn"] = _cudnn_version(torch.backends.cudnn.version())
            try:
                facts["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
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


def _reset_for_tests() -> None:
    """Forget the process's run (tests only)."""
    global _current
    with _current_lock:
        if isinstance(_current, Run):
            _current.close()
        _current = None


__all__ = ["NullRun", "Run", "current", "runtime_facts"]
