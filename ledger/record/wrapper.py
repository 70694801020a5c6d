"""`ledger record -- CMD`: run any training launch as a child and publish its receipt.

The recording path is one pipeline, each stage entered once, in order (:func:`record`): the run's staging
directory (:mod:`ledger.store.staging`) -> the launch and its streams (:mod:`ledger.record.streams`) -> the tee, the
log on disk and its clock (:mod:`ledger.record.tee`) -> the live capture of the output, while it runs
(:mod:`ledger.ingest.launch`, :mod:`ledger.ingest.worker`) -> the child's end -> what the output and the launch's
files gave, into staging -> publish (:mod:`ledger.store.publish`).

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
    """Run the command under the ledger and publish its receipt: one stage after the other (the module docs).

    The launch starts as soon as its staging directory is ready; the parser, the stack capture, the telemetry
    sampler and what publishing needs (pyarrow, numpy, the receipt models: most of the wrapper's import time)
    are loaded while it runs, once its output pauses (:meth:`ledger.record.tee.Tee.wait_quiet`)."""
    _check(opts)
    run = _stage(ledger, opts)  # staging: the run's directory, locked, its facts and arguments
    launch = _launch(run, opts)  # streams: the child, its output to the tee, signals forwarded to it
    live = _observe(run, opts, launch)  # live capture of its output, telemetry, the stack, while it runs
    ended = _wait(run, opts, launch)  # its end, kept on disk at once
    captured = _capture(run, opts, launch, live, ended)  # what its output and files gave, into staging
    return _publish(ledger, run, ended, captured)  # one receipt, and the lines that say so


@dataclass
class _Run:
    """A run being recorded: where it stages and what it knows of itself."""

    ledger: Ledger
    staging: Path
    dir: Path
    lock: int
    facts: dict[str, Any]
    env: dict[str, str]
    redactor: Any
    err: IO[bytes]
    job: Any
    """The multi-node job the run is a node of (:mod:`ledger.record.jobkey`), or None."""


@dataclass
class _Launched:
    """The child, its streams and the tee that copies them."""

    child: Popen[bytes]
    streams: Any
    tee: Any
    forwarded: list[int]
    previous: dict[int, Any]
    """The signal handlers replaced while the child runs."""


@dataclass
class _Observers:
    """What watches the launch while it runs: the output's live parser, the sampler, the stack capture."""

    live: Any
    sampler: Any
    stack: threading.Thread


@dataclass
class _Ended:
    """How the child ended."""

    returncode: int
    at: datetime
    forwarded: list[int]
    """The signals forwarded to it."""
    notes: list[str]
    """What the tee said about the end of the output (processes left, output cut)."""


def _check(opts: RecordOptions) -> None:
    """Refuse a launch that cannot run, before anything is written."""
    if not opts.command:
        raise BadInput("nothing to run: give the launch after `--`, e.g. ledger record -- python train.py")
    if shutil.which(opts.command[0]) is None and not Path(opts.command[0]).is_file():
        raise BadInput(f"command not found: {opts.command[0]!r} (check the launch after `--`)")
    if opts.parse is not None:  # a bad pattern is refused before anything runs
        from ledger.ingest.formats.pattern import compile_pattern

        compile_pattern(opts.parse)


def _stage(ledger: Ledger, opts: RecordOptions) -> _Run:
    """The run's staging directory (a node's of a job), locked, with the wrapper's facts, the space its outcome
    will need, and the launch's arguments and config files as they are at launch."""
    from ledger.ingest.arguments import stage_arguments
    from ledger.record.jobkey import resolve_job  # a multi-node job stages per node (None: a single run)
    from ledger.redact import Redactor

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
    return _Run(ledger, staging, run_dir, lock_fd, facts, env, redactor, err, job)


def _launch(run: _Run, opts: RecordOptions) -> _Launched:
    """Start the child in a session of its own (a terminal for each of the wrapper's streams that is one, else a
    pipe: :mod:`ledger.record.streams`), forward the signals meant for it, and start the tee's pumps (the output
    is in the log from its first line; the parser attaches later: :mod:`ledger.record.tee`)."""
    from ledger.record.streams import launch_streams
    from ledger.record.tee import Tee
    from ledger.redact import StreamRedactor

    fault("prelaunch")
    outputs = (opts.stdout or sys.stdout.buffer, run.err)
    tee = Tee(run.dir / LOG_FILE, StreamRedactor(run.redactor).feed_bytes, outputs)  # the log exists at launch
    streams = launch_streams(outputs)
    child_env = run.env | {ENV_RUN_DIR: str(run.dir.resolve()), ENV_RUN_ATTEMPT: str(opts.attempt)}
    if not all(streams.terminal) and UNBUFFERED not in run.env:
        child_env[UNBUFFERED] = "1"  # lines reach the tee (and their time) as printed, not 8 KiB at a time
    forwarded: list[int] = []
    started: list[Popen[bytes]] = []
    unsent: list[int] = []  # signals that came before the launch could be sent one

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        if not started:
            unsent.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(started[0].pid, signum)

    # the handlers before the launch: a signal that came while it started (the launch itself may send one at once)
    # killed the wrapper and left the launch running without it
    previous: dict[int, Any] = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        child = Popen(list(opts.command), stdout=streams.child[0], stderr=streams.child[1], env=child_env,
                      cwd=opts.cwd, start_new_session=True)
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        streams.close()
        tee.close_unstarted()
        raise
    started.append(child)  # from here the handler sends each signal itself
    while unsent:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, unsent.pop(0))
    streams.launched()
    write_wrapper_facts(run.dir, run.facts | {"child_pid": child.pid, "child_start": proc_start(child.pid)})
    fault("launched")

    def resized(_signum: int, _frame: object) -> None:  # the user's terminal: its new size, then the launch's turn
        streams.resized()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGWINCH)

    if streams.any_terminal:
        previous[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, resized)
    tee.start(streams.readers())  # the log and its clock from the first line; the parser attaches later
    return _Launched(child, streams, tee, forwarded, previous)


