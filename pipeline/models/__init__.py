"""Models and what they accept (spec §2.1, §4.1).

The model registry, the data-spec and row validation, baseline estimators.
"""
