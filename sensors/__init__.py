"""Dagster sensors: dataset arrivals (SQS or the embedded queue), per-model schedules and the
retirement of settled partitions.

Exports used by `definitions.py`: `make_sensors(settings)` and the sensors' RESOURCES. The
sensors are built when the code location loads, not at import: their minimum intervals follow
ARRIVAL_POLL_INTERVAL_SECONDS and SCHEDULER_POLL_INTERVAL_SECONDS of that moment's environment.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from pipeline.core.config import Settings
from sensors.arrivals import make_arrival_sensor
from sensors.partitions import make_retirement_sensor
from sensors.resources import SENSOR_STORE, SensorStore
from sensors.schedules import make_schedule_sensor


def make_sensors(settings: Settings) -> list[dg.SensorDefinition]:
    """The three sensors, polling at the intervals of `settings`."""
    return [
        make_arrival_sensor(minimum_interval_seconds=settings.arrival_poll_interval_seconds),
        make_schedule_sensor(minimum_interval_seconds=settings.scheduler_poll_interval_seconds),
        make_retirement_sensor(),
    ]


RESOURCES: dict[str, Any] = {SENSOR_STORE: SensorStore()}
