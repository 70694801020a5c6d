"""``ledger serve``: a local, read-only web view of a ledger (Starlette + uvicorn, plots with Plotly).

    app      routes: /, /receipt/REF, /overlay?id=..., /compare?id=A&id=B, /live, /live/UUID, /api/live/UUID,
             /static/plotly.min.js (served from the plotly package: pages render offline)
    views    what each page shows, read from the index, the receipt files and the staging area
    pages    the HTML (every user text escaped)
    plots    Plotly figures as JSON

Needs the ``web`` extra (``pip install 'stackreceipt[web]'``).
"""

from ledger.report.web.app import create_app, served_names

__all__ = ["create_app", "served_names"]
