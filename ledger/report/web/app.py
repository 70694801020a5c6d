"""The Starlette application of ``ledger serve``: routes, errors as pages, the bundled Plotly script.

Read-only: every handler opens the index with :func:`ledger.store.index.reader` (a read-only connection)
or reads files; nothing is written. Handlers are plain functions: Starlette runs them in its thread pool.

Trusted only when true: a request whose ``Host`` is not a name the view is served as (the local names, the
``--host`` address, ``--allow-host`` names) is refused with 400 by Starlette's ``TrustedHostMiddleware`` (a page
that rebinds its own DNS name to this machine cannot read the ledger through the user's browser); a receipt
whose files or index rows disagree is refused with 409 (:mod:`ledger.report.web.views`); and while the index is
unverified (:func:`ledger.store.index.unverified`) every page says so at its top.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from functools import cache

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ledger.errors import BadInput, DamagedReceipt, LedgerError
from ledger.report.web import overlay, pages, table, views
from ledger.store import index
from ledger.store.receipts import Ledger


@cache
def plotly_js() -> bytes:
    """plotly.min.js as shipped inside the plotly Python package."""
    from plotly.offline import get_plotlyjs

    script: str = get_plotlyjs()
    return script.encode("utf-8")


LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""Host names that always reach this machine's loopback: the view answers to them wherever it listens."""
WILDCARDS = ("0.0.0.0", "::", "")


def served_names(host: str = "127.0.0.1", allow: Sequence[str] = ()) -> list[str]:
    """The ``Host`` names the view answers to when it listens on ``host``: the local names, the address itself
    (an IPv6 one in brackets, as a ``Host`` header carries it), for a wildcard address this machine's host name
    and fully qualified name, and the names in ``allow`` (``--allow-host``: a DNS name or a proxy's)."""
    names = list(LOCAL_NAMES)
    if host in WILDCARDS:
        names += [socket.gethostname(), socket.getfqdn()]
    else:
        names.append(host)
    names += allow
    return list(dict.fromkeys(f"[{n}]" if ":" in n and not n.startswith("[") else n.lower() for n in names if n))


def create_app(ledger: Ledger, poll_s: float = 2.0, hosts: Sequence[str] = LOCAL_NAMES) -> Starlette:
    """The app over ``ledger``; live pages poll every ``poll_s`` seconds; requests for another ``Host`` than
    ``hosts`` (:func:`served_names`) are refused with 400."""

    def guarded(title: str, make: object) -> Response:
        try:
            page: str = make()  # type: ignore[operator]
        except LedgerError as exc:
            status = 400 if isinstance(exc, BadInput) else 409 if isinstance(exc, DamagedReceipt) else 500
            return HTMLResponse(_said(pages.error_page(title, str(exc))), status_code=status)
        return HTMLResponse(_said(page))

    def _said(page: str) -> str:
        reason = index.unverified(ledger)
        return page if reason is None else pages.unverified(page, reason)

    def receipts_table(request: Request) -> Response:
        return guarded("receipts", lambda: table.table_page(ledger, request.query_params, int(poll_s * 1000)))

    def table_api(request: Request) -> Response:
        q = request.query_params
        state = table.refresh_state(ledger, table.TableQuery.from_params(q), q.get("since"))
        return JSONResponse(state, headers={"Cache-Control": "no-store"})

    def receipt(request: Request) -> Response:
        ref = request.path_params["ref"]
        return guarded("receipt", lambda: views.receipt_page(ledger, ref))

    def overlay_runs(request: Request) -> Response:
        q = request.query_params
        refs, chosen = q.getlist("id"), [m for m in q.getlist("m") if m]

        def make() -> str:
            try:
                smooth = float(q.get("smooth") or 0)
            except ValueError as exc:
                raise BadInput(f"smooth must be a number from 0 to 0.99, not {q.get('smooth')!r}") from exc
            return overlay.overlay_page(ledger, refs, chosen, q.get("x") or "auto", smooth)

        return guarded("overlay", make)

    def compare(request: Request) -> Response:
        q = request.query_params
        refs = q.getlist("id") or [r for r in (q.get("a"), q.get("b")) if r]
        return guarded("compare", lambda: views.compare_page(ledger, refs))

    def history(request: Request) -> Response:
        from ledger.report.web.history import history_page

        q = request.query_params
        return guarded("history", lambda: history_page(ledger, q.get("where", ""), q.get("metric", "")))

    def live_list(request: Request) -> Response:
        return guarded("runs in progress", lambda: views.live_list_page(ledger))

    def live(request: Request) -> Response:
        ref = request.path_params["ref"]
        return guarded("run in progress", lambda: views.live_page(ledger, ref, int(poll_s * 1000)))

    def live_api(request: Request) -> Response:
        try:
            state = views.live_state(ledger, request.path_params["ref"])
        except LedgerError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(state, headers={"Cache-Control": "no-store"})

    def static_plotly(request: Request) -> Response:
        return Response(plotly_js(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    routes = [
        Route("/", receipts_table),
        Route("/api/table", table_api),
        Route("/receipt/{ref}", receipt),
        Route("/overlay", overlay_runs),
        Route("/compare", compare),
        Route("/history", history),
        Route("/live", live_list),
        Route("/live/{ref}", live),
        Route("/api/live/{ref}", live_api),
        Route("/static/plotly.min.js", static_plotly),
    ]
    trusted = Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts), www_redirect=False)
    return Starlette(routes=routes, middleware=[trusted])
