"""Dagster sensors: dataset arrivals (SQS or the embedded queue) and per-model schedules.

Exports used by `definitions.py`: SENSORS and their RESOURCES.
"""

from __future__ import annotations

from typing import Any

from pipeline.config import get_settings
from sensors.arrivals import make_arrival_sensor
from sensors.resources import SENSOR_STORE, SensorStore
from sensors.schedules import make_schedule_sensor

SENSORS: list[Any] = [
    make_arrival_sensor(minimum_interval_seconds=get_settings().arrival_poll_interval_seconds),
    make_schedule_sensor(minimum_interval_seconds=get_settings().scheduler_poll_interval_seconds),
]
RESOURCES: dict[str, Any] = {SENSOR_STORE: SensorStore()}
