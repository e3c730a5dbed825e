"""The partition retirement sensor: deletes the Dagster partitions of settled dataset versions.

Each dataset version is one partition of `dataset_versions`, and the asset page's partition
query reads every partition (docs/scale.md), so partitions are kept for versions that may still
run and for PARTITION_KEEP_HOURS after a version settles (`pipeline.triggers.retirement`), then
deleted. One tick walks the partitions oldest first from its cursor
(`assets.partitions.plan_retirement`) and asks the daemon to delete at most
PARTITION_RETIRE_PER_TICK of them; the cursor goes back to the start once the walk reaches the
newest partition. The runs, materializations and check results of a retired partition stay in
Dagster's event log, and its job, evaluation and ledger rows in the marketplace database.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import dagster as dg

from assets.partitions import dataset_versions, plan_retirement
from pipeline.core.tables import utcnow
from pipeline.services import Services
from pipeline.triggers.retirement import settled_cutoff
from sensors.resources import SensorStore

RETIREMENT_SENSOR = "partition_retirement_sensor"
RETIRE_INTERVAL_SECONDS = 300
# Walking pages is cheap; the bound keeps a tick far from Dagster's sensor timeout.
RETIRE_BUDGET_SECONDS = 20.0


def make_retirement_sensor(
    *,
    name: str = RETIREMENT_SENSOR,
    minimum_interval_seconds: int = RETIRE_INTERVAL_SECONDS,
    time_budget_seconds: float = RETIRE_BUDGET_SECONDS,
    clock: Callable[[], datetime] = utcnow,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Deletes the dataset-version partitions of versions settled more than "
        "PARTITION_KEEP_HOURS ago (history stays in the event log and the marketplace database).",
    )
    def partition_retirement_sensor(
        context: dg.SensorEvaluationContext, sensor_store: SensorStore
    ) -> dg.SensorResult:
        settings = sensor_store.settings()
        if settings.partition_retire_per_tick == 0:
            return dg.SensorResult(skip_reason="PARTITION_RETIRE_PER_TICK is 0")
        with Services(settings) as services:
            plan = plan_retirement(
                context.instance,
                services.db,
                settled_before=settled_cutoff(clock(), settings.partition_keep_hours),
                limit=settings.partition_retire_per_tick,
                cursor=context.cursor,
                time_budget_seconds=time_budget_seconds,
            )
        cursor = plan.cursor or ""
        if not plan.keys:
            return dg.SensorResult(
                skip_reason=f"no settled partition to retire ({plan.scanned} looked at)",
                cursor=cursor,
            )
        context.log.info(
            f"retiring {len(plan.keys)} settled partition(s) of {plan.scanned} looked at: "
            f"{plan.keys[0]} … {plan.keys[-1]}"
        )
        return dg.SensorResult(
            dynamic_partitions_requests=[dataset_versions.build_delete_request(plan.keys)],
            cursor=cursor,
        )

    return partition_retirement_sensor
