"""A queued job says what it waits for and when its evaluation is due (issue 11, spec §4.2, §6).

`GET /api/models/{id}/contributions/{jobId}` of a `queued` job carries `evaluationDueAt` and a
`reason` for each stage: the arrival sensor has not recorded the version yet, the debounce
window is open, the run is requested and waits in Dagster's run queue.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetArrival
from pipeline.demo.churn_data import churn_rows
from pipeline.intake.contributions import queue_wait
from pipeline.store.objectstore import LocalObjectStore
from pipeline.store.queue import LocalArrivalQueue
from pipeline.triggers.arrival_rows import mark_run_key
from pipeline.triggers.debounce import run_request_due
from pipeline.triggers.drain import drain_queue

Headers = Callable[..., dict[str, str]]
WINDOW, POLL = 10, 5


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(
        evaluation_debounce_window_seconds=WINDOW, arrival_poll_interval_seconds=POLL
    )


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def submit(client: Any, auth_headers: Headers, seed: int = 1) -> str:
    body = {"modelId": 1, "benchmarkSpecId": None, "rows": churn_rows(120, seed=seed)}
    response = client.post("/api/models/1/contributions", headers=auth_headers(), json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["jobId"])


def view(client: Any, auth_headers: Headers, job_id: str) -> dict[str, Any]:
    response = client.get(f"/api/models/1/contributions/{job_id}", headers=auth_headers())
    assert response.status_code == 200
    result: dict[str, Any] = response.json()
    return result


def record_arrivals(settings: Settings, db: Database, now: datetime) -> None:
    """What the arrival sensor's tick does first: drain the embedded queue."""
    drain_queue(
        LocalArrivalQueue(db),
        db,
        LocalObjectStore(settings.objects_dir),
        now=now,
        max_messages=100,
        time_budget_seconds=10,
    )


@pytest.mark.parametrize(
    ("window", "poll", "after"),
    # A window of whole intervals may close a tick late (ticks are not exactly regular).
    [
        (10, 5, 15),
        (12, 5, 15),
        (13, 5, 15),
        (14, 5, 15),
        (15, 5, 20),
        (0, 5, 0),
        (300, 30, 330),
        (45, 30, 60),
    ],
)
def test_a_batch_is_released_at_the_first_sensor_tick_after_its_window(
    window: int, poll: int, after: int
) -> None:
    opened = datetime(2026, 1, 1, tzinfo=UTC)
    assert run_request_due(opened, window, poll) == opened + timedelta(seconds=after)


def test_queued_job_says_what_it_waits_for_at_each_stage(
    client: Any, auth_headers: Headers, settings: Settings, db: Database
) -> None:
    job_id = submit(client, auth_headers)
    before = view(client, auth_headers, job_id)
    assert before["status"] == "queued"
    created = parse(before["createdAt"])
    # Not recorded yet: the sensor's next tick (at most POLL s), then the window (3 ticks).
    assert parse(before["evaluationDueAt"]) == created + timedelta(seconds=POLL + 15)
    assert before["reason"].startswith(
        f"waiting for the arrival sensor to record the dataset version (every {POLL} s), "
        f"then for the {WINDOW} s debounce window to close; evaluation due at "
    )

    recorded_at = datetime.now(UTC)
    record_arrivals(settings, db, recorded_at)
    waiting = view(client, auth_headers, job_id)
    due = parse(waiting["evaluationDueAt"])
    assert due == recorded_at + timedelta(seconds=15)
    assert waiting["reason"] == (
        f"waiting for the {WINDOW} s debounce window to close; evaluation due at "
        f"{due.replace(microsecond=0).isoformat().replace('+00:00', 'Z')}"
    )

    # A second contribution joins the open batch: due when the batch is.
    second = submit(client, auth_headers, seed=2)
    assert parse(view(client, auth_headers, second)["evaluationDueAt"]) == due

    with db.session() as session:
        versions = list(session.scalars(select(DatasetArrival.version)))
        mark_run_key(session, 1, versions, "arrival-1-v2-test")
    requested = view(client, auth_headers, job_id)
    assert parse(requested["evaluationDueAt"]) == due
    assert requested["reason"] == (
        "evaluation run requested; waiting for Dagster's run queue to start it "
        f"(at most {settings.scheduler_max_concurrent} evaluation runs at once, one per model)"
    )


def test_an_overdue_job_points_at_the_dagster_daemon(
    client: Any, auth_headers: Headers, settings: Settings, db: Database
) -> None:
    job_id = submit(client, auth_headers)
    with db.session() as session:
        job = session.get(Contribution, job_id)
    assert job is not None
    later = datetime.now(UTC) + timedelta(minutes=5)
    unrecorded = queue_wait(db, settings, job, now=later)
    assert unrecorded is not None and "is the Dagster daemon running?" in unrecorded.reason

    record_arrivals(settings, db, datetime.now(UTC))
    overdue = queue_wait(db, settings, job, now=later)
    assert overdue is not None
    assert overdue.reason.startswith("evaluation was due at ")
    assert overdue.reason.endswith("no run has been requested: is the Dagster daemon running?")


def test_without_a_window_the_job_waits_for_the_next_sensor_check(
    make_settings: Callable[..., Settings], client: Any, auth_headers: Headers, db: Database
) -> None:
    job_id = submit(client, auth_headers)
    now = datetime.now(UTC)
    no_window = make_settings(evaluation_debounce_window_seconds=0, arrival_poll_interval_seconds=7)
    record_arrivals(no_window, db, now)
    with db.session() as session:
        job = session.get(Contribution, job_id)
    assert job is not None
    wait = queue_wait(db, no_window, job, now=now)
    assert wait is not None and wait.due_at == now
    assert wait.reason.startswith("waiting for the arrival sensor's next check (every 7 s)")


def test_jobs_past_the_queue_or_waiting_for_a_benchmark_carry_no_due_time(
    client: Any, auth_headers: Headers, db: Database
) -> None:
    waiting_id, running_id = submit(client, auth_headers), submit(client, auth_headers, seed=2)
    reason = "checks passed; waiting for a benchmark: the model has no BenchmarkSpec yet"
    with db.session() as session:
        session.execute(
            update(Contribution).where(Contribution.id == waiting_id).values(reason=reason)
        )
        session.execute(
            update(Contribution).where(Contribution.id == running_id).values(status="validating")
        )
    waiting = view(client, auth_headers, waiting_id)
    assert waiting["reason"] == reason and "evaluationDueAt" not in waiting
    running = view(client, auth_headers, running_id)
    assert running["status"] == "validating" and "evaluationDueAt" not in running
