"""The dataset-arrival sensor: queue → recorded arrivals → partitions → debounced evaluation runs.

One tick:
1. reads at most `max_messages` messages (SQS, or the embedded queue table) within a time budget
   well under Dagster's tick timeout, records each arrival once and deletes a message only after
   its records are committed (malformed messages and test events are logged and deleted);
2. adds each newly recorded arrival to the debounce cursor, and any recorded arrival that no run
   has been requested for but the cursor does not hold (a tick that failed after committing
   loses its cursor update; the database still knows);
3. releases the batches whose window has passed (trailing edge from the first arrival, see
   `pipeline.triggers.debounce`): one run per model for its newest version, `run_key` derived from
   the batch, the arrival rows marked with that run key;
4. gives back the jobs whose claim expired (their run died:
   `pipeline.evaluation.leases.expire_leases`) and requests one run per model with jobs given back,
   `run_key` derived from those jobs and their expired-claim counts, so the request is made once;
5. returns the new partitions, the run requests and the cursor JSON.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import dagster as dg

from assets.partitions import (
    EVALUATION_JOB,
    TAG_CONCURRENCY,
    TAG_MODEL,
    TAG_TRIGGER,
    TAG_VERSIONS,
    dataset_versions,
    partition_key,
)
from pipeline.core.db import Database
from pipeline.core.tables import utcnow
from pipeline.evaluation.leases import RequeuedJob, expire_leases, requeued_jobs
from pipeline.triggers.arrival_rows import mark_run_key, pending_arrivals
from pipeline.triggers.debounce import DebounceCursor, batch_run_key
from pipeline.triggers.drain import DrainReport, drain_queue
from sensors.resources import SensorStore, TickStore

ARRIVAL_SENSOR = "dataset_arrival_sensor"
MAX_MESSAGES_PER_TICK = 500
TICK_BUDGET_SECONDS = 20.0
RECONCILE_LIMIT = 1000


def evaluation_request(
    model_id: int, versions: list[str], run_key: str, trigger: str
) -> dg.RunRequest:
    """The run the evaluation job gets for a model: its newest version's partition."""
    return dg.RunRequest(
        job_name=EVALUATION_JOB,
        partition_key=partition_key(model_id, versions[-1]),
        run_key=run_key,
        tags={
            TAG_CONCURRENCY: "true",
            TAG_MODEL: str(model_id),
            TAG_TRIGGER: trigger,
            TAG_VERSIONS: ",".join(versions),
        },
    )


def retry_run_key(model_id: int, jobs: Sequence[RequeuedJob]) -> str:
    """One key per model and set of (job, expired claims): a tick that sees the same requeued
    jobs again requests nothing new; a job requeued a second time gets a new key."""
    ordered = sorted(f"{job.job_id}:{job.expired_claims}" for job in jobs)
    digest = hashlib.sha256(",".join(ordered).encode()).hexdigest()[:12]
    return f"retry-{model_id}-{digest}"


def retry_requests(db: Database) -> list[dg.RunRequest]:
    """One run per model whose jobs were given back after an expired claim."""
    by_model: dict[int, list[RequeuedJob]] = {}
    for job in requeued_jobs(db):
        by_model.setdefault(job.model_id, []).append(job)
    return [
        evaluation_request(
            model_id, [job.version for job in jobs], retry_run_key(model_id, jobs), "arrival"
        )
        for model_id, jobs in sorted(by_model.items())
    ]


@dataclass(frozen=True)
class TickLimits:
    """How much one tick may read: messages, and seconds well under Dagster's tick timeout."""

    max_messages: int = MAX_MESSAGES_PER_TICK
    time_budget_seconds: float = TICK_BUDGET_SECONDS


def read_cursor(context: dg.SensorEvaluationContext) -> DebounceCursor:
    try:
        return DebounceCursor.from_json(context.cursor)
    except ValueError as exc:
        # The database still holds every pending arrival: start over from it.
        context.log.warning(f"discarding unreadable cursor: {exc}")
        return DebounceCursor()


