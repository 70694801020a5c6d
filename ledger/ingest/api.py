"""One function per `ledger ingest` command: parse the evidence, publish the receipt, return it.

The CLI (``ledger/commands/ingest.py``) only parses options, calls these and prints the id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ledger.errors import BadInput
from ledger.ingest import golden, mlperf, trace
from ledger.ingest.common import (
    Evidence,
    Issues,
    WrongKind,
    check_file,
    conform,
    describe,
    publish_evidence,
    sha256_of,
    stage_evidence,
)
from ledger.ingest.megatron import MegatronLog, parse_log, routing_from_dir
from ledger.ingest.megatron_args import args_from_text, merge_args, workload_from_args
from ledger.store.merge import empty
from ledger.store.receipts import Ledger
from ledger.store.routing import as_lists
from schemas import Links, Receipt, Stack
from schemas.tables import TABLES

ENDED_EARLY = "ended_early"
"""summary.outcome of an imported log that stops before the end its own arguments give."""


@dataclass
class Imported:
    """A published import and what the command reports about it."""

    receipt: Receipt
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        """The new receipt's id and name, and what the import found."""
        return {"receipt_id": self.receipt.id, "name": self.receipt.name, "notes": self.notes}


def megatron_evidence(path: Path, args_from: Path | None = None, routing: Path | None = None) -> tuple[Evidence,
                                                                                                      MegatronLog]:
    """A Megatron log (and optional launch arguments and routing dumps) as :class:`Evidence`."""
    check_file(path)
    log = parse_log(path)
    extra: dict[str, Any] = {}
    if args_from is not None:
        check_file(args_from)
        extra = args_from_text(args_from.read_text(errors="replace"))
        if not extra:
            raise WrongKind(f"{args_from}: expected Megatron arguments (an argument dump, launch flags or a "
                            f"model_config.yaml), found {describe(args_from)}")
    if not log.iteration_lines and not log.args and not log.evals:
        raise WrongKind(f"{path}: expected a Megatron-LM log (iteration lines or an argument dump), found "
                        f"{describe(path)}" + (f"; {len(log.issues.unparsed)} line(s) looked like Megatron output "
                                               "but did not parse" if log.issues.unparsed else "")
                        + "; a log of another trainer is read by `ledger ingest log FILE` (or --parse REGEX)")
    args = merge_args(extra, log.arguments())
    tables = log.tables(args)
    directory = routing if routing is not None else path.parent / "tokens_per_expert"
    if routing is not None and not routing.is_dir():
        raise BadInput(f"--routing {routing}: not a folder")
    if directory.is_dir():
        tables["routing"] = routing_from_dir(directory, log.issues)
    if "train_iters" not in args and log.total_iters:
        args["train_iters"] = log.total_iters
    workload = workload_from_args(args, complete=False) if args else None
    early = log.stopped_early(args)
    if early:
        log.issues.note(early)
    ev = Evidence(kind="megatron-log", path=path, sha256=sha256_of(path), tables=tables, workload=workload,
                  issues=log.issues, lines=log.lines, started_at=log.first_time, ended_at=log.last_time, log=path,
                  outcome=ENDED_EARLY if early else None)
    return ev, log


def ingest_megatron(ledger: Ledger, path: Path, args_from: Path | None = None, name: str | None = None,
                    routing: Path | None = None, tags: Mapping[str, str] | None = None) -> Imported:
    """`ledger ingest megatron`."""
    ev, log = megatron_evidence(path, args_from, routing)
    receipt = publish_evidence(ledger, ev, name or path.stem, tags)
    notes = [f"{log.iteration_lines} iteration line(s), {len(log.evals)} eval value(s), {len(log.timing)} timer "
             f"value(s) from {log.lines} line(s)"]
    if ev.unparsed:
        notes.append(f"{ev.unparsed} line(s) did not parse (listed in the receipt's problems)")
    if ev.outcome == ENDED_EARLY:
        notes.append(f"outcome {ENDED_EARLY}: the log stops at iteration {log.last_step}, before train_iters")
    return Imported(receipt, notes)


def ingest_mlperf(ledger: Ledger, path: Path, system: Path | None = None, rules: Sequence[Path] = (),
                  name: str | None = None, tags: Mapping[str, str] | None = None) -> Imported:
    """`ledger ingest mlperf` of one result."""
    result = mlperf.evidence(path, system, rules)
    return _mlperf_imported(result, publish_evidence(ledger, result.evidence, name or path.stem, tags))


IMPORT_GROUP = 64
"""Results published together by an import of many (:func:`ledger.store.publish.publish_many`)."""


