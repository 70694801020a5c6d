"""Zero-code capture of a wrapped launch: metrics from its output and the files it wrote, configuration
from its command line, and one sentence saying what was captured.

The wrapper stages the command line and the config files it names before the launch starts
(:func:`ledger.ingest.arguments.stage_arguments`: they are read as they are at launch), feeds the output to
:func:`live_capture`'s parser as the tee writes it (so a launch killed mid-run has its lines parsed up to the
kill, and the log is never read a second time), and calls :func:`finish` after the child exited and the
Megatron capture (:mod:`ledger.ingest.live`) ran, before publishing. Without a live parser (``ledger
recover``, a consumer that failed) :func:`finish` reads ``output.log``. Neither ever raises: whatever goes
wrong is a receipt problem, and a successful training run is never lost to its capture.

Sources of the metric tables, each table from one source only, in this order of trust:

1. the SDK (the training process wrote the table itself) or the Megatron-LM capture: never second-guessed;
2. ``--parse PATTERN`` on the output, when it matched;
3. the best of: the output's lines in the format that gave the most steps (:mod:`ledger.ingest.formats`),
   ``trainer_state.json``, Lightning's ``metrics.csv`` and TensorBoard event files written under the
   launch's directory (or ``--tensorboard DIR``) since the launch started. The source with the most rows
   wins; on a tie a file wins over printed lines (files carry exact step numbers).

Where each table came from is written to ``capture.json`` (published as ``receipt.capture``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.ingest.common import write_tables
from ledger.ingest.formats import hf, lightning, tensorboard
from ledger.ingest.formats.pattern import compile_pattern
from ledger.ingest.formats.scan import Derived, LineCapture, Rows, rows_of
from ledger.ingest.live import capture_root, has_table, started_at
from ledger.ingest.tokens import tokens_per_step
from ledger.ingest.worker import LiveParser, WorkerFailed, live_capture
from ledger.store.clock import CLOCK_FILE, read_clock
from ledger.store.layout import (
    ARGUMENTS_FILE,
    CAPTURE_FILE,
    LIVE_FILE,
    LOG_FILE,
    rank_dir,
)
from ledger.store.merge import read_json, read_table
from ledger.store.staging import add_problems, write_json_atomic

NOTHING = "no step metrics captured: use --parse PATTERN, write TensorBoard events, or the SDK (README#capture)"
MAX_WALK = 20_000
"""Directory entries looked at when searching the launch's directory for metric files."""
MAX_DEPTH = 5
_SKIP_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "receipts", "wandb", "mlruns"})


@dataclass
class CaptureOptions:
    """What the user told `ledger record` about where metrics are."""

    parse: str | None = None
    """A regular expression with named groups (``--parse``)."""
    tensorboard: Path | None = None
    """A TensorBoard log directory (``--tensorboard``), besides the launch's directory."""


@dataclass
class Source:
    """One candidate source of metric tables."""

    rows: Rows
    source: str
    format: str
    path: str | None = None
    is_file: bool = False
    built: tuple[dict[str, Any], Derived] | None = None

    def tables(self, run_dir: Path, command: Sequence[str]) -> tuple[dict[str, Any], Derived]:
        """The source's tables: printed lines timed by the output's clock (``output.clock``), tokens from the
        launch's arguments where they settle it (:mod:`ledger.ingest.tokens`)."""
        if self.built is None:
            times = None
            if not self.is_file:
                clock = read_clock(run_dir / CLOCK_FILE)
                times = clock.times(self.rows.merged().lines) if len(clock) else None
            args, _ = read_json(run_dir / ARGUMENTS_FILE)
            per_step = tokens_per_step(args, command) if isinstance(args, dict) else None
            tables, derived = self.rows.build_tables(times, per_step.tokens if per_step else None)
            if per_step is not None and "tokens" not in self.rows.merged().values:
                derived.columns["tokens"] = f"step x {per_step.how}"
            self.built = tables, derived
        return self.built


# ------------------------------------------------------------------------------------------- start
def live_parser(parse: str | None, run_dir: Path | None = None) -> LiveParser:
    """The output's parser as the tee feeds it (:func:`ledger.ingest.worker.live_capture`): in the wrapper for a
    small output, in a process of its own past that (:class:`ledger.ingest.worker.LiveParser`); with ``run_dir``,
    it writes what it read so far there (``live.json``) for `ledger watch` and the live page."""
    return LiveParser(parse, trail=run_dir / LIVE_FILE if run_dir is not None else None)