def _observe(run: _Run, opts: RecordOptions, launch: _Launched) -> _Observers:
    """Once the launch's first output pauses (what follows imports pyarrow, numpy and the receipt models, holding
    the interpreter lock for long stretches, which would hold back the pumps and the launch with them): the
    telemetry sampler, the stack capture, and the output's live parser, which the tee's writer feeds from now on
    (:mod:`ledger.ingest.launch`: in the wrapper, then in a fork of it; it times the lines by ``output.clock``
    and writes what it read so far for `ledger watch`)."""
    child, tee = launch.child, launch.tee
    tee.wait_quiet(QUIET_S, QUIET_LIMIT_S, lambda: child.poll() is not None)
    with imports_without_collection(freeze=opts.process_ends and "duckdb" not in sys.modules):
        sampler = _start_sampler(run.dir, opts.telemetry_interval, child.pid)
        stack = threading.Thread(target=_capture_stack, args=(run.dir, opts, run.env, run.redactor), daemon=True)
        stack.start()
        from ledger.ingest import launch as capture

        live = capture.live_parser(opts.parse, run.dir)
        # output waiting to be parsed (logged before the parser attached, and not yet logged): when there is much
        # of it already, the worker parses from the start
        live.watch(lambda: max(0, tee.written - live.fed) + tee.backlog())
        tee.attach(live.feed, live.idle)  # the log so far first, then each batch
        _load_publishing()
    fault("running")
    return _Observers(live, sampler, stack)


def _wait(run: _Run, opts: RecordOptions, launch: _Launched) -> _Ended:
    """The child's end; the tee's too (it never waits for grandchildren that keep the pipes open longer than its
    grace); the outcome written at once, in place, into the space reserved at launch (works on a full disk), so
    that `ledger recover` of a wrapper that dies after this gives the run its true status."""
    try:
        returncode = launch.child.wait()
        at = datetime.now(UTC)
        notes = launch.tee.finish(launch.child.pid)
    finally:
        for s, handler in launch.previous.items():
            signal.signal(s, handler)
    with contextlib.suppress(OSError):
        _fill(run.dir / EXIT_FILE,
              {"returncode": returncode, "forwarded": launch.forwarded, "ended_at": at.isoformat()})
    fault("finalizing")
    if opts.process_ends:  # the training is over: what is left is bookkeeping
        from ledger.process import reuse_freed_memory
        from ledger.store.staging import yield_cpu

        yield_cpu()
        reuse_freed_memory(arrow=True)  # the capture's tables, the publish: large arrays made once, then the exit
    return _Ended(returncode, at, list(launch.forwarded), notes)