def ingest_mlperf_many(ledger: Ledger, paths: Sequence[Path], system: Path | None = None, rules: Sequence[Path] = (),
                       tags: Mapping[str, str] | None = None) -> list[Imported]:
    """`ledger ingest mlperf` of many results (each named by its file's stem): every file is parsed first (a
    bad one stops the import before anything is published), then they are published in groups of
    :data:`IMPORT_GROUP` through the bulk publish path, and the index is synced once at the end."""
    from ledger.redact import Redactor
    from ledger.store.index import try_sync
    from ledger.store.publish import publish_many

    results = [mlperf.evidence(path, system, rules) for path in paths]
    redact = Redactor(os.environ).text
    imported: list[Imported] = []
    for start in range(0, len(results), IMPORT_GROUP):
        group = list(zip(paths[start : start + IMPORT_GROUP], results[start : start + IMPORT_GROUP], strict=True))
        staged = [stage_evidence(ledger, result.evidence, path.stem, tags) for path, result in group]
        receipts = publish_many(ledger, staged, redact=redact)
        imported.extend(_mlperf_imported(result, receipt) for (_, result), receipt in zip(group, receipts, strict=True))
    try_sync(ledger)
    return imported


def _mlperf_imported(result: mlperf.MlperfResult, receipt: Receipt) -> Imported:
    ev = result.evidence
    notes = [f"outcome {ev.outcome or 'unknown'}, time to train "
             + (f"{ev.time_to_train_s:.3f} s" if ev.time_to_train_s is not None else "unknown")]
    if result.target is not None:
        g = result.target.gate
        sign = "<=" if g.direction == "min" else ">="
        met = f"met at samples_count {result.met_at}" if result.met_at is not None else "not met"
        notes.append(f"quality target {g.metric} {sign} {g.threshold} ({result.target.rules_file}): {met}")
    return Imported(receipt, notes)


def ingest_golden(ledger: Ledger, path: Path, config: Path | None = None, name: str | None = None,
                  tags: Mapping[str, str] | None = None) -> Imported:
    """`ledger ingest golden`."""
    ev = golden.evidence(path, config)
    receipt = publish_evidence(ledger, ev, name or path.stem, tags)
    return Imported(receipt, [f"{ev.tables['steps'].num_rows} step(s)"])


def ingest_trace(ledger: Ledger, path: Path, into: str, name: str | None = None) -> Imported:
    """`ledger ingest trace --into REF`: receipts are immutable, so this publishes a NEW receipt holding
    the referenced receipt's facts (stack, workload, command, times, metric tables, log) plus the trace's
    timing rows (rank = the trace's rank) and events, with ``links.baseline`` = the referenced id and the
    tag ``trace_of=<id>``. Its status is ``imported`` and its source the trace."""
    from ledger.store.layout import LOG_FILE
    from ledger.store.reading import resolve_ref

    check_file(path)
    issues = Issues(path.name)
    timing = trace.analyse(path, issues)  # before resolving: a bad trace fails without touching the ledger
    target = resolve_ref(ledger, into)
    original = ledger.load(target)
    directory = ledger.path(target)
    tables: dict[str, pa.Table] = {}
    for table_name in TABLES:
        file = directory / f"{table_name}.parquet"
        tables[table_name] = conform(as_lists(pq.read_table(file)) if table_name == "routing" else pq.read_table(file),
                                     TABLES[table_name]) if file.exists() else empty(TABLES[table_name])
    added = timing.tables()
    for table_name, extra in added.items():
        tables[table_name] = pa.concat_tables([tables[table_name].cast(TABLES[table_name]), extra])
    log = directory / LOG_FILE
    ev = Evidence(
        kind="profiler-trace", path=path, sha256=sha256_of(path), tables=tables, workload=original.workload,
        stack=original.stack if isinstance(original.stack, Stack) else Stack(), issues=issues,
        started_at=original.started_at, ended_at=original.ended_at, duration_s=original.duration_s,
        outcome=original.summary.outcome, time_to_train_s=original.summary.time_to_train_s,
        command=original.command, log=log if log.exists() else None, extra_problems=original.problems,
        links=Links(attempt_of=original.links.attempt_of, replicates=original.links.replicates, baseline=target),
        attempt=original.attempt, exit_code=original.exit_code, signal=original.signal,
    )
    tags = {**original.tags, "trace_of": target}
    receipt = publish_evidence(ledger, ev, name or f"{original.name or target[:12]}+trace", tags)
    share = timing.communication_share
    notes = [f"{len(timing.steps)} ProfilerStep(s) of rank {timing.rank} ({timing.device or 'unknown device'}); "
             f"communication {share:.1%} of GPU kernel time" if share is not None else
             f"{len(timing.steps)} ProfilerStep(s)",
             f"receipts are immutable: this is a new receipt with {target[:12]}'s facts plus the trace's timing "
             f"(links.baseline and tag trace_of point at {target[:12]})"]
    ep = timing.total("comm_ep_exposed") + timing.total("comm_ep_overlapped")
    if ep:
        notes.append(f"expert-parallel communication {ep * 1e3:.4g} ms: {timing.total('comm_ep_exposed') * 1e3:.4g} ms "
                     f"exposed, {timing.total('comm_ep_overlapped') * 1e3:.4g} ms overlapped with computation")
    notes.extend(timing.notes)
    return Imported(receipt, notes)


