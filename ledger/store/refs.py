"""Resolving what users type (an id, a unique id prefix, or a name) to one receipt id."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ledger.errors import AmbiguousRef, DamagedReceipt, InvalidRef, UnknownRef

MAX_REF = 200
MIN_PREFIX = 4
if TYPE_CHECKING:  # `ledger record --name` checks a name without loading DuckDB
    import duckdb

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
SHOWN = 40
"""Characters of a refused ref or name that its error message repeats."""


def _shown(text: str) -> str:
    """A refused ref or name as its error shows it: quoted, cut after :data:`SHOWN` characters with its length
    (a 10,000-character name was repeated whole)."""
    if len(text) <= SHOWN + 20:
        return repr(text)
    return f"{text[:SHOWN]!r}... ({len(text):,} characters)"


def check_ref(ref: str) -> str:
    """A ref is an id, an id prefix or a name. Any name is a ref — ``a/b``, ``[/x]``, ``run 1``, ``实验`` —
    because a ref is only ever compared with SQL parameters, never used as a path or a pattern; names
    with control characters are refused when recorded (:func:`check_name`), so no ref needs one."""
    if not ref or len(ref) > MAX_REF or _CONTROL.search(ref):
        raise InvalidRef(
            f"invalid ref {_shown(ref)}: use an id, an id prefix or a name (1 to {MAX_REF} characters, no control "
            "characters)"
        )
    return ref


def check_name(name: str) -> str:
    """A run's name as given to ``--name``: usable as a ref (see :func:`check_ref`)."""
    if not name or len(name) > MAX_REF or _CONTROL.search(name):
        raise InvalidRef(
            f"--name {_shown(name)}: a name is also a ref, so it must be 1 to {MAX_REF} characters without control "
            "characters (newlines, tabs, escape sequences); e.g. --name 'fp8 grouped/run-2'"
        )
    return name


def resolve(con: duckdb.DuckDBPyConnection, ref: str) -> str:
    """The id of the receipt a ref names.

    - a full id or a unique id prefix (at least 4 hex characters);
    - a name: when several receipts share it and they are attempts of one logical run, the latest
      attempt; otherwise the candidates are listed.
    """
    check_ref(ref)
    if re.fullmatch(r"[0-9a-f]+", ref) and len(ref) >= MIN_PREFIX:
        bounds = [ref, ref + "\uffff"]  # the ids with this prefix, as a range: answered from the id index
        damaged = con.execute("SELECT id, error FROM damaged WHERE id >= ? AND id < ?", bounds).fetchall()
        rows = con.execute(
            "SELECT id, name, started_at FROM receipts WHERE id >= ? AND id < ? ORDER BY started_at", bounds
        ).fetchall()
        if damaged and not rows:
            rid, error = damaged[0]
            raise DamagedReceipt(f"receipt {rid[:12]} is damaged ({error}); run `ledger verify {rid[:12]}`")
        if len(rows) == 1:
            return str(rows[0][0])
        if len(rows) > 1:
            raise AmbiguousRef(f"ref {ref!r} matches {len(rows)} receipts: {_listing(rows)}; give more characters")
    rows = con.execute(
        "SELECT id, name, started_at, coalesce(attempt_of, id) AS root, attempt FROM receipts "
        "WHERE name = ? ORDER BY started_at, attempt",
        [ref],
    ).fetchall()
    if not rows:
        raise UnknownRef(f"no receipt has the id prefix or name {ref!r}; `ledger ls` lists them")
    if len({r[3] for r in rows}) == 1:
        return str(rows[-1][0])
    raise AmbiguousRef(
        f"name {ref!r} is shared by {len(rows)} receipts of different runs: {_listing(rows)}; use an id prefix"
    )


def _listing(rows: list[tuple[object, ...]]) -> str:
    shown = ", ".join(f"{str(r[0])[:12]} ({r[1] or 'unnamed'}, {str(r[2])[:19]})" for r in rows[:10])
    return shown + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")
