"""Analyses: pure functions of receipts and their metric tables (DESIGN.md, "Analyses").

This package is shared by several capabilities; importing it imports nothing (each module is imported
where it is used). One module per concept.

Goodput and quality gates:

    goodput        goodput and badput buckets of a logical run (all attempts): the figures and their computation
    goodput_index  a logical run's tables read from the index, handed to ``goodput.compute``
    km             Kaplan-Meier summaries of costs where some runs never reached a gate (censored)
    gate_spec      which gates: the task's declared gates or an ad-hoc spec (``val/loss<=2.6``), their series
    pricing        prices per device-hour (flag or ``ledger.toml``) and the devices an attempt held
    gates          time, GPU-hours, energy and money to reach each quality gate (renderings: ``report.goodput``)

Compare and attribution (``ledger compare``, ``ledger report``):

    stats            within-run intervals (batch means), the between-run test, robust summaries, outliers,
                     spikes (scipy.stats and arch)
    evidence         between-run evidence: replicates in the ledger and the learned noise floor
    diff             the factor diff of two receipts; the task check
    series           one receipt's metric tables as numpy columns (RunData), loaded from the index
    matched          curves interpolated at common token counts or wall times
    curves           B - A along the matched range, and display smoothing, for plots
    groups           ``--group TAG=VALUE`` (the one resolver, also behind ``gate`` and ``plan --goodput-from``)
                     and the two sides of a comparison; replicate groups
    metrics          what a metric and a provider are, the side-by-side statistics of each metric (the verdict
                     engine), and the plugins found in the other modules
    builtin_metrics  the seven families every comparison reports, and ``compare_all``
    goodput_compare  goodput and time-to-gate rows of ``compare`` (a ``METRICS`` / ``HEADLINES`` module)
    attribution      the ablation graph, paths, Shapley shares, confounded factor sets
    ablations        the missing ablation runs as ready-to-run commands
    nodes            differences between the nodes of a multi-node receipt, by factor
    stragglers       the ranks and nodes that set a synchronous job's pace, and the time lost waiting on them
    compare          ``compare()``: all of the above for two refs, as one ``Comparison``
    power            runs per side for 80% power at the measured noise (the hint of an undecided headline)

Verdicts over time:

    sequential       the always-valid mixture test of ``ledger ab --until-verdict`` (the loop is in ``replay``)
    changepoints     E-divisive means with its permutation test
    history          ``ledger history``: series per configuration, change points, their suspects

Any module of this package may contribute to ``compare`` without editing it: a module-level ``METRICS``
(a list of :class:`ledger.analyses.metrics.MetricProvider`) adds rows to the side-by-side table, and a
module-level ``HEADLINES`` (a list of :class:`ledger.analyses.attribution.Headline`) adds a headline
metric that attribution splits over factors (e.g. time to a quality gate). See
:func:`ledger.analyses.metrics.plugins` and :func:`ledger.analyses.attribution.headlines`.

May import: ``schemas``, the core (``ledger.errors``, ``ledger.kv``, ``ledger.mfu``...), ``ledger.store``,
``ledger.record`` (telemetry facts), ``ledger.ingest``.
Never ``replay``, ``planning``, ``report`` or ``cli``.
"""
