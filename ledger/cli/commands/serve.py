"""`ledger serve`: the local, read-only web view (see :mod:`ledger.report.web`)."""

from __future__ import annotations

from pathlib import Path

import click

from ledger.cli.kit import ledger_from, ledger_option


def register(cli: click.Group) -> None:
    """Add `serve` to the CLI."""

    @cli.command()
    @click.option("--host", default="127.0.0.1", show_default=True,
                  help="Address to listen on (the default serves this machine only).")
    @click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
                  help="Port to listen on (0: any free port).")
    @click.option("--allow-host", "allow", multiple=True, metavar="NAME",
                  help="Another Host name the view is reached by (a DNS name, a proxy's); repeatable. Requests "
                       "for any name but these, localhost and --host are refused (DNS rebinding).")
    @click.option("--poll", "poll_s", type=click.FloatRange(0.2, 60), default=2.0, show_default=True,
                  help="Seconds between refreshes of a run in progress.")
    @ledger_option
    @click.pass_context
    def serve(ctx: click.Context, host: str, port: int, allow: tuple[str, ...], poll_s: float,
              ledger_path: Path | None) -> None:
        """Serve a read-only web view of the ledger: the receipts as a sortable table filtered with the
        `--where` language, each receipt (stack and workload by factor, curves, routing, goodput), curves of
        any number of runs overlaid, the comparison report of two selected runs, and runs in progress with
        their curves updating. Plotly's script is served from its Python package: no network needed. It answers
        only requests addressed to localhost, the --host address and --allow-host names (any other Host header
        gets 400), refuses receipts whose files or index rows disagree, and says on every page when the index
        is unverified.

        Example:

            ledger serve --port 8765
            ledger serve --ledger demo/receipts --port 0
        """
        import socket

        from ledger.errors import BadInput

        try:
            import uvicorn

            from ledger.report.web import create_app, served_names
        except ImportError as exc:
            raise BadInput(f"`ledger serve` needs the web extra ({exc.name} is missing): "
                           "pip install 'stackreceipt[web]'") from exc
        ledger = ledger_from(ctx, ledger_path, must_exist=True)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(128)  # before saying where: a client may connect as soon as the line is printed
        except OSError as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port "
                           "(0 picks a free one)") from exc
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"serving {ledger.root} on http://{shown}:{bound}/ (read-only; Ctrl-C stops)", err=True)
        app = create_app(ledger, poll_s, served_names(host, allow))
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
