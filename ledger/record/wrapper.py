"""`ledger record -- CMD`: run any training launch as a child and publish its receipt.

The child runs in its own process group with ``LEDGER_RUN_DIR`` pointing at the run's staging directory.
The wrapper tees the child's stdout and stderr to the terminal and (secrets redacted) to ``output.log``,
forwards SIGINT/SIGTERM/SIGHUP to the child's group, captures the stack in a background thread, samples
its own node's telemetry, and on exit — success, failure, signal, child killed — publishes the receipt
(:mod:`ledger.store.publish`), prints the id and exits with the child's exit code.

It does not sync the DuckDB index: the publish appends the id to the ledger's journal, and the next reader of
the index (:func:`ledger.store.index.reader`) adds what was published since, before it answers. A launch thus
never loads DuckDB nor waits for the index's lock, and a sweep of many launches is indexed in one catch-up.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from subprocess import Popen
from typing import IO, TYPE_CHECKING, Any

from ledger import __version__
from ledger.errors import BadInput, LedgerNotWritable
from ledger.process import launch_environment
from ledger.record.outcome import EXIT_FILE, outcome_of, proc_start, say
from ledger.store.faults import fault
from ledger.store.layout import ENV_RUN_ATTEMPT, ENV_RUN_DIR, LOG_FILE, STACK_FILE
from ledger.store.receipts import Ledger
from ledger.store.staging import (
    acquire_staging_lock,
    add_problems,
    private_fallback,
    write_json_atomic,
    write_wrapper_facts,
)

if TYPE_CHECKING:
    from ledger.record.jobkey import JobOptions
    from schemas import Receipt

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_NOT_RECORDED = 75
"""Exit status of `ledger record` when the launch succeeded but its receipt could not be published
(EX_TEMPFAIL: retry with `ledger recover`). A failed launch keeps its own exit status."""
QUIET_S = 0.02
QUIET_LIMIT_S = 2.0
"""Once the launch started, the wrapper loads what it needs for the rest (the parser, the stack capture,
publishing) when the launch's output pauses for QUIET_S, the launch ended, or QUIET_LIMIT_S passed."""
UNBUFFERED = "PYTHONUNBUFFERED"
"""Set to 1 for a launch whose output goes to a pipe (a file, a batch job), unless the user set it: a Python
training loop then writes each line as it prints it, not 8 KiB at a time, so that every step line reaches the log
when it is printed (its time is when it arrived: :mod:`ledger.store.clock`) and none is lost in the launch's buffer
when it is killed. At a terminal the launch gets a terminal and writes line by line anyway."""


@dataclass
class RecordOptions:
    """Everything `ledger record` needs besides the ledger."""

    command: Sequence[str]
    name: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    attempt_of: str | None = None
    attempt: int = 1
    replicates: str | None = None
    baseline: str | None = None
    env_names: Sequence[str] = ()
    cwd: Path = field(default_factory=Path.cwd)
    telemetry_interval: float = 1.0
    stdout: IO[bytes] | None = None
    stderr: IO[bytes] | None = None
    job: JobOptions | None = None
    """Multi-node job options (:mod:`ledger.record.job`); the environment may also say it."""
    parse: str | None = None
    """A pattern for step lines (``--parse``); see :mod:`ledger.ingest.launch`."""
    tensorboard: Path | None = None
    """A TensorBoard log directory to read besides the launch's directory (``--tensorboard``)."""
    process_ends: bool = False
    """This process ends with the record: set by the `ledger record` command; a process that goes on (the
    Python API, `ledger rerun`, which launches again) leaves it False. Then the wrapper keeps what it imports
    out of the garbage collector's reach for the rest of the process (:func:`imports_without_collection`), and
    once the launch exited lowers its CPU priority for the bookkeeping left
    (:func:`ledger.store.staging.yield_cpu`)."""
    env: Mapping[str, str] | None = None
    """The launch's environment (None: this process's, without what the `ledger` command set for itself:
    :func:`ledger.process.launch_environment`)."""


