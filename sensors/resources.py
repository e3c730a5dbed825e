"""The sensors' one resource: settings, database, object store and arrival queue for a tick.

Every field left unset comes from the environment through `pipeline.core.config.Settings`, so the
production `Definitions` use `SensorStore()`; tests build one with `SensorStore.from_settings`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from assets.settings_resource import SettingsResource
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.store.objectstore import ObjectStore, object_store_from_settings
from pipeline.store.queue import ArrivalQueue, arrival_queue_from_settings

SENSOR_STORE = "sensor_store"


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


class SensorStore(SettingsResource):
    """Settings, database, object store and arrival queue for sensor ticks."""

    sqs_wait_seconds: int = 1

    @contextmanager
    def open(self) -> Iterator[TickStore]:
        settings = self.settings()
        db = Database.from_settings(settings)
        try:
            queue = arrival_queue_from_settings(
                settings, db, sqs_wait_seconds=self.sqs_wait_seconds
            )
            yield TickStore(settings, db, object_store_from_settings(settings), queue)
        finally:
            db.dispose()
