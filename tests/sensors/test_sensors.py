"""Sensors (spec §6): arrivals from moto's S3 → SQS over HTTP and from the embedded queue,
debounced into runs; per-model schedules with a frozen clock; the Dagster instance configs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import dagster as dg
import pytest
from sqlalchemy import func, select

from assets.partitions import (
    EVALUATION_JOB,
    TAG_CONCURRENCY,
    TAG_MODEL,
    TAG_TRIGGER,
    TAG_VERSIONS,
)
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import ArrivalEvent, DatasetArrival, DatasetVersion, Model
from pipeline.intake.contributions import ContributionRequest, submit_contribution
from pipeline.models.registry import allocate_version
from pipeline.store.objectstore import LocalObjectStore, StoredObject, dataset_key
from pipeline.store.queue import (
    LocalArrivalQueue,
    SqsArrivalQueue,
    enqueue_local_arrival,
    s3_event_body,
)
from pipeline.triggers.debounce import batch_run_key
from pipeline.triggers.schedules import create_schedule, get_schedule
from sensors.arrivals import make_arrival_sensor
from sensors.resources import SENSOR_STORE, SensorStore
from sensors.schedules import make_schedule_sensor
from tests.support.scheduling import add_benchmark, add_version, demo_model_id


class Clock:
    """A frozen clock the sensors read; tests move it by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture(scope="module")
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def tick(
    sensor: dg.SensorDefinition,
    store: SensorStore,
    instance: dg.DagsterInstance,
    cursor: str | None = None,
) -> dg.SensorResult:
    with dg.build_sensor_context(
        cursor=cursor, instance=instance, resources={SENSOR_STORE: store}
    ) as context:
        result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def run_requests(result: dg.SensorResult) -> Sequence[dg.RunRequest]:
    """A tick's run requests (typed optional; SensorResult makes a missing list [])."""
    assert result.run_requests is not None
    return result.run_requests


def added_partitions(result: dg.SensorResult) -> list[str]:
    requests = result.dynamic_partitions_requests
    assert requests is not None  # typed optional; SensorResult makes a missing list []
    return [key for request in requests for key in request.partition_keys]


def arrivals(db: Database) -> list[DatasetArrival]:
    with db.session() as session:
        return list(session.scalars(select(DatasetArrival).order_by(DatasetArrival.received_at)))


# --- S3 → SQS → sensor ------------------------------------------------------------------------


@pytest.fixture
def s3(s3_resources: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=s3_resources["endpoint"], region_name="us-east-1")


@pytest.fixture
def sqs(s3_resources: dict[str, str]) -> Any:
    return boto3.client("sqs", endpoint_url=s3_resources["endpoint"], region_name="us-east-1")


