"""The one Dagster Definitions object of the marketplace code location."""

from __future__ import annotations

import dagster as dg

from assets import ASSET_CHECKS, ASSETS, JOBS, RESOURCES
from sensors import RESOURCES as SENSOR_RESOURCES
from sensors import SENSORS

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=ASSET_CHECKS,
    jobs=JOBS,
    sensors=SENSORS,
    resources={**RESOURCES, **SENSOR_RESOURCES},
)
