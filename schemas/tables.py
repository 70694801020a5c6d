"""Arrow schemas of the metric tables: one row per observation, long where the width varies.

The SDK writes these schemas per rank (Arrow IPC streams); the publisher merges them into one Parquet
file per table; the DuckDB index holds the same columns plus ``receipt_id``. Times are Unix seconds
(float64, UTC); durations are seconds; memory is bytes; energy is joules; power is watts.
"""

from __future__ import annotations

import pyarrow as pa

EXTRA = pa.map_(pa.string(), pa.float64())

STEPS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False, metadata={"doc": "Rank that logged the row."}),
        pa.field("step", pa.int64(), nullable=False, metadata={"doc": "Optimizer step (1-based)."}),
        pa.field("time", pa.float64(), metadata={"doc": "Unix time at the end of the step."}),
        pa.field("tokens", pa.int64(), metadata={"doc": "Tokens seen so far, all ranks."}),
        pa.field("loss", pa.float64(), metadata={"doc": "Training loss (language-model part)."}),
        pa.field("lr", pa.float64(), metadata={"doc": "Learning rate."}),
        pa.field("grad_norm", pa.float64(), metadata={"doc": "Gradient norm before clipping."}),
        pa.field("step_time_s", pa.float64(), metadata={"doc": "Wall time of the step."}),
        pa.field("tokens_per_s", pa.float64(), metadata={"doc": "Throughput of the step, all ranks."}),
        pa.field("flops_per_s", pa.float64(), metadata={"doc": "Achieved model FLOP/s, all ranks."}),
        pa.field("tflops_per_device", pa.float64(),
                 metadata={"doc": "Model TFLOP/s per device as the training framework printed it (its own FLOPs "
                                  "formula), e.g. Megatron's 'throughput per GPU (TFLOP/s/GPU)'."}),
        pa.field("global_batch", pa.int64(), metadata={"doc": "Samples in the step's global batch, all ranks."}),
        pa.field("aux_loss", pa.float64(), metadata={"doc": "Load-balancing loss (unweighted)."}),
        pa.field("z_loss", pa.float64(), metadata={"doc": "Router z-loss (unweighted)."}),
        pa.field("loss_scale", pa.float64(), metadata={"doc": "Loss scale (fp16)."}),
        pa.field("memory_bytes", pa.int64(), metadata={"doc": "Peak device memory of the step."}),
        pa.field("skipped", pa.bool_(), metadata={"doc": "The optimizer step was skipped (nan/inf)."}),
        pa.field("epoch", pa.float64(),
                 metadata={"doc": "Epoch as the run printed or logged it (fractional where the framework prints it so, "
                                  "e.g. Hugging Face's 0.38); null when not given."}),
        pa.field("printed_step", pa.int64(),
                 metadata={"doc": "The step counter as the output printed it, where it differs from step: a counter "
                                  "that restarts each epoch (iter 20/50 of epoch 2 is step 70). Null for SDK rows and "
                                  "where the printed counter is the step."}),
        pa.field("extra", EXTRA, metadata={"doc": "Any other numeric metric, by name."}),
    ]
)

EXTRA_CODED = pa.map_(pa.dictionary(pa.int32(), pa.string()), pa.float64())
""":data:`EXTRA` as the SDK's steps stream holds it: each row's names as indices into one dictionary of the
names per batch (a training loop names the same few metrics on every row)."""

STEPS_STREAM = pa.schema([f.with_type(EXTRA_CODED) if f.name == "extra" else f for f in STEPS])
"""The steps table in the SDK's Arrow IPC stream (``steps.arrows``): :data:`STEPS` with the ``extra`` names
dictionary-coded. :func:`ledger.store.merge.read_table` reads streams of either schema (a rank file may hold
an older SDK's stream of :data:`STEPS` before this one's) and returns :data:`STEPS`, the names decoded."""

