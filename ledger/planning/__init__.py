"""Cluster-optimal planning from the ledger (DESIGN.md, "plan"): fit a sparse-MoE scaling law and an
operator-level performance model on receipts, then pick the geometry and parallel plan that reach the
lowest predicted loss with the compute a cluster can deliver (C_peak x MFU x goodput), as in MOSAIC.

One concept per module:

    hardware      device profiles (B200, H200, H100, this CPU; more from a JSON or TOML file)
    geometry      MoE transformer geometries: parameter counts, sparsity, model FLOPs per token
    perf          the analytic performance model: step time, MFU and memory of a geometry x plan
    calibrate     calibration factors of the performance model fitted on receipts; held-out MAPE
    law           the scaling law L(N_tot, S, D, G), its default parameters and its JSON form
    fitting       robust non-linear least squares of the law (Huber in log space, LM, bootstrap)
    observations  what the fits read from receipts (losses, geometries, measured step times)
    plan          the search: geometries x plans under memory, deliverable vs fixed model-FLOP budget
    ranks         rank correlations (Spearman, Kendall) in numpy
    svg           the loss-against-sparsity plot, drawn by hand
    errors        the bad-input errors of this package

Everything here is numpy and the standard library; nothing imports torch.

May import: ``schemas``, ``ledger.errors``, ``ledger.store``, ``ledger.record``, ``ledger.ingest``, ``ledger.analyses``,
``ledger.replay``. Never ``report`` or ``cli``.
"""
