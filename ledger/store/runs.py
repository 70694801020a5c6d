"""Runs as flat records: one dict per receipt, one key per column, as ``mlflow.search_runs`` gives one row per run
with ``params.*`` and ``metrics.*`` columns. What :meth:`ledger.Ledger.runs` (a pandas DataFrame), `ledger ls
--columns` and the web view's table show.

Columns, in this order (every name is also a ``--where`` key, :mod:`ledger.store.filters`):

    id, name, status, started_at, ended_at, duration_s, exit_code, attempt, archived, notes
    summary.<figure>          the receipt's summary: steps, tokens, final_loss, tokens_per_s, step_time_s,
                              peak_memory_bytes, peak_memory_source, peak_host_memory_bytes, energy_j, ...;
                              summary.final_eval.<split/source/metric> for each eval series
    tags.<K>                  each tag
    params.<K>                each of the launch's own arguments and config-file keys (workload.arguments: text,
                              as the command line gave it; ``train.yaml:optimizer.lr``)
    workload.<path>           each workload field a receipt sets: hyperparameters (optimizer, batch), model,
                              router, kernels, parallelism, precision, task, data, seed, device
    stack.<path>              the few stack fields a table of runs is sorted by: GPU model and count, commit, dirty

A column appears when any of the runs has a value for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BASE = ("id", "name", "status", "started_at", "ended_at", "duration_s", "exit_code", "attempt", "archived", "notes")
"""The bookkeeping columns, first."""
STACK = ("stack.hardware.gpu_model", "stack.hardware.gpu_count", "stack.code.commit", "stack.code.dirty")
"""The stack fields a table of runs shows."""
SKIPPED_WORKLOAD = ("workload.arguments", "workload.launch")
"""Workload parts that are not columns of their own: the arguments are ``params.*``; the launch is bookkeeping."""
PREFIX_ORDER = ("summary.", "tags.", "params.", "workload.", "stack.")
SUMMARY_FIRST = ("summary.steps", "summary.last_step", "summary.tokens", "summary.final_loss", "summary.tokens_per_s",
                 "summary.step_time_s", "summary.peak_memory_bytes", "summary.peak_memory_source",
                 "summary.peak_host_memory_bytes", "summary.energy_j")
"""The summary's headline figures, first among the summary columns (the receipt's JSON holds its keys sorted)."""


def _cell(value: Any) -> Any:
    """A receipt value as one cell: lists as comma-separated text, everything else as it is."""
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) if value else None
    if isinstance(value, dict):
        return None  # maps are spread into columns of their own; other objects are not columns
    return value


def _walk(prefix: str, data: Mapping[str, Any], out: dict[str, Any], skip: Sequence[str] = ()) -> None:
    for key, value in data.items():
        path = f"{prefix}{key}"
        if path in skip:
            continue
        if isinstance(value, Mapping):
            _walk(path + ".", value, out, skip)
        else:
            cell = _cell(value)
            if cell is not None and cell != "":
                out[path] = cell


def record(receipt: Mapping[str, Any], archived: bool = False, notes: int = 0) -> dict[str, Any]:
    """One run's columns (``receipt``: its JSON data, ``Receipt.model_dump(mode="json")``)."""
    out: dict[str, Any] = {k: receipt.get(k) for k in BASE if k not in ("archived", "notes")}
    out["archived"], out["notes"] = archived, notes
    summary = receipt.get("summary") or {}
    for key, value in summary.items():
        if key == "final_eval":
            for series, v in (value or {}).items():
                out[f"summary.final_eval.{series}"] = v
        elif not isinstance(value, dict | list):
            out[f"summary.{key}"] = value
    for key, value in (receipt.get("tags") or {}).items():
        out[f"tags.{key}"] = value
    workload = receipt.get("workload") or {}
    for key, value in (workload.get("arguments") or {}).items():
        out[f"params.{key}"] = value
    _walk("workload.", workload, out, SKIPPED_WORKLOAD)
    stack = receipt.get("stack") or {}
    for path in STACK:
        found: Any = stack
        for part in path.split(".")[1:]:
            found = found.get(part) if isinstance(found, Mapping) else None
        if found is not None:
            out[path] = found
    return out


def columns(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The columns of a set of records: :data:`BASE`, then every other column any record has, grouped by
    prefix (:data:`PREFIX_ORDER`) in the order first seen within a group."""
    seen: dict[str, None] = {}
    for r in records:
        for k in r:
            seen.setdefault(k, None)
    rest = [c for c in seen if c not in BASE]

    def group(c: str) -> tuple[int, int]:
        first = SUMMARY_FIRST.index(c) if c in SUMMARY_FIRST else len(SUMMARY_FIRST)
        return next((i for i, p in enumerate(PREFIX_ORDER) if c.startswith(p)), len(PREFIX_ORDER)), first

    return [*BASE, *sorted(rest, key=group)]


def hyperparameters(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The columns that describe the configuration (``params.*``, ``workload.*``) of a set of records, the ones
    whose values differ between the records first (what a reader picks columns for)."""
    rows = list(records)
    cols = [c for c in columns(rows) if c.startswith(("params.", "workload."))]
    varying = [c for c in cols if len({repr(r.get(c)) for r in rows}) > 1]
    return varying + [c for c in cols if c not in varying]


def resolve(name: str, available: Sequence[str]) -> str | None:
    """The column a short name means: itself, ``params.<name>``, or the one workload column ending in
    ``.<name>``; None when none or several do."""
    if name in available:
        return name
    params = "params." + name.removeprefix("param.")
    if params in available:
        return params
    ends = [c for c in available if c.startswith(("workload.", "summary.", "stack.")) and c.endswith("." + name)]
    return ends[0] if len(ends) == 1 else None


def pandas() -> Any:
    """The pandas module, or a :class:`~ledger.errors.MissingExtra` naming the extra that installs it."""
    try:
        import pandas as pd
    except ImportError as exc:
        from ledger.errors import MissingExtra

        raise MissingExtra("pandas", "pandas") from exc
    return pd


def frame(records: Sequence[Mapping[str, Any]]) -> Any:
    """The records as a pandas DataFrame, one row per run, :func:`columns` in order; times as UTC datetimes."""
    pd = pandas()
    cols = columns(records)
    df = pd.DataFrame([[r.get(c) for c in cols] for r in records], columns=cols)
    for c in ("started_at", "ended_at"):
        df[c] = pd.to_datetime(df[c], utc=True, format="ISO8601")
    return df


def steps_table(con: Any, receipt_id: str) -> Any:
    """One run's steps as an Arrow table in step order: every column of the steps table but ``receipt_id`` and
    ``extra``, then each custom metric of ``extra`` as a column of its own (named as logged)."""
    names = [r[0] for r in con.execute(
        "SELECT DISTINCT unnest(map_keys(extra)) AS k FROM steps WHERE receipt_id = ? ORDER BY k",
        [receipt_id]).fetchall()]
    fixed = [r[0] for r in con.execute("SELECT column_name FROM (DESCRIBE steps)").fetchall()
             if r[0] not in ("receipt_id", "extra")]
    taken = set(fixed)
    custom = [(n, n if n not in taken else f"extra.{n}") for n in names]
    select = ", ".join([*(f'"{c}"' for c in fixed),
                        *(f"extra[?]::DOUBLE AS \"{alias.replace(chr(34), chr(34) * 2)}\"" for _, alias in custom)])
    return con.sql(f"SELECT {select} FROM steps WHERE receipt_id = ? ORDER BY rowid",
                   params=[*(n for n, _ in custom), receipt_id]).to_arrow_table()
