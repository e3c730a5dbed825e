"""Dataset arrivals (spec §4.5, §6): key rules, idempotent recording, the upload race, the
debounce cursor, and the listing endpoint."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import DatasetArrival, DatasetVersion
from pipeline.models.registry import allocate_version
from pipeline.store.objectstore import LocalObjectStore, StoredObject, dataset_key
from pipeline.store.queue import LocalArrivalQueue, ObjectArrival, enqueue_local_arrival
from pipeline.triggers.arrival_keys import parse_dataset_key
from pipeline.triggers.arrival_rows import list_arrivals, mark_run_key, pending_arrivals
from pipeline.triggers.arrivals import Outcome, record_arrival
from pipeline.triggers.debounce import DebounceCursor, batch_run_key
from pipeline.triggers.drain import drain_queue
from tests.support.scheduling import T0, add_version, demo_model_id

# --- keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("datasets/1/v1/rows.parquet", (1, "v1", 1, "parquet")),
        ("datasets/12/v30/data.CSV", (12, "v30", 30, "csv")),
        ("datasets/3/v2/part.jsonl", (3, "v2", 2, "json")),
        ("datasets/1/v1/manifest.json", None),  # describes the data, is not data
        ("datasets/1/v1/.hidden.csv", None),
        ("datasets/1/v1/notes.txt", None),
        ("datasets/1/v01/rows.csv", None),  # versions are v + a number without leading zeros
        ("datasets/1/2024-06/rows.csv", None),
        ("datasets/0/v1/rows.csv", None),
        ("datasets/1/v1/sub/rows.csv", None),
        ("other/1/v1/rows.csv", None),
        ("datasets/99999999999/v1/rows.csv", None),
    ],
)
def test_which_keys_are_arrivals(key: str, expected: tuple[Any, ...] | None) -> None:
    parsed = parse_dataset_key(key)
    if expected is None:
        assert parsed is None
    else:
        assert parsed is not None
        assert (parsed.model_id, parsed.version, parsed.version_number, parsed.file_format) == (
            expected
        )


# --- recording --------------------------------------------------------------------------------


def event(key: str, bucket: str = "local", size: int | None = None) -> ObjectArrival:
    return ObjectArrival(bucket=bucket, key=key, size_bytes=size, etag=None, event_time=None)


def record(db: Database, store: LocalObjectStore, key: str, now: datetime, **kw: Any) -> Any:
    return record_arrival(db, store, event(key), source="local", now=now, **kw)


def _arrivals(db: Database) -> list[DatasetArrival]:
    with db.session() as session:
        return list(session.scalars(select(DatasetArrival)))


def _version(db: Database, model_id: int, version: str) -> DatasetVersion | None:
    with db.session() as session:
        return session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )


def test_an_uploaded_version_is_recorded_once(db: Database, store: LocalObjectStore) -> None:
    model = demo_model_id(db)
    version = add_version(db, model, kind="contribution")
    key = dataset_key(model, version, "data.csv")

    first = record(db, store, key, T0)
    assert (first.outcome, first.model_id, first.version) == (Outcome.RECORDED, model, version)
    again = record(db, store, key, T0 + timedelta(seconds=5))
    assert again.outcome is Outcome.DUPLICATE

    [row] = _arrivals(db)
    assert (row.version, row.source, row.sha256, row.size_bytes) == (version, "local", "0" * 64, 10)
    assert row.received_at == T0 and row.run_key is None


def test_object_dropped_into_the_store_becomes_an_external_version(
    db: Database, store: LocalObjectStore
) -> None:
    model = demo_model_id(db)
    stored = store.put_bytes(dataset_key(model, "v7", "data.csv"), b"a,target\n1,0\n")
    store.put_bytes(dataset_key(model, "v7", "manifest.json"), b'{"contributor_id": "c1"}')

    outcome = record(db, store, stored.key, datetime.now(UTC))
    assert outcome.outcome is Outcome.RECORDED
    row = _version(db, model, "v7")
    assert row is not None
    assert (row.kind, row.version_number, row.file_format) == ("external", 7, "csv")
    assert (row.size_bytes, row.sha256) == (stored.size_bytes, stored.sha256)
    assert row.manifest == {"contributor_id": "c1"}
    # The API never hands out v7 again.
    assert allocate_version(db, model) == (8, "v8")


def test_upload_whose_commit_is_in_flight_is_deferred_then_recorded(
    db: Database, store: LocalObjectStore
) -> None:
    """The API writes the object, then commits its row; the notification may come between."""
    model = demo_model_id(db)
    number, version = allocate_version(db, model)
    stored = store.put_bytes(dataset_key(model, version, "rows.parquet"), b"PAR1")
    with store.local_path(stored.key) as path:
        written = datetime.fromtimestamp(path.stat().st_mtime, UTC)

    early = record(db, store, stored.key, written + timedelta(seconds=10))
    assert early.outcome is Outcome.DEFERRED and early.retry_after
    assert _arrivals(db) == [] and _version(db, model, version) is None

    with db.session() as session:  # the API's commit lands
        session.add(
            DatasetVersion(
                model_id=model, version=version, version_number=number, kind="contribution",
                object_key=stored.key, uri=stored.uri, file_format="parquet",
                sha256=stored.sha256, size_bytes=stored.size_bytes,
            )
        )  # fmt: skip
    late = record(db, store, stored.key, written + timedelta(seconds=20))
    assert late.outcome is Outcome.RECORDED
    row = _version(db, model, version)
    assert row is not None and row.kind == "contribution"


def test_abandoned_allocated_version_is_recorded_as_external_after_the_grace(
    db: Database, store: LocalObjectStore
) -> None:
    model = demo_model_id(db)
    _, version = allocate_version(db, model)
    stored = store.put_bytes(dataset_key(model, version, "rows.csv"), b"a\n1\n")
    later = datetime.now(UTC) + timedelta(hours=1)
    assert record(db, store, stored.key, later).outcome is Outcome.RECORDED
    row = _version(db, model, version)
    assert row is not None and row.kind == "external"


def test_failed_upload_whose_object_was_removed_is_dropped(
    db: Database, store: LocalObjectStore
) -> None:
    model = demo_model_id(db)
    _, version = allocate_version(db, model)
    outcome = record(db, store, dataset_key(model, version, "rows.parquet"), T0)
    assert outcome.outcome is Outcome.DROPPED and "no longer exists" in outcome.reason


def test_keys_that_cannot_be_recorded(db: Database, store: LocalObjectStore) -> None:
    model = demo_model_id(db)
    version = add_version(db, model)
    store.put_bytes("datasets/424242/v1/rows.csv", b"a\n")
    unknown = record(db, store, "datasets/424242/v1/rows.csv", T0)
    assert unknown.outcome is Outcome.DROPPED and "does not exist" in unknown.reason
    manifest = record(db, store, dataset_key(model, version, "manifest.json"), T0)
    assert manifest.outcome is Outcome.IGNORED
    store.put_bytes(dataset_key(model, version, "second.csv"), b"a\n")
    second = record(db, store, dataset_key(model, version, "second.csv"), T0)
    assert second.outcome is Outcome.DROPPED and "already holds" in second.reason
    foreign = record_arrival(
        db, store, event(dataset_key(model, version, "data.csv"), bucket="elsewhere"),
        source="sqs", now=T0, expected_bucket="datasets",
    )  # fmt: skip
    assert foreign.outcome is Outcome.DROPPED
    assert _arrivals(db) == []


def test_a_failing_message_is_left_on_the_queue_and_the_others_proceed(
    db: Database, settings: Settings
) -> None:
    class FlakyStore(LocalObjectStore):
        def local_path(self, key: str) -> Any:
            raise RuntimeError("store unavailable")

    store = FlakyStore(settings.objects_dir)
    model = demo_model_id(db)
    version = add_version(db, model)
    with db.session() as session:
        for key in (dataset_key(model, "v9", "data.csv"), dataset_key(model, version, "data.csv")):
            enqueue_local_arrival(session, StoredObject(key, "", 1, ""))
    queue = LocalArrivalQueue(db)
    report = drain_queue(queue, db, store, now=T0, max_messages=10, time_budget_seconds=10)
    assert (report.received, report.failed, len(report.recorded)) == (2, 1, 1)
    [left] = queue.receive(10)
    assert "v9" in left.body


def test_pending_marking_and_listing(db: Database, store: LocalObjectStore) -> None:
    model = demo_model_id(db)
    versions = [add_version(db, model) for _ in range(3)]
    for i, version in enumerate(versions):
        record(db, store, dataset_key(model, version, "data.csv"), T0 + timedelta(seconds=i))
    with db.session() as session:
        assert [p.version for p in pending_arrivals(session, 10)] == versions
        assert mark_run_key(session, model, versions[:2], "arrival-x") == 2
        assert mark_run_key(session, model, versions[:2], "arrival-y") == 0  # already fed a run
        assert [p.version for p in pending_arrivals(session, 10)] == versions[2:]
        newest = list_arrivals(session, model, 2)
        assert [a.version for a in newest] == [versions[2], versions[1]]
        assert list_arrivals(session, model + 1, 10) == []


# --- debounce cursor --------------------------------------------------------------------------


def test_batch_is_released_at_the_trailing_edge_of_the_first_arrivals_window() -> None:
    cursor = DebounceCursor()
    assert cursor.add(1, "v1", T0)
    assert cursor.add(1, "v2", T0 + timedelta(seconds=200))
    assert not cursor.add(1, "v2", T0 + timedelta(seconds=201))  # same version again
    cursor.add(2, "v5", T0 + timedelta(seconds=250))
    assert cursor.due(T0 + timedelta(seconds=299), 300) == []
    # Later arrivals join the batch but do not push its edge back.
    assert cursor.due(T0 + timedelta(seconds=300), 300) == [1]
    batch = cursor.pop(1)
    assert (batch.versions, batch.latest) == (["v1", "v2"], "v2")
    assert (batch.first_seen, batch.last_seen) == (T0, T0 + timedelta(seconds=201))
    assert cursor.due(T0 + timedelta(seconds=549), 300) == []
    assert cursor.due(T0 + timedelta(seconds=550), 300) == [2]


def test_window_zero_releases_immediately() -> None:
    cursor = DebounceCursor()
    cursor.add(3, "v1", T0)
    assert cursor.due(T0, 0) == [3]


def test_cursor_json_round_trip_and_version_order() -> None:
    cursor = DebounceCursor()
    for number in (10, 9, 2):
        cursor.add(4, f"v{number}", T0 + timedelta(seconds=number))
    text = cursor.to_json()
    assert json.loads(text) == {
        "pending": {
            "4": {
                "first_seen": "2025-03-01T10:07:32Z",
                "last_seen": "2025-03-01T10:07:40Z",
                "versions": ["v2", "v9", "v10"],
            }
        }
    }
    assert DebounceCursor.from_json(text) == cursor
    assert DebounceCursor.from_json(None) == DebounceCursor() == DebounceCursor.from_json("")


@pytest.mark.parametrize("text", ["nope", "[]", '{"pending": {"x": {}}}', '{"pending": 3}'])
def test_unreadable_cursor_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        DebounceCursor.from_json(text)


def test_run_key_names_the_batch() -> None:
    key = batch_run_key(1, ["v2", "v10", "v3"])
    assert key == batch_run_key(1, ["v10", "v3", "v2"])
    assert key.startswith("arrival-1-v10-")
    assert key != batch_run_key(1, ["v3", "v10"])
    assert key != batch_run_key(2, ["v2", "v10", "v3"])


# --- API --------------------------------------------------------------------------------------


def test_list_arrivals_newest_first_with_filter_and_limit(
    client: Any, db: Database, store: LocalObjectStore, platform_key: Callable[..., str]
) -> None:
    # The demo model's owner, the admin user.
    headers = {"Authorization": f"Bearer {platform_key('admin')}"}
    model = demo_model_id(db)
    versions = [add_version(db, model) for _ in range(3)]
    for i, version in enumerate(versions):
        record(db, store, dataset_key(model, version, "data.csv"), T0 + timedelta(minutes=i))
    with db.session() as session:
        mark_run_key(session, model, versions[:1], "arrival-run-1")

    response = client.get("/api/v1/dataset-arrivals", headers=headers)
    assert response.status_code == 200
    arrivals = response.json()["arrivals"]
    assert [a["version"] for a in arrivals] == list(reversed(versions))
    oldest = arrivals[-1]
    assert oldest == {
        "id": oldest["id"],
        "model_id": str(model),
        "version": versions[0],
        "object_key": dataset_key(model, versions[0], "data.csv"),
        "uri": dataset_key(model, versions[0], "data.csv"),  # no server path
        "size_bytes": 10,
        "sha256": "0" * 64,
        "source": "local",
        "received_at": "2025-03-01T10:07:30Z",
        "run_key": "arrival-run-1",
    }

    limited = client.get("/api/v1/dataset-arrivals?limit=1", headers=headers).json()["arrivals"]
    assert [a["version"] for a in limited] == [versions[2]]
    filtered = client.get(f"/api/v1/dataset-arrivals?model_id={model}", headers=headers)
    assert len(filtered.json()["arrivals"]) == 3
    other = client.get(f"/api/v1/dataset-arrivals?model_id={model + 1}", headers=headers)
    assert other.json() == {"arrivals": []}


def test_a_key_lists_only_the_arrivals_of_models_it_owns(
    client: Any,
    db: Database,
    store: LocalObjectStore,
    platform_key: Callable[..., str],
    auth_headers: Callable[..., dict[str, str]],
) -> None:
    """Issue 21 row 8: any user's key listed every model's arrivals and server paths."""
    from pipeline.auth.orgs import Role, create_org, set_member
    from pipeline.models.definitions import demo_definition
    from pipeline.models.registry import ModelOwner, get_model, register_model, set_model_owner

    demo = demo_model_id(db)  # owned by the admin user, the operator
    with db.session() as session:
        acme = create_org(session, "acme", "olivia")
        set_member(session, acme, "dora", Role.DEVELOPER)
        definition = demo_definition().model_copy(update={"name": "alice-model"})
        alices = register_model(session, definition, ModelOwner(user_id="alice")).id
        definition = demo_definition().model_copy(update={"name": "acme-model"})
        acmes = register_model(session, definition, ModelOwner(org_id=acme.id)).id
        acme_id = acme.id
    for model in (demo, alices, acmes):
        version = add_version(db, model)
        record(db, store, dataset_key(model, version, "data.csv"), T0)

    def listed(key: str, query: str = "") -> set[int]:
        response = client.get(
            f"/api/v1/dataset-arrivals{query}", headers={"Authorization": f"Bearer {key}"}
        )
        assert response.status_code == 200
        arrivals = response.json()["arrivals"]
        for arrival in arrivals:
            assert arrival["uri"] == arrival["object_key"]
            assert "file:" not in json.dumps(arrival)
            assert str(store.root) not in json.dumps(arrival)
        return {int(a["model_id"]) for a in arrivals}

    assert listed(platform_key("alice")) == {alices}
    assert listed(platform_key("alice"), f"?model_id={demo}") == set()
    assert listed(platform_key("zed")) == set()
    assert listed(platform_key("olivia")) == {acmes}
    # Organization keys: an Owner's acts for the organization; a Developer's does not own.
    olivia = client.post(
        f"/api/v1/organizations/{acme_id}/api-keys",
        json={"name": "k", "service_id": "platform"},
        headers=auth_headers("olivia"),
    ).json()["api_key"]
    assert listed(olivia) == {acmes}
    dora = client.post(
        f"/api/v1/organizations/{acme_id}/api-keys",
        json={"name": "k", "service_id": "platform"},
        headers=auth_headers("dora"),
    ).json()["api_key"]
    assert listed(dora) == set()
    # The operator's own key sees every model's arrivals.
    assert listed(platform_key("admin")) == {demo, alices, acmes}
    # Ownership is read at each request: giving the model away hides its arrivals.
    with db.session() as session:
        set_model_owner(get_model(session, alices), ModelOwner(user_id="bob"))
    assert listed(platform_key("alice")) == set()


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=1001", "limit=abc", "model_id=abc", "model_id=0", "limit=-5"]
)
def test_list_arrivals_bad_parameters_are_400(
    client: Any, platform_key: Callable[..., str], query: str
) -> None:
    headers = {"Authorization": f"Bearer {platform_key('alice')}"}
    response = client.get(f"/api/v1/dataset-arrivals?{query}", headers=headers)
    assert response.status_code == 400
    assert response.json()["detail"]


def test_list_arrivals_limit_bounds_are_accepted(
    client: Any, platform_key: Callable[..., str]
) -> None:
    headers = {"Authorization": f"Bearer {platform_key('alice')}"}
    for limit in (1, 1000):
        assert (
            client.get(f"/api/v1/dataset-arrivals?limit={limit}", headers=headers).status_code
            == 200
        )


def test_list_arrivals_needs_a_platform_key(client: Any) -> None:
    assert client.get("/api/v1/dataset-arrivals").status_code == 401
