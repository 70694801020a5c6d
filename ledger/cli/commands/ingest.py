"""`ledger ingest`: turn evidence other tools wrote into receipts (status ``imported``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ledger.cli.kit import ledger_from, ledger_option, parse_tags

_FILE = click.Path(dir_okay=False, path_type=Path)


def _ledger(ctx: click.Context, ledger_path: Path | None) -> Any:
    """--ledger of the command, else of `ingest`, else of `ledger`, else $LEDGER_DIR / ./receipts."""
    parent = ctx.parent.params.get("ledger_path") if ctx.parent is not None else None
    return ledger_from(ctx, ledger_path or parent)


def _done(result: object) -> None:
    receipt = result.receipt  # type: ignore[attr-defined]
    for note in result.notes:  # type: ignore[attr-defined]
        click.echo(f"ledger: {note}", err=True)
    click.echo(receipt.id)


def register(cli: click.Group) -> None:
    """Add the `ingest` group and its commands."""

    @cli.group()
    @ledger_option
    def ingest(ledger_path: Path | None) -> None:
        """Import evidence (Megatron logs, MLPerf results, golden values, profiler traces) as receipts.

        Each command prints the new receipt's id (status: imported); notes go to stderr.

        Example:

            ledger ingest mlperf result_0.txt --system systems/NVIDIA__eos.json --rules mlperf/rules
        """

    @ingest.command("megatron")
    @click.argument("log", type=_FILE)
    @click.option("--args-from", type=_FILE, help="Launch flags, an argument dump or a model_config.yaml.")
    @click.option("--routing", type=click.Path(file_okay=False, path_type=Path),
                  help="Folder of tokens_per_expert/*.jsonl dumps (default: tokens_per_expert/ beside LOG).")
    @click.option("--name", help="Receipt name (default: the file's stem).")
    @click.option("--tag", "tags", multiple=True, metavar="K=V", help="A label; repeatable.")
    @ledger_option
    @click.pass_context
    def megatron(ctx: click.Context, log: Path, args_from: Path | None, routing: Path | None, name: str | None,
                 tags: tuple[str, ...], ledger_path: Path | None) -> None:
        """Import a Megatron-LM (or Megatron-DeepSpeed) training log; prints the new receipt id.

        Example:

            ledger ingest megatron train.log --args-from launch.sh --name moe64-ep4
        """
        from ledger.ingest.api import ingest_megatron

        _done(ingest_megatron(_ledger(ctx, ledger_path), log, args_from, name, routing, parse_tags(tags)))

    @ingest.command("log")
    @click.argument("log", type=_FILE)
    @click.option("--format", "fmt", default="auto", show_default=True,
                  type=click.Choice(["auto", "hf-trainer", "nanogpt", "torchtitan", "deepspeed", "open-instruct",
                                     "nanotron", "json-lines", "key-value", "megatron", "trainer-state",
                                     "lightning-csv", "tensorboard"]),
                  help="The log's format (auto: by the file's name, else the format that gives the most steps).")
    @click.option("--parse", metavar="REGEX", help="Step lines of your own: named groups, (?P<step>...) required.")
    @click.option("--name", help="Receipt name (default: the file's stem).")
    @click.option("--tag", "tags", multiple=True, metavar="K=V", help="A label; repeatable.")
    @ledger_option
    @click.pass_context
    def log_cmd(ctx: click.Context, log: Path, fmt: str, parse: str | None, name: str | None, tags: tuple[str, ...],
                ledger_path: Path | None) -> None:
        """Import any training log `ledger record` understands (printed steps of Hugging Face Trainer,
        nanoGPT, torchtitan, DeepSpeed, open-instruct, nanotron, JSON lines, key=value lines, Megatron-LM;
        trainer_state.json,
        Lightning metrics.csv, a TensorBoard event file); prints the new receipt id.

        Example:

            ledger ingest log train.out --parse 'it (?P<step>\\d+) loss=(?P<loss>\\S+)' --name sft-7b
        """
        from ledger.ingest.api import ingest_log

        _done(ingest_log(_ledger(ctx, ledger_path), log, fmt, parse, name, parse_tags(tags)))

    @ingest.command("mlperf")
    @click.argument("results", nargs=-1, required=True, type=_FILE)
    @click.option("--system", type=_FILE, help="The submission's systems/<system>.json.")
    @click.option("--rules", multiple=True, type=click.Path(path_type=Path),
                  help="Compliance rules file or folder (for the quality target); repeatable.")
    @click.option("--name", help="Receipt name (default: the file's stem; one result only).")
    @click.option("--tag", "tags", multiple=True, metavar="K=V", help="A label; repeatable.")
    @ledger_option
    @click.pass_context
    def mlperf_cmd(ctx: click.Context, results: tuple[Path, ...], system: Path | None, rules: tuple[Path, ...],
                   name: str | None, tags: tuple[str, ...], ledger_path: Path | None) -> None:
        """Import MLPerf Training result logs; prints each new receipt's id, a line each.

        Several results are all parsed first, then published in groups (one flush to disk and one journal
        write per group) and the index synced once.

        Example:

            ledger ingest mlperf result_*.txt --system NVIDIA__eos.json --rules training_4.0.0/
        """
        from ledger.errors import BadInput
        from ledger.ingest.api import ingest_mlperf, ingest_mlperf_many

        if len(results) == 1:
            _done(ingest_mlperf(_ledger(ctx, ledger_path), results[0], system, rules, name, parse_tags(tags)))
            return
        if name is not None:
            raise BadInput("--name names one receipt: give one result with it (several are named by their files)")
        for imported in ingest_mlperf_many(_ledger(ctx, ledger_path), results, system, rules, parse_tags(tags)):
            _done(imported)

    @ingest.command("golden")
    @click.argument("values", type=_FILE)
    @click.option("--config", type=_FILE, help="The test's model_config.yaml (workload and environment).")
    @click.option("--name", help="Receipt name (default: the file's stem).")
    @click.option("--tag", "tags", multiple=True, metavar="K=V", help="A label; repeatable.")
    @ledger_option
    @click.pass_context
    def golden(ctx: click.Context, values: Path, config: Path | None, name: str | None, tags: tuple[str, ...],
               ledger_path: Path | None) -> None:
        """Import Megatron-LM CI golden values; prints the new receipt id.

        Example:

            ledger ingest golden golden_values_dev_dgx_h100.json --config model_config.yaml
        """
        from ledger.ingest.api import ingest_golden

        _done(ingest_golden(_ledger(ctx, ledger_path), values, config, name, parse_tags(tags)))

    @ingest.command("trace")
    @click.argument("trace_file", metavar="TRACE", type=_FILE)
    @click.option("--into", "into", required=True, metavar="REF", help="The receipt the trace belongs to.")
    @click.option("--name", help="Name of the new receipt (default: REF's name + '+trace').")
    @ledger_option
    @click.pass_context
    def trace_cmd(ctx: click.Context, trace_file: Path, into: str, name: str | None,
                  ledger_path: Path | None) -> None:
        """Add a PyTorch profiler trace's timing to a receipt; prints the new receipt id.

        Receipts are immutable: this publishes a new receipt with REF's facts and tables plus the trace's
        timing per ProfilerStep, linked to REF (links.baseline and the tag trace_of=REF).

        Example:

            ledger ingest trace rank0.json.gz --into fp8-grouped
        """
        from ledger.ingest.api import ingest_trace

        _done(ingest_trace(_ledger(ctx, ledger_path), trace_file, into, name))