def record_arrivals(
    tick: TickStore, cursor: DebounceCursor, now: datetime, limits: TickLimits
) -> tuple[DrainReport, set[str]]:
    """Steps 1 and 2: drain the queue into the cursor, then add the recorded arrivals with no
    run requested that the cursor lost. Returns the report and the partitions to add."""
    report = drain_queue(
        tick.queue,
        tick.db,
        tick.store,
        now=now,
        max_messages=limits.max_messages,
        time_budget_seconds=limits.time_budget_seconds,
        expected_bucket=tick.dataset_bucket,
    )
    new_partitions: set[str] = set()
    for arrival in report.recorded:
        assert arrival.model_id is not None and arrival.version is not None
        cursor.add(arrival.model_id, arrival.version, arrival.received_at or now)
        new_partitions.add(partition_key(arrival.model_id, arrival.version))
    with tick.db.session() as session:
        for pending in pending_arrivals(session, RECONCILE_LIMIT):
            if not cursor.contains(pending.model_id, pending.version):
                cursor.add(pending.model_id, pending.version, pending.received_at)
                new_partitions.add(partition_key(pending.model_id, pending.version))
    return report, new_partitions


def release_due(
    tick: TickStore, cursor: DebounceCursor, now: datetime
) -> tuple[list[dg.RunRequest], set[str]]:
    """Step 3: one run per model whose window has passed, its arrivals marked with the run key.

    Returns the requests and their partitions (harmless when they exist, needed if an earlier
    add was lost)."""
    requests: list[dg.RunRequest] = []
    partitions: set[str] = set()
    due = cursor.due(now, tick.settings.evaluation_debounce_window_seconds)
    with tick.db.session() as session:
        for model_id in due:
            versions = cursor.pending[model_id].versions
            run_key = batch_run_key(model_id, versions)
            mark_run_key(session, model_id, versions, run_key)
            requests.append(evaluation_request(model_id, versions, run_key, "arrival"))
            partitions.update(partition_key(model_id, v) for v in versions)
    for model_id in due:
        cursor.pop(model_id)
    return requests, partitions


def arrival_tick(
    context: dg.SensorEvaluationContext,
    sensor_store: SensorStore,
    now: datetime,
    limits: TickLimits,
) -> dg.SensorResult:
    """One tick of the arrival sensor (see the module doc for its steps)."""
    cursor = read_cursor(context)
    with sensor_store.open() as tick:
        report, new_partitions = record_arrivals(tick, cursor, now, limits)
        run_requests, released = release_due(tick, cursor, now)
        new_partitions |= released
        for expired in expire_leases(tick.db, tick.settings.claim_lease_seconds, now=now):
            context.log.warning(f"model {expired.model_id} {expired.version}: {expired.reason}")
        run_requests.extend(retry_requests(tick.db))
    if report.received:
        context.log.info(f"arrival queue ({tick.queue.source}): {report.summary()}")
    partition_requests = (
        [dataset_versions.build_add_request(sorted(new_partitions))] if new_partitions else []
    )
    return dg.SensorResult(
        run_requests=run_requests,
        skip_reason=None
        if run_requests
        else f"no batch due ({len(cursor.pending)} model(s) pending)",
        dynamic_partitions_requests=partition_requests,
        cursor=cursor.to_json(),
    )


def make_arrival_sensor(
    *,
    name: str = ARRIVAL_SENSOR,
    minimum_interval_seconds: int = 30,
    max_messages: int = MAX_MESSAGES_PER_TICK,
    time_budget_seconds: float = TICK_BUDGET_SECONDS,
    clock: Callable[[], datetime] = utcnow,
) -> dg.SensorDefinition:
    limits = TickLimits(max_messages, time_budget_seconds)

    @dg.sensor(
        name=name,
        job_name=EVALUATION_JOB,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Records dataset arrivals from the arrival queue and requests one "
        "evaluation run per model per debounce window.",
    )
    def dataset_arrival_sensor(
        context: dg.SensorEvaluationContext, sensor_store: SensorStore
    ) -> dg.SensorResult:
        return arrival_tick(context, sensor_store, clock(), limits)

    return dataset_arrival_sensor