@dataclass
class RecordResult:
    """The published receipt (None when publishing failed) and the exit code to return."""

    receipt: Receipt | None
    exit_code: int
    run_dir: Path

    def to_json(self) -> dict[str, Any]:
        """The receipt's id, name and status (None when it was not published), and the exit code."""
        r = self.receipt
        return {"receipt_id": r.id if r else None, "name": r.name if r else None,
                "status": r.status if r else None, "exit_code": self.exit_code,
                "kept_in": None if r else str(self.run_dir)}


def record(ledger: Ledger, opts: RecordOptions) -> RecordResult:
    """Run the command under the ledger and publish its receipt.

    The launch starts as soon as its staging directory is ready; the parser, the stack capture, the telemetry
    sampler and what publishing needs (pyarrow, numpy, the receipt models: most of the wrapper's import time)
    are loaded while it runs, once its output pauses (:meth:`ledger.record.tee.Tee.wait_quiet`)."""
    from ledger.ingest.arguments import stage_arguments
    from ledger.record.jobkey import resolve_job  # a multi-node job stages per node (None: a single run)
    from ledger.record.streams import launch_streams
    from ledger.record.tee import Tee
    from ledger.redact import Redactor, StreamRedactor

    if not opts.command:
        raise BadInput("nothing to run: give the launch after `--`, e.g. ledger record -- python train.py")
    if shutil.which(opts.command[0]) is None and not Path(opts.command[0]).is_file():
        raise BadInput(f"command not found: {opts.command[0]!r} (check the launch after `--`)")
    if opts.parse is not None:  # a bad pattern is refused before anything runs
        from ledger.ingest.formats.pattern import compile_pattern

        compile_pattern(opts.parse)
    env = launch_environment() if opts.env is None else dict(opts.env)
    redactor = Redactor(env, opts.env_names)
    run_uuid = uuid.uuid4().hex
    err = opts.stderr or sys.stderr.buffer
    job = resolve_job(opts.job, env)
    staging = _staging_root(ledger, err)
    run_dir = staging / run_uuid if job is None else job.claim(staging)
    run_dir.mkdir(parents=True, exist_ok=job is not None)
    lock_fd = acquire_staging_lock(run_dir)
    facts: dict[str, Any] = {
        "run_uuid": run_uuid,
        "pid": os.getpid(),
        "pid_start": proc_start(os.getpid()),
        "host": socket.gethostname(),
        "started_at": datetime.now(UTC).isoformat(),
        "command": redactor.argv(list(opts.command)),
        "cwd": str(opts.cwd),
        "name": redactor.label(opts.name) if opts.name else opts.name,
        "tags": redactor.tags(opts.tags),
        "attempt": opts.attempt,
        "links": {"attempt_of": opts.attempt_of, "replicates": opts.replicates, "baseline": opts.baseline},
        "ledger_version": __version__,
        "telemetry_interval": opts.telemetry_interval,  # `ledger probe` samples each node at the same rate
        "node_name": env.get("SLURMD_NODENAME"),  # the launching node, as its ranks and `ledger probe` name it
        **(job.facts() if job is not None else {}),
    }
    write_wrapper_facts(run_dir, facts)
    _fill(run_dir / EXIT_FILE, {"returncode": None})  # reserve the space the outcome will need
    stage_arguments(run_dir, opts.command, opts.cwd, redactor)  # the config files as they are at launch

    forwarded: list[int] = []
    fault("prelaunch")
    outputs = (opts.stdout or sys.stdout.buffer, err)
    streams = launch_streams(outputs)  # a terminal for each of the wrapper's that is one, else a pipe
    child_env = env | {ENV_RUN_DIR: str(run_dir.resolve()), ENV_RUN_ATTEMPT: str(opts.attempt)}
    if not all(streams.terminal) and UNBUFFERED not in env:
        child_env[UNBUFFERED] = "1"  # lines reach the tee (and their time) as printed, not 8 KiB at a time
    try:
        child = Popen(list(opts.command), stdout=streams.child[0], stderr=streams.child[1], env=child_env,
                      cwd=opts.cwd, start_new_session=True)
    except BaseException:
        streams.close()
        raise
    streams.launched()
    write_wrapper_facts(run_dir, facts | {"child_pid": child.pid, "child_start": proc_start(child.pid)})
    fault("launched")

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    def resized(_signum: int, _frame: object) -> None:  # the user's terminal: its new size, then the launch's turn
        streams.resized()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGWINCH)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    if streams.any_terminal:
        previous[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, resized)
    tee = Tee(run_dir / LOG_FILE, StreamRedactor(redactor).feed_bytes, outputs)
    tee.start(streams.readers(), writer=False)  # the output waits in the spool until its parser exists
    # what follows imports pyarrow, numpy and the receipt models, holding the interpreter lock for long stretches:
    # not while the launch's first output pours out (the pumps would wait for the lock, and the launch for them)
    tee.wait_quiet(QUIET_S, QUIET_LIMIT_S, lambda: child.poll() is not None)
    with imports_without_collection(freeze=opts.process_ends and "duckdb" not in sys.modules):
        sampler = _start_sampler(run_dir, opts.telemetry_interval, child.pid)
        capture = threading.Thread(target=_capture, args=(run_dir, opts, env, redactor), daemon=True)
        capture.start()
        from ledger.ingest import launch

        live = launch.live_parser(opts.parse, run_dir)  # the output's metric lines, parsed as the log is written
        live.watch(tee.backlog)  # much output already waiting: parsed in the worker from the start
        tee.start_writer(live.feed, live.idle)
        _load_publishing()
    fault("running")
    try:
        returncode = child.wait()
        ended = datetime.now(UTC)
        tee_notes = tee.finish(child.pid)  # never waits for grandchildren that keep the pipes open
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    with contextlib.suppress(OSError):  # in place, into the space reserved at launch: works on a full disk
        _fill(run_dir / EXIT_FILE, {"returncode": returncode, "forwarded": forwarded, "ended_at": ended.isoformat()})
    fault("finalizing")
    if opts.process_ends:  # the training is over: what is left is bookkeeping
        from ledger.process import reuse_freed_memory
        from ledger.store.staging import yield_cpu

        yield_cpu()
        reuse_freed_memory(arrow=True)  # the capture's tables, the publish: large arrays made once, then the exit
    if sampler is not None:
        sampler.stop()
    notes = [("telemetry", e) for e in (sampler.errors[:20] if sampler is not None else [])]
    notes += [(LOG_FILE, n) for n in tee_notes]
    # a Megatron launch without the SDK: its metrics and workload come from the tee'd log
    from ledger.ingest.live import augment

    notes += [("megatron log", n) for n in augment(run_dir, list(opts.command), run_dir / LOG_FILE)]
    if tee.consumer is None:  # a failed parser: the log is read instead
        live.abandon()
    if live.note:
        notes.append((LOG_FILE, live.note))
    captured = launch.finish(run_dir, opts.command, opts.cwd, launch.CaptureOptions(opts.parse, opts.tensorboard),
                             live=live if tee.consumer is not None else None)
    with contextlib.suppress(OSError):  # published as problems of the receipt
        add_problems(run_dir, notes)
    capture.join(timeout=60)

    outcome = outcome_of(returncode, forwarded, ended)
    exit_code, status = outcome.exit_code or 0, outcome.status
    try:
        from ledger.record.nodes import runtime_merge

        if job is not None:  # node 0 publishes the job once every node ended; the others stop here
            from ledger.record.job import finish

            job_receipt = finish(ledger, job, run_dir, redactor.text, err)
            if job_receipt is None:
                os.close(lock_fd)
                return RecordResult(None, exit_code, run_dir)
            receipt = job_receipt
        else:
            from ledger.record.probe import merge_probe_telemetry
            from ledger.store.publish import publish

            merge_probe_telemetry(run_dir)  # the nodes `ledger probe` sampled, if any
            receipt = publish(ledger, run_dir, outcome, redact=redactor.text, locked=True,
                              runtime=runtime_merge(run_dir))
    except Exception as exc:  # nothing the run wrote may lose it: the data stays in staging
        os.close(lock_fd)
        source = "" if staging == ledger.staging else f" --from {staging}"
        say(err, f"ledger: could not publish the receipt ({exc}); the run's data is kept in {run_dir}; "
                  f"once the problem is fixed, publish it with `ledger recover{source} --ledger {ledger.root}`")
        return RecordResult(None, exit_code or EXIT_NOT_RECORDED, run_dir)
    os.close(lock_fd)  # the index is left to its next reader, which catches up from the journal
    say(err, f"ledger: {captured}")
    if receipt.failure is not None:
        where = f"line {receipt.failure.first_line} of " if receipt.failure.first_line else ""
        say(err, f"ledger: failed: {receipt.failure.exception or 'no exception printed'} "
                 f"({where}{ledger.path(receipt.id) / LOG_FILE})")
    mine = (status, exit_code)  # what was published is said: a job's outcome, and this node's where it differs
    own = "" if (receipt.status, receipt.exit_code) == mine else f"; this node: {status}, exit {exit_code}"
    say(err, f"ledger: recorded {receipt.id} ({receipt.name or 'unnamed'}, {receipt.status}, exit {receipt.exit_code}"
             f"{own})")
    return RecordResult(receipt, exit_code, run_dir)


