"""Evaluation of a model with and without contributions (spec §1).

Metrics, the scorer and fit engine, the datasets a scoring step reads, claims with leases, and
job status. Scoring and valuing a batch is `pipeline.rewards` (above this package).
"""