LOG_FORMATS = ("auto", "hf-trainer", "nanogpt", "torchtitan", "deepspeed", "open-instruct", "nanotron", "json-lines",
               "key-value", "megatron", "trainer-state", "lightning-csv", "tensorboard")
"""``ledger ingest log --format`` choices (``auto``: recognised by the file's name, else by its lines)."""


def log_evidence(path: Path, fmt: str = "auto", parse: str | None = None) -> tuple[Evidence, str]:
    """Any log `ledger record` understands, as :class:`Evidence`; returns it and the format used."""
    from ledger.ingest.formats import LINE_FORMATS, hf, lightning, tensorboard
    from ledger.ingest.formats.pattern import compile_pattern, line_format
    from ledger.ingest.formats.scan import LineCapture, Rows, rows_of

    check_file(path)
    if fmt not in LOG_FORMATS:
        raise BadInput(f"--format {fmt}: unknown; one of {', '.join(LOG_FORMATS)}")
    if parse is not None and fmt != "auto":
        raise BadInput("give --format or --parse, not both")
    if fmt == "auto" and parse is None:
        if path.name == hf.STATE_FILE:
            fmt = "trainer-state"
        elif path.name.startswith(tensorboard.PREFIX):
            fmt = "tensorboard"
        elif path.suffix == ".csv" and lightning.looks_like(path):
            fmt = "lightning-csv"
    rows: Rows | None
    issues = Issues(path.name)
    lines: int | None = None
    try:
        if fmt == "trainer-state":
            rows = rows_of(hf.NAME, hf.parse_state(path))
        elif fmt == "lightning-csv":
            rows = rows_of(lightning.NAME, lightning.parse_csv(path))
        elif fmt == "tensorboard":
            rows = rows_of(tensorboard.NAME, tensorboard.parse_events([path]))
        else:
            if parse is not None:
                scan = LineCapture({"pattern": line_format(compile_pattern(parse))}, hint=False)
            elif fmt == "auto":
                scan = LineCapture()
            else:
                scan = LineCapture({fmt: LINE_FORMATS[fmt]})
            scan.feed_file(path)
            lines = scan.lines
            rows = scan.best()
            if scan.long_lines:
                issues.note(f"{scan.long_lines} line(s) longer than 64 KiB were not parsed")
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise WrongKind(f"{path}: expected a {fmt} file, found {describe(path)} ({exc})") from exc
    if rows is None or not (rows.step_count() or rows.evals):
        raise WrongKind(f"{path}: no step or eval lines of a known format ({fmt if parse is None else '--parse'}); "
                        f"found {describe(path)}. Give --parse 'step (?P<step>\\d+) loss (?P<loss>\\S+)' for "
                        "lines of your own")
    for n in rows.unparsed:
        issues.line(n, f"looked like a {rows.name} line but did not parse")
    if rows.ordinal:
        issues.note(f"{rows.name} lines carry no step number: steps are numbered 1, 2, ... in the order printed")
    text_log = path if fmt not in ("tensorboard",) else None
    ev = Evidence(kind=f"log:{rows.name}", path=path, sha256=sha256_of(path), tables=rows.tables(), issues=issues,
                  lines=lines, log=text_log)
    return ev, rows.name


def ingest_log(ledger: Ledger, path: Path, fmt: str = "auto", parse: str | None = None, name: str | None = None,
               tags: Mapping[str, str] | None = None) -> Imported:
    """`ledger ingest log`."""
    if fmt == "megatron":
        return ingest_megatron(ledger, path, None, name, None, tags)
    ev, used = log_evidence(path, fmt, parse)
    receipt = publish_evidence(ledger, ev, name or path.stem, tags)
    steps, evals = ev.tables["steps"].num_rows, ev.tables["evals"].num_rows
    notes = [f"{steps} step(s), {evals} eval value(s) [{used}]"]
    if ev.unparsed:
        notes.append(f"{ev.unparsed} line(s) did not parse (see the receipt's problems)")
    return Imported(receipt, notes)


__all__ = ["LOG_FORMATS", "Imported", "ingest_golden", "ingest_log", "ingest_megatron", "ingest_mlperf", "ingest_trace",
           "log_evidence", "megatron_evidence"]
