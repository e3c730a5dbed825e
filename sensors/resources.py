"""The sensors' one resource: settings, database, object store and arrival queue for a tick.

Every field left unset comes from the environment through `pipeline.config.Settings`, so the
production `Definitions` use `SensorStore()`; tests build one with `SensorStore.from_settings`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from pipeline.config import Settings, load_settings
from pipeline.db import Database
from pipeline.objectstore import ObjectStore, object_store_from_settings, s3_client
from pipeline.queue import ArrivalQueue, LocalArrivalQueue, SqsArrivalQueue

SENSOR_STORE = "sensor_store"

_OVERRIDES = (
    "database_url",
    "marketplace_data_dir",
    "service_dataset_bucket",
    "s3_endpoint_url",
    "aws_region",
    "dataset_arrival_sqs_queue_url",
    "evaluation_debounce_window_seconds",
    "enable_evaluation_scheduler",
)


@dataclass
class TickStore:
    """What one sensor tick works with; the database is disposed when the tick ends."""

    settings: Settings
    db: Database
    store: ObjectStore
    queue: ArrivalQueue

    @property
    def dataset_bucket(self) -> str | None:
        """The bucket arrivals must come from (SQS only; the local queue has no bucket)."""
        return self.settings.service_dataset_bucket if self.queue.source == "sqs" else None


class SensorStore(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Settings overrides for the sensors (unset: from the environment)."""

    database_url: str | None = None
    marketplace_data_dir: str | None = None
    service_dataset_bucket: str | None = None
    s3_endpoint_url: str | None = None
    aws_region: str | None = None
    dataset_arrival_sqs_queue_url: str | None = None
    evaluation_debounce_window_seconds: int | None = None
    enable_evaluation_scheduler: bool | None = None
    sqs_wait_seconds: int = 1

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> SensorStore:
        values: dict[str, Any] = {name: getattr(settings, name) for name in _OVERRIDES}
        values["marketplace_data_dir"] = str(settings.marketplace_data_dir)
        values.update(extra)
        return cls(**values)

    def settings(self) -> Settings:
        overrides = {name: getattr(self, name) for name in _OVERRIDES}
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})

    @contextmanager
    def open(self) -> Iterator[TickStore]:
        settings = self.settings()
        db = Database.from_settings(settings)
        try:
            queue: ArrivalQueue
            if settings.dataset_arrival_sqs_queue_url:
                queue = SqsArrivalQueue(
                    settings.dataset_arrival_sqs_queue_url,
                    s3_client(settings, "sqs"),
                    wait_seconds=self.sqs_wait_seconds,
                )
            else:
                queue = LocalArrivalQueue(db)
            yield TickStore(settings, db, object_store_from_settings(settings), queue)
        finally:
            db.dispose()
