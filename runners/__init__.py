"""Workloads that execute MoE training and speak the receipt contract through ``ledger.sdk`` only."""
