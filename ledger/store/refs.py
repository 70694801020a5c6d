"""Resolving what users type (an id, a unique id prefix, or a name) to one receipt id."""

from __future__ import annotations

import re

import duckdb

from ledger.errors import AmbiguousRef, DamagedReceipt, InvalidRef, UnknownRef

REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+=@-]{0,199}$")
MIN_PREFIX = 4


def check_ref(ref: str) -> str:
    """A ref is an id, a prefix or a name made of safe characters: never a path or a pattern."""
    if not REF_RE.match(ref) or ".." in ref:
        raise InvalidRef(
            f"invalid ref {ref!r}: use an id, an id prefix or a name "
            "(letters, digits and . _ : + = @ -; no '/', no '..', no wildcards)"
        )
    return ref


def resolve(con: duckdb.DuckDBPyConnection, ref: str) -> str:
    """The id of the receipt a ref names.

    - a full id or a unique id prefix (at least 4 hex characters);
    - a name: when several receipts share it and they are attempts of one logical run, the latest
      attempt; otherwise the candidates are listed.
    """
    check_ref(ref)
    if re.fullmatch(r"[0-9a-f]+", ref) and len(ref) >= MIN_PREFIX:
        damaged = con.execute("SELECT id, error FROM damaged WHERE starts_with(id, ?)", [ref]).fetchall()
        healthy = con.execute("SELECT count(*) FROM receipts WHERE starts_with(id, ?)", [ref]).fetchone()
        if damaged and not (healthy and healthy[0]):
            rid, error = damaged[0]
            raise DamagedReceipt(f"receipt {rid[:12]} is damaged ({error}); run `ledger verify {rid[:12]}`")
        rows = con.execute(
            "SELECT id, name, started_at FROM receipts WHERE starts_with(id, ?) ORDER BY started_at", [ref]
        ).fetchall()
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
