"""The per-model schedule sensor: due `evaluation_schedules` rows → one evaluation run each.

Per-model schedules are created at run time over the API, so they are rows read by a sensor, not
Dagster schedules defined in code. A tick does nothing unless ENABLE_EVALUATION_SCHEDULER is true;
otherwise it fires at most `limit` due schedules (oldest first; the rest on the next tick), each
asking for a run of the model's newest dataset-version partition with
`run_key = schedule-{model}-{scheduled tick}`, and advances `last_run_at`/`next_run_at`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import dagster as dg

from assets.partitions import EVALUATION_JOB, dataset_versions
from pipeline.core.tables import utcnow
from pipeline.triggers.schedules import fire_due_schedules
from sensors.arrivals import evaluation_request
from sensors.resources import SensorStore

SCHEDULE_SENSOR = "evaluation_schedule_sensor"
MAX_DUE_PER_TICK = 200


def make_schedule_sensor(
    *,
    minimum_interval_seconds: int,
    name: str = SCHEDULE_SENSOR,
    limit: int = MAX_DUE_PER_TICK,
    clock: Callable[[], datetime] = utcnow,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=name,
        job_name=EVALUATION_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Fires due per-model evaluation schedules "
        "(only when ENABLE_EVALUATION_SCHEDULER=true).",
    )
    def evaluation_schedule_sensor(
        context: dg.SensorEvaluationContext, sensor_store: SensorStore
    ) -> dg.SensorResult:
        settings = sensor_store.settings()
        if not settings.enable_evaluation_scheduler:
            return dg.SensorResult(skip_reason="ENABLE_EVALUATION_SCHEDULER is false")
        now = clock()
        with sensor_store.open() as tick, tick.db.session() as session:
            runs = fire_due_schedules(session, now, limit)
        requests = []
        for run in runs:
            if run.version is None:
                context.log.warning(f"model {run.model_id} has no dataset version to evaluate")
                continue
            requests.append(
                evaluation_request(run.model_id, [run.version], run.run_key, "schedule")
            )
        if not requests:
            return dg.SensorResult(skip_reason="no schedule due")
        context.log.info(f"fired {len(requests)} due schedule(s)")
        keys = sorted({r.partition_key for r in requests if r.partition_key})
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[dataset_versions.build_add_request(keys)],
        )

    return evaluation_schedule_sensor
