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

from pipeline.core.db import Database
from pipeline.core.tables import ArrivalEvent, Contribution, DatasetVersion, utcnow
from pipeline.models.definitions import demo_definition

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


def test_a_reused_idempotency_key_still_validates_the_body(client, auth_headers, db) -> None:
    headers = {**auth_headers(), "Idempotency-Key": "batch-0002"}
    assert client.post(URL, json=body(3), headers=headers).status_code == 202
    bad = body(3)
    bad["rows"][1]["tenure_months"] = "not a number"
    retried = client.post(URL, json=bad, headers=headers)
    assert retried.status_code == 400
    assert retried.json()["errors"][0]["rowIndex"] == 1
    assert counts(db)[0] == 1


def test_an_idempotency_key_reused_for_another_request_is_409(client, auth_headers, db) -> None:
    headers = {**auth_headers(), "Idempotency-Key": "batch-0003"}
    assert client.post(URL, json=body(3), headers=headers).status_code == 202
    other = client.post(URL, json=body(5), headers=headers)
    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["detail"]
    assert counts(db)[0] == 1


@pytest.mark.parametrize("key", [b"", b" ", b"x" * 201, "caf\u00e9".encode("latin-1")])
def test_an_empty_or_malformed_idempotency_key_is_400_every_time(
    client, auth_headers, db, key: bytes
) -> None:
    headers = {**auth_headers(), "Idempotency-Key": key}
    for _ in range(2):
        response = client.post(URL, json=body(3), headers=headers)
        assert response.status_code == 400, response.text
        assert response.json()["ok"] is False
    assert counts(db)[0] == 0


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

    import pipeline.intake.versions as versions

    client = TestClient(app, raise_server_exceptions=False)

    def broken(session, stored) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(versions, "enqueue_local_arrival", broken)
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
    from pipeline.auth.sessions import ALGORITHM

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


# --- non-finite numbers, unreadable bodies, large bodies (issues 9, 10, 13) -----------------


def raw_body(rows_json: list[str]) -> bytes:
    return (
        '{"modelId": 1, "benchmarkSpecId": null, "rows": [' + ",".join(rows_json) + "]}"
    ).encode()


def row_json(charges: str = "79.85", **fields: str) -> str:
    values = {
        "tenure_months": "14",
        "monthly_charges": charges,
        "contract": '"one-year"',
        "support_calls": "3",
        "churned": "1",
        **fields,
    }
    return "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}"


def post_raw(client, auth_headers, content: bytes):
    return client.post(
        URL, content=content, headers={**auth_headers(), "content-type": "application/json"}
    )


