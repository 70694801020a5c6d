"""Megatron-LM (and Megatron-DeepSpeed) training logs -> steps, evals, timing, routing and workload.

Recognised lines, wherever they are in the log and whatever precedes them (a launcher's rank prefix such
as ``0: `` or ``[default3]:``, a ``[YYYY-MM-DD hh:mm:ss]`` timestamp, or neither):

- iteration lines ``iteration  N/ TOTAL | name: value | ...`` -> one steps row. Fields with a column of
  their own fill it (``lm loss`` -> loss, ``learning rate`` -> lr, ``grad norm``, ``loss scale``,
  ``load_balancing_loss``/``moe loss`` -> aux_loss, ``z_loss``, ``elapsed time per iteration (ms)`` ->
  step_time_s, ``consumed tokens`` -> tokens, ``memory(GiB)`` -> memory_bytes, ``number of skipped
  iterations`` -> skipped, ``global batch size`` -> global_batch, ``throughput per GPU (TFLOP/s/GPU)`` or
  Megatron-DeepSpeed's ``TFLOPs`` -> tflops_per_device, as printed); every other ``name: value`` (mtp losses,
  ``seq_load_balancing_loss``, ``num zeros``, ``params norm``, consumed samples, ``samples per second``...) is kept
  in ``extra`` under its printed name. Durations such as ``1m 52s`` become seconds. A missing
  trailing ``|``, ``nan`` and ``inf`` are fine;
- ``[Rank r] (after N iterations) memory (MB) | allocated: ... | max allocated: ...`` -> memory of step N, rank r
  (a launcher's rank prefix, when there is one, wins);
- ``validation loss at iteration N [on S set] | lm loss value: ... | lm loss PPL: ...`` and ``validation
  loss at the end of training for S data | ...`` -> evals (``lm loss value`` -> metric ``loss``, ``lm loss
  PPL`` -> ``ppl``);
- timers: ``(min, max) time across ranks (ms):`` followed by ``name ....: (min, max)`` lines, or the older
  ``time (ms) | name: value | ...`` -> timing rows of the last iteration seen (seconds = max / 1000: the
  slowest rank is the one the step waits for);
- the argument dump (``name ....... value`` lines) -> workload;
- ``using world size: 8, data-parallel size: 2, context-parallel size: 1, ..., tensor-model-parallel size: 2,
  pipeline-model-parallel size: 2`` (printed once the sizes are settled) -> workload.parallelism (world size, dp,
  cp, tp, pp), whether or not the log has an argument dump (:func:`.megatron_args.args_from_world_line`);
- the global batch size every iteration line prints -> workload.batch.global_batch when it is the same on every
  line (a batch-size ramp-up changes it: then the receipt says from which iteration it was which, and the workload
  keeps what the arguments say).

Derived columns, each from facts in the log: tokens = consumed samples x seq_length (when no ``consumed
tokens``), tokens_per_s = global batch size x seq_length / step time (or samples per second x actual
seqlen), flops_per_s = TFLOP/s per GPU x 1e12 x world_size; only when those facts are known.

A line that looks like one of these (it starts with ``iteration``, or says ``validation loss at``) but does
not parse is counted and listed with its line number; a field that is not a number is listed too. Lines that
are none of these (warnings, prints of other libraries) are foreign and skipped. The log streams: memory is
one small dict per iteration line, never the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.ingest.common import Issues, LineError, numbered_lines, strip_rank, table
from ledger.ingest.megatron_args import ARG_LINE, WORLD_LINE, args_from_world_line, parse_value

_TIMESTAMP = re.compile(r"^\s*\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\]\s*")
_ITERATION = re.compile(r"^iteration\s+(\d+)\s*/\s*(\d+)\s*(?:\|(.*))?$")
_VALIDATION = re.compile(
    r"validation loss at (?:iteration\s+(\d+)(?:\s+on\s+(\w+)\s+set)?|the end of training for (\w+) data)"
    r"\s*(?:\|(.*))?$"
)
_MEMORY = re.compile(r"\(after (\d+) iterations\) memory \((MB|GB|GiB|MiB)\)\s*\|(.*)$")
_TIMER = re.compile(r"^\s*([A-Za-z][\w\-/ ]*?)\s*\.{2,}:\s*\(?\s*([^,()\s]+)(?:\s*,\s*([^,()\s]+))?\s*\)?\s*$")
_DURATION = re.compile(r"^\s*(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m(?!s))?\s*(?:(\d+(?:\.\d+)?)\s*s)?\s*$")
_MEMORY_RANK = re.compile(r"\[Rank (\d+)\]")
"""Megatron's own rank label of a memory report (each data-parallel rank 0 prints one: several with TP/PP)."""
_MB = {"MB": 1 << 20, "MiB": 1 << 20, "GB": 1 << 30, "GiB": 1 << 30}

