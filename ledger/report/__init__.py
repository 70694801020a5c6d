"""Renderings of a comparison: terminal (rich), Markdown for a review, one self-contained HTML page.

    terminal   ``ledger compare`` on a terminal
    markdown   ``ledger compare --markdown``
    html       ``ledger report --html FILE``: plots as inline SVG, raw tables, no external resources
    svg        the plot primitives of the HTML page (line charts, histograms, heatmaps)
    goodput    the goodput timeline (inline SVG) and the terminal tables of ``ledger goodput`` and ``ledger gate``
    console    ``ledger ls``, ``show`` and ``query`` on a terminal
    fmt        number formatting shared by all of them
    plan       ``ledger fit law``, ``ledger fit perf`` and ``ledger plan`` on a terminal
    plan_svg   ``ledger plan --plot FILE``: predicted loss against sparsity

Nothing here computes a statistic: every figure comes from :mod:`ledger.analyses` (the HTML page takes the
sides' goodputs as input).

May import every package below it (store ... planning), never ``cli``.
"""