# ------------------------------------------------------------------------------------------ finish
def finish(run_dir: Path, command: Sequence[str], cwd: Path, options: CaptureOptions | None = None,
           live: LineCapture | LiveParser | None = None) -> str:
    """Fill the staging directory's missing metric tables from the launch's output and files; returns the
    sentence to print. ``live``: the output's parser, fed while the launch ran (:func:`live_capture`);
    None: ``output.log`` is read now."""
    try:
        return _finish(Path(run_dir), list(command), Path(cwd), options or CaptureOptions(), live)
    except Exception as exc:  # capture never fails the run
        message = f"metric capture failed: {type(exc).__name__}: {exc}"
        try:
            add_problems(run_dir, [("capture", message)])
        except OSError:
            pass
        return message


def finished(run_dir: Path) -> bool:
    """Whether :func:`finish` ran for this staging directory (``ledger recover`` runs it otherwise)."""
    return "line" in _read_facts(run_dir)


def _read_facts(run_dir: Path) -> dict[str, Any]:
    data, _ = read_json(run_dir / CAPTURE_FILE)
    return data or {}


def _finish(run_dir: Path, command: list[str], cwd: Path, options: CaptureOptions,
            live: LineCapture | LiveParser | None) -> str:
    from ledger.ingest.live import looks_like_megatron

    facts = _read_facts(run_dir)
    notes: list[tuple[str, str]] = []
    log = run_dir / LOG_FILE
    existing = {name: has_table(run_dir, name) for name in ("steps", "evals")}
    candidates: list[Source] = []
    chosen: dict[str, dict[str, Any]] = {}
    unparsed = 0
    if existing["steps"] and existing["evals"]:
        pass
    else:
        pattern = compile_pattern(options.parse) if options.parse else None
        if live is not None:
            try:
                live.close()
            except WorkerFailed as exc:  # the parser process died: the log is read here instead
                notes.append((LOG_FILE, f"{exc}; the log was parsed after the launch instead"))
                live = None
        if live is not None or log.exists():
            scan: LineCapture | LiveParser
            if live is not None:
                scan = live
            else:
                scan = live_capture(options.parse)
                scan.feed_file(log)
            best = scan.best()
            if best is not None:
                candidates.append(Source(best, "output", best.name))
                unparsed = len(best.unparsed)
                if best.unparsed:
                    notes.append((LOG_FILE, f"{len(best.unparsed)} line(s) looked like {best.name} lines but did "
                                            f"not parse: lines {', '.join(map(str, best.unparsed[:10]))}"))
            if scan.long_lines:
                notes.append((LOG_FILE, f"{scan.long_lines} line(s) longer than 64 KiB were not parsed"))
            if pattern is not None and best is None:
                notes.append((LOG_FILE, f"--parse {options.parse!r} matched no line of the output"))
        if pattern is None or not candidates:
            candidates.extend(_file_sources(cwd, options.tensorboard, started_at(run_dir), notes))
    sources: list[dict[str, Any]] = []
    also: list[dict[str, Any]] = []
    for table_name in ("steps", "evals"):
        if existing[table_name]:
            table = read_table(run_dir, table_name)[0]
            if not table.num_rows:  # the Megatron capture's, apart from the ranks' on a node of a job
                table = read_table(capture_root(run_dir), table_name)[0]
            megatron = looks_like_megatron(command, log)
            chosen[table_name] = {"table": table_name, "rows": table.num_rows,
                                  "source": "output" if megatron else "sdk",
                                  "format": "megatron" if megatron else None,
                                  "metrics": _table_metrics(table, table_name)}
            sources.append(chosen[table_name])
            continue
        ranked = sorted(candidates, key=lambda c: (_count(c.rows, table_name), c.is_file), reverse=True)
        ranked = [c for c in ranked if _count(c.rows, table_name)]
        if not ranked:
            continue
        pick = ranked[0]
        tables, derived = pick.tables(run_dir, command)
        write_tables(rank_dir(capture_root(run_dir), 0), {table_name: tables[table_name]}, skip_existing=True)
        chosen[table_name] = _describe(pick, table_name, derived)
        sources.append(chosen[table_name])
        also.extend(_describe(c, table_name) for c in ranked[1:])
        if table_name == "steps" and pick.rows.ordinal:
            notes.append((pick.path or LOG_FILE, f"{pick.format} lines carry no step number: steps are numbered "
                                                 "1, 2, ... in the order printed (no trainer_state.json was found)"))
        if table_name == "steps":
            notes.extend((pick.path or LOG_FILE, n) for n in _identity_notes(chosen[table_name]))
    line = _sentence(chosen, facts)
    facts.update({"tables": sources, "also_found": also, "unparsed_lines": unparsed, "line": line})
    write_json_atomic(run_dir / CAPTURE_FILE, facts)
    add_problems(run_dir, notes)
    return line