STEP_COLUMNS: dict[str, tuple[str, float]] = {
    "lm loss": ("loss", 1.0),
    "loss": ("loss", 1.0),
    "learning rate": ("lr", 1.0),
    "grad norm": ("grad_norm", 1.0),
    "loss scale": ("loss_scale", 1.0),
    "load_balancing_loss": ("aux_loss", 1.0),
    "moe loss": ("aux_loss", 1.0),
    "z_loss": ("z_loss", 1.0),
    "elapsed time per iteration (ms)": ("step_time_s", 1e-3),
    "consumed tokens": ("tokens", 1.0),
    "memory(GiB)": ("memory_bytes", float(1 << 30)),
}
"""Printed field name -> (steps column, factor to the column's unit)."""

TFLOPS_FIELDS = ("throughput per GPU (TFLOP/s/GPU)", "TFLOPs")
"""Model TFLOP/s per GPU as Megatron-LM (``throughput per GPU (TFLOP/s/GPU)``) and Megatron-DeepSpeed (``TFLOPs``,
FLOPs per iteration / (iteration time x world size)) print it."""
GLOBAL_BATCH = "global batch size"
FIRST_CLASS = frozenset({*TFLOPS_FIELDS, GLOBAL_BATCH})
"""Printed fields with a steps column of their own besides STEP_COLUMNS (not repeated in ``extra``)."""
SKIPPED = "number of skipped iterations"


