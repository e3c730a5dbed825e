"""Every string of every request body is bounded and refuses NUL (issue 21 row 6), in the
pydantic models and in the OpenAPI document; no SQL parameters reach the logs.

On PostgreSQL an over-long `benchmarkSpecId` or a NUL answered 500 and logged the statement with
its parameters; on SQLite 10 MB values were stored and echoed on every job view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text
from sqlalchemy.exc import SQLAlchemyError

from pipeline.core.db import Database
from pipeline.core.tables import Contribution
from tests.intake.test_contributions import URL, body
from tests.intake.test_uploads import csv_bytes, upload

NUL = "a\x00b"


def _strings(
    schema: Any, components: dict[str, Any], where: str, seen: frozenset[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every string schema reachable from `schema`, with where it is."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _strings(components[name], components, f"{where}->{name}", seen | {name})
        return
    branches = [b for k in ("anyOf", "oneOf", "allOf") for b in schema.get(k, [])]
    types = schema.get("type")
    if not branches and (types == "string" or (isinstance(types, list) and "string" in types)):
        yield where, schema
    for branch in branches:
        # A branch inherits the type and bounds stated beside it (a pattern next to anyOf).
        yield from _strings({**_bounds(schema), **branch}, components, where, seen)
    for name, sub in schema.get("properties", {}).items():
        yield from _strings(sub, components, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        yield from _strings(schema["items"], components, f"{where}[]", seen)


def _bounds(schema: dict[str, Any]) -> dict[str, Any]:
    kept = ("type", "maxLength", "pattern", "enum", "format")
    return {k: schema[k] for k in kept if k in schema}


def test_every_string_of_every_request_body_is_bounded_in_the_document(
    client: TestClient,
) -> None:
    document = client.get("/openapi.json").json()
    components = document["components"]["schemas"]
    unbounded = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            for media, entry in content.items():
                where = f"{method.upper()} {path} [{media}]"
                for field, schema in _strings(
                    entry.get("schema", {}), components, where, frozenset()
                ):
                    if schema.get("format") == "binary" or "enum" in schema:
                        continue
                    if "maxLength" not in schema and "const" not in schema:
                        unbounded.append(f"{field}: no maxLength")
                    if "pattern" not in schema and "format" not in schema:
                        unbounded.append(f"{field}: NUL not excluded (no pattern)")
    assert unbounded == []


def _job_count(db: Database) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(Contribution)) or 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("benchmarkSpecId", "b" * 37),
        ("benchmarkSpecId", NUL),
        ("schemaVersion", "v" * 101),
        ("schemaVersion", NUL),
        ("templateId", "t" * 10_000_000),
        ("templateId", NUL),
    ],
)
def test_contribution_strings_are_bounded_and_refuse_nul(
    client: TestClient,
    auth_headers: Callable[..., dict[str, str]],
    db: Database,
    caplog: pytest.LogCaptureFixture,
    field: str,
    value: str,
) -> None:
    response = client.post(URL, json=body(2, **{field: value}), headers=auth_headers())
    assert response.status_code == 400
    answer = response.json()
    assert answer["ok"] is False and answer["status"] == 400
    assert [e["path"] for e in answer["errors"]] == [field]
    assert len(response.content) < 2_000  # the value is not echoed back
    assert _job_count(db) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_contribution_strings_at_their_bounds_are_accepted(
    client: TestClient, auth_headers: Callable[..., dict[str, str]]
) -> None:
    payload = body(2, benchmarkSpecId="b" * 36, schemaVersion="v" * 100, templateId="t" * 100)
    response = client.post(URL, json=payload, headers=auth_headers())
    assert response.status_code == 202, response.text


MANIFEST = {
    "contributor_id": "alice",
    "wallet_address": "0x8c2Ead04647BE200896CE2020DCbEbA56B6afB75",
    "data_description": "rows\nfrom the March run\t(tab)",
    "data_source": "CRM export",
    "license": "CC-BY-4.0",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("contributor_id", NUL),
        ("contributor_id", "line\nbreak"),
        ("data_description", NUL),
        ("data_source", "x\x1b[31m"),
        ("license", "LicenseRef-" + "x" * 300),
        ("wallet_address", "0x" + "a" * 5_000),
    ],
)
def test_manifest_strings_are_bounded_and_refuse_nul(
    client: TestClient, auth_headers: Callable[..., dict[str, str]], field: str, value: str
) -> None:
    response = client.put(
        "/api/contributors/me", json={**MANIFEST, field: value}, headers=auth_headers()
    )
    assert response.status_code == 400
    assert field in response.json()["detail"]
    assert client.get("/api/contributors/me", headers=auth_headers()).status_code == 404
    # Line breaks and tabs are fine in a description.
    assert (
        client.put("/api/contributors/me", json=MANIFEST, headers=auth_headers()).status_code == 201
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("eval_split", NUL),
        ("target_column", "churned\x00"),
        ("input_columns", "tenure_months,\x00"),
        ("input_columns", "a," * 9_000),
    ],
)
def test_upload_form_fields_are_bounded_and_refuse_nul(
    client: TestClient, platform_key: Callable[..., str], field: str, value: str
) -> None:
    headers = {"Authorization": f"Bearer {platform_key('admin')}"}
    response = upload(client, headers, csv_bytes(), **{field: value})
    assert response.status_code == 400
    assert field in response.json()["detail"]


def test_key_bodies_are_bounded_and_refuse_nul(client: TestClient, settings: Any) -> None:
    from tests.conftest import TEST_ADMIN_TOKEN

    admin = {"Authorization": f"Bearer {TEST_ADMIN_TOKEN}"}
    created = client.post(
        "/api/v1/keys",
        json={"name": "k", "service_id": "platform", "allowed_ips": ["1" * 65]},
        headers=admin,
    )
    assert created.status_code == 400
    assert "allowed_ips" in created.json()["detail"]
    for payload in ({"api_key": "mk_" + NUL}, {"api_key": "mk_x", "scope": NUL}):
        verified = client.post("/api/v1/keys/verify", json=payload, headers=admin)
        assert verified.status_code == 400, payload


def test_database_errors_never_carry_their_parameters(db: Database) -> None:
    """The message SQLAlchemy puts in an error (logged with a 500's traceback) has no values."""
    secret = "secret-value-2f9c1e"
    with pytest.raises(SQLAlchemyError) as raised, db.session() as session:
        session.execute(text("INSERT INTO no_such_table (a) VALUES (:v)"), {"v": secret})
    assert secret not in str(raised.value)
    assert "hidden due to hide_parameters" in str(raised.value)
