"""Evaluation of a model with and without contributions (spec §1).

Metrics, scoring of a batch, claims with leases, and job status.
"""
