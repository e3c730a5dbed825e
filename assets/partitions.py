"""Names shared by assets and sensors: the dataset-version partitions, the job and run tags."""

from __future__ import annotations

import dagster as dg

# One partition per stored dataset version; a MultiPartitionsDefinition would cross every model
# with every version, most of which do not exist.
dataset_versions = dg.DynamicPartitionsDefinition(name="dataset_versions")

EVALUATION_JOB = "evaluation_job"

# Run tags. The concurrency key is what dagster.yaml limits to SCHEDULER_MAX_CONCURRENT.
TAG_CONCURRENCY = "marketplace/evaluation"
TAG_MODEL = "marketplace/model_id"
TAG_TRIGGER = "marketplace/trigger"  # arrival | schedule | manual
TAG_VERSIONS = "marketplace/versions"  # comma-separated versions a debounced run covers


def partition_key(model_id: int, version: str) -> str:
    return f"{model_id}__{version}"


def parse_partition_key(key: str) -> tuple[int, str]:
    model, sep, version = key.partition("__")
    if not sep or not model.isdigit() or not version:
        raise ValueError(f"not a dataset-version partition key: {key!r}")
    return int(model), version
