"""The Starlette application of ``ledger serve``: routes, errors as pages, the bundled Plotly script.

Read-only: every handler opens the index with :func:`ledger.store.index.reader` (a read-only connection)
or reads files; nothing is written. Handlers are plain functions: Starlette runs them in its thread pool.
"""

from __future__ import annotations

from functools import cache

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ledger.errors import BadInput, LedgerError
from ledger.report.web import pages, views
from ledger.store.receipts import Ledger


@cache
def plotly_js() -> bytes:
    """plotly.min.js as shipped inside the plotly Python package."""
    from plotly.offline import get_plotlyjs

    script: str = get_plotlyjs()
    return script.encode("utf-8")


def create_app(ledger: Ledger, poll_s: float = 2.0) -> Starlette:
    """The app over ``ledger``; live pages poll every ``poll_s`` seconds."""

    def guarded(title: str, make: object) -> Response:
        try:
            return HTMLResponse(make())  # type: ignore[operator]
        except LedgerError as exc:
            status = 400 if isinstance(exc, BadInput) else 500
            return HTMLResponse(pages.error_page(title, str(exc)), status_code=status)

    def table(request: Request) -> Response:
        q = request.query_params
        return guarded("receipts", lambda: views.table_page(ledger, q.get("where", ""), q.get("sort") or None,
                                                            q.get("desc") == "1"))

    def receipt(request: Request) -> Response:
        ref = request.path_params["ref"]
        return guarded("receipt", lambda: views.receipt_page(ledger, ref))

    def overlay(request: Request) -> Response:
        refs = request.query_params.getlist("id")
        return guarded("overlay", lambda: views.overlay_page(ledger, refs))

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
        Route("/", table),
        Route("/receipt/{ref}", receipt),
        Route("/overlay", overlay),
        Route("/compare", compare),
        Route("/history", history),
        Route("/live", live_list),
        Route("/live/{ref}", live),
        Route("/api/live/{ref}", live_api),
        Route("/static/plotly.min.js", static_plotly),
    ]
    return Starlette(routes=routes)
