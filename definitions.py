"""The one Dagster Definitions object of the marketplace code location.

Built by `defs()` when Dagster loads the code location (`workspace.yaml`), not at import: the
sensors' intervals are settings, read then (`marketplace dev` sets them in the environment of
the Dagster processes it starts). A bad setting stops the load with the message naming it.
"""

from __future__ import annotations

import dagster as dg

from assets import ASSET_CHECKS, ASSETS, JOBS, RESOURCES
from assets.settlement import make_settlement_schedule
from pipeline.core.config import load_settings
from sensors import RESOURCES as SENSOR_RESOURCES
from sensors import make_sensors


@dg.definitions
def defs() -> dg.Definitions:
    settings = load_settings()
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=JOBS,
        sensors=make_sensors(settings),
        schedules=[make_settlement_schedule(settings)],
        resources={**RESOURCES, **SENSOR_RESOURCES},
        # Also the executor of the implicit asset job the UI's "Materialize" launches: the steps
        # of a run share one process and hand values over in memory (assets/run_values.py).
        executor=dg.in_process_executor,
    )
