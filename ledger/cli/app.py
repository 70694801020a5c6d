"""The `ledger` command line: parse, call one library function, render.

Every command takes ``--ledger DIR`` (default ``./receipts`` or ``$LEDGER_DIR``). Errors are one line,
``Error: ...``, exit status 2 for bad input and 1 otherwise; ``ledger --debug CMD`` shows the traceback.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from ledger.cli.kit import echo_json, ledger_from, ledger_option, parse_tags
from ledger.errors import BadInput, LedgerError, QueryRefused


class LedgerGroup(click.Group):
    """Turns :class:`LedgerError` into a one-line message and its exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LedgerError as exc:
            if ctx.params.get("debug"):
                raise
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=LedgerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@ledger_option
@click.version_option(package_name="stackreceipt")
def cli(debug: bool, ledger_path: Path | None) -> None:
    """stackreceipt: a reproducibility ledger for Mixture-of-Experts training.

    Example:

        ledger record --name baseline -- python -m runners.moe --config tiny
    """


class _NoPandas:
    """Import hook that makes `import pandas` fail in this process."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not used by the ledger command line")


def _keep_pandas_out() -> None:
    """No command needs pandas, but pyarrow imports it (0.4-0.6 s) on the first array it builds when it is
    installed (the `bench` extra installs it), which would double `ledger record`'s overhead and `ledger
    ls`'s time. Processes the CLI launches (the training child) are not affected; nor is the Python API."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--name", help="A human name for the run (attempts of one run share it).")
@click.option("--tag", "tags", multiple=True, metavar="K=V", help="A label; repeatable.")
@click.option("--baseline", metavar="REF", help="The receipt this run should be compared against.")
@click.option("--attempt-of", metavar="REF", help="This run restarts that receipt's logical run.")
@click.option("--replicates", metavar="REF", help="This run replays that receipt.")
@click.option("--env", "env_names", multiple=True, metavar="NAME", help="Also store this environment variable.")
@click.option("--telemetry-interval", type=float, default=1.0, show_default=True,
              help="Seconds between telemetry samples of this node (0: off).")
@click.option("--id-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the new receipt's id to this file (for pipelines).")
@click.option("--parse", "parse", metavar="REGEX",
              help="Step lines of the output: named groups, (?P<step>...) required, e.g. "
                   "'step (?P<step>\\d+) loss (?P<loss>\\S+)'; other groups are custom metrics.")
@click.option("--tensorboard", type=click.Path(file_okay=False, path_type=Path),
              help="Also read TensorBoard event files written under this folder during the run.")
@click.option("--job", "job_key", metavar="KEY",
              help="Multi-node job key shared by one wrapper per node (default: Slurm job+step, torchrun run id).")
@click.option("--node-rank", type=click.IntRange(0), help="This node's rank in the job (0 publishes).")
@click.option("--nnodes", type=click.IntRange(1), help="Nodes in the job.")
@click.option("--job-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds node 0 waits for the other nodes after its launch ended; then they are lost.")
@ledger_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def record(
    ctx: click.Context,
    name: str | None,
    tags: tuple[str, ...],
    baseline: str | None,
    attempt_of: str | None,
    replicates: str | None,
    env_names: tuple[str, ...],
    telemetry_interval: float,
    id_file: Path | None,
    parse: str | None,
    tensorboard: Path | None,
    job_key: str | None,
    node_rank: int | None,
    nnodes: int | None,
    job_timeout: float,
    ledger_path: Path | None,
    command: tuple[str, ...],
) -> None:
    """Run a training launch and record its receipt; exits with the launch's exit status.

    Metrics are captured with no change to the training code: from the SDK, from the output (Hugging Face
    Trainer, nanoGPT, torchtitan, DeepSpeed, open-instruct, nanotron, Megatron-LM, JSON lines and key=value step
    lines, or --parse), from trainer_state.json, Lightning's metrics.csv and TensorBoard events; the command line and
    the config files it names become workload.arguments. The last lines say what was captured.

    On several nodes, run one wrapper per node (`srun --ntasks-per-node 1 ledger record -- torchrun ...`):
    they stage into one directory and node 0 publishes one receipt for the job.

    Example:

        ledger record --name fp8 --tag sweep=precision -- torchrun --nproc_per_node 8 pretrain_gpt.py ...
    """
    from ledger.record.jobkey import JobOptions
    from ledger.record.wrapper import RecordOptions
    from ledger.record.wrapper import record as run_record
    from ledger.store.links import resolve_links
    from ledger.store.refs import check_name

    ledger = ledger_from(ctx, ledger_path)
    if not command:
        raise BadInput("nothing to run: give the launch after `--`, e.g. ledger record -- python train.py")
    if name is not None:
        check_name(name)
    if attempt_of is None:
        from ledger.store.attempts import auto_link

        attempt_of = auto_link(ledger, name, list(command))
        if attempt_of is not None:
            click.echo(f"ledger: resuming run {name!r}: linked as a later attempt of {attempt_of[:12]}", err=True)
    links = resolve_links(ledger, attempt_of=attempt_of, replicates=replicates, baseline=baseline)
    opts = RecordOptions(
        command=list(command),
        name=name,
        tags=parse_tags(tags),
        env_names=env_names,
        telemetry_interval=telemetry_interval,
        parse=parse,
        tensorboard=tensorboard,
        job=JobOptions(key=job_key, node_rank=node_rank, nnodes=nnodes, timeout_s=job_timeout),
        process_ends=True,  # its bookkeeping yields to interactive readers, its imports are frozen (wrapper)
        **links,
    )
    result = run_record(ledger, opts)
    if id_file is not None and result.receipt is not None:
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(result.receipt.id + "\n")
    ctx.exit(result.exit_code)


class WhereHelp(click.Command):
    """A command whose --help ends with the --where language (:data:`ledger.store.filters.HELP`), read when the
    help is shown: `ledger` does not import the store at start-up."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ledger.store.filters import HELP

        formatter.write_paragraph()
        formatter.write_heading("The --where language")
        with formatter.indentation():
            for line in HELP.splitlines():
                formatter.write(" " * formatter.current_indent + line + "\n")


@cli.command(name="ls", cls=WhereHelp)
@click.option("--where", "where", metavar="EXPR", help="Filter, e.g. 'precision=bf16 and (loss<3 or "
              "param.lr in (1e-3, 3e-3))'; the language is below.")
@click.option("--sort", "sort", metavar="COL", help="Order by a column (id, name, started, time, steps, loss, tok/s, "
              "..., or any runs-table column such as params.lr); default: oldest first.")
@click.option("--desc", is_flag=True, help="With --sort: largest first.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Show only the first N rows (after sorting).")
@click.option("--columns", metavar="A,B,...", help="Table columns, e.g. id,name,loss,tok/s,lr: the ls columns, or "
              "any column of the runs table (params.lr or lr, workload.optimizer.lr, summary.step_time_s, "
              "tags.sweep); not for --json.")
@click.option("--all", "show_all", is_flag=True, help="Also list archived receipts (`ledger archive`).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (every field, whatever --columns says).")
@ledger_option
@click.pass_context
def ls_cmd(ctx: click.Context, where: str | None, sort: str | None, desc: bool, limit: int | None,
           columns: str | None, show_all: bool, as_json: bool, ledger_path: Path | None) -> None:
    """List receipts, oldest first (archived ones only with --all). Short ids (8 hex characters) are valid
    refs for show and compare.

    Example:

        ledger ls --where "status=failed and workload.model.num_experts>=8"
        ledger ls --where "param.lr<=1e-3 or tag.sweep=lr" --columns id,name,lr,loss
        ledger ls --sort loss --limit 5 --columns id,name,loss,tok/s
    """
    from ledger.report import console as render
    from ledger.store import reading

    names = [c.strip() for c in columns.split(",") if c.strip()] if columns is not None else None
    fields = (names is not None and any(c not in render.LS_COLUMNS for c in names)) or (
        sort is not None and sort not in reading.SORT_KEYS and sort not in reading.LIST_COLUMNS)
    ledger = ledger_from(ctx, ledger_path, must_exist=True)
    rows = reading.list_receipts(ledger, where, None if fields else sort, desc, None if fields else limit,
                                 archived=show_all, fields=fields)
    if fields:
        if sort is not None:
            from ledger.store.runs import columns as run_columns
            from ledger.store.runs import resolve

            known = sort in reading.SORT_KEYS or sort in reading.LIST_COLUMNS
            rows = reading.sort_rows(rows, sort if known else resolve(sort, run_columns(
                [r["fields"] for r in rows])) or sort, desc)
        rows = rows if limit is None else rows[:limit]
    from ledger.report.safe import visible

    for row in rows:  # the index is derived: a row whose files are gone or changed is said, not trusted
        if row.get("index_problem"):
            click.echo(f"ledger: receipt {row['id'][:12]}: {visible(row['index_problem'])}; its row is from "
                       "the index: run `ledger verify` and `ledger reindex`", err=True)
    if as_json:
        echo_json([{k: v for k, v in row.items() if k != "fields"} for row in rows])
    elif names is not None:
        render.receipts_table(rows, render.table_columns(rows, names) if fields else names)
    else:
        render.receipts_table(rows)


@cli.command()
@click.argument("ref")
@click.option("--json", "as_json", is_flag=True, help="Print the receipt as JSON.")
@ledger_option
@click.pass_context
def show(ctx: click.Context, ref: str, as_json: bool, ledger_path: Path | None) -> None:
    """Show one receipt (REF: id, unique id prefix, or name).

    Example:

        ledger show baseline --json
    """
    from ledger.report import console as render
    from ledger.store import reading

    ledger = ledger_from(ctx, ledger_path, must_exist=True)
    receipt = reading.show(ledger, ref)
    if as_json:
        echo_json(receipt.model_dump(mode="json"))
    else:
        render.receipt(receipt, ledger.path(receipt.id))
        from ledger.report import failure, notes
        from ledger.store import annotation

        failure.render_terminal(receipt, render.console)
        notes.render_terminal(annotation.of(ledger.root, receipt.id), render.console)
        # a single-node receipt has no differences between nodes, one without timing rows no ranks to score:
        # `show` of such a receipt then loads neither the capture probes nor numpy and Arrow
        differences, scores = [], None
        if len(receipt.stack.nodes) > 1:
            from ledger.analyses.nodes import node_differences

            differences = node_differences(receipt)
        if any(a.path == "timing.parquet" and a.rows for a in receipt.artifacts):
            from ledger.analyses.stragglers import of_receipt

            scores = of_receipt(ledger.path(receipt.id), receipt)
        render.nodes_and_stragglers(receipt, differences, scores)


@cli.command()
@click.argument("sql")
@click.option("--json", "as_json", is_flag=True, help="Print rows as JSON objects (NaN and infinities as null).")
@click.option("--timeout", type=float, default=60.0, show_default=True, metavar="S",
              help="Interrupt the query after S seconds.")
@ledger_option
@click.pass_context
def query(ctx: click.Context, sql: str, as_json: bool, timeout: float, ledger_path: Path | None) -> None:
    """Run one read-only SQL statement over the index.

    Views: receipts, steps, evals, routing, timing, events, telemetry (each has receipt_id).

    Example:

        ledger query "SELECT name, max(tokens_per_s) FROM steps JOIN receipts ON id = receipt_id GROUP BY name"
    """
    from ledger.report import console as render
    from ledger.store import reading

    columns, rows = reading.read_only_rows(ledger_from(ctx, ledger_path, must_exist=True), sql, timeout)
    if as_json:
        echo_json([dict(zip(columns, row, strict=True)) for row in rows])
    else:
        render.rows_table(columns, rows)


@cli.command()
@click.option("--migrate", is_flag=True, help="First move receipts of the old flat layout (<id>/) into their "
              "shards (<id[:2]>/<id>/); readers see every receipt throughout.")
@ledger_option
@click.pass_context
def reindex(ctx: click.Context, migrate: bool, ledger_path: Path | None) -> None:
    """Rebuild the DuckDB index from the receipt files (the index is derived: nothing is lost).

    Example:

        ledger reindex --ledger /shared/receipts
        ledger reindex --migrate
    """
    from ledger.report import console as render
    from ledger.store import index

    ledger = ledger_from(ctx, ledger_path)
    if migrate:
        click.echo(f"moved {len(ledger.migrate_layout())} receipt(s) of the old flat layout into shards")
    with render.progress("indexing receipts") as advance:
        result = index.reindex(ledger, advance)
    click.echo(f"indexed {len(result.added)} receipt(s)" + (
        f"; {len(result.damaged)} damaged: " + "; ".join(f"{k[:12]}: {v}" for k, v in result.damaged.items())
        if result.damaged else ""))


@cli.command()
@click.option("--from", "staging", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Publish runs staged in DIR, a staging root (where a wrapper staged runs when the ledger was not "
                   "writable; one run's own directory is refused with the root to give).")
@ledger_option
@click.pass_context
def recover(ctx: click.Context, staging: Path | None, ledger_path: Path | None) -> None:
    """Publish runs whose wrapper died or could not publish; leaves live runs alone.

    A run whose wrapper saw the child exit gets the child's status; otherwise it is `interrupted`.

    Example:

        ledger recover
        ledger recover --from /tmp/ledger-staging-1000 --ledger /shared/receipts
    """
    from ledger.record.recover import recover as do_recover
    from ledger.store import index

    ledger = ledger_from(ctx, ledger_path)
    results = do_recover(ledger, staging)
    for r in results:
        click.echo(f"{r.run_uuid[:12]}: {r.action}" + (f" as {r.receipt_id}" if r.receipt_id else "")
                   + (f" ({r.detail})" if r.detail else ""))
    if not results:
        click.echo("nothing to recover")
    index.try_sync(ledger, timeout=30)
    if any(r.action == "failed" for r in results):
        ctx.exit(1)  # those runs stay in staging; the line above says why


def _register_plugins() -> None:
    from ledger.cli.commands import register_all

    register_all(cli)


_register_plugins()


PANDAS_FREE = frozenset({"record", "ls", "show", "query", "watch", "verify", "recover", "reindex"})
"""Commands that never need pandas (the analyses do: arch, which compare's within-run intervals use, imports it)."""


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (after the group's own options)."""
    args = iter(argv)
    for arg in args:
        if arg == "--ledger":
            next(args, None)
        elif not arg.startswith("-"):
            return arg
    return None


QUICK_EXIT = frozenset({"ls", "show", "query"})
"""Read-only commands whose process ends without Python's finalization (:func:`_exit_now`). At exit Python
collects every object still alive (DuckDB's, pydantic's schemas, rich's) before freeing them: 40-90 ms of a
`ledger show` or `ls` measured here, a sixth of the command. These commands have closed their index connection
and written nothing else by then; their output is flushed first."""


NO_BARS = frozenset({"record", "probe", "watch", "serve"})
"""Commands that draw no progress bars: the launch's own output (record, probe), a live display of its own (watch),
a server (serve). Every other command shows the library's long tasks on a terminal (:mod:`ledger.progress`)."""


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def main() -> None:
    """Console entry point (the `ledger` script and ``python -m ledger.cli``)."""
    from ledger.process import configure

    configure()  # settings of this process that its launches do not inherit
    command = _command(sys.argv[1:])
    if command is None or command in PANDAS_FREE:
        _keep_pandas_out()
    bars: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if command is not None and command not in NO_BARS and _stderr_is_terminal():
        from ledger.report.progress_bar import on_terminal

        bars = on_terminal()
    if command not in QUICK_EXIT:
        with bars:
            cli(prog_name="ledger")
        return
    try:
        with bars:
            cli(prog_name="ledger")  # click's standalone mode ends every command with SystemExit
    except SystemExit as exc:
        _exit_now(exc.code)


def _exit_now(code: object) -> NoReturn:
    """End the process as ``SystemExit(code)`` would (a string is printed on stderr and exits 1), after
    flushing stdout and stderr, without finalizing the interpreter (``os._exit``): no collection, no atexit
    handlers. Output that cannot be written (a closed pipe: ``ledger ls | head``) exits 120, as Python does."""
    import os

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        status = 1
        with contextlib.suppress(Exception):
            print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120
    os._exit(status)


__all__ = ["QueryRefused", "cli", "main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # type: ignore[func-returns-value]
