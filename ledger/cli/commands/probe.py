"""`ledger probe`: contribute this node's stack to the launch `ledger record` wraps (:mod:`ledger.record.probe`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ledger.cli.kit import ledger_from, ledger_option


def register(cli: click.Group) -> None:
    """Add `probe` to the CLI."""

    @cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="The run's staging directory (default: $LEDGER_RUN_DIR, which `ledger record` exports).")
    @click.option("--node-rank", type=click.IntRange(0),
                  help="This node's rank (default: SLURM_NODEID, else torchrun's GROUP_RANK).")
    @ledger_option
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def probe(ctx: click.Context, run_dir: Path | None, node_rank: int | None, ledger_path: Path | None,
              command: tuple[str, ...]) -> None:
        """Probe this node's stack into the recorded launch, then run COMMAND (if given) in its place.

        For a launch that one `ledger record` starts on many nodes (`ledger record -- srun ...`): every node
        runs the probes the wrapper runs on its own node (code, container, packages, drivers, GPUs with
        clocks, ECC and topology, CPU), so the receipt lists every node's stack and the differences between
        nodes; while COMMAND runs, the node's telemetry is sampled at the wrapper's --telemetry-interval. The
        first task of each node probes it; its other tasks go straight on. The node is named by SLURMD_NODENAME
        (else the host name), as the ranks' own facts name it. With --ledger, the run must be
        one of that ledger's (a check that this node sees the ledger the wrapper publishes to).

        Example:

            ledger record --name moe-16n -- srun --nodes 16 ledger probe -- python train.py
        """
        from ledger.record.probe import describe, sample_while_running
        from ledger.record.probe import probe as run_probe

        explicit = ledger_path or ctx.find_root().params.get("ledger_path")
        staging = ledger_from(ctx, ledger_path).staging if explicit else None
        path = run_probe(run_dir, os.environ, node_rank=node_rank, staging=staging)
        click.echo(describe(path), err=True)
        if command:
            if path is not None:  # the node's first task also samples its telemetry while COMMAND runs
                sample_while_running(path, path.parents[1])
            try:
                os.execvp(command[0], list(command))
            except OSError as exc:
                raise click.ClickException(f"cannot run {command[0]!r}: {exc.strerror}") from exc