def _count(rows: Rows, table: str) -> int:
    return rows.step_count() if table == "steps" else len(rows.evals)


def _describe(src: Source, table: str, derived: Derived | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"table": table, "rows": _count(src.rows, table), "source": src.source,
                           "format": src.format, "path": src.path}
    if table == "steps":
        ident = src.rows.identity()
        out |= {"metrics": src.rows.columns(), "ordinal_steps": src.rows.ordinal,
                "lines": ident["lines"], "merged": ident["merged"], "differing": ident["differing"],
                "segments": ident["segments"], "restarts": ident["restarts"], "planned_steps": ident["planned_steps"],
                "derived": dict(derived.columns) if derived is not None else {}}
    else:
        out["metrics"] = sorted({f"{split}/{metric}" if split else metric for _, split, metric, _ in src.rows.evals})
    return out


def _identity_notes(steps: dict[str, Any]) -> list[str]:
    """What step identity decided, for the receipt's problems (nothing when every line was a step of its own)."""
    notes = []
    segments, restarts = int(steps.get("segments") or 1), int(steps.get("restarts") or 0)
    if segments > 1:
        epochs = segments - 1 - restarts
        parts = ([f"{epochs} new epoch(s): each segment's steps follow the previous one's"] if epochs else []) + \
                ([f"{restarts} restart(s) from a checkpoint: the steps computed again are kept as later rows"]
                 if restarts else [])
        notes.append(f"the printed step counter went back {segments - 1} time(s): " + "; ".join(parts)
                     + " (the steps table's printed_step keeps the counter as printed)")
    merged = int(steps.get("merged") or 0)
    if merged:
        differing = int(steps.get("differing") or 0)
        notes.append(f"{merged} line(s) printed a step already printed (another rank, another shape, or again) and "
                     "were merged into it" + (f"; {differing} of them with other values, the first reading kept"
                                               if differing else ""))
    return notes


def _table_metrics(table: Any, name: str) -> list[str]:
    if name == "evals":
        if not table.num_rows:
            return []
        pairs = zip(table.column("split").to_pylist(), table.column("metric").to_pylist(), strict=True)
        return sorted({f"{s}/{m}" if s else str(m) for s, m in pairs})
    known = ["loss", "lr", "grad_norm", "tokens", "step_time_s", "tokens_per_s", "flops_per_s", "aux_loss",
             "z_loss", "loss_scale", "memory_bytes"]
    present = [c for c in known if table.column(c).null_count < table.num_rows]
    extra: set[str] = set()
    for row in table.column("extra").to_pylist():
        if row:
            extra.update(k for k, _ in row)
    return present + sorted(extra)


def _label(src: dict[str, Any]) -> str:
    if src["source"] == "sdk":
        return "the SDK"
    if src["source"] == "output":
        return f"output [{src['format']}]"
    return f"{src['path']} [{src['format']}]"


def _identity_words(steps: dict[str, Any]) -> str:
    """How the steps were timed and what became of their lines, in a few words: every merge and every segment
    counted (nothing more when each line was a step of its own)."""
    words = []
    lines, rows = int(steps.get("lines") or 0), int(steps.get("rows") or 0)
    segments, restarts = int(steps.get("segments") or 1), int(steps.get("restarts") or 0)
    if segments > 1:
        epochs = segments - 1 - restarts
        words += ([f"{epochs + 1} epochs of the printed counter"] if epochs else []) + \
                 ([f"{restarts} restart(s) kept as later rows"] if restarts else [])
    if lines > rows:
        differing = int(steps.get("differing") or 0)
        words.append(f"{lines - rows} of {lines} lines merged into steps printed before"
                     + (f", {differing} with other values" if differing else ""))
    timed = ", timed by arrival" if "time" in (steps.get("derived") or {}) else ""
    return timed + (f" ({'; '.join(words)})" if words else "")


