"""A run's metric tables as numpy columns (:class:`RunData`), loaded from the DuckDB index.

Only the lowest rank that logged steps is read (as the receipt summary does); routing is summed over
ranks per (step, layer, expert) and reduced per (step, layer) in SQL, so a run with millions of routing
rows arrives as one row per logged layer and step. Nulls become NaN. Everything downstream is a pure
function of :class:`RunData`.

Warm-up (one meaning everywhere, as the receipt summary): the first 10% of logged steps, at least 1 when
there is more than one (:func:`ledger.store.summary.warmup_cut`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import duckdb
import numpy as np
from numpy.typing import NDArray

from ledger.analyses.stats import mad_keep
from ledger.mfu import model_flops_per_token
from ledger.store.routing import STEP_SUMMARY_COLUMNS
from ledger.store.summary import warmup_cut
from schemas import Receipt

Columns = dict[str, NDArray[Any]]

STEP_COLUMNS = (
    "step", "tokens", "time", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "flops_per_s",
    "tflops_per_device", "memory_bytes", "skipped", "global_batch",
)
EXTRA_COLUMNS = ("samples_per_s",)
"""Metrics of the steps table's ``extra`` map read as columns of their own: the samples rate a launch printed
(``640.0 samples/sec``: the capture's name for it), for a throughput where tokens are unknown."""

def routing_per_layer_step(con: duckdb.DuckDBPyConnection, receipt_id: str) -> Columns:
    """A receipt's routing per (step, layer) as numpy columns, from the index's ``routing_steps`` table
    (:data:`ledger.store.routing.STEP_SUMMARY`, computed in DuckDB when the receipt was indexed)."""
    cols = ", ".join(STEP_SUMMARY_COLUMNS)
    return _numpy(con.execute(f"SELECT {cols} FROM routing_steps WHERE receipt_id = $1 ORDER BY step, layer",
                              [receipt_id]).fetchnumpy())


@dataclass(frozen=True)
class RunData:
    """One receipt and its metric tables as columns (NaN for nulls)."""

    id: str
    """Receipt id."""
    receipt: Receipt
    """The receipt."""
    steps: Columns
    """Lowest rank's step rows sorted by step: :data:`STEP_COLUMNS`, and ``loss_nonfinite`` (1 where the loss
    was NaN or infinite, 0 where it was finite or not logged)."""
    evals: list[dict[str, Any]]
    """Eval rows (step, tokens, split, source, metric, value) sorted by step."""
    routing: Columns
    """Per (step, layer): experts, n_sum, n_std, n_max, d_sum, c_sum, entropy, n_log_n, dominant
    (:data:`ledger.store.routing.STEP_SUMMARY`)."""
    timing: dict[str, Columns]
    """Phase -> {step, seconds} (mean over ranks)."""
    telemetry: Columns = field(default_factory=dict)
    """Telemetry rows: time, device, power_w, energy_j, memory_bytes."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Event rows (rank, time, kind, step, attempt, detail) in time order."""
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Values derived from the tables, computed once (e.g. the steady throughput samples)."""

    @property
    def label(self) -> str:
        """Name and short id, e.g. ``bf16 (6635a6b9)``."""
        return f"{self.receipt.name} ({self.id[:8]})" if self.receipt.name else self.id[:12]

    @property
    def n_steps(self) -> int:
        """Logged step rows."""
        return int(self.steps["step"].size) if "step" in self.steps else 0

    @cached_property
    def warmup(self) -> int:
        """Step rows dropped as warm-up."""
        return warmup_cut(self.n_steps)

    @cached_property
    def steady(self) -> NDArray[np.bool_]:
        """Step rows after warm-up whose step time is not an outlier (:func:`ledger.analyses.stats.mad_keep`);
        every row after warm-up when step times were not logged."""
        mask = np.zeros(self.n_steps, dtype=np.bool_)
        mask[self.warmup :] = True
        st = np.asarray(self.steps.get("step_time_s", np.empty(0)), dtype=np.float64)
        if st.size and np.isfinite(st[self.warmup :]).any():
            mask[self.warmup :] &= mad_keep(st[self.warmup :])
        return mask

    def after_warmup(self, column: str) -> NDArray[np.float64]:
        """A step column without the warm-up rows."""
        return np.asarray(self.steps[column][self.warmup :], dtype=np.float64)

    @property
    def devices(self) -> int:
        """Devices the run used: the world size (ranks), else the GPU count, else 1."""
        w = self.receipt.workload.parallelism.world_size or self.receipt.stack.launcher.world_size
        return int(w) if w and w > 0 else 1

    @property
    def flops_per_token(self) -> float | None:
        """Model FLOPs per token (DESIGN.md): 6 x active parameters + 12 x layers x hidden x sequence length;
        None when the workload lacks one of them."""
        wl = self.receipt.workload
        active, layers, hidden = wl.model.active_params, wl.model.layers, wl.model.hidden
        seq = wl.data.sequence_length
        if not (active and layers and hidden and seq):
            return None
        return float(model_flops_per_token(float(active), layers, hidden, seq))

    @property
    def gpu_model(self) -> str | None:
        """The GPU model the run used (None on CPU)."""
        if self.receipt.workload.device == "cpu":
            return None
        return self.receipt.stack.hardware.gpu_model

    @property
    def precision(self) -> str | None:
        """The precision policy's name (fp32, bf16, fp8...)."""
        return self.receipt.workload.precision.compute

    @property
    def train_time(self) -> NDArray[np.float64]:
        """Seconds of training since the start of the first logged step, at the end of each step."""
        t = np.asarray(self.steps.get("time", np.empty(0)), dtype=np.float64)
        if t.size == 0 or not np.isfinite(t[0]):
            return np.full(t.size, math.nan)
        first = self.steps["step_time_s"][0] if "step_time_s" in self.steps else math.nan
        start = t[0] - (first if np.isfinite(first) else 0.0)
        return np.asarray(t - start, dtype=np.float64)


def _numpy(result: Mapping[str, Any]) -> Columns:
    out: Columns = {}
    for name, values in result.items():
        if isinstance(values, np.ma.MaskedArray):
            if values.dtype.kind in "biuf":
                values = np.ma.filled(values.astype(np.float64), np.nan)
            else:  # (np.ma.filled with None fills the array's fill_value, '?' for text, not None)
                text = np.asarray(values.data, dtype=object)
                text[np.ma.getmaskarray(values)] = None
                values = text
        elif values.dtype.kind in "iu" and name not in ("step", "layer", "expert"):
            values = values.astype(np.float64)
        elif values.dtype.kind == "b":
            values = values.astype(np.float64)
        out[name] = np.asarray(values)
    return out


def _arrow_numpy(table: Any) -> Columns:
    """:func:`_numpy` of the same rows fetched as Arrow (``to_arrow_table``): the same dtypes and values, for a
    million rows in about two thirds of ``fetchnumpy``'s time. Each column's chunks are converted one by one and
    joined into one writable array of its own (``ChunkedArray.to_numpy`` imports pandas, 0.6 s)."""
    import pyarrow as pa

    out: Columns = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        kind = column.type
        whole = pa.types.is_integer(kind) and name in ("step", "layer", "expert") and column.null_count == 0
        if (pa.types.is_integer(kind) or pa.types.is_boolean(kind)) and not whole:
            column = column.cast(pa.float64())  # nulls become NaN, as _numpy fills them
        chunks = [c.to_numpy(zero_copy_only=False) for c in column.chunks]
        if not chunks:
            chunks = [pa.array([], column.type).to_numpy(zero_copy_only=False)]
        out[name] = np.concatenate(chunks)
    return out


def _sorted(steps: Columns) -> Columns:
    """Rows by step, then time (sorting in numpy only when the index returned them out of order: an
    ORDER BY would cost DuckDB a sort of every row, every time).

    The columns are reordered in place (they are freshly fetched and owned by the caller) through one
    scratch array per dtype, rather than as a dozen new million-row arrays."""
    step = steps.get("step")
    if step is None or step.size < 2 or not bool((step[1:] < step[:-1]).any()):
        return steps
    order = np.lexsort((np.nan_to_num(steps["time"], nan=np.inf), step))
    scratch: dict[np.dtype[Any], NDArray[Any]] = {}
    out: Columns = {}
    for k, v in steps.items():
        if v.ndim != 1 or not v.flags.writeable or not v.flags.owndata or v.dtype.hasobject:
            out[k] = v[order]
            continue
        buf = scratch.get(v.dtype)
        if buf is None:
            buf = scratch[v.dtype] = np.empty(v.size, dtype=v.dtype)
        np.take(v, order, out=buf)
        v[...] = buf
        out[k] = v
    return out


def load_receipt(con: duckdb.DuckDBPyConnection, receipt_id: str) -> Receipt:
    """A receipt from the index (the same JSON as its file, validated when it was indexed)."""
    row = con.execute("SELECT receipt FROM receipts WHERE id = ?", [receipt_id]).fetchone()
    if row is None:
        raise KeyError(receipt_id)
    return Receipt.model_validate_json(row[0])


def load_run(con: duckdb.DuckDBPyConnection, receipt_id: str, receipt: Receipt | None = None) -> RunData:
    """One receipt's tables from the index (the attempts of a logical run are
    :func:`ledger.store.attempts.logical_run`)."""
    receipt = receipt if receipt is not None else load_receipt(con, receipt_id)
    cols = ", ".join(STEP_COLUMNS) + "".join(f", extra['{name}'] AS {name}" for name in EXTRA_COLUMNS) + \
        ", coalesce(isnan(loss) OR isinf(loss), false) AS loss_nonfinite"
    # the lowest rank first, then its rows by a plain filter: a scan that keeps the index's insertion order
    # (by step, as publishing wrote them), where a subquery in the filter made a join that returned them
    # shuffled, for _sorted to sort again
    first = con.execute("SELECT min(rank) FROM steps WHERE receipt_id = $1", [receipt_id]).fetchall()
    steps = _arrow_numpy(con.sql(f"SELECT {cols} FROM steps WHERE receipt_id = $1 AND rank = $2",
                                 params=[receipt_id, first[0][0]]).to_arrow_table())
    steps = _sorted(steps)
    evals = [
        dict(zip(("step", "tokens", "split", "source", "metric", "value"), r, strict=True))
        for r in con.execute(
            "SELECT step, tokens, split, source, metric, value FROM evals WHERE receipt_id = $1 AND rank = "
            "(SELECT min(rank) FROM evals WHERE receipt_id = $1) ORDER BY step, time",
            [receipt_id],
        ).fetchall()
    ]
    routing = routing_per_layer_step(con, receipt_id)
    timing_rows = _numpy(
        con.execute(
            "SELECT phase, step, avg(seconds) AS seconds FROM timing WHERE receipt_id = $1 "
            "GROUP BY phase, step ORDER BY phase, step",
            [receipt_id],
        ).fetchnumpy()
    )
    timing: dict[str, Columns] = {}
    if timing_rows.get("phase") is not None and timing_rows["phase"].size:
        phases = timing_rows["phase"]
        for phase in dict.fromkeys(phases.tolist()):
            mask = phases == phase
            timing[str(phase)] = {"step": timing_rows["step"][mask], "seconds": timing_rows["seconds"][mask]}
    telemetry = _numpy(
        con.execute(
            "SELECT time, device, power_w, energy_j, memory_bytes FROM telemetry WHERE receipt_id = $1 "
            "ORDER BY time",
            [receipt_id],
        ).fetchnumpy()
    )
    events = [
        dict(zip(("rank", "time", "kind", "step", "attempt", "detail"), r, strict=True))
        for r in con.execute(
            "SELECT rank, time, kind, step, attempt, detail FROM events WHERE receipt_id = $1 ORDER BY time",
            [receipt_id],
        ).fetchall()
    ]
    return RunData(receipt_id, receipt, steps, evals, routing, timing, telemetry, events)


_CACHE: OrderedDict[str, RunData] = OrderedDict()
CACHE_RUNS = 256
"""Runs kept by :func:`load_run_cached` (receipts are immutable and named by their content digest)."""
CACHE_MAX_STEPS = 20_000
"""Only runs with at most this many step rows are kept."""


def load_run_cached(con: duckdb.DuckDBPyConnection, receipt_id: str, receipt: Receipt | None = None) -> RunData:
    """:func:`load_run` through a small in-process cache: a receipt id is the digest of its content, so a run
    read once is the same run every time (the noise floor reads the same replicate groups for every
    comparison)."""
    found = _CACHE.get(receipt_id)
    if found is not None:
        _CACHE.move_to_end(receipt_id)
        return found
    run = load_run(con, receipt_id, receipt)
    if run.n_steps <= CACHE_MAX_STEPS:
        _CACHE[receipt_id] = run
        while len(_CACHE) > CACHE_RUNS:
            _CACHE.popitem(last=False)
    return run


HEATMAP_LAYERS = 8
"""Routing heatmaps drawn per receipt at most (the most imbalanced layers: :func:`imbalanced_layers`)."""


def imbalanced_layers(con: duckdb.DuckDBPyConnection, receipt_id: str, limit: int = HEATMAP_LAYERS) -> list[int]:
    """The ``limit`` MoE layers of highest mean load CV (from the index's ``routing_steps``), in layer order."""
    rows = con.execute(
        "SELECT layer FROM routing_steps WHERE receipt_id = $1 GROUP BY layer "
        "ORDER BY avg(n_std / nullif(n_sum / experts, 0)) DESC NULLS LAST, layer LIMIT $2",
        [receipt_id, limit]).fetchall()
    return sorted(int(r[0]) for r in rows)


def layer_count(con: duckdb.DuckDBPyConnection, receipt_id: str) -> int:
    """MoE layers that logged routing."""
    row = con.execute("SELECT count(DISTINCT layer) FROM routing_steps WHERE receipt_id = $1", [receipt_id]).fetchone()
    return int(row[0]) if row else 0


def routing_matrices(con: duckdb.DuckDBPyConnection, receipt_id: str, max_bins: int = 120,
                     layers: Sequence[int] | None = None) -> dict[int, Columns]:
    """Tokens per expert per step of each MoE layer (or only ``layers``), steps binned into at most ``max_bins``
    columns, as the share of the mean load (1 = even): layer -> {"step": bin start steps, "load": experts x
    bins}. Bins and sums are made in DuckDB (each (step, layer) row gets its bin, then the lists are opened
    and summed per bin and expert); numpy receives experts x bins numbers per layer."""
    where = "receipt_id = $1"
    params: list[Any] = [receipt_id]
    if layers is not None:
        if not layers:
            return {}
        where += f" AND layer IN ({', '.join(str(int(x)) for x in layers)})"
    bins = _numpy(con.execute(f"""
        WITH s AS (SELECT layer, step, dense_rank() OVER (PARTITION BY layer ORDER BY step) - 1 AS j,
                          count(*) OVER (PARTITION BY layer) AS steps
                   FROM (SELECT DISTINCT layer, step FROM routing WHERE {where}))
        SELECT layer, step, (((j + 1) * least(steps, {int(max_bins)}) + steps - 1) // steps) - 1 AS bin FROM s
        ORDER BY layer, step""", params).fetchnumpy())
    if not bins or bins["layer"].size == 0:
        return {}
    con.register("_routing_bins", {k: bins[k] for k in ("layer", "step", "bin")})
    try:
        rows = _numpy(con.execute(f"""
            SELECT layer, bin, expert, sum(n) AS n
            FROM (SELECT b.layer, b.bin, generate_subscripts(r.tokens, 1) - 1 AS expert, unnest(r.tokens) AS n
                  FROM routing r JOIN _routing_bins b ON r.layer = b.layer AND r.step = b.step
                  WHERE r.{where.replace(" layer", " r.layer")})
            GROUP BY layer, bin, expert""", params).fetchnumpy())
    finally:
        con.unregister("_routing_bins")
    out: dict[int, Columns] = {}
    for lay in np.unique(bins["layer"]).tolist():
        m, mb = rows["layer"] == lay, bins["layer"] == lay
        b, e = rows["bin"][m].astype(np.int64), rows["expert"][m].astype(np.int64)
        grid = np.zeros((int(e.max()) + 1 if e.size else 0, int(bins["bin"][mb].max()) + 1))
        grid[e, b] = np.nan_to_num(rows["n"][m])
        first = np.unique(bins["bin"][mb], return_index=True)[1]
        mean = grid.mean(axis=0, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            load = np.where(mean > 0, grid / mean, np.nan)
        out[int(lay)] = {"step": bins["step"][mb][first], "load": load}
    return out


def routing_matrix(con: duckdb.DuckDBPyConnection, receipt_id: str, layer: int, max_bins: int = 120) -> Columns:
    """One layer of :func:`routing_matrices`."""
    found = routing_matrices(con, receipt_id, max_bins, [layer]).get(layer)
    return found if found is not None else {"step": np.empty(0), "load": np.empty((0, 0))}


def layers_of(run: RunData) -> list[int]:
    """The MoE layers that logged routing."""
    layer = run.routing.get("layer")
    return sorted({int(v) for v in layer.tolist()}) if layer is not None and layer.size else []
