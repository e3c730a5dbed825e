"""Dagster sensors: dataset arrivals (SQS or the embedded queue), per-model schedules and the
retirement of settled partitions.

Exports used by `definitions.py`: SENSORS and their RESOURCES.
"""

from __future__ import annotations

from typing import Any

from pipeline.core.config import get_settings
from sensors.arrivals import make_arrival_sensor
from sensors.partitions import make_retirement_sensor
from sensors.resources import SENSOR_STORE, SensorStore
from sensors.schedules import make_schedule_sensor

SENSORS: list[Any] = [
    make_arrival_sensor(minimum_interval_seconds=get_settings().arrival_poll_interval_seconds),
    make_schedule_sensor(minimum_interval_seconds=get_settings().scheduler_poll_interval_seconds),
    make_retirement_sensor(),
]
RESOURCES: dict[str, Any] = {SENSOR_STORE: SensorStore()}