def _capture(run: _Run, opts: RecordOptions, launch: _Launched, observers: _Observers, ended: _Ended) -> str:
    """What the launch's output and files gave (a Megatron launch's log; else the live parser's steps, or the log
    read now when the parser failed), the notes of the tee and the sampler as receipt problems, the stack; returns
    the sentence that says what was captured."""
    from ledger.ingest import launch as capture
    from ledger.ingest.live import augment

    sampler, live = observers.sampler, observers.live
    if sampler is not None:
        sampler.stop()
    notes = [("telemetry", e) for e in (sampler.errors[:20] if sampler is not None else [])]
    notes += [(LOG_FILE, n) for n in ended.notes]
    notes += [("megatron log", n) for n in augment(run.dir, list(opts.command), run.dir / LOG_FILE)]
    parsed = launch.tee.consumer is not None  # else the parser failed: the log is read instead
    if not parsed:
        live.abandon()
    if live.note:
        notes.append((LOG_FILE, live.note))
    sentence: str = capture.finish(run.dir, opts.command, opts.cwd,
                                   capture.CaptureOptions(opts.parse, opts.tensorboard),
                                   live=live if parsed else None)
    with contextlib.suppress(OSError):  # published as problems of the receipt
        add_problems(run.dir, notes)
    observers.stack.join(timeout=60)
    return sentence


def _publish(ledger: Ledger, run: _Run, ended: _Ended, captured: str) -> RecordResult:
    """Publish the receipt (a node of a job: the job's, by node 0, once every node ended); on failure keep the
    run's data in staging and say how to publish it later. Then say what was captured, why a failed run failed,
    and what was published."""
    from ledger.record.nodes import runtime_merge

    outcome = outcome_of(ended.returncode, ended.forwarded, ended.at)
    exit_code, status = outcome.exit_code or 0, outcome.status
    err = run.err
    try:
        if run.job is not None:  # node 0 publishes the job once every node ended; the others stop here
            from ledger.record.job import finish

            job_receipt = finish(ledger, run.job, run.dir, run.redactor.text, err)
            if job_receipt is None:
                os.close(run.lock)
                return RecordResult(None, exit_code, run.dir)
            receipt = job_receipt
        else:
            from ledger.record.probe import merge_probe_telemetry
            from ledger.store.publish import publish

            merge_probe_telemetry(run.dir)  # the nodes `ledger probe` sampled, if any
            receipt = publish(ledger, run.dir, outcome, redact=run.redactor.text, locked=True,
                              runtime=runtime_merge(run.dir))
    except Exception as exc:  # nothing the run wrote may lose it: the data stays in staging
        os.close(run.lock)
        source = "" if run.staging == ledger.staging else f" --from {run.staging}"
        say(err, f"ledger: could not publish the receipt ({exc}); the run's data is kept in {run.dir}; "
                  f"once the problem is fixed, publish it with `ledger recover{source} --ledger {ledger.root}`")
        return RecordResult(None, exit_code or EXIT_NOT_RECORDED, run.dir)
    os.close(run.lock)  # the index is left to its next reader, which catches up from the journal
    say(err, f"ledger: {captured}")
    if receipt.failure is not None:
        where = f"line {receipt.failure.first_line} of " if receipt.failure.first_line else ""
        say(err, f"ledger: failed: {receipt.failure.exception or 'no exception printed'} "
                 f"({where}{ledger.path(receipt.id) / LOG_FILE})")
    mine = (status, exit_code)  # what was published is said: a job's outcome, and this node's where it differs
    own = "" if (receipt.status, receipt.exit_code) == mine else f"; this node: {status}, exit {exit_code}"
    say(err, f"ledger: recorded {receipt.id} ({receipt.name or 'unnamed'}, {receipt.status}, exit {receipt.exit_code}"
             f"{own})")
    return RecordResult(receipt, exit_code, run.dir)


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


def _capture_stack(run_dir: Path, opts: RecordOptions, env: Mapping[str, str], redactor: Any) -> None:
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
