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

from schemas import Factor, Receipt, flatten, leaves

# Piped output is read by tools and people alike: do not squeeze tables into 80 columns there.
console = Console() if sys.stdout.isatty() else Console(width=200)
MAX_ROWS = 1000


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def receipts_table(rows: list[dict[str, Any]]) -> None:
    """`ledger ls`."""
    table = Table(show_lines=False)
    for col in ("id", "name", "status", "started", "time s", "steps", "loss", "tok/s", "precision", "experts",
                "tags"):
        table.add_column(col)
    for r in rows:
        experts = f"{r['num_experts']}x top{r['top_k']}" if r["num_experts"] else "-"
        table.add_row(
            r["id"][:12], _fmt(r["name"]), r["status"] + (f" ({r['problems']} problems)" if r["problems"] else ""),
            (r["started_at"] or "-")[:19], _fmt(r["duration_s"]), _fmt(r["steps"]), _fmt(r["final_loss"]),
            _fmt(r["tokens_per_s"]), _fmt(r["precision"]), experts, _fmt(r["tags"]),
        )
    console.print(table)
    console.print(f"{len(rows)} receipt(s)")


def receipt(r: Receipt) -> None:
    """`ledger show`: bookkeeping first, then every non-empty field grouped by factor."""
    console.print(f"[bold]{r.id}[/bold]  {r.name or 'unnamed'}  [{r.status}]  exit {r.exit_code}")
    console.print(f"started {r.started_at}  duration {_fmt(r.duration_s)} s  attempt {r.attempt}")
    console.print("command: " + " ".join(r.command))
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
            table.add_row(path, _fmt(value))
        console.print(table)
    summary = Table(title="summary", title_justify="left", show_header=False, box=None)
    for key, value in r.summary.model_dump().items():
        summary.add_row(key, _fmt(value))
    console.print(summary)
    files = Table("artifact", "rows", "bytes", "sha256", title="artifacts", title_justify="left")
    for a in r.artifacts:
        files.add_row(a.path, _fmt(a.rows), str(a.bytes), a.sha256[:16])
    console.print(files)
    for p in r.problems:
        console.print(f"[yellow]problem[/yellow] {p.source}: {p.message}")


def arrow_table(table: pa.Table) -> None:
    """`ledger query`."""
    out = Table(*table.column_names)
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


def nodes_and_stragglers(r: Receipt, differences: list[tuple[Any, str]], s: Any) -> None:
    """`ledger show`, after the receipt: every node's stack, differences between nodes, rank and node scores
    (``s``: :class:`ledger.analyses.stragglers.Stragglers`) and the time lost waiting on slower ranks."""
    from rich.markup import escape

    if r.stack.nodes:
        table = Table("node", "host", "status", "ranks", "exit", "python", "torch", "NCCL", "driver", "packages",
                      "container", "code", "GPU", title="nodes", title_justify="left")
        for n in r.stack.nodes:
            code = (n.code_commit or "")[:10] + ("+" + n.code_digest[:8] if n.code_digest else "")
            table.add_row(*(escape(_fmt(v)) for v in (
                n.node_rank, n.hostname, n.status, ",".join(map(str, n.ranks)) or None, n.exit_code, n.python,
                n.torch, n.drivers.nccl, n.drivers.gpu_driver, (n.packages_digest or "")[:12] or None,
                (n.container_digest or "")[:19] or None, code or None,
                f"{n.gpu_count}x {n.gpu_model}" if n.gpu_model else n.gpu_count)))
        console.print(table)
        for n in r.stack.nodes:
            if n.detail:
                console.print(escape(f"node {n.node_rank}: {n.detail}"))
    for factor, text in differences:
        console.print(f"[yellow]nodes differ[/yellow] ({escape(str(factor))}) {escape(text)}")
    if s is None or len(s.ranks) < 2:
        return
    table = Table("rank", "node", "steps", "median work s", "relative", "individual",
                  title=f"slowest ranks (work = timed phases without {', '.join(s.excluded_phases) or 'collectives'})",
                  title_justify="left")
    for rs in s.ranks[:max(3, len(s.stragglers))]:
        node = f"{rs.node_rank} ({rs.hostname})" if rs.hostname else rs.node_rank
        table.add_row(str(rs.rank), escape(_fmt(node)), str(rs.steps), f"{rs.median_s:.4g}",
                      f"{rs.relative:.2f}", f"{rs.individual:.2f}")
    console.print(table)
    if len(s.nodes) > 1:
        console.print("node scores (slowest rank's): " + escape(", ".join(
            f"node {n.node_rank} ({n.hostname}) {n.relative:.2f} (rank {n.slowest_rank})" for n in s.nodes)))
    if s.stragglers:
        console.print("[red]stragglers[/red] (score < " + f"{s.threshold:g}): " + ", ".join(
            f"rank {x.rank} {x.score:.2f}" for x in s.stragglers))
    share = s.wait_s / s.paced_s if s.paced_s > 0 else 0.0
    console.print(f"waiting on slower ranks: {s.wait_s:.3g} s over {s.steps_compared} steps "
                  f"({share:.1%} of their paced step time; goodput bucket straggler_wait)")
