"""Verifying a whole ledger or one ref, including receipts too damaged to be indexed."""

from __future__ import annotations

from ledger.errors import UnknownRef
from ledger.store import index
from ledger.store.integrity import Finding, verify_receipt
from ledger.store.receipts import Ledger
from ledger.store.refs import check_ref, resolve


def resolve_any(ledger: Ledger, ref: str) -> str:
    """Like :func:`ledger.store.refs.resolve`, but an id prefix also matches receipt directories that the index
    refused (damaged ones), so they can be verified by id."""
    check_ref(ref)
    matches = [i for i in ledger.ids() if i.startswith(ref)] if len(ref) >= 4 else []
    if len(matches) == 1:
        return matches[0]
    with index.reader(ledger) as con:
        return resolve(con, ref)


def verify_ledger(ledger: Ledger, ref: str | None = None) -> tuple[int, list[Finding]]:
    """(receipts checked, findings) for one ref or every receipt of the ledger: the files against their
    digests, then the index against the files (rows of every table, the receipts row, the damaged list)."""
    ids = [resolve_any(ledger, ref)] if ref else ledger.ids()
    if ref is None and not ledger.root.is_dir():
        raise UnknownRef(f"no ledger at {ledger.root}")
    findings: list[Finding] = []
    for receipt_id in ids:
        findings.extend(verify_receipt(ledger, receipt_id))
    from ledger.store.agreement import index_findings

    with index.reader(ledger, announce=False) as con:  # the index is derived: it must say what the files say
        findings.extend(index_findings(ledger, con, ids))
        if ref is None and not findings:  # the whole index found true, as it is now (no writer while it is open)
            index.mark_verified(ledger, con)
    return len(ids), findings
