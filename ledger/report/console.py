"""Rich terminal rendering of library results (no logic here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledger.errors import BadInput
from ledger.report import fmt
from ledger.report.safe import markup, terminal

if TYPE_CHECKING:  # `ledger ls` needs none of the receipt models, nor Arrow

    from ledger.analyses.stragglers import Stragglers
    from schemas import Receipt

# Piped output follows $COLUMNS like a terminal (rich's default: 80 columns when it is not set).
console = Console(emoji=False)  # user text is data: ':fire:' stays ':fire:'
MAX_ROWS = 1000
SHORT_ID = 8
"""Hex characters of an id shown in tables: always whole (a unique prefix that `show` and `compare` take)."""


def _fmt(value: Any) -> Text:
    """A table cell: user data, never markup, control characters visible."""
    if value is None:
        return Text("-")
    if isinstance(value, float):
        return Text(f"{value:.4g}")
    if isinstance(value, dict):
        return terminal(", ".join(f"{k}={v}" for k, v in value.items()))
    return terminal(value)


def _plain(value: Any) -> str:
    """A table cell as plain text (rendered through :func:`ledger.report.safe.terminal`)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def _status(r: dict[str, Any]) -> str:
    return (str(r["status"]) + (f" ({r['problems']} problems)" if r["problems"] else "")
            + (" (archived)" if r.get("archived") else ""))


def _experts(r: dict[str, Any]) -> str:
    return f"{r['num_experts']}x top{r['top_k']}" if r["num_experts"] else "-"


LS_COLUMNS: dict[str, Callable[[dict[str, Any]], str]] = {
    "id": lambda r: r["id"][:SHORT_ID],
    "name": lambda r: _plain(r["name"]),
    "status": _status,
    "started": lambda r: (r["started_at"] or "-")[:16].replace("T", " "),
    "time": lambda r: fmt.duration(r["duration_s"]),
    "attempt": lambda r: _plain(r["attempt"]),
    "steps": lambda r: _plain(r["steps"]),
    "loss": lambda r: _plain(r["final_loss"]),
    "tok/s": lambda r: fmt.si(r["tokens_per_s"]),
    "precision": lambda r: _plain(r["precision"]),
    "experts": _experts,
    "device": lambda r: _plain(r["device"]),
    "gpu": lambda r: _plain(r["gpu_model"]),
    "tags": lambda r: _plain(r["tags"]),
    "notes": lambda r: _plain(r.get("notes") or None),
}
"""`ledger ls --columns` names -> how a row shows in that column."""
DEFAULT_LS_COLUMNS = ("id", "name", "status", "started", "time", "steps", "loss", "tok/s", "precision", "experts",
                      "tags")
_RIGHT = {"time", "attempt", "steps", "loss", "tok/s"}
_WRAP = {"name", "tags", "status", "gpu"}
"""Columns whose text wraps; any other column (the runs table's, ``params.lr``) is kept whole too."""
_PRIORITY = ("id", "name", "status", "loss", "tok/s", "steps", "time", "precision", "experts", "started", "tags")
"""Which default columns stay when the terminal is narrow (first ones first)."""
MIN_NAME = 12


def fitting_columns(rows: list[dict[str, Any]], width: int, columns: Sequence[str] = DEFAULT_LS_COLUMNS) -> list[str]:
    """The default columns that fit ``width`` (in :data:`_PRIORITY` order, shown in table order)."""
    need = {c: max([len(c), *(len(LS_COLUMNS[c](r)) for r in rows)]) + 3 for c in columns}  # + padding, rule
    for c in _WRAP & set(need):
        need[c] = min(need[c], MIN_NAME + 3)
    chosen: set[str] = set()
    used = 0
    for c in (c for c in _PRIORITY if c in columns):
        if used + need[c] <= width or not chosen:
            chosen.add(c)
            used += need[c]
    return [c for c in columns if c in chosen]