def _sentence(chosen: dict[str, dict[str, Any]], facts: dict[str, Any]) -> str:
    parts = []
    steps = chosen.get("steps")
    if steps:
        names = steps["metrics"]
        shown = ", ".join(names[:4]) + (f", +{len(names) - 4} more" if len(names) > 4 else "")
        parts.append(f"captured {steps['rows']} steps ({shown}) from {_label(steps)}" + _identity_words(steps))
    else:
        parts.append(NOTHING)
    evals = chosen.get("evals")
    if evals:
        same = steps is not None and (steps["source"], steps.get("path")) == (evals["source"], evals.get("path"))
        parts.append(f"evals {evals['rows']}" + ("" if same else f" from {_label(evals)}"))
    keys = int(facts.get("config_keys") or 0)
    if keys:
        parts.append(f"config {keys} keys from {' + '.join(facts.get('config_sources') or ['argv'])}")
    return "; ".join(parts)


# -------------------------------------------------------------------------------------------- files
def _walk(root: Path) -> list[Path]:
    """Files under root (depth-limited, hidden and package folders skipped, at most MAX_WALK entries)."""
    out: list[Path] = []
    seen = 0
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - base
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS and depth < MAX_DEPTH]
        seen += len(dirnames) + len(filenames)
        out.extend(Path(dirpath) / f for f in filenames
                   if f == hf.STATE_FILE or f == lightning.FILE or f.startswith(tensorboard.PREFIX))
        if seen > MAX_WALK:
            break
    return out


def _relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def _file_sources(cwd: Path, tb_dir: Path | None, started: float | None, notes: list[tuple[str, str]]) -> list[Source]:
    files = _walk(cwd) if cwd.is_dir() else []
    if tb_dir is not None:
        files += [p for p in _walk(tb_dir) if p.name.startswith(tensorboard.PREFIX) and p not in files]

    def fresh(p: Path) -> bool:
        try:
            return started is None or p.stat().st_mtime >= started - 1
        except OSError:
            return False

    files = [p for p in files if fresh(p)]
    out: list[Source] = []
    states = [p for p in files if p.name == hf.STATE_FILE]
    best_state: Source | None = None
    for path in states:  # checkpoints each hold one; the fullest is the latest
        try:
            rows = rows_of(hf.NAME, hf.parse_state(path))
        except (OSError, ValueError) as exc:
            notes.append((_relative(path, cwd), f"not read: {exc}"))
            continue
        if best_state is None or (rows.step_count(), len(rows.evals)) > (best_state.rows.step_count(),
                                                                        len(best_state.rows.evals)):
            best_state = Source(rows, hf.STATE_FILE, hf.NAME, _relative(path, cwd), True)
    if best_state is not None:
        out.append(best_state)
    for path in (p for p in files if p.name == lightning.FILE and lightning.looks_like(p)):
        try:
            out.append(Source(rows_of(lightning.NAME, lightning.parse_csv(path)), lightning.FILE, lightning.NAME,
                              _relative(path, cwd), True))
        except (OSError, ValueError) as exc:
            notes.append((_relative(path, cwd), f"not read: {exc}"))
    events = sorted(p for p in files if p.name.startswith(tensorboard.PREFIX))
    if events:
        if not tensorboard.available():
            notes.append(("tensorboard", f"{len(events)} event file(s) found but not read: install the "
                                         "tensorboard extra (pip install 'stackreceipt[tensorboard]')"))
        else:
            try:
                rows = rows_of(tensorboard.NAME, tensorboard.parse_events(events))
                where = _common_dir(events, cwd)
                out.append(Source(rows, "tensorboard", tensorboard.NAME, where, True))
            except Exception as exc:  # a damaged event file is a note
                notes.append(("tensorboard", f"event files not read: {type(exc).__name__}: {exc}"))
    return out


def _common_dir(paths: list[Path], cwd: Path) -> str:
    common = Path(os.path.commonpath([str(p.parent) for p in paths]))
    return _relative(common, cwd) or "."



__all__ = ["NOTHING", "CaptureOptions", "finish", "finished", "live_parser"]
