"""The code location `bench/partitions.py` runs: the project's own assets, checks, job, resources
and arrival sensor; only the sensor's interval differs (1 s instead of 30 s, so a bench tick
does not wait half a minute)."""

from __future__ import annotations

import dagster as dg

from assets import ASSET_CHECKS, ASSETS, JOBS, RESOURCES
from sensors import RESOURCES as SENSOR_RESOURCES
from sensors.arrivals import make_arrival_sensor

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=ASSET_CHECKS,
    jobs=JOBS,
    sensors=[make_arrival_sensor(minimum_interval_seconds=1)],
    resources={**RESOURCES, **SENSOR_RESOURCES},
)