def queue_depth(sqs: Any, queue_url: str) -> int:
    """Messages left on the queue, visible or in flight."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


@pytest.fixture
def s3_store(s3_settings: Settings) -> SensorStore:
    return SensorStore.from_settings(s3_settings, sqs_wait_seconds=0)


def test_tick_queue_follows_the_settings(s3_store: SensorStore, settings: Settings) -> None:
    with s3_store.open() as tick:
        assert isinstance(tick.queue, SqsArrivalQueue)
        assert tick.queue.wait_seconds == 0
        assert tick.dataset_bucket == tick.settings.service_dataset_bucket
    with SensorStore.from_settings(settings).open() as tick:
        assert isinstance(tick.queue, LocalArrivalQueue)
        assert tick.dataset_bucket is None


def test_hundred_arrivals_in_one_window_make_one_run(
    s3: Any, sqs: Any, s3_resources: dict[str, str], s3_settings: Settings,
    s3_store: SensorStore, db: Database, clock: Clock, instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    model = demo_model_id(db)
    versions = [f"v{n}" for n in range(1, 101)]
    for version in versions:
        s3.put_object(
            Bucket=s3_resources["bucket"],
            Key=dataset_key(model, version, "data.csv"),
            Body=f"a,churned\n{version},0\n".encode(),
        )
    # The tick's time budget is not what this test is about: 100 messages through moto on a
    # loaded CI machine can take longer than the default 20 s, which left some for a later tick.
    sensor = make_arrival_sensor(clock=clock, time_budget_seconds=600)
    first_seen = clock.now

    result = tick(sensor, s3_store, instance)
    assert result.run_requests == []
    assert sorted(added_partitions(result)) == sorted(f"{model}__{v}" for v in versions)
    cursor = json.loads(result.cursor or "")
    assert cursor == {
        "pending": {
            str(model): {
                "first_seen": first_seen.isoformat().replace("+00:00", "Z"),
                "last_seen": first_seen.isoformat().replace("+00:00", "Z"),
                "versions": versions,
            }
        }
    }
    assert len(arrivals(db)) == 100
    assert queue_depth(sqs, s3_resources["queue_url"]) == 0  # the s3:TestEvent went too

    clock.advance(299)
    quiet = tick(sensor, s3_store, instance, result.cursor)
    assert quiet.run_requests == [] and json.loads(quiet.cursor or "") == cursor

    clock.advance(1)
    released = tick(sensor, s3_store, instance, quiet.cursor)
    [request] = run_requests(released)
    expected_key = batch_run_key(model, versions)
    assert request.job_name == EVALUATION_JOB
    assert request.partition_key == f"{model}__v100"
    assert request.run_key == expected_key
    assert request.tags == {
        TAG_CONCURRENCY: "true",
        TAG_MODEL: str(model),
        TAG_TRIGGER: "arrival",
        TAG_VERSIONS: ",".join(versions),
    }
    assert json.loads(released.cursor or "") == {"pending": {}}
    assert {a.run_key for a in arrivals(db)} == {expected_key}

    # Re-evaluating the same tick (its cursor update lost) asks for the same run key again.
    again = tick(sensor, s3_store, instance, quiet.cursor)
    assert [r.run_key for r in run_requests(again)] == [expected_key]


def test_duplicate_delivery_records_nothing_new(
    s3: Any, sqs: Any, s3_resources: dict[str, str], s3_store: SensorStore,
    db: Database, clock: Clock, instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    model = demo_model_id(db)
    key = dataset_key(model, "v1", "data.csv")
    s3.put_object(Bucket=s3_resources["bucket"], Key=key, Body=b"a\n1\n")
    sensor = make_arrival_sensor(clock=clock)
    first = tick(sensor, s3_store, instance)
    assert added_partitions(first) == [f"{model}__v1"]

    body = s3_event_body(s3_resources["bucket"], StoredObject(key, "", 4, ""))
    sqs.send_message(QueueUrl=s3_resources["queue_url"], MessageBody=body)
    sqs.send_message(QueueUrl=s3_resources["queue_url"], MessageBody=body)
    second = tick(sensor, s3_store, instance, first.cursor)
    assert added_partitions(second) == [] and second.run_requests == []
    assert second.cursor == first.cursor
    assert len(arrivals(db)) == 1
    assert queue_depth(sqs, s3_resources["queue_url"]) == 0


def test_malformed_messages_and_test_events_are_deleted(
    sqs: Any, s3_resources: dict[str, str], s3_store: SensorStore,
    db: Database, clock: Clock, instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    url = s3_resources["queue_url"]
    for body in [
        "not json",
        "[1, 2]",
        '{"Records": "nope"}',
        '{"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}',
        json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"}),
        s3_event_body(s3_resources["bucket"], StoredObject("datasets/4242/v1/x.csv", "", 1, "")),
    ]:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    result = tick(make_arrival_sensor(clock=clock), s3_store, instance)
    assert result.run_requests == [] and added_partitions(result) == []
    assert queue_depth(sqs, url) == 0  # nothing is retried forever
    assert arrivals(db) == []


def test_upload_whose_commit_is_in_flight_stays_on_the_queue(
    s3: Any, sqs: Any, s3_resources: dict[str, str], s3_store: SensorStore,
    db: Database, clock: Clock, instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    model = demo_model_id(db)
    _, version = allocate_version(db, model)  # the API allocated it and wrote the object...
    s3.put_object(
        Bucket=s3_resources["bucket"], Key=dataset_key(model, version, "rows.parquet"), Body=b"x"
    )
    result = tick(make_arrival_sensor(clock=clock), s3_store, instance)  # ...not yet committed
    assert added_partitions(result) == [] and arrivals(db) == []
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 0
    assert queue_depth(sqs, s3_resources["queue_url"]) == 1  # deferred, not deleted


def test_external_object_gets_a_dataset_version_with_store_facts(
    s3: Any, s3_resources: dict[str, str], s3_store: SensorStore,
    db: Database, clock: Clock, instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    model = demo_model_id(db)
    key = dataset_key(model, "v3", "data.parquet")
    s3.put_object(Bucket=s3_resources["bucket"], Key=key, Body=b"PAR1data")
    tick(make_arrival_sensor(clock=clock), s3_store, instance)
    with db.session() as session:
        row = session.scalar(select(DatasetVersion).where(DatasetVersion.object_key == key))
        assert row is not None
        assert (row.kind, row.size_bytes, row.uri) == (
            "external", 8, f"s3://{s3_resources['bucket']}/{key}",
        )  # fmt: skip
        assert session.scalar(select(Model.last_version).where(Model.id == model)) == 3


# --- the embedded queue -----------------------------------------------------------------------


def test_local_queue_feeds_the_same_code(
    settings: Settings, db: Database, clock: Clock, instance: dg.DagsterInstance
) -> None:
    model = demo_model_id(db)
    with db.session() as session:
        example = dict(session.get_one(Model, model).example_row)
    store = LocalObjectStore(settings.objects_dir)
    job = submit_contribution(
        db, store, ContributionRequest(model, None, [example]),
        submitter_id="alice", local_queue=True,
    )  # fmt: skip
    sensor_store = SensorStore.from_settings(settings, evaluation_debounce_window_seconds=0)

    result = tick(make_arrival_sensor(clock=clock), sensor_store, instance)
    [request] = run_requests(result)
    assert request.partition_key == f"{model}__v1"
    assert request.tags[TAG_VERSIONS] == "v1"
    assert added_partitions(result) == [f"{model}__v1"]
    [arrival] = arrivals(db)
    assert (arrival.source, arrival.run_key) == ("local", request.run_key)
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(ArrivalEvent)) == 0
        version = session.get_one(DatasetVersion, job.dataset_version_id)
        assert (arrival.sha256, arrival.uri) == (version.sha256, version.uri)


def test_ticks_are_bounded_and_a_lost_cursor_is_rebuilt(
    settings: Settings, db: Database, clock: Clock, instance: dg.DagsterInstance
) -> None:
    model = demo_model_id(db)
    versions = [add_version(db, model) for _ in range(12)]
    with db.session() as session:
        for version in versions:
            key = dataset_key(model, version, "data.csv")
            enqueue_local_arrival(session, StoredObject(key, "", 10, ""))
    sensor_store = SensorStore.from_settings(settings, evaluation_debounce_window_seconds=60)
    sensor = make_arrival_sensor(clock=clock, max_messages=5)

    counts = []
    cursor = None
    for _ in range(3):
        result = tick(sensor, sensor_store, instance, cursor)
        counts.append(len(added_partitions(result)))
        cursor = result.cursor
    assert counts == [5, 5, 2]

    # The cursor is lost or unreadable (a tick failed after committing): the database knows.
    clock.advance(60)
    rebuilt = tick(sensor, sensor_store, instance, cursor="{not a cursor")
    [request] = run_requests(rebuilt)
    assert request.run_key == batch_run_key(model, versions)
    assert json.loads(rebuilt.cursor or "") == {"pending": {}}


# --- schedules --------------------------------------------------------------------------------


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2025, 3, 1, hour, minute, tzinfo=UTC)


@pytest.fixture
def scheduled_model(db: Database) -> tuple[int, str]:
    model = demo_model_id(db)
    add_benchmark(db, model)
    latest = add_version(db, model, kind="contribution")
    with db.session() as session:
        create_schedule(session, model, "0 * * * *", now=at(9, 30))  # next 10:00
    return model, latest


def test_schedule_sensor_does_nothing_while_the_flag_is_off(
    settings: Settings, db: Database, scheduled_model: tuple[int, str],
    instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    sensor = make_schedule_sensor(minimum_interval_seconds=60, clock=Clock(at(12)))
    result = tick(sensor, SensorStore.from_settings(settings), instance)
    assert result.run_requests == [] and result.skip_reason
    with db.session() as session:
        assert get_schedule(session, scheduled_model[0]).next_run_at == at(10)


def test_schedule_sensor_fires_due_schedules_once(
    settings: Settings, db: Database, scheduled_model: tuple[int, str],
    instance: dg.DagsterInstance,
) -> None:  # fmt: skip
    model, latest = scheduled_model
    store = SensorStore.from_settings(settings, enable_evaluation_scheduler=True)
    clock = Clock(at(9, 59))
    sensor = make_schedule_sensor(minimum_interval_seconds=60, clock=clock)
    assert tick(sensor, store, instance).run_requests == []

    clock.now = at(15, 20)  # down since before 10:00: five ticks missed
    result = tick(sensor, store, instance)
    [request] = run_requests(result)
    assert request.run_key == f"schedule-{model}-20250301T100000Z"
    assert request.partition_key == f"{model}__{latest}"
    assert request.tags[TAG_TRIGGER] == "schedule"
    assert request.tags[TAG_CONCURRENCY] == "true"
    assert added_partitions(result) == [f"{model}__{latest}"]
    with db.session() as session:
        schedule = get_schedule(session, model)
        assert (schedule.last_run_at, schedule.next_run_at) == (at(15, 20), at(16))

    clock.now = at(15, 21)
    assert tick(sensor, store, instance).run_requests == []
    clock.now = at(16)
    assert [r.run_key for r in run_requests(tick(sensor, store, instance))] == [
        f"schedule-{model}-20250301T160000Z"
    ]


def test_sensor_definitions() -> None:
    import definitions
    from pipeline.core.config import get_settings

    sensors = definitions.defs().sensors
    assert sensors is not None
    by_name = {s.name: s for s in sensors}
    assert set(by_name) == {
        "dataset_arrival_sensor",
        "evaluation_schedule_sensor",
        "partition_retirement_sensor",
    }
    poll = get_settings().scheduler_poll_interval_seconds
    assert by_name["evaluation_schedule_sensor"].minimum_interval_seconds == poll
    arrivals = get_settings().arrival_poll_interval_seconds
    assert by_name["dataset_arrival_sensor"].minimum_interval_seconds == arrivals
    assert make_schedule_sensor(minimum_interval_seconds=7).minimum_interval_seconds == 7
    assert by_name["dataset_arrival_sensor"].job_name == EVALUATION_JOB
    assert by_name["evaluation_schedule_sensor"].job_name == EVALUATION_JOB
    # Retirement only deletes partitions: it targets no job.
    assert by_name["partition_retirement_sensor"].targets == []


def test_definitions_validate_with_the_evaluation_job() -> None:
    import definitions
    from assets import JOBS

    # The sensors target this job: its absence is a failure, not a reason to skip.
    assert any(getattr(job, "name", None) == EVALUATION_JOB for job in JOBS)
    dg.Definitions.validate_loadable(definitions.defs())


# --- Dagster instance configuration -----------------------------------------------------------


def test_dev_writes_the_concurrency_limit_into_dagster_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.dagster_instance import dagster_environment

    home = tmp_path / "dagster-home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    settings = Settings(marketplace_data_dir=tmp_path / "data", scheduler_max_concurrent=2)
    env = dagster_environment(settings)
    assert env["DAGSTER_HOME"] == str(home.resolve())
    with dg.DagsterInstance.from_config(str(home)) as loaded:
        run_queue = loaded.get_concurrency_config().run_queue_config
        assert run_queue is not None
        limits = run_queue.tag_concurrency_limits
        assert {"key": TAG_CONCURRENCY, "limit": 2} in limits
        assert {"key": TAG_MODEL, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits


@pytest.fixture
def dagster_pg_url() -> Iterator[str]:
    from tests.conftest import scratch_postgres

    with scratch_postgres("dg_") as url:
        yield url


def test_postgres_instance_stores_runs_and_events(
    dagster_pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.dagster_instance import dagster_environment

    home = tmp_path / "dagster-home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    settings = Settings(marketplace_data_dir=tmp_path / "data", dagster_pg_url=dagster_pg_url)
    env = dagster_environment(settings)
    assert "env: DAGSTER_PG_URL" in (home / "dagster.yaml").read_text()
    assert env["DAGSTER_PG_URL"].startswith("postgresql+psycopg2://")
    # Dagster processes get this environment from `marketplace dev`.
    monkeypatch.setenv("DAGSTER_PG_URL", env["DAGSTER_PG_URL"])

    @dg.asset
    def ping() -> int:
        return 1

    with dg.DagsterInstance.from_config(str(home)) as pg_instance:
        assert type(pg_instance.run_storage).__name__ == "PostgresRunStorage"
        outcome = dg.materialize([ping], instance=pg_instance)
        assert outcome.success
        run_id = outcome.run_id
    with dg.DagsterInstance.from_config(str(home)) as reopened:
        run = reopened.get_run_by_id(run_id)
        assert run is not None and run.is_success
        events = reopened.all_logs(run_id)
        assert any(e.dagster_event and e.dagster_event.is_step_success for e in events)
        run_queue = reopened.get_concurrency_config().run_queue_config
        assert run_queue is not None
        limits = run_queue.tag_concurrency_limits
        assert {"key": TAG_CONCURRENCY, "limit": settings.scheduler_max_concurrent} in limits