EVALS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("time", pa.float64()),
        pa.field("tokens", pa.int64()),
        pa.field("split", pa.string(), metadata={"doc": "e.g. val, test."}),
        pa.field("source", pa.string(), metadata={"doc": "Data source, or null for the whole split."}),
        pa.field("metric", pa.string(), nullable=False, metadata={"doc": "e.g. loss, accuracy."}),
        pa.field("value", pa.float64()),
    ]
)

COUNTS = pa.list_(pa.int64())
"""Counts per expert of one MoE layer, indexed by expert number (0 .. E-1)."""

ROUTING = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("layer", pa.int32(), nullable=False),
        pa.field("tokens", COUNTS, metadata={"doc": "Token-assignments routed to each expert (n_e), by expert."}),
        pa.field("dropped", COUNTS, metadata={"doc": "Of those, dropped by capacity (d_e), by expert; null when "
                                                     "not logged."}),
        pa.field("capacity", pa.int64(), metadata={"doc": "Expert capacity C (slots per expert), when enforced."}),
        pa.field("entropy", pa.float64(), metadata={"doc": "Mean router entropy of the layer / log E."}),
    ]
)
"""One row per (rank, step, MoE layer), the counts of its E experts as lists: a 58-layer, 256-expert model
logs 58 rows a step, not 14,848 (docs/architecture.md, "Routing at production shape")."""

ROUTING_LONG = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("layer", pa.int32(), nullable=False),
        pa.field("expert", pa.int32(), nullable=False),
        pa.field("tokens", pa.int64(), metadata={"doc": "Token-assignments routed to the expert (n_e)."}),
        pa.field("dropped", pa.int64(), metadata={"doc": "Of those, dropped by capacity (d_e)."}),
        pa.field("capacity", pa.int64(), metadata={"doc": "Expert capacity C, when enforced."}),
        pa.field("entropy", pa.float64(), metadata={"doc": "Mean router entropy of the layer / log E."}),
    ]
)
"""The routing table of receipts written before the list layout: one row per (rank, step, layer, expert).
Such receipts still read: :mod:`ledger.store.routing` turns their rows into :data:`ROUTING`'s."""

TIMING = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("phase", pa.string(), nullable=False, metadata={"doc": "attention, router, dispatch..."}),
        pa.field("seconds", pa.float64()),
    ]
)

EVENTS = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("time", pa.float64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False, metadata={"doc": "init_start, checkpoint_save_end..."}),
        pa.field("step", pa.int64()),
        pa.field("attempt", pa.int32(), metadata={"doc": "Attempt number, filled in at publish time."}),
        pa.field("detail", pa.string(), metadata={"doc": "JSON object with anything else."}),
    ]
)

TELEMETRY = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False, metadata={"doc": "Rank that sampled; -1: the wrapper."}),
        pa.field("time", pa.float64(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("device", pa.string(), metadata={"doc": "gpu0, cpu, process..."}),
        pa.field("power_w", pa.float64()),
        pa.field("energy_j", pa.float64(), metadata={"doc": "Cumulative energy counter of the device."}),
        pa.field("utilization", pa.float64(), metadata={"doc": "0..1."}),
        pa.field("memory_bytes", pa.int64()),
        pa.field("sm_clock_mhz", pa.float64(), metadata={"doc": "Graphics (SM) clock now, MHz."}),
        pa.field("memory_clock_mhz", pa.float64(), metadata={"doc": "Memory clock now, MHz."}),
        pa.field("temperature_c", pa.float64(), metadata={"doc": "Device temperature, degrees C."}),
        pa.field("ecc_corrected", pa.int64(),
                 metadata={"doc": "Corrected ECC errors since the driver loaded (volatile count)."}),
        pa.field("ecc_uncorrected", pa.int64(),
                 metadata={"doc": "Uncorrected ECC errors since the driver loaded (volatile count)."}),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "steps": STEPS,
    "evals": EVALS,
    "routing": ROUTING,
    "timing": TIMING,
    "events": EVENTS,
    "telemetry": TELEMETRY,
}
"""Every metric table by name; the name is also the Parquet file stem and the index table name."""
