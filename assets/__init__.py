"""Dagster assets: thin wrappers over `pipeline` functions.

Exports used by `definitions.py`: ASSETS, ASSET_CHECKS, JOBS, RESOURCES. They are built on first
use (PEP 562): the webserver and the daemon import `assets.run_queue` for the instance's run
coordinator, and must not pay for the assets' imports (pandas, scikit-learn: seconds).
"""

from __future__ import annotations

from typing import Any


def _build() -> dict[str, Any]:
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
    from assets.evaluation import evaluation_and_rewards
    from assets.partitions import EVALUATION_JOB, TAG_CONCURRENCY
    from assets.resources import resource_defs
    from assets.settlement import SETTLEMENT_ASSET_JOB, settlement, settlement_reconciles

    assets: list[Any] = [
        dataset_version,
        quality_report,
        pii_report,
        integrity_report,
        evaluation_and_rewards,
    ]
    # `improves_model` is a check spec of `evaluation_and_rewards` itself.
    checks: list[Any] = [
        dataset_version_readable,
        quality_thresholds,
        no_pii,
        no_benchmark_copies,
        new_rows,
        labels_consistent,
    ]
    # One run per dataset-version partition: the six assets and their checks. The partitions
    # are the assets' own (`dataset_versions`; dagster 1.13 infers them and deprecates passing
    # them). The concurrency tag is what dagster.yaml limits to SCHEDULER_MAX_CONCURRENT runs at
    # once; the per-model tag is added to every run by `assets.run_queue`. Steps run in the
    # run's one process: each step would otherwise start a process that imports pandas, Great
    # Expectations, Presidio and scikit-learn again (seconds each) for work that takes
    # milliseconds on a typical contribution, and the steps hand values over in memory
    # (`assets.run_values`); runs of different models still run in parallel.
    evaluation_job = dg.define_asset_job(
        EVALUATION_JOB,
        selection=dg.AssetSelection.assets(*assets),
        executor_def=dg.in_process_executor,
        tags={TAG_CONCURRENCY: "true"},
        description="Checks, evaluates and rewards the pending dataset versions of one model.",
    )
    return {
        "ASSETS": [*assets, settlement],
        "ASSET_CHECKS": [*checks, settlement_reconciles],
        "JOBS": [evaluation_job, SETTLEMENT_ASSET_JOB],
        "RESOURCES": resource_defs(),
    }


_BUILT: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name not in ("ASSETS", "ASSET_CHECKS", "JOBS", "RESOURCES"):
        raise AttributeError(f"module 'assets' has no attribute {name!r}")
    if not _BUILT:
        _BUILT.update(_build())
    return _BUILT[name]
