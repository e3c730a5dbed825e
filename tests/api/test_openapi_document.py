"""The OpenAPI document says what the server does: statuses, Allow on 405, credentials, rules."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeline.core.errors import Unprocessable
from pipeline.triggers.schedules import CRON_PATTERN, validate_cron

ADMIN = {"Authorization": "Bearer test-admin-token"}


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    return client.get("/openapi.json").json()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


def test_validation_errors_are_documented_as_400_not_fastapis_422(document) -> None:
    declared_422 = set()
    for path, method, operation in operations(document):
        responses = operation["responses"]
        if "requestBody" in operation:
            assert {"400", "413"} <= set(responses), (method, path)
        if "422" in responses:
            declared_422.add((method, path))
    assert declared_422 == {
        ("post", "/api/v1/benchmarks/upload/{model_id}"),
        ("post", "/api/v1/models/{model_id}/evaluation-schedule"),
        ("put", "/api/v1/models/{model_id}/evaluation-schedule"),
        # A well-formed proof refused: expired, issued to another user, signed by another key.
        ("post", "/api/wallet-proofs/verify"),
    }
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_error_bodies_are_documented(document) -> None:
    contribution = document["paths"]["/api/models/{modelId}/contributions"]["post"]
    rejected = contribution["responses"]["400"]["content"]["application/json"]["schema"]
    assert rejected == {"$ref": "#/components/schemas/ContributionRejected"}
    keys = document["paths"]["/api/v1/keys"]["post"]["responses"]
    assert keys["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }
    assert "413" in keys and "503" in keys
    assert "Retry-After" in keys["503"]["headers"]


def test_each_operation_names_its_credential(document) -> None:
    schemes = document["components"]["securitySchemes"]
    assert set(schemes) == {"AdminToken", "SessionToken", "SessionCookie", "PlatformApiKey"}
    assert schemes["SessionCookie"]["in"] == "cookie"
    security = {
        (method, path): [name for requirement in op.get("security", []) for name in requirement]
        for path, method, op in operations(document)
    }
    assert security[("post", "/api/v1/keys")] == ["AdminToken"]
    assert security[("get", "/api/v1/organizations/{org_id}/api-keys")] == [
        "SessionToken",
        "SessionCookie",
    ]
    assert security[("post", "/api/models/{modelId}/contributions")] == [
        "SessionToken",
        "SessionCookie",
    ]
    assert security[("get", "/api/v1/dataset-arrivals")] == ["PlatformApiKey"]
    assert security[("get", "/api/models/{modelId}/data-spec")] == []
    assert security[("post", "/api/v1/keys/verify")] == []
    for (method, path), names in security.items():
        responses = document["paths"][path][method]["responses"]
        if names:
            assert "401" in responses, (method, path)
        if "PlatformApiKey" in names:
            assert {"403", "429"} <= set(responses), (method, path)


def test_key_ids_are_uuids_and_model_ids_bounded(document) -> None:
    key = document["paths"]["/api/v1/keys/{key_id}"]["get"]
    assert key["parameters"][0]["schema"]["format"] == "uuid"
    assert "400" not in key["responses"] and "404" in key["responses"]
    spec = document["paths"]["/api/models/{modelId}/data-spec"]["get"]
    model_id = spec["parameters"][0]["schema"]
    assert (model_id["minimum"], model_id["maximum"]) == (1, 2**31 - 1)


def test_request_rules_are_in_the_schemas(document) -> None:
    schemas = document["components"]["schemas"]
    key = schemas["KeyCreate"]["properties"]
    assert re.match(key["name"]["pattern"], "ok name")
    assert not re.match(key["name"]["pattern"], "bad\x07name")
    assert key["scopes"]["items"]["minLength"] == 1
    cron = schemas["ScheduleCreate"]["properties"]["cron_expression"]
    assert cron["pattern"] == CRON_PATTERN and cron["maxLength"] == 200
    manifest = document["paths"]["/api/contributors/me"]["put"]["requestBody"]
    manifest_schema = manifest["content"]["application/json"]["schema"]
    assert manifest_schema["$ref"] == "#/components/schemas/ContributorManifest"
    assert "license" in schemas["ContributorManifest"]["required"]
    wallet = document["paths"]["/api/rewards"]["get"]["parameters"][0]["schema"]
    assert re.match(wallet["pattern"], "0x" + "ab" * 20)
    assert not re.match(wallet["pattern"], "0x" + "ab" * 20 + "\n")
    contribution = document["paths"]["/api/models/{modelId}/contributions"]["post"]
    body = contribution["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["rows"]["minItems"] == 1
    header = next(p for p in contribution["parameters"] if p["in"] == "header")
    assert header["schema"]["anyOf"][0]["minLength"] == 1
    upload = document["paths"]["/api/v1/benchmarks/upload/{model_id}"]["post"]
    form = upload["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["properties"]["file"]["format"] == "binary"


def test_links_lead_from_a_created_key_to_its_reads(document) -> None:
    links = document["paths"]["/api/v1/keys"]["post"]["responses"]["201"]["links"]
    assert links["GetKey"]["parameters"] == {"key_id": "$response.body#/key_info/key_id"}


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/api/v1/keys", "GET, POST"),
        ("/api/v1/keys/00000000-0000-4000-8000-000000000000", "DELETE, GET"),
        ("/api/contributors/me", "GET, PUT"),
        ("/api/v1/models/1/evaluation-schedule", "DELETE, GET, POST, PUT"),
        ("/api/v1/keys/verify", "POST"),
    ],
)
def test_405_names_every_method_of_the_path(client: TestClient, path: str, allow: str) -> None:
    response = client.request("PATCH", path, headers=ADMIN)
    assert response.status_code == 405
    assert response.headers["allow"] == allow


def test_out_of_range_model_id_is_400_not_an_overflow(client: TestClient) -> None:
    for url in ("/api/models/2147483648/data-spec", "/api/models/0/evaluations"):
        response = client.get(url)
        assert response.status_code == 400, url
        assert set(response.json()) == {"detail"}


def test_non_uuid_key_id_is_404(client: TestClient) -> None:
    assert client.get("/api/v1/keys/verify", headers=ADMIN).status_code == 405
    assert client.get("/api/v1/keys/not-a-key", headers=ADMIN).status_code == 404


@pytest.mark.parametrize(
    "expression", ["0 0 L * *", "0 0 * * 5#2", "0 0 ? * *", "H * * * *", "0 0 0 * * *", ""]
)
def test_croniter_extensions_are_refused_by_the_pattern_and_the_domain(expression: str) -> None:
    assert not re.match(CRON_PATTERN, expression)
    with pytest.raises(Unprocessable):
        validate_cron(expression)


@pytest.mark.parametrize("expression", ["*/5 * * * *", " 0 12 * jan-MAR mon-fri ", "@DAILY"])
def test_standard_cron_passes_the_pattern_and_the_domain(expression: str) -> None:
    assert re.match(CRON_PATTERN, expression)
    validate_cron(expression)
