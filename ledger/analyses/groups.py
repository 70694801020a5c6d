"""``--group TAG=VALUE`` and the two sides of a comparison; replicate groups.

A side is one receipt (a name or an id prefix) or a group: ``--group TAG=VALUE`` selects every receipt
tagged so (:func:`tagged`, the one resolver of ``--group``, also behind the gates and goodput of a group:
:func:`group_runs`). A side's group must be a **replicate group**: receipts identical in every causal
factor but the seed; its members are compared as runs of one configuration (between-run variance).

:class:`Catalog` holds every indexed receipt's causal factor values (read from the index's JSON without
validating each receipt again), for the groups, the replicates (:mod:`ledger.analyses.evidence`) and the
ablation graph.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from ledger.analyses.diff import causal_value
from ledger.errors import BadInput
from ledger.kv import pair
from ledger.store.attempts import LogicalRun, root_of, run_of
from ledger.store.refs import resolve
from schemas import Factor, leaves
from schemas.factors import CAUSAL_FACTORS

SEED = Factor.SEED.value
_CAUSAL_LEAVES = [(path.split("."), factor.value) for path, factor in leaves() if factor is not Factor.RECORD]


class InvalidGroup(BadInput):
    """A ``--group`` that is malformed, empty, or not a replicate group."""


class SameReceipt(BadInput):
    """Both sides name the same receipt (or share members)."""


@dataclass(frozen=True)
class Entry:
    """One indexed receipt, as the catalog knows it."""

    id: str
    name: str | None
    tags: dict[str, str]
    started_at: datetime | None
    data: dict[str, Any]
    """The receipt as JSON (validated when it was indexed)."""
    factors: dict[str, str]
    """Causal factor -> canonical JSON of its leaves: two receipts agree on a factor iff these are equal."""

    @property
    def label(self) -> str:
        """Name and short id."""
        return f"{self.name} ({self.id[:8]})" if self.name else self.id[:12]

    def config_key(self, ignore: Iterable[str] = (SEED,)) -> tuple[str, ...]:
        """The causal configuration without the ``ignore``d factors (default: the seed)."""
        skip = set(ignore)
        return tuple(self.factors[f.value] for f in CAUSAL_FACTORS if f.value not in skip)


def factor_keys(data: Mapping[str, Any]) -> dict[str, str]:
    """Causal factor -> canonical JSON of its leaf values, from a receipt's JSON (``model_dump(mode="json")``)."""
    by_factor: dict[str, dict[str, Any]] = {f.value: {} for f in CAUSAL_FACTORS}
    for parts, factor in _CAUSAL_LEAVES:
        node: Any = data
        for part in parts:
            node = node.get(part) if isinstance(node, dict) else None
        path = ".".join(parts)
        by_factor[factor][path] = causal_value(path, node)
    return {f: json.dumps(v, sort_keys=True, separators=(",", ":")) for f, v in by_factor.items()}


class Catalog:
    """Every indexed receipt by id."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries: dict[str, Entry] = {e.id: e for e in entries}

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> Catalog:
        """Read every receipt of the index."""
        rows = con.execute(
            "SELECT id, name, tags, started_at, receipt FROM receipts ORDER BY started_at, id"
        ).fetchall()
        entries = []
        for rid, name, tags, started, receipt in rows:
            data = json.loads(receipt)
            entries.append(Entry(rid, name, json.loads(tags) if tags else {}, started, data, factor_keys(data)))
        return cls(entries)

    def __getitem__(self, receipt_id: str) -> Entry:
        return self.entries[receipt_id]



@dataclass(frozen=True)
class Side:
    """One side of a comparison."""

    name: str
    """A or B."""
    spec: str
    """What the user gave: a ref, or ``--group TAG=VALUE``."""
    ids: tuple[str, ...]
    """Receipt ids (one for a receipt; the members, oldest first, for a group)."""
    is_group: bool

    @property
    def label(self) -> str:
        """What to call the side in a report."""
        return self.spec if not self.is_group else f"{self.spec} ({len(self.ids)} run{'s' * (len(self.ids) != 1)})"

    def to_json(self, catalog: Catalog) -> dict[str, Any]:
        """The side with its members."""
        return {
            "spec": self.spec, "group": self.is_group, "ids": list(self.ids),
            "names": [catalog[i].name for i in self.ids],
        }


def parse_group(text: str) -> tuple[str, str]:
    """``TAG=VALUE`` -> (tag, value)."""
    return pair(text, "--group", error=InvalidGroup)


def tagged(con: duckdb.DuckDBPyConnection, group: str) -> tuple[str, ...]:
    """The receipts a ``--group TAG=VALUE`` selects: every receipt tagged so, oldest first. Raises
    :class:`InvalidGroup` when ``group`` is not ``TAG=VALUE`` or no receipt is tagged so."""
    tag, value = parse_group(group)
    rows = con.execute("SELECT id, tags FROM receipts ORDER BY started_at, id").fetchall()
    ids = tuple(str(rid) for rid, tags in rows if json.loads(tags or "{}").get(tag) == value)
    if not ids:
        raise InvalidGroup(f"no receipt is tagged {tag}={value}; `ledger ls --where tag.{tag}={value}` lists them")
    return ids


def group_runs(con: duckdb.DuckDBPyConnection, group: str) -> list[LogicalRun]:
    """The logical runs with an attempt in the group ``TAG=VALUE`` (:func:`tagged`), oldest first."""
    return [run_of(con, root) for root in dict.fromkeys(root_of(con, rid) for rid in tagged(con, group))]


def resolve_side(con: duckdb.DuckDBPyConnection, catalog: Catalog, name: str, ref: str | None = None,
                 group: str | None = None) -> Side:
    """A side from a ref (name or id prefix) or a group ``TAG=VALUE``."""
    if ref is not None:
        return Side(name, ref, (resolve(con, ref),), False)
    if group is None:
        raise BadInput("give a ref or --group TAG=VALUE for each side")
    ids = tagged(con, group)
    check_replicates(catalog, ids, f"--group {group}")
    return Side(name, f"--group {group}", ids, True)


def check_replicates(catalog: Catalog, ids: Iterable[str], what: str) -> None:
    """Raise :class:`InvalidGroup` unless the receipts differ in nothing but the seed."""
    members = [catalog[i] for i in ids]
    first = members[0]
    differing = sorted(
        {f for m in members[1:] for f, v in m.factors.items() if f != SEED and v != first.factors[f]},
        key=[c.value for c in CAUSAL_FACTORS].index,
    )
    if differing:
        odd = next(m for m in members[1:] if any(m.factors[f] != first.factors[f] for f in differing))
        raise InvalidGroup(
            f"{what} is not a replicate group: {odd.label} differs from {first.label} in "
            f"{', '.join(differing)} (members may differ only in the seed); tag replicates alone"
        )


def check_distinct(a: Side, b: Side) -> None:
    """Refuse comparing a receipt with itself, or groups that share members."""
    shared = set(a.ids) & set(b.ids)
    if not shared:
        return
    if len(a.ids) == 1 and len(b.ids) == 1:
        raise SameReceipt(f"A and B are the same receipt ({a.ids[0][:12]}); give two different receipts")
    raise SameReceipt(f"A and B share {len(shared)} receipt(s) ({', '.join(sorted(s[:12] for s in shared))}); "
                      "a receipt can be on one side only")
