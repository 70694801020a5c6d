"""Every rendering: the terminal (rich), Markdown for a review, self-contained HTML, SVG, the web view.

    terminal   ``ledger compare`` on a terminal
    layout     tables that never break a word inside a cell, else a block per row (80 columns, piped output)
    intervals  an interval too wide to mean anything said as "too few runs (~N per side)"
    failure    why a failed run failed (``Receipt.failure``), for ``show`` and the web view's receipt page
    notes      the team's notes and archive flags, for ``show``, ``compare`` and the web view
    progress_bar  the library's long tasks (:mod:`ledger.progress`) as rich bars on a terminal's stderr
    markdown   ``ledger compare --markdown``
    html       ``ledger report --html FILE``: plots as inline SVG, raw tables, no external resources
    svg        the plot primitives of the HTML page (line charts, histograms, heatmaps)
    goodput    the goodput timeline (inline SVG) and the terminal tables of ``ledger goodput`` and ``ledger gate``
    console    ``ledger ls``, ``show`` and ``query`` on a terminal
    fmt        number formatting shared by all of them
    plan       ``ledger fit law``, ``ledger fit perf`` and ``ledger plan`` on a terminal
    plan_svg   ``ledger plan --plot FILE``: predicted loss against sparsity
    safe       user text made safe for each place it is rendered (terminal, Markdown, HTML, SVG)
    watch      ``ledger watch REF``: the live steps of a run in progress
    web/       ``ledger serve``: the local, read-only web view (Starlette, Plotly)

Nothing here computes a statistic: every figure comes from :mod:`ledger.analyses` (the HTML page takes the
sides' goodputs as input).

May import every package below it (store ... planning), never ``cli``.
"""
