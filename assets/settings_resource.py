"""The base of the Dagster resources: the settings object from the environment, with pins.

Every field left unset comes from the environment, so production `Definitions` use the resources
with no arguments; tests pin a store with `from_settings(settings, **extra)`.
"""

from __future__ import annotations

from typing import Any, Self

import dagster as dg

from pipeline.core.config import Settings, load_settings

# Settings a deployment (or a test) may pin on a resource instead of the environment.
PINNABLE = (
    "database_url",
    "marketplace_data_dir",
    "service_dataset_bucket",
    "s3_endpoint_url",
    "aws_region",
    "dataset_arrival_sqs_queue_url",
    "evaluation_debounce_window_seconds",
    "enable_evaluation_scheduler",
    "max_sample_size",
    "parallel_workers",
    "batch_size",
    "pipeline_log_level",
    "enable_pii_detection",
    "data_validation_strict",
    "partition_keep_hours",
    "partition_retire_per_tick",
)


class SettingsResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings overrides (unset: from the environment, spec §8 defaults)."""

    database_url: str | None = None
    marketplace_data_dir: str | None = None
    service_dataset_bucket: str | None = None
    s3_endpoint_url: str | None = None
    aws_region: str | None = None
    dataset_arrival_sqs_queue_url: str | None = None
    evaluation_debounce_window_seconds: int | None = None
    enable_evaluation_scheduler: bool | None = None
    max_sample_size: int | None = None
    parallel_workers: int | None = None
    batch_size: int | None = None
    pipeline_log_level: str | None = None
    enable_pii_detection: bool | None = None
    data_validation_strict: bool | None = None
    partition_keep_hours: int | None = None
    partition_retire_per_tick: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> Self:
        values: dict[str, Any] = {name: getattr(settings, name) for name in PINNABLE}
        values["marketplace_data_dir"] = str(settings.marketplace_data_dir)
        values["database_url"] = settings.resolved_database_url
        values.update(extra)
        return cls(**values)

    def settings(self) -> Settings:
        pinned = {name: getattr(self, name) for name in PINNABLE}
        return load_settings(**{k: v for k, v in pinned.items() if v is not None})