def assert_spec_body(response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    payload = response.json()
    assert payload["ok"] is False and payload["status"] == 400
    assert isinstance(payload["message"], str) and payload["message"]
    assert payload["errors"] and all(
        set(e) == {"path", "message", "rowIndex"} and isinstance(e["rowIndex"], int)
        for e in payload["errors"]
    )
    return payload


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" * 401])
def test_non_finite_numbers_are_refused_at_their_row_path(
    client, auth_headers, db, settings, literal
) -> None:
    content = raw_body([row_json(), row_json(), row_json(charges=literal), row_json()])
    payload = assert_spec_body(post_raw(client, auth_headers, content))
    assert [(e["path"], e["rowIndex"]) for e in payload["errors"]] == [
        ("rows[2].monthly_charges", 2)
    ]
    assert "not a finite number" in payload["errors"][0]["message"]
    assert counts(db) == (0, 0, 0)
    assert stored_files(settings) == []


def test_out_of_range_numbers_and_schema_errors_are_all_listed(client, auth_headers, db) -> None:
    rows_json = [row_json() for _ in range(30)]
    rows_json[4] = row_json(charges="1e400")
    rows_json[9] = row_json(tenure_months="500")
    rows_json[21] = row_json(charges="-" + "9" * 400)
    payload = assert_spec_body(post_raw(client, auth_headers, raw_body(rows_json)))
    assert [e["path"] for e in payload["errors"]] == [
        "rows[4].monthly_charges",
        "rows[9].tenure_months",
        "rows[21].monthly_charges",
    ]
    assert payload["message"].startswith("3 of 30 rows")
    assert counts(db) == (0, 0, 0)


def test_every_nan_and_infinity_literal_is_listed(client, auth_headers, db) -> None:
    # NaN and Infinity are not JSON at all: the body is scanned row by row to place each.
    rows_json = [row_json() for _ in range(30)]
    rows_json[3] = row_json(charges="NaN")
    rows_json[17] = row_json(charges="Infinity", support_calls="-Infinity")
    payload = assert_spec_body(post_raw(client, auth_headers, raw_body(rows_json)))
    assert [(e["path"], e["rowIndex"]) for e in payload["errors"]] == [
        ("rows[3].monthly_charges", 3),
        ("rows[17].monthly_charges", 17),
        ("rows[17].support_calls", 17),
    ]
    assert counts(db) == (0, 0, 0)


def test_non_finite_number_in_the_envelope_is_refused(client, auth_headers, db) -> None:
    content = b'{"modelId": 1e400, "benchmarkSpecId": null, "rows": [' + row_json().encode() + b"]}"
    payload = assert_spec_body(post_raw(client, auth_headers, content))
    assert payload["errors"][0]["path"] == "modelId"
    assert counts(db) == (0, 0, 0)


@pytest.mark.parametrize(
    ("content", "path"),
    [
        (b"\xff\xfe{}", "body"),
        (b'{"modelId": 1, "benchmarkSpecId": "\xff", "rows": []}', "benchmarkSpecId"),
        (raw_body([row_json(contract='"\xff"'.encode("latin-1").decode("latin-1"))]), None),
        (b"[" * 10_000 + b"]" * 10_000, "body"),
        (b'{"modelId": 1, "benchmarkSpecId": null, "rows": [' + b"[" * 10_000 + b"]" * 10_000
         + b"]}", "rows[0]"),
        (b'{"manifest": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_000 + b"}", "manifest"),
        (b'{"modelId": 1, "benchmarkSpecId": null, "rows": ["\\ud800"]}', None),
        (b"", "body"),
    ],
)  # fmt: skip
def test_unreadable_bodies_get_the_spec_body(client, auth_headers, db, content, path) -> None:
    payload = assert_spec_body(post_raw(client, auth_headers, content))
    if path is not None:
        assert payload["errors"][0]["path"] == path, payload
    assert counts(db) == (0, 0, 0)


def test_non_utf8_text_in_a_row_is_located(client, auth_headers, db) -> None:
    content = raw_body([row_json(), row_json()]).replace(b'"one-year"', b'"one-\xffyear"', 1)
    payload = assert_spec_body(post_raw(client, auth_headers, content))
    assert payload["errors"][0]["path"] == "rows[0]"
    assert "UTF-8" in payload["errors"][0]["message"]


def test_failing_rows_across_chunks_keep_their_own_index(client, auth_headers, db) -> None:
    from pipeline.intake.jsonrows import ROW_CHUNK

    submitted = rows(2 * ROW_CHUNK + 10)
    bad = [5, ROW_CHUNK - 1, ROW_CHUNK, 2 * ROW_CHUNK + 9]
    for index in bad:
        submitted[index]["support_calls"] = -1
    response = client.post(URL, json=body(rows=submitted), headers=auth_headers())
    payload = assert_spec_body(response)
    assert [(e["path"], e["rowIndex"]) for e in payload["errors"]] == [
        (f"rows[{i}].support_calls", i) for i in bad
    ]
    assert payload["message"].startswith(f"4 of {len(submitted)} rows")
    assert counts(db) == (0, 0, 0)


def test_errors_stay_capped_for_a_body_of_bad_rows(client, auth_headers, db) -> None:
    from pipeline.models.dataspec import MAX_ERRORS_TOTAL

    submitted = rows(3000)
    for row in submitted:
        row["contract"] = "weekly"
        row["support_calls"] = 99
    payload = assert_spec_body(client.post(URL, json=body(rows=submitted), headers=auth_headers()))
    assert len(payload["errors"]) == MAX_ERRORS_TOTAL
    assert payload["errors"][0]["path"] == "rows[0].contract"


def test_many_rows_are_stored_column_by_column_with_their_types(
    client, auth_headers, settings
) -> None:
    from pipeline.intake.jsonrows import ROW_CHUNK

    submitted = rows(ROW_CHUNK + 123)
    for i, row in enumerate(submitted):
        row["monthly_charges"] = i % 400 if i % 2 else (i % 3000) / 7  # ints in a number column
        row["has_fiber"] = i % 3 == 0
        if i % 5 == 0:
            del row["payment_method"]
    response = client.post(URL, json=body(rows=submitted), headers=auth_headers())
    assert response.status_code == 202, response.text
    table = pq.read_table(settings.objects_dir / "datasets/1/v1/rows.parquet")
    assert table.num_rows == len(submitted)
    assert str(table.schema.field("tenure_months").type) == "int64"
    assert str(table.schema.field("monthly_charges").type) == "double"
    assert table.to_pylist() == [
        {name: row.get(name) for name in table.column_names} for row in submitted
    ]


def test_the_openapi_document_describes_the_request_body(client) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/api/models/{modelId}/contributions"]
    schema = operation["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["modelId", "benchmarkSpecId", "rows"]
    assert schema["properties"]["rows"]["minItems"] == 1
    assert schema["additionalProperties"] is False
