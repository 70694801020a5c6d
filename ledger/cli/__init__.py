"""The ``ledger`` command line: click commands that parse, make one library call, and render.

app (the group and the core commands), kit (options shared by commands), commands/ (one module per
capability, discovered at start-up). May import every other package of ``ledger``.
"""

from ledger.cli.app import cli, main

__all__ = ["cli", "main"]