def _number(text: str) -> float:
    """A field's value: a number (nan and inf included) or a duration such as ``7h 6m 43s`` in seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    m = _DURATION.match(text)
    if m and any(m.groups()) and text.strip():
        d, h, mi, s = m.groups()
        return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)
    raise ValueError(text)


def split_fields(text: str) -> tuple[dict[str, float], list[str]]:
    """``name: value | name: value`` -> ({name: number}, [why each unusable field was not kept])."""
    values: dict[str, float] = {}
    bad: list[str] = []
    for part in text.split("|"):
        name, sep, value = part.partition(":")
        name = name.strip()
        if not sep:
            if name:
                bad.append(f"{name[:40]!r} has no ': value'")
            continue
        value = value.strip()
        if not value:
            bad.append(f"{name[:40]!r} has no value")
            continue
        try:
            values[name] = _number(value)
        except ValueError:
            bad.append(f"{name[:40]!r}: {value[:40]!r} is not a number")
    return values, bad


@dataclass
class Line:
    """One recognised line."""

    kind: str
    """iteration, validation, memory, timer, timers-header, argument, parallelism."""
    rank: int | None = None
    time: datetime | None = None
    step: int | None = None
    total: int | None = None
    split: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)
    name: str | None = None
    value: Any = None


def _timestamp(text: str) -> tuple[datetime | None, str]:
    m = _TIMESTAMP.match(text)
    if not m:
        return None, text
    try:
        when = datetime.fromisoformat(m.group(1).replace(",", "."))
    except ValueError:
        when = None
    return when, text[m.end():]


def is_iteration_line(raw: str) -> bool:
    """True for a line that is a Megatron iteration line (cheap: for recognising Megatron output)."""
    if "iteration" not in raw:
        return False
    _, text = strip_rank(raw)
    _, text = _timestamp(text)
    return _ITERATION.match(text.strip()) is not None


def parse_line(raw: str) -> Line | None:
    """One log line: a :class:`Line`, None for foreign lines, or :class:`LineError` for a line that looks
    like Megatron evidence and does not parse."""
    rank, text = strip_rank(raw.rstrip("\r\n"))
    when, text = _timestamp(text)
    body = text.strip()
    if body.startswith("iteration"):
        m = _ITERATION.match(body)
        if not m:
            raise LineError("an iteration line without 'iteration N/ TOTAL'")
        values, bad = split_fields(m.group(3) or "")
        return Line("iteration", rank, when, int(m.group(1)), int(m.group(2)), values=values, bad=bad)
    if "validation loss at" in body:
        m = _VALIDATION.search(body)
        if not m:
            raise LineError("a validation line without 'at iteration N' or 'at the end of training'")
        values, bad = split_fields(m.group(4) or "")
        if not values:
            raise LineError("a validation line without values")
        where = m.group(2) or m.group(3) or "validation"
        split = "val" if where.lower() in ("val", "valid", "validation") else where.lower()
        step = int(m.group(1)) if m.group(1) else None
        return Line("validation", rank, when, step, split=split, values=values, bad=bad)
    if "iterations) memory (" in body:
        m = _MEMORY.search(body)
        if not m:
            raise LineError("a memory report without '(after N iterations) memory (MB) | ...'")
        values, bad = split_fields(m.group(3))
        scale = _MB[m.group(2)]
        said = _MEMORY_RANK.search(body, 0, m.start())
        if rank is None and said:  # no launcher prefix: the rank the report names, not rank 0 for all
            rank = int(said.group(1))
        return Line("memory", rank, when, int(m.group(1)), values={k: v * scale for k, v in values.items()},
                    bad=bad)
    if body.startswith(WORLD_LINE):
        return Line("parallelism", rank, when, values={k: float(v) for k, v in args_from_world_line(body).items()})
    if body.startswith("(min, max) time across ranks"):
        return Line("timers-header", rank, when)
    if body.startswith("time (ms)") and "|" in body:
        values, bad = split_fields(body.split("|", 1)[1])
        return Line("timers", rank, when, values=values, bad=bad)
    if "...:" in body:
        m = _TIMER.match(text)
        if m:
            try:
                low = float(m.group(2))
                high = float(m.group(3)) if m.group(3) else low
            except ValueError as exc:
                raise LineError(f"timer {m.group(1)!r} with a value that is not a number") from exc
            return Line("timer", rank, when, name=m.group(1).strip(), values={"min": low, "max": high})
    elif "..." in body:
        m = ARG_LINE.match(text)
        if m:
            return Line("argument", rank, when, name=m.group(1), value=parse_value(m.group(2)))
    return None


# ------------------------------------------------------------------------------------------ the log
@dataclass
class MegatronLog:
    """What a Megatron log says."""

    steps: list[tuple[int, int, float | None, dict[str, float]]] = field(default_factory=list)
    """(rank, step, unix time or None, fields) per iteration line, in log order."""
    evals: list[tuple[int, int, float | None, str, str, float]] = field(default_factory=list)
    """(rank, step, time, split, metric, value)."""
    timing: list[tuple[int, int, str, float]] = field(default_factory=list)
    """(rank, step, phase, seconds)."""
    memory: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    """(rank, step) -> memory report in bytes."""
    args: dict[str, Any] = field(default_factory=dict)
    """The argument dump."""
    stated: dict[str, Any] = field(default_factory=dict)
    """Arguments the log states outside the dump: the ``using world size`` line's sizes, the global batch size of
    iteration lines that all print the same (:meth:`arguments`)."""
    batch_sizes: list[tuple[int, int]] = field(default_factory=list)
    """(iteration, global batch size) where the iteration lines' global batch size first is each value it takes."""
    total_iters: int | None = None
    lines: int = 0
    iteration_lines: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None
    timestamps: bool = False
    truncated_last: bool = False
    end_line: tuple[int, str] | None = None
    """(line number, text) of Megatron's own end-of-run message (``[after training is done]``, ``exiting program
    after N minutes`` / ``at iteration N``), when the log has one."""
    issues: Issues = field(default_factory=lambda: Issues("log"))

    def arguments(self) -> dict[str, Any]:
        """Megatron's arguments as the log states them: the argument dump over what other lines state
        (:attr:`stated`)."""
        return {**self.stated, **self.args}

    def tables(self, args: Mapping[str, Any] | None = None) -> dict[str, pa.Table]:
        """steps, evals and timing tables; ``args`` (launch flags merged with the log's :meth:`arguments`) give the
        sequence length and world size the derived columns need."""
        a = {**self.arguments(), **(args or {})}
        return {"steps": self._steps_table(a), "evals": self._evals_table(), "timing": self._timing_table()}

    def _steps_table(self, args: Mapping[str, Any]) -> pa.Table:
        seq = _positive_int(args.get("seq_length"))
        world = _positive_int(args.get("world_size"))
        cols: dict[str, list[Any]] = {n: [] for n in (
            "rank", "step", "time", "tokens", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s",
            "flops_per_s", "tflops_per_device", "global_batch", "aux_loss", "z_loss", "loss_scale", "memory_bytes",
            "skipped", "extra")}
        seen = set()
        for rank, step, when, fields in self.steps:
            row: dict[str, Any] = {}
            extra: dict[str, float] = {}
            for name, value in fields.items():
                column = STEP_COLUMNS.get(name)
                if column is None:
                    if name not in FIRST_CLASS:
                        extra[name] = value
                elif column[0] not in row or name != "loss":  # "lm loss" wins over a bare "loss"
                    row[column[0]] = value * column[1]
            memory = self.memory.get((rank, step))
            if memory:
                for name, value in memory.items():
                    extra[f"memory {name} (bytes)"] = value
                if "max allocated" in memory and "memory_bytes" not in row:
                    row["memory_bytes"] = memory["max allocated"]
            samples = fields.get("consumed samples")
            actual = fields.get("actual seqlen")
            length = seq or (int(actual) if actual and math.isfinite(actual) and actual > 0 else None)
            if "tokens" not in row and samples is not None and length and math.isfinite(samples):
                row["tokens"] = samples * length
            step_time = row.get("step_time_s")
            gbs = fields.get(GLOBAL_BATCH)
            if length and step_time and gbs and math.isfinite(gbs) and step_time > 0:
                row["tokens_per_s"] = gbs * length / step_time
            elif length and fields.get("samples per second"):
                row["tokens_per_s"] = fields["samples per second"] * length
            tflops = next((fields[f] for f in TFLOPS_FIELDS if f in fields), None)
            if tflops is not None and math.isfinite(tflops):
                row["tflops_per_device"] = tflops
                if world:
                    row["flops_per_s"] = tflops * 1e12 * world
            if gbs is not None and math.isfinite(gbs) and gbs > 0:
                row["global_batch"] = gbs
            skipped = fields.get(SKIPPED)
            cols["rank"].append(rank)
            cols["step"].append(step)
            cols["time"].append(when)
            for name in ("tokens", "memory_bytes", "global_batch"):
                v = row.get(name)
                cols[name].append(int(v) if v is not None and math.isfinite(v) else None)
            for name in ("loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "flops_per_s", "tflops_per_device",
                         "aux_loss", "z_loss", "loss_scale"):
                cols[name].append(row.get(name))
            cols["skipped"].append(None if skipped is None or math.isnan(skipped) else skipped > 0)
            cols["extra"].append(extra or None)
            seen.add((rank, step))
        for (rank, step), memory in sorted(self.memory.items()):  # memory reports of unlogged iterations
            if (rank, step) in seen:
                continue
            for name in cols:
                cols[name].append(None)
            cols["rank"][-1], cols["step"][-1] = rank, step
            cols["memory_bytes"][-1] = int(memory["max allocated"]) if "max allocated" in memory else None
            cols["extra"][-1] = {f"memory {k} (bytes)": v for k, v in memory.items()} or None
        extra_maps = cols.pop("extra")
        t = table("steps", cols)
        return t.set_column(t.schema.get_field_index("extra"), t.schema.field("extra"), _map_column(extra_maps))

    @property
    def last_step(self) -> int | None:
        """The highest iteration an iteration line reports."""
        return max((step for _, step, _, _ in self.steps), default=None)

    def stopped_early(self, args: Mapping[str, Any] | None = None) -> str | None:
        """Why the log reads as a run that stopped before ``train_iters`` (killed, crashed, preempted, or an
        excerpt), or None. A run that reached ``train_iters``, stopped at its ``--exit-interval``, or printed
        Megatron's own end-of-run message (``after training is done``, ``exiting program ...``) did not; neither
        did one whose last logged iteration is within one ``--log-interval`` of the end."""
        a = {**self.arguments(), **(args or {})}
        total = _positive_int(a.get("train_iters")) or self.total_iters
        last = self.last_step
        if not total or last is None or last >= total or self.end_line is not None:
            return None
        exit_interval = _positive_int(a.get("exit_interval"))
        if exit_interval and last >= exit_interval and last % exit_interval == 0:
            return None
        interval = _positive_int(a.get("log_interval"))
        if interval and last + interval > total:
            return None
        cut = " (its last line has no line end)" if self.truncated_last else ""
        return (f"the log stops at iteration {last} of {total} (train_iters) without Megatron's end-of-run message"
                f"{cut}: the run ended early (killed, crashed or preempted), or the log is an excerpt")

    def _evals_table(self) -> pa.Table:
        cols: dict[str, list[Any]] = {n: [] for n in ("rank", "step", "time", "split", "metric", "value")}
        for rank, step, when, split, metric, value in self.evals:
            for name, v in zip(cols, (rank, step, when, split, metric, value), strict=True):
                cols[name].append(v)
        return table("evals", cols)

    def _timing_table(self) -> pa.Table:
        cols: dict[str, list[Any]] = {n: [] for n in ("rank", "step", "phase", "seconds")}
        for row in self.timing:
            for name, v in zip(cols, row, strict=True):
                cols[name].append(v)
        return table("timing", cols)


