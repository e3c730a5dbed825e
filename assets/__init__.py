"""Dagster assets: thin wrappers over `pipeline` functions.

Exports used by `definitions.py`: ASSETS, ASSET_CHECKS, JOBS, RESOURCES.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from assets.datasets import (
    dataset_version,
    dataset_version_readable,
    no_pii,
    pii_report,
    quality_report,
    quality_thresholds,
)
from assets.evaluation import evaluation, rewards
from assets.partitions import EVALUATION_JOB, TAG_CONCURRENCY
from assets.resources import resource_defs

ASSETS: list[Any] = [dataset_version, quality_report, pii_report, evaluation, rewards]
ASSET_CHECKS: list[Any] = [dataset_version_readable, quality_thresholds, no_pii]

# One run per dataset-version partition: the five assets and their checks. The partitions are
# the assets' own (`dataset_versions`; dagster 1.13 infers them and deprecates passing them).
# The concurrency tag is what dagster.yaml limits to SCHEDULER_MAX_CONCURRENT runs at once.
evaluation_job = dg.define_asset_job(
    EVALUATION_JOB,
    selection=dg.AssetSelection.assets(*ASSETS),
    tags={TAG_CONCURRENCY: "true"},
    description="Checks, evaluates and rewards the pending dataset versions of one model.",
)

JOBS: list[Any] = [evaluation_job]
RESOURCES: dict[str, Any] = resource_defs()
