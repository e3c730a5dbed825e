"""The sensors' one resource: settings, database, object store and arrival queue for a tick.

Every field left unset comes from the environment through `pipeline.core.config.Settings`, so the
production `Definitions` use `SensorStore()`; tests build one with `SensorStore.from_settings`.
The parts are a `pipeline.services.Services`, built here, in an entry point.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from assets.settings_resource import SettingsResource
from pipeline.services import Services

SENSOR_STORE = "sensor_store"


class TickStore(Services):
    """What one sensor tick works with; the database is disposed when the tick ends."""

    @property
    def dataset_bucket(self) -> str | None:
        """The bucket arrivals must come from (SQS only; the local queue has no bucket)."""
        return self.settings.service_dataset_bucket if self.queue.source == "sqs" else None


class SensorStore(SettingsResource):
    """Settings, database, object store and arrival queue for sensor ticks."""

    sqs_wait_seconds: int = 1

    @contextmanager
    def open(self) -> Iterator[TickStore]:
        with TickStore(self.settings(), sqs_wait_seconds=self.sqs_wait_seconds) as tick:
            yield tick
