"""Checks before evaluation (spec §8 quality thresholds).

Quality, PII, benchmark leakage and known rows, label consistency, data-spec compliance.
"""