def _map_column(rows: list[dict[str, float] | None]) -> pa.Array:
    """The ``extra`` MAP column from one dict (or None) per row, built from flat arrays."""
    offsets = [0]
    keys: list[str] = []
    values: list[float] = []
    for row in rows:
        if row:
            keys.extend(row)
            values.extend(row.values())
        offsets.append(len(keys))
    mask = pa.array([row is None for row in rows], type=pa.bool_()) if None in rows else None
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=pa.string()),
                                   pa.array(values, type=pa.float64()), mask=mask)


def _positive_int(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        return None
    return int(v)


def _metric(name: str) -> str:
    base = name[: -len(" value")] if name.endswith(" value") else name
    return {"lm loss": "loss", "lm loss PPL": "ppl"}.get(base, base)


def _unix(when: datetime | None) -> float | None:
    """Megatron prints local time without a zone: read as UTC (relative times are exact; the receipt
    says so in a problem note)."""
    if when is None:
        return None
    from datetime import UTC

    return when.replace(tzinfo=UTC).timestamp() if when.tzinfo is None else when.timestamp()


def parse_lines(lines: Iterable[tuple[int, str, bool]], source: str = "log") -> MegatronLog:
    """Parse numbered lines (see :func:`ledger.ingest.common.numbered_lines`)."""
    log = MegatronLog(issues=Issues(source))
    issues = log.issues
    last_step: int | None = None
    counts: dict[tuple[int, int], int] = {}
    ended = True
    lineno = 0
    for lineno, raw, ended in lines:  # noqa: B007 (ended: of the last line, read after the loop)
        if not raw:
            continue
        if "exiting program" in raw or "after training is done" in raw:
            log.end_line = (lineno, raw.strip()[:120])
            continue
        if "iteration" not in raw and "..." not in raw and "validation" not in raw and "time (ms)" not in raw \
                and "(min, max)" not in raw and WORLD_LINE not in raw:
            continue  # the common foreign line, rejected cheaply
        try:
            line = parse_line(raw)
        except LineError as exc:
            issues.line(lineno, str(exc))
            continue
        if line is None:
            continue
        rank = line.rank or 0
        if line.time is not None:
            log.timestamps = True
            log.first_time = log.first_time or line.time
            log.last_time = line.time
        for why in line.bad:
            issues.field(lineno, why)
        if line.kind == "iteration":
            assert line.step is not None
            log.iteration_lines += 1
            log.total_iters = line.total
            log.steps.append((rank, line.step, _unix(line.time), line.values))
            batch = _positive_int(line.values.get(GLOBAL_BATCH))
            if batch is not None and (not log.batch_sizes or log.batch_sizes[-1][1] != batch):
                log.batch_sizes.append((line.step, batch))
            counts[(rank, line.step)] = counts.get((rank, line.step), 0) + 1
            last_step = line.step if last_step is None else max(last_step, line.step)
        elif line.kind == "validation":
            step = line.step if line.step is not None else last_step
            if step is None:
                issues.line(lineno, "a validation result before any iteration")
                continue
            for name, value in line.values.items():
                log.evals.append((rank, step, _unix(line.time), line.split or "val", _metric(name), value))
        elif line.kind == "memory":
            assert line.step is not None
            log.memory[(rank, line.step)] = line.values
        elif line.kind in ("timer", "timers"):
            if last_step is None:
                continue  # start-up timers (model build, data loaders) before the first iteration
            if line.kind == "timer":
                assert line.name is not None
                log.timing.append((rank, last_step, line.name, line.values["max"] / 1000.0))
            else:
                for name, ms in line.values.items():
                    log.timing.append((rank, last_step, name, ms / 1000.0))
        elif line.kind == "argument":
            assert line.name is not None
            log.args[line.name] = line.value
        elif line.kind == "parallelism":
            log.stated.update({k: int(v) for k, v in line.values.items()})
    log.lines = lineno
    log.truncated_last = not ended
    if not ended and lineno:
        issues.note(f"line {lineno} has no line end: the log may have been cut off (a killed job); "
                    "its fields were kept as far as they parse")
    sizes = {batch for _, batch in log.batch_sizes}
    if len(sizes) == 1:
        log.stated["global_batch_size"] = log.batch_sizes[0][1]
    elif sizes:
        shown = ", ".join(f"{batch} from iteration {step}" for step, batch in log.batch_sizes[:6])
        more = f" and {len(log.batch_sizes) - 6} more changes" if len(log.batch_sizes) > 6 else ""
        issues.note(f"the global batch size changes during the run ({shown}{more}): a batch-size ramp-up "
                    "(--rampup-batch-size)? The workload's global batch is the arguments' (none when they do not say), "
                    "each step's is in the steps table")
    repeated = sorted(k for k, n in counts.items() if n > 1)
    if repeated:
        shown = ", ".join(str(s) for _, s in repeated[:10])
        issues.note(f"{len(repeated)} iteration(s) appear more than once (a restart into the same log?): {shown}")
    if log.timestamps:
        issues.note("timestamps carry no time zone: read as UTC (durations between them are exact)")
    return log


def parse_log(path: Path, source: str | None = None) -> MegatronLog:
    """Parse a Megatron log file (plain or gzip), streaming."""
    return parse_lines(numbered_lines(path), source or path.name)


# ---------------------------------------------------------------------------------------- routing
def routing_from_dir(directory: Path, issues: Issues, since: float | None = None) -> pa.Table:
    """``tokens_per_expert/*.jsonl`` dumps -> the routing table. One JSON object per line:

    - ``{"iteration": N, "layer": L, "tokens_per_expert": [n_0, ...]}`` with optional ``"dropped"`` (list),
      ``"capacity"``, ``"entropy"`` and ``"rank"`` (``"step"`` may stand for ``"iteration"``);
    - or every layer at once: ``"tokens_per_expert": [[...], [...]]`` (layer = position, or ``"layers"``
      lists their numbers) or ``{"<layer>": [...]}``.

    ``since``: ignore files last modified before this Unix time (dumps of an earlier run)."""
    cols: dict[str, list[Any]] = {n: [] for n in ("rank", "step", "layer", "tokens", "dropped", "capacity",
                                                  "entropy")}
    for path in sorted(directory.glob("*.jsonl")):
        if since is not None and path.stat().st_mtime < since:
            continue
        name = f"{directory.name}/{path.name}"
        bad = Issues(name)
        for lineno, raw, _ in numbered_lines(path):
            if not raw.strip():
                continue
            try:
                for row in _routing_rows(raw):
                    for key, value in zip(cols, row, strict=True):
                        cols[key].append(value)
            except LineError as exc:
                bad.line(lineno, str(exc))
        if bad.unparsed:
            issues.notes.extend(p.message if p.source == issues.source else f"{p.source}: {p.message}"
                                for p in bad.problems())
            issues.unparsed.extend(bad.unparsed)
    return table("routing", cols)


def _routing_rows(raw: str) -> Iterator[tuple[Any, ...]]:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise LineError(f"not JSON ({exc.args[0][:60]})") from exc
    if not isinstance(obj, dict):
        raise LineError("expected a JSON object")
    step = obj.get("iteration", obj.get("step"))
    if not isinstance(step, int) or isinstance(step, bool):
        raise LineError("no integer 'iteration' (or 'step')")
    counts = obj.get("tokens_per_expert", obj.get("counts"))
    rank = obj.get("rank", 0)
    rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else 0
    if isinstance(counts, dict):
        layers = [(k, v) for k, v in counts.items()]
    elif isinstance(counts, list) and counts and all(isinstance(c, list) for c in counts):
        numbers = obj.get("layers") or list(range(len(counts)))
        layers = list(zip(numbers, counts, strict=False))
    elif isinstance(counts, list):
        if "layer" not in obj:
            raise LineError("a flat tokens_per_expert list needs 'layer'")
        layers = [(obj["layer"], counts)]
    else:
        raise LineError("no 'tokens_per_expert' list")
    dropped = obj.get("dropped")
    for layer, per_expert in layers:
        try:
            layer_no = int(layer)
            values = [int(v) for v in per_expert]
        except (TypeError, ValueError) as exc:
            raise LineError(f"layer {layer!r}: counts must be integers") from exc
        drops: list[Any] | None = None
        if isinstance(dropped, list) and len(dropped) == len(values) and len(layers) == 1:
            drops = [int(d) if isinstance(d, int | float) and not isinstance(d, bool) else 0 for d in dropped]
        capacity = obj.get("capacity")
        entropy = obj.get("entropy")
        yield (rank, step, layer_no, values, drops,
               capacity if isinstance(capacity, int) and not isinstance(capacity, bool) else None,
               float(entropy) if isinstance(entropy, int | float) and not isinstance(entropy, bool) else None)


__all__ = [
    "Line", "MegatronLog", "is_iteration_line", "parse_line", "parse_lines", "parse_log", "routing_from_dir",
    "split_fields",
]
