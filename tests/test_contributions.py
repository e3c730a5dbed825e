"""Row contributions (spec §2.2–2.4, §4.2, §5): validation, storage, jobs and sessions."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import jwt
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from pipeline.db import Database
from pipeline.registry import demo_definition
from pipeline.tables import ArrivalEvent, Contribution, DatasetVersion, utcnow

URL = "/api/models/1/contributions"


def rows(n: int) -> list[dict[str, Any]]:
    example = demo_definition().example_row
    out = []
    for i in range(n):
        row = copy.deepcopy(example)
        row["tenure_months"] = i % 121
        row["support_calls"] = i % 7
        row["churned"] = i % 2
        out.append(row)
    return out


def body(n: int = 3, **overrides: Any) -> dict[str, Any]:
    return {"modelId": 1, "benchmarkSpecId": None, "rows": rows(n), **overrides}


def counts(db: Database) -> tuple[int, int, int]:
    with db.session() as session:
        return (
            session.scalar(select(func.count()).select_from(Contribution)) or 0,
            session.scalar(select(func.count()).select_from(DatasetVersion)) or 0,
            session.scalar(select(func.count()).select_from(ArrivalEvent)) or 0,
        )


def stored_files(settings) -> list[str]:
    root = settings.objects_dir
    return (
        sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        if root.exists()
        else []
    )


def test_valid_rows_are_accepted_and_stored(client, auth_headers, db, settings) -> None:
    response = client.post(URL, json=body(5), headers=auth_headers())
    assert response.status_code == 202
    payload = response.json()
    assert payload["ok"] is True
    assert payload["submittedRows"] == 5
    assert set(payload) == {"ok", "submittedRows", "jobId"}

    assert counts(db) == (1, 1, 1)
    assert stored_files(settings) == ["datasets/1/v1/rows.parquet"]
    table = pq.read_table(settings.objects_dir / "datasets/1/v1/rows.parquet")
    assert table.num_rows == 5
    assert table.column("tenure_months").to_pylist() == [0, 1, 2, 3, 4]

    job = client.get(f"{URL}/{payload['jobId']}", headers=auth_headers())
    assert job.status_code == 200
    view = job.json()
    assert view["jobId"] == payload["jobId"]
    assert view["status"] == "queued"
    assert view["submittedRows"] == 5
    assert "createdAt" in view


def test_each_contribution_is_a_new_version(client, auth_headers, settings) -> None:
    for _ in range(2):
        assert client.post(URL, json=body(2), headers=auth_headers()).status_code == 202
    assert stored_files(settings) == ["datasets/1/v1/rows.parquet", "datasets/1/v2/rows.parquet"]


def test_every_failing_row_is_listed(client, auth_headers, db, settings) -> None:
    submitted = rows(6)
    submitted[1]["tenure_months"] = 500
    submitted[3]["contract"] = "weekly"
    del submitted[4]["monthly_charges"]
    submitted[5]["surprise"] = 1
    response = client.post(URL, json=body(rows=submitted), headers=auth_headers())
    assert response.status_code == 400
    payload = response.json()
    assert payload["ok"] is False
    assert payload["status"] == 400
    assert isinstance(payload["message"], str) and payload["message"]
    by_path = {e["path"]: e for e in payload["errors"]}
    assert set(by_path) == {
        "rows[1].tenure_months",
        "rows[3].contract",
        "rows[4].monthly_charges",
        "rows[5].surprise",
    }
    assert by_path["rows[1].tenure_months"]["rowIndex"] == 1
    assert by_path["rows[4].monthly_charges"]["rowIndex"] == 4
    assert "maximum" in by_path["rows[1].tenure_months"]["message"]
    assert counts(db) == (0, 0, 0)
    assert stored_files(settings) == []


@pytest.mark.parametrize(
    ("payload", "path"),
    [
        ({"modelId": 1, "rows": rows(1)}, "benchmarkSpecId"),
        ({"modelId": 1, "benchmarkSpecId": None, "rows": []}, "rows"),
        ({"modelId": 1, "benchmarkSpecId": None, "rows": {"a": 1}}, "rows"),
        ({"modelId": "1", "benchmarkSpecId": None, "rows": rows(1)}, "modelId"),
        ({"modelId": 1, "benchmarkSpecId": 5, "rows": rows(1)}, "benchmarkSpecId"),
        ({"modelId": 1, "benchmarkSpecId": None, "rows": [1, 2]}, "rows[0]"),
        ([1, 2, 3], "body"),
    ],
)
def test_wrong_shapes_get_the_spec_body(client, auth_headers, db, payload, path) -> None:
    response = client.post(URL, json=payload, headers=auth_headers())
    assert response.status_code == 400
    data = response.json()
    assert data["ok"] is False and data["status"] == 400
    assert any(e["path"] == path for e in data["errors"]), data
    assert all(isinstance(e["rowIndex"], int) for e in data["errors"])
    assert counts(db) == (0, 0, 0)


def test_malformed_json_gets_the_spec_body(client, auth_headers) -> None:
    response = client.post(
        URL,
        content=b'{"modelId": 1, "rows": [',
        headers={**auth_headers(), "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "body"


def test_model_id_must_match_the_path(client, auth_headers) -> None:
    response = client.post(URL, json=body(1, modelId=2), headers=auth_headers())
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "modelId"


def test_unknown_model_is_404(client, auth_headers) -> None:
    response = client.post(
        "/api/models/42/contributions", json=body(1, modelId=42), headers=auth_headers()
    )
    assert response.status_code == 404
    assert "detail" in response.json()


def test_session_cookie_authenticates(client, session_token, settings) -> None:
    client.cookies.set(settings.session_cookie_name(), session_token("carol"))
    try:
        assert client.post(URL, json=body(1)).status_code == 202
    finally:
        client.cookies.clear()


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer nonsense", "Basic abc"])
def test_missing_or_invalid_session_is_401(client, header) -> None:
    headers = {"Authorization": header} if header else {}
    response = client.post(URL, json=body(1), headers=headers)
    assert response.status_code == 401
    assert "detail" in response.json()


def test_expired_or_foreign_token_is_401(client, settings) -> None:
    now = utcnow()
    expired = jwt.encode(
        {"sub": "a", "iat": now - timedelta(hours=2), "exp": now - timedelta(hours=1),
         "iss": settings.service_name},
        settings.jwt_key(), algorithm="HS256",
    )  # fmt: skip
    foreign = jwt.encode(
        {"sub": "a", "iat": now, "exp": now + timedelta(hours=1), "iss": settings.service_name},
        "another-secret-another-secret-another",
        algorithm="HS256",
    )
    for token in (expired, foreign):
        response = client.post(URL, json=body(1), headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401


def test_jobs_are_private_to_their_submitter(client, auth_headers) -> None:
    job_id = client.post(URL, json=body(1), headers=auth_headers("alice")).json()["jobId"]
    assert client.get(f"{URL}/{job_id}", headers=auth_headers("mallory")).status_code == 404
    assert client.get(f"{URL}/{job_id}").status_code == 401
    assert (
        client.get(
            f"/api/models/999/contributions/{job_id}", headers=auth_headers("alice")
        ).status_code
        == 404
    )


def test_idempotency_key_stores_rows_once(client, auth_headers, db) -> None:
    headers = {**auth_headers(), "Idempotency-Key": "batch-0001"}
    first = client.post(URL, json=body(3), headers=headers)
    second = client.post(URL, json=body(3), headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["jobId"] == second.json()["jobId"]
    assert counts(db)[0] == 1


def test_body_over_the_limit_is_413(make_settings, auth_headers) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(make_settings(contribution_max_body_bytes=4096))
    with TestClient(app) as small:
        big = json.dumps(body(200)).encode()
        response = small.post(
            URL, content=big, headers={**auth_headers(), "content-type": "application/json"}
        )
        assert response.status_code == 413
        assert "detail" in response.json()

        def chunks():
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        chunked = small.post(
            URL, content=chunks(), headers={**auth_headers(), "content-type": "application/json"}
        )
        assert chunked.status_code == 413
    app.state.db.dispose()


def test_failed_commit_leaves_no_object(app, auth_headers, db, settings, monkeypatch) -> None:
    from fastapi.testclient import TestClient

    import pipeline.contributions as contributions

    client = TestClient(app, raise_server_exceptions=False)

    def broken(session, stored) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(contributions, "enqueue_local_arrival", broken)
    response = client.post(URL, json=body(2), headers=auth_headers())
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error"}
    assert counts(db) == (0, 0, 0)
    assert stored_files(settings) == []


def test_contribution_on_s3_announces_itself_through_sqs(s3_settings, auth_headers) -> None:
    import boto3
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(s3_settings)
    with TestClient(app) as s3_client:
        response = s3_client.post(URL, json=body(4), headers=auth_headers())
        assert response.status_code == 202
    app.state.db.dispose()
    sqs = boto3.client("sqs", endpoint_url=s3_settings.s3_endpoint_url, region_name="us-east-1")
    keys = []
    for _ in range(5):
        messages = sqs.receive_message(
            QueueUrl=s3_settings.dataset_arrival_sqs_queue_url, MaxNumberOfMessages=10
        ).get("Messages", [])
        for message in messages:
            payload = json.loads(message["Body"])
            keys += [r["s3"]["object"]["key"] for r in payload.get("Records", [])]
        if keys:
            break
    assert any("rows.parquet" in key for key in keys)


def test_token_for_an_overlong_user_id_is_refused(client, settings) -> None:
    from pipeline.sessions import ALGORITHM

    now = utcnow()
    token = jwt.encode(
        {"sub": "u" * 201, "iat": now, "exp": now + timedelta(hours=1),
         "iss": settings.service_name, "adm": True},
        settings.jwt_key(), algorithm=ALGORITHM,
    )  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    assert client.post(URL, json=body(1), headers=headers).status_code == 401
    create = client.post(
        "/api/v1/keys", json={"name": "k", "service_id": "platform"}, headers=headers
    )
    assert create.status_code == 401