EXIT_RESERVE = 512


def _fill(path: Path, data: dict[str, Any]) -> None:
    """Write a small JSON document into a file of fixed size, overwriting in place: once the file
    exists, no new disk blocks are needed, so the child's outcome can be kept when the disk is full."""
    text = json.dumps(data, sort_keys=True).encode()
    if len(text) > EXIT_RESERVE:
        raise ValueError("outcome larger than its reserved space")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, text.ljust(EXIT_RESERVE), 0)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def imports_without_collection(freeze: bool) -> Iterator[None]:
    """The wrapper's imports (pyarrow, numpy, pydantic, the receipt models: about 80,000 objects alive after) with
    Python's cyclic garbage collector off. Each collection the imports set off scanned everything imported so
    far: about 70 ms of CPU in all on the 2-core machine here (`import ledger.sdk, ledger.ingest.launch,
    ledger.store.publish, ledger.record.capture`: 530 against 460 ms, medians of 7).

    ``freeze`` (a process that ends with the record): then those objects are also moved out of the collector's
    reach for good (:func:`gc.freeze`), so that no later full collection, during the launch or at exit, scans
    them again. Not in a process that goes on: whatever is alive at the freeze would never be collected. Nor
    once DuckDB is loaded (a record that read the index before its launch, for ``--baseline`` or ``--resume``):
    its bindings report every object of theirs that exit leaves unfreed as a leak, on stderr. What the launch's
    output makes later (parsing) is collected as usual either way."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def _load_publishing() -> None:
    """Import what publishing the receipt needs, while the launch runs rather than after it ended (never
    raises: publishing imports it again and reports what fails there)."""
    with contextlib.suppress(Exception):
        import ledger.record.nodes
        import ledger.record.probe
        import ledger.store.publish  # noqa: F401


def _staging_root(ledger: Ledger, err: IO[bytes]) -> Path:
    """The ledger's staging directory; when the ledger cannot be written (read-only or full disk), a private
    directory under $TMPDIR (:func:`ledger.store.staging.private_fallback`), so that the training still runs and
    its data can be published later."""
    try:
        ledger.ensure_writable()
        return ledger.staging
    except LedgerNotWritable as exc:
        fallback = private_fallback()  # this user's own, never a directory or link found under a shared name
        say(err, f"ledger: {exc}; staging this run in {fallback} instead, the training proceeds")
        return fallback


def _capture(run_dir: Path, opts: RecordOptions, env: Mapping[str, str], redactor: Any) -> None:
    """Capture the stack and write stack.json (never raises: a failed probe is recorded in its section)."""
    try:
        from ledger.record.capture import capture_stack
        from ledger.record.tee import lower_priority

        lower_priority()  # runs beside the child: the child and the tee's pumps first

        stack = capture_stack(opts.cwd, env, list(opts.command), redactor)
        data = stack.model_dump(mode="json")
    except Exception as exc:  # capture never fails the run
        data = {"hardware": {"error": f"stack capture failed: {type(exc).__name__}: {exc}"}}
    with contextlib.suppress(OSError):  # a full disk: the receipt will say the stack was not captured
        write_json_atomic(run_dir / STACK_FILE, data)


def _start_sampler(run_dir: Path, interval: float, session: int) -> Any:
    """This node's telemetry, and the launch's process tree (its ``session``: the launch's pid)."""
    if interval <= 0:
        return None
    try:
        from ledger.record.telemetry import Sampler

        sampler = Sampler(run_dir, interval=interval, session=session)
        sampler.start()
        return sampler
    except Exception:  # telemetry is best effort
        return None
