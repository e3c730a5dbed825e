"""Dagster assets: thin wrappers over `pipeline` functions.

Exports used by `definitions.py`: ASSETS, ASSET_CHECKS, JOBS, RESOURCES.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from assets.datasets import (
    dataset_version,
    dataset_version_readable,
    integrity_report,
    labels_consistent,
    new_rows,
    no_benchmark_copies,
    no_pii,
    pii_report,
    quality_report,
    quality_thresholds,
)
from assets.evaluation import evaluation, improves_model, rewards
from assets.partitions import EVALUATION_JOB, TAG_CONCURRENCY
from assets.resources import resource_defs

ASSETS: list[Any] = [
    dataset_version,
    quality_report,
    pii_report,
    integrity_report,
    evaluation,
    rewards,
]
ASSET_CHECKS: list[Any] = [
    dataset_version_readable,
    quality_thresholds,
    no_pii,
    no_benchmark_copies,
    new_rows,
    labels_consistent,
    improves_model,
]

# One run per dataset-version partition: the six assets and their checks. The partitions are
# the assets' own (`dataset_versions`; dagster 1.13 infers them and deprecates passing them).
# The concurrency tag is what dagster.yaml limits to SCHEDULER_MAX_CONCURRENT runs at once.
# Steps run in the run's one process: each step would otherwise start a process that imports
# pandas, Great Expectations, Presidio and scikit-learn again (seconds each) for work that
# takes milliseconds on a typical contribution; runs of different models still run in parallel.
evaluation_job = dg.define_asset_job(
    EVALUATION_JOB,
    selection=dg.AssetSelection.assets(*ASSETS),
    executor_def=dg.in_process_executor,
    tags={TAG_CONCURRENCY: "true"},
    description="Checks, evaluates and rewards the pending dataset versions of one model.",
)

JOBS: list[Any] = [evaluation_job]
RESOURCES: dict[str, Any] = resource_defs()
