"""Evaluation schedules (spec §2.7, §3, §4.4): domain rules with a frozen clock, and the API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from pipeline.core.db import Database
from pipeline.core.errors import Conflict, NotFound, Unprocessable
from pipeline.core.tables import EvaluationSchedule
from pipeline.triggers.schedules import (
    advance,
    create_schedule,
    delete_schedule,
    due_schedules,
    fire_due_schedules,
    get_schedule,
    schedule_view,
    update_schedule,
    validate_cron,
)
from tests.support.scheduling import T0, add_benchmark, add_model, add_version, demo_model_id

URL = "/api/v1/models/{}/evaluation-schedule"


@pytest.fixture
def model_id(db: Database) -> int:
    model = demo_model_id(db)
    add_benchmark(db, model)
    return model


def at(hour: int, minute: int = 0, day: int = 1) -> datetime:
    return datetime(2025, 3, day, hour, minute, tzinfo=UTC)


# --- cron validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    ["61 * * * *", "* * * *", "* * * * * *", "0 0 * * * 2030", "bad", "", "   ", "@reboot",
     "0 0 31 2 *", "H * * * *", "*/0 * * * *"],
)  # fmt: skip
def test_invalid_cron_is_unprocessable(expression: str) -> None:
    with pytest.raises(Unprocessable):
        validate_cron(expression)


@pytest.mark.parametrize(
    ("expression", "normalised"),
    [("*/15 * * * *", "*/15 * * * *"), ("0  3 * * 1-5", "0 3 * * 1-5"), ("@DAILY", "@daily")],
)
def test_valid_cron_is_normalised(expression: str, normalised: str) -> None:
    assert validate_cron(expression) == normalised


# --- domain -----------------------------------------------------------------------------------


def test_create_computes_next_run_at_from_now(db: Database, model_id: int) -> None:
    with db.session() as session:
        schedule = create_schedule(session, model_id, "*/15 * * * *", now=T0)
        body = schedule_view(schedule)
    assert body["next_run_at"] == "2025-03-01T10:15:00Z"
    assert body["last_run_at"] is None
    assert body["enabled"] is True
    assert body["model_id"] == str(model_id)
    assert body["created_at"] == body["updated_at"] == "2025-03-01T10:07:30Z"


def test_disabled_schedule_has_no_next_run(db: Database, model_id: int) -> None:
    with db.session() as session:
        schedule = create_schedule(session, model_id, "@hourly", enabled=False, now=T0)
        assert schedule.next_run_at is None


def test_second_create_conflicts(db: Database, model_id: int) -> None:
    with db.session() as session:
        create_schedule(session, model_id, "@hourly", now=T0)
    with db.session() as session, pytest.raises(Conflict, match="already has"):
        create_schedule(session, model_id, "@daily", now=T0)


def test_model_without_benchmark_spec_conflicts(db: Database) -> None:
    bare = add_model(db, "no-spec-model")
    with db.session() as session, pytest.raises(Conflict, match="benchmark"):
        create_schedule(session, bare, "@hourly", now=T0)


def test_unknown_model_is_not_found(db: Database) -> None:
    with db.session() as session, pytest.raises(NotFound):
        create_schedule(session, 999_999, "@hourly", now=T0)


def test_disable_keeps_the_schedule_and_reenable_recomputes(db: Database, model_id: int) -> None:
    with db.session() as session:
        create_schedule(session, model_id, "0 * * * *", now=T0)
    with db.session() as session:
        schedule = update_schedule(session, model_id, enabled=False, now=T0 + timedelta(hours=1))
        assert (schedule.enabled, schedule.next_run_at) == (False, None)
    with db.session() as session:
        assert get_schedule(session, model_id).cron_expression == "0 * * * *"
        schedule = update_schedule(session, model_id, enabled=True, now=at(15, 20))
        assert schedule.next_run_at == at(16)
        assert schedule.updated_at == at(15, 20)


def test_update_without_change_keeps_a_due_tick(db: Database, model_id: int) -> None:
    with db.session() as session:
        create_schedule(session, model_id, "0 * * * *", now=T0)
    with db.session() as session:
        schedule = update_schedule(session, model_id, "0 * * * *", True, now=at(13))
        assert schedule.next_run_at == at(11)  # still due, not pushed past 13:00
        schedule = update_schedule(session, model_id, "30 * * * *", now=at(13))
        assert schedule.next_run_at == at(13, 30)


def test_update_and_delete_of_a_missing_schedule_are_not_found(db: Database, model_id: int) -> None:
    with db.session() as session, pytest.raises(NotFound):
        update_schedule(session, model_id, "@hourly", now=T0)
    with db.session() as session, pytest.raises(NotFound):
        delete_schedule(session, model_id)


def test_due_schedules_are_only_the_enabled_due_ones(db: Database) -> None:
    models = [add_model(db, f"due-{i}") for i in range(4)]
    for model in models:
        add_benchmark(db, model)
    with db.session() as session:
        create_schedule(session, models[0], "0 * * * *", now=at(9, 30))  # next 10:00
        create_schedule(session, models[1], "30 * * * *", now=at(9, 50))  # next 10:30
        create_schedule(session, models[2], "0 * * * *", now=at(8, 30))  # next 09:00
        create_schedule(session, models[3], "0 * * * *", enabled=False, now=at(8, 30))
    with db.session() as session:
        due = due_schedules(session, at(10, 5), limit=10)
        assert [s.model_id for s in due] == [models[2], models[0]]  # oldest first
        assert [s.model_id for s in due_schedules(session, at(10, 5), limit=1)] == [models[2]]
        assert due_schedules(session, at(8, 0), limit=10) == []


def test_due_selection_reads_through_the_index(db: Database, backend: str) -> None:
    query = (
        "SELECT id FROM evaluation_schedules WHERE enabled = {true} AND next_run_at <= :now "
        "ORDER BY next_run_at LIMIT 50"
    )
    with db.engine.connect() as conn:
        if backend == "sqlite":
            plan = conn.execute(
                text("EXPLAIN QUERY PLAN " + query.format(true="1")), {"now": "2025-01-01"}
            ).all()
            assert "USING INDEX ix_evaluation_schedules_due" in str(plan)
        else:
            conn.execute(text("SET enable_seqscan = off"))
            plan = conn.execute(text("EXPLAIN " + query.format(true="true")), {"now": T0}).all()
            assert "ix_evaluation_schedules_due" in str(plan)


def test_missed_ticks_after_downtime_fire_once(db: Database, model_id: int) -> None:
    version = add_version(db, model_id, kind="contribution")
    with db.session() as session:
        create_schedule(session, model_id, "0 * * * *", now=at(9, 30))  # next 10:00
    with db.session() as session:
        runs = fire_due_schedules(session, at(15, 20), limit=10)  # five ticks missed
    assert len(runs) == 1
    assert runs[0].run_key == f"schedule-{model_id}-20250301T100000Z"
    assert runs[0].tick == at(10)
    assert runs[0].version == version  # the newest version, not the benchmark's
    with db.session() as session:
        schedule = get_schedule(session, model_id)
        assert (schedule.last_run_at, schedule.next_run_at) == (at(15, 20), at(16))
        assert fire_due_schedules(session, at(15, 21), limit=10) == []


def test_advance_moves_to_the_next_time_after_firing() -> None:
    schedule = EvaluationSchedule(model_id=1, cron_expression="*/10 * * * *", enabled=True)
    advance(schedule, at(10, 10))
    assert (schedule.last_run_at, schedule.next_run_at) == (at(10, 10), at(10, 20))


# --- API --------------------------------------------------------------------------------------


# The demo model belongs to the admin user (docs/ownership.md): its keys may change schedules.
OWNER = "admin"


@pytest.fixture
def headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key(OWNER)}"}


def test_post_creates_with_201_and_the_schedule_body(
    client: Any, model_id: int, headers: dict[str, str]
) -> None:
    response = client.post(
        URL.format(model_id), json={"cron_expression": "0 3 * * *"}, headers=headers
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {
        "id", "model_id", "cron_expression", "enabled", "last_run_at", "next_run_at",
        "created_at", "updated_at",
    }  # fmt: skip
    assert body["model_id"] == str(model_id)
    assert body["enabled"] is True and body["last_run_at"] is None
    assert body["next_run_at"].endswith("T03:00:00Z")
    datetime.fromisoformat(body["created_at"])

    again = client.post(URL.format(model_id), json={"cron_expression": "@daily"}, headers=headers)
    assert again.status_code == 409
    assert "already" in again.json()["detail"]


def test_post_refuses_bad_cron_and_models_without_spec(
    client: Any, db: Database, model_id: int, headers: dict[str, str]
) -> None:
    bad = client.post(URL.format(model_id), json={"cron_expression": "61 * * * *"}, headers=headers)
    assert bad.status_code == 422
    assert "cron" in bad.json()["detail"]

    bare = add_model(db, "bare-model", owner_user_id=OWNER)
    response = client.post(URL.format(bare), json={"cron_expression": "@daily"}, headers=headers)
    assert response.status_code == 409
    assert "benchmark" in response.json()["detail"]

    missing = client.post(URL.format(999_999), json={"cron_expression": "@daily"}, headers=headers)
    assert missing.status_code == 404


@pytest.mark.parametrize(
    "body",
    [{}, {"enabled": True}, {"cron_expression": 5}, {"cron_expression": "@daily", "enabled": "x"}],
)
def test_post_malformed_body_is_400(
    client: Any, model_id: int, headers: dict[str, str], body: dict[str, Any]
) -> None:
    response = client.post(URL.format(model_id), json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["detail"]


def test_put_updates_disables_and_get_delete(
    client: Any, model_id: int, headers: dict[str, str]
) -> None:
    url = URL.format(model_id)
    assert client.put(url, json={"cron_expression": "@daily"}, headers=headers).status_code == 404
    assert client.get(url, headers=headers).status_code == 404
    created = client.post(url, json={"cron_expression": "@hourly"}, headers=headers).json()

    updated = client.put(
        url, json={"cron_expression": "*/5 * * * *", "enabled": False}, headers=headers
    )
    assert updated.status_code == 200
    body = updated.json()
    assert body["id"] == created["id"]
    assert (body["cron_expression"], body["enabled"], body["next_run_at"]) == (
        "*/5 * * * *", False, None,
    )  # fmt: skip

    enabled = client.put(url, json={"enabled": True}, headers=headers).json()
    assert enabled["enabled"] is True and enabled["next_run_at"] is not None
    assert client.put(url, json={}, headers=headers).status_code == 400
    assert client.put(url, json={"cron_expression": "nope"}, headers=headers).status_code == 422

    assert client.get(url, headers=headers).json() == enabled
    deleted = client.delete(url, headers=headers)
    assert deleted.status_code == 204 and deleted.content == b""
    assert client.get(url, headers=headers).status_code == 404
    assert client.delete(url, headers=headers).status_code == 404


def test_schedule_endpoints_need_a_platform_key_with_scope(
    client: Any, model_id: int, platform_key: Callable[..., str]
) -> None:
    url = URL.format(model_id)
    assert client.get(url).status_code == 401
    assert client.post(url, json={"cron_expression": "@daily"}).status_code == 401
    bad = {"Authorization": "Bearer not-a-key"}
    assert client.get(url, headers=bad).status_code == 401
    reader = {"Authorization": f"Bearer {platform_key('bob', scopes=['arrivals:read'])}"}
    response = client.post(url, json={"cron_expression": "@daily"}, headers=reader)
    assert response.status_code == 403
    assert response.json()["detail"]


def test_non_integer_model_id_is_400(client: Any, headers: dict[str, str]) -> None:
    assert client.get(URL.format("abc"), headers=headers).status_code == 400
