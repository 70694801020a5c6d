"""``ledger serve``: a local, read-only web view of a ledger (Starlette + uvicorn, plots with Plotly).

    app      routes: /, /api/table, /receipt/REF, /overlay?id=...&m=...&x=...&smooth=..., /compare?id=A&id=B,
             /live, /live/UUID, /api/live/UUID, /static/plotly.min.js (served from the plotly package: pages render
             offline)
    table    the receipts table: chosen columns (hyperparameters too), a filter per column, refreshed while runs
             are in progress
    overlay  any metric of any number of runs (training, custom, evals, system telemetry), smoothed
    views    what each other page shows, read from the index, the receipt files and the staging area
    pages    the HTML (every user text escaped)
    plots    Plotly figures as JSON

Needs the ``web`` extra (``pip install 'stackreceipt[web]'``).
"""

from ledger.report.web.app import create_app, served_names

__all__ = ["create_app", "served_names"]
