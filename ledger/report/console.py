"""Rich terminal rendering of library results (no logic here)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ledger.report.safe import markup, terminal
from schemas import Factor, Receipt, flatten, leaves

# Piped output is read by tools and people alike: do not squeeze tables into 80 columns there.
console = Console() if sys.stdout.isatty() else Console(width=200)
MAX_ROWS = 1000


def _fmt(value: Any) -> Text:
    """A table cell: user data, never markup, control characters visible."""
    if value is None:
        return Text("-")
    if isinstance(value, float):
        return Text(f"{value:.4g}")
    if isinstance(value, dict):
        return terminal(", ".join(f"{k}={v}" for k, v in value.items()))
    return terminal(value)


def receipts_table(rows: list[dict[str, Any]]) -> None:
    """`ledger ls`."""
    table = Table(show_lines=False)
    for col in ("id", "name", "status", "started", "time s", "steps", "loss", "tok/s", "precision", "experts",
                "tags"):
        table.add_column(col)
    for r in rows:
        experts = f"{r['num_experts']}x top{r['top_k']}" if r["num_experts"] else "-"
        table.add_row(
            _fmt(r["id"][:12]), _fmt(r["name"]),
            _fmt(r["status"] + (f" ({r['problems']} problems)" if r["problems"] else "")),
            _fmt((r["started_at"] or "-")[:19]), _fmt(r["duration_s"]), _fmt(r["steps"]), _fmt(r["final_loss"]),
            _fmt(r["tokens_per_s"]), _fmt(r["precision"]), experts, _fmt(r["tags"]),
        )
    console.print(table)
    console.print(f"{len(rows)} receipt(s)")


def receipt(r: Receipt) -> None:
    """`ledger show`: bookkeeping first, then every non-empty field grouped by factor."""
    console.print(f"[bold]{r.id}[/bold]  {markup(r.name or 'unnamed')}  {markup(f'[{r.status}]')}  exit {r.exit_code}")
    console.print(f"started {r.started_at}  duration {_fmt(r.duration_s)} s  attempt {r.attempt}")
    console.print(Text("command: ") + terminal(" ".join(r.command)))
    flat = flatten(r)
    factors = dict(leaves())
    by_factor: dict[Factor, list[tuple[str, Any]]] = {}
    for path, value in flat.items():
        if value in (None, [], {}, "") or path.startswith(("summary.", "artifacts", "problems")):
            continue
        if path == "stack.software.packages":
            value = f"{len(value)} packages"
        by_factor.setdefault(factors[path], []).append((path, value))
    for factor in Factor:
        items = by_factor.get(factor)
        if not items or factor is Factor.RECORD:
            continue
        table = Table(title=factor.value, title_justify="left", show_header=False, box=None)
        for path, value in items:
            table.add_row(_fmt(path), _fmt(value))
        console.print(table)
    summary = Table(title="summary", title_justify="left", show_header=False, box=None)
    for key, value in r.summary.model_dump().items():
        summary.add_row(_fmt(key), _fmt(value))
    console.print(summary)
    files = Table("artifact", "rows", "bytes", "sha256", title="artifacts", title_justify="left")
    for a in r.artifacts:
        files.add_row(_fmt(a.path), _fmt(a.rows), _fmt(a.bytes), _fmt(a.sha256[:16]))
    console.print(files)
    for p in r.problems:
        console.print(Text("problem ", style="yellow") + terminal(f"{p.source}: {p.message}"))


def arrow_table(table: pa.Table) -> None:
    """`ledger query`."""
    out = Table()
    for name in table.column_names:
        out.add_column(_fmt(name))
    for row in table.slice(0, MAX_ROWS).to_pylist():
        out.add_row(*(_fmt(v) for v in row.values()))
    console.print(out)
    if table.num_rows > MAX_ROWS:
        console.print(f"(first {MAX_ROWS} of {table.num_rows} rows; use --json for all)")


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar fed with (done, total); silent when not on a terminal."""
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True, disable=not console.is_terminal)
    task = bar.add_task(label, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)
