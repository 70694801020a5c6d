"""Cluster-optimal planning from the ledger (DESIGN.md, "plan"): fit a sparse-MoE scaling law and an
operator-level performance model on receipts, then pick the geometry and parallel plan that reach the
lowest predicted loss with the compute a cluster can deliver (C_peak x MFU x goodput), as in MOSAIC.

One concept per module:

    hardware      device profiles (B200, H200, H100, this CPU; more from a JSON or TOML file)
    geometry      MoE transformer geometries: parameter counts, sparsity, model FLOPs per token
    perf          the analytic performance model: step time, MFU and memory of a geometry x plan
    calibrate     calibration factors of the performance model fitted on receipts; held-out MAPE
    law           the scaling law L(N_tot, S, D, G), the published default (each coefficient cited), its
                  uncertainty and support, and its JSON form
    fitting       robust non-linear least squares of the law (scipy least_squares, Huber in log space,
                  bootstrap, k-fold held-out error)
    design        identifiability checks of both fits; a degenerate design is refused with the runs that fix it
    observations  what the fits read from receipts (losses, geometries, measured step times)
    plan          the search: geometries x plans under memory, deliverable vs fixed model-FLOP budget, the
                  law's uncertainty propagated by resampling, sensitivity
    api           the library calls behind `ledger fit law`, `ledger fit perf` and `ledger plan`
    ranks         rank correlations (Spearman, Kendall) in numpy
    errors        the bad-input errors of this package

Rendering (terminal, SVG) lives in :mod:`ledger.report.plan` and :mod:`ledger.report.plan_svg`.
Everything here is numpy, scipy and the standard library; nothing imports torch.

May import: ``schemas``, ``ledger.errors``, ``ledger.store``, ``ledger.record``, ``ledger.ingest``, ``ledger.analyses``,
``ledger.replay``. Never ``report`` or ``cli``.
"""