def table_columns(rows: list[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """`ledger ls --columns` names as columns: the :data:`LS_COLUMNS`, or any column of the runs table
    (:mod:`ledger.store.runs`: ``summary.*``, ``params.*``, ``workload.*``, ``tags.*``), by its full name or a
    short one (``lr`` for ``params.lr``); an unknown one is a :class:`BadInput` naming the choices."""
    from ledger.store.runs import columns as run_columns
    from ledger.store.runs import resolve

    available = run_columns([r["fields"] for r in rows if "fields" in r])
    out: list[str] = []
    unknown: list[str] = []
    for name in names:
        found = name if name in LS_COLUMNS else resolve(name, available)
        (out if found else unknown).append(found or name)
    if unknown or not out:
        extra = [c for c in available if c.startswith(("params.", "workload.", "summary."))]
        more = f"; or a column of these runs: {','.join(extra[:24])}" + (",..." if len(extra) > 24 else "") \
            if extra else ""
        raise BadInput(f"unknown column(s) {', '.join(map(repr, unknown)) or '(none given)'} for --columns; "
                       f"choose from: {','.join(LS_COLUMNS)}{more}")
    return out


def field_text(value: Any) -> str:
    """A runs-table value in a cell: numbers in 4 significant digits, times to the minute."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return _plain(value)


def receipts_table(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
    """`ledger ls`: ids whole (8 hex characters), long names and tags wrap instead of being cut; without
    ``columns``, the default columns that fit the terminal's width; runs-table columns (``params.lr``) read the
    rows' ``fields``."""
    if columns is None:
        columns = fitting_columns(rows, console.width)
    unknown = [c for c in columns if c not in LS_COLUMNS and not any(c in r.get("fields", {}) for r in rows)
               and not all("fields" in r for r in rows)]
    if unknown or not columns:
        raise BadInput(f"unknown column(s) {', '.join(map(repr, unknown)) or '(none given)'} for --columns; "
                       f"choose from: {','.join(LS_COLUMNS)}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in columns:
        if col in _WRAP or col not in LS_COLUMNS:
            table.add_column(col, overflow="fold", min_width=9 if col == "status" else min(MIN_NAME, len(col) + 2))
        else:
            table.add_column(col, no_wrap=True, justify="right" if col in _RIGHT else "left",
                             min_width=SHORT_ID if col == "id" else None)

    def cell(r: dict[str, Any], col: str) -> str:
        if col in LS_COLUMNS:
            return LS_COLUMNS[col](r)
        value = r.get("fields", {}).get(col)
        return "-" if value is None else field_text(value)

    for r in rows:
        table.add_row(*(terminal(cell(r, c)) for c in columns))
    # columns chosen wider than the terminal run past its edge (it wraps them) rather than being cut: a cropped
    # line showed 14.5k tok/s as "14"
    console.print(table, crop=False)
    console.print(f"{len(rows)} receipt(s)")


def human(path: str, value: Any) -> str:
    """A receipt field for people: byte counts in GiB/MiB, rates and token counts with k/M, seconds as time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        leaf = path.rsplit(".", 1)[-1]
        if leaf.endswith("bytes"):
            return f"{fmt.size(value)} ({value:,} B)" if isinstance(value, int) else fmt.size(value)
        if leaf.endswith("_per_s") or leaf in ("tokens", "params", "active_params", "total_params"):
            return fmt.si(value, "tok/s" if leaf == "tokens_per_s" else "")
        if leaf.endswith("_s"):
            return fmt.duration(value)
    return _plain(value)


def receipt(r: Receipt, directory: Path | None = None) -> None:
    """`ledger show`: bookkeeping first, then every non-empty field grouped by factor; the output log's path last
    (``directory``: the receipt's, where its files are). A failed run's error follows (:mod:`ledger.report.failure`,
    which the web view's receipt page shares)."""
    console.print(f"[bold]{r.id}[/bold]  {markup(r.name or 'unnamed')}  {markup(f'[{r.status}]')}  exit {r.exit_code}")
    console.print(f"started {r.started_at}  duration {fmt.duration(r.duration_s)}  attempt {r.attempt}")
    console.print(Text("command: ") + terminal(" ".join(r.command)))
    from schemas import Factor, flatten, leaves

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
            table.add_row(path, terminal(human(path, value)))
        console.print(table)
    summary = Table(title="summary", title_justify="left", show_header=False, box=None)
    for key, value in r.summary.model_dump().items():
        summary.add_row(key, terminal(human(key, value)))
    console.print(summary)
    files = Table("artifact", "rows", "bytes", "sha256", title="artifacts", title_justify="left")
    for a in r.artifacts:
        files.add_row(terminal(a.path), _fmt(a.rows), fmt.size(a.bytes), a.sha256[:16])
    console.print(files)
    for p in r.problems:
        console.print(Text("problem ", style="yellow") + terminal(f"{p.source}: {p.message}"))
    log = next((directory / a.path for a in r.artifacts if a.kind == "log"), None) if directory else None
    if log is not None:
        console.print(Text("output: ") + terminal(str(log)), soft_wrap=True)


def rows_table(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """`ledger query`: the first :data:`MAX_ROWS` rows."""
    out = Table()
    for name in columns:
        out.add_column(_fmt(name))
    for row in rows[:MAX_ROWS]:
        out.add_row(*(_fmt(v) for v in row))
    console.print(out)
    if len(rows) > MAX_ROWS:
        console.print(f"(first {MAX_ROWS} of {len(rows)} rows; use --json for all)")


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar fed with (done, total); silent when not on a terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True, emoji=False), transient=True, disable=not console.is_terminal)
    task = bar.add_task(label, total=None)
    with bar:
        yield lambda done, total: bar.update(task, completed=done, total=total)


def nodes_and_stragglers(r: Receipt, differences: list[tuple[Any, str]], s: Stragglers | None) -> None:
    """`ledger show`, after the receipt: every node's stack, differences between nodes, rank and node scores
    (``s``: :class:`ledger.analyses.stragglers.Stragglers`) and the time lost waiting on slower ranks."""
    if r.stack.nodes:
        table = Table("node", "host", "status", "ranks", "exit", "python", "torch", "NCCL", "driver", "packages",
                      "container", "code", "GPU", title="nodes", title_justify="left")
        for n in r.stack.nodes:
            code = (n.code_commit or "")[:10] + ("+" + n.code_digest[:8] if n.code_digest else "")
            table.add_row(*(_fmt(v) for v in (
                n.node_rank, n.hostname, n.status, ",".join(map(str, n.ranks)) or None, n.exit_code, n.python,
                n.torch, n.drivers.nccl, n.drivers.gpu_driver, (n.packages_digest or "")[:12] or None,
                (n.container_digest or "")[:19] or None, code or None,
                f"{n.gpu_count}x {n.gpu_model}" if n.gpu_model else n.gpu_count)))
        console.print(table)
        table = Table("node", "GPU clocks", "ECC", "GPU topology", "CPU topology", "CPU governor", "CPU max MHz",
                      title="node hardware (probed on each node where available)", title_justify="left")
        for n in r.stack.nodes:
            ecc = n.ecc if n.ecc is None or n.ecc_errors is None else f"{n.ecc}, {n.ecc_errors} uncorrected errors"
            table.add_row(_fmt(n.node_rank), *(_fmt(v) if v is not None else "not available" for v in (
                n.gpu_clocks, ecc, n.gpu_topology, n.cpu_topology, n.cpu_governor, n.cpu_max_mhz)))
        console.print(table)
        for n in r.stack.nodes:
            if n.detail:
                console.print(terminal(f"node {n.node_rank}: {n.detail}"))
    for factor, text in differences:
        console.print(Text("nodes differ", style="yellow") + terminal(f" ({factor}) {text}"))
    if s is None or len(s.ranks) < 2:
        return
    table = Table("rank", "node", "steps", "median work s", "relative", "individual",
                  title=f"slowest ranks (work = timed phases without {', '.join(s.excluded_phases) or 'collectives'})",
                  title_justify="left")
    for rs in s.ranks[:max(3, len(s.stragglers))]:
        node = f"{rs.node_rank} ({rs.hostname})" if rs.hostname else rs.node_rank
        table.add_row(str(rs.rank), _fmt(node), str(rs.steps), f"{rs.median_s:.4g}",
                      f"{rs.relative:.2f}", f"{rs.individual:.2f}")
    console.print(table)
    if len(s.nodes) > 1:
        console.print("node scores (slowest rank's): " + markup(", ".join(
            f"node {n.node_rank} ({n.hostname}) {n.relative:.2f} (rank {n.slowest_rank})" for n in s.nodes)))
    if s.stragglers:
        console.print("[red]stragglers[/red] (score < " + f"{s.threshold:g}): " + ", ".join(
            f"rank {x.rank} {x.score:.2f}" for x in s.stragglers))
    share = s.wait_s / s.paced_s if s.paced_s > 0 else 0.0
    console.print(f"waiting on slower ranks: {s.wait_s:.3g} s over {s.steps_compared} steps "
                  f"({share:.1%} of their paced step time; goodput bucket straggler_wait)")
