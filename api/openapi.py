"""The OpenAPI document as the service really answers: FastAPI's generated one, completed.

FastAPI documents what it knows from the route declarations. Some answers come from elsewhere,
and without them a client (or schemathesis) meets statuses the document never mentions, or
looks for one it will never get:

- request validation errors are 400 with `{detail}` (spec §7, key management), or the
  spec §2.4 body on the contribution routes, never FastAPI's 422 (api/errors.py);
- 413 comes from the body size limit (api/limits.py) on every operation that takes a body;
- 401 from every credential check, 403 and 429 from the platform key check (api/deps.py);
- 404 on every operation with a path parameter: an unknown resource, or text the parameter's
  route pattern does not match (key ids are UUIDs);
- 503 with Retry-After when the database is unreachable, on every operation that reads it.

A 422 stays only where a route declared it itself (upload contents, cron expressions). Error
bodies are `{detail: string}` unless the route declared another body.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from pipeline.core.config import Settings
from pipeline.rewards.manifests import ContributorManifest

ERROR_BODY = "ErrorBody"
ERROR_SCHEMA: dict[str, Any] = {
    "title": ERROR_BODY,
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string", "title": "Detail"}},
}
RETRY_AFTER: dict[str, Any] = {
    "Retry-After": {
        "description": "seconds to wait before retrying",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}
# FastAPI's description of the 422 it adds to every operation with parameters or a body.
FASTAPI_VALIDATION_DESCRIPTION = "Validation Error"
# Operations that do not touch the database.
NO_DATABASE = {"/healthz"}
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}

DEFAULT_DESCRIPTIONS = {
    400: "invalid request parameters or body",
    401: "missing or invalid credentials",
    403: "the credential may not do this (scope, address, service, or role)",
    404: "no such resource",
    413: "request body too large",
    429: "the key's rate limit is reached (Retry-After)",
    503: "the database is unavailable; retry shortly (Retry-After)",
}


# OpenAPI links: which answer gives the parameters of which later call. Clients and stateful
# fuzzers (schemathesis) follow them from a created resource to its reads and changes.
KEY_ID = "$response.body#/key_info/key_id"
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("/api/v1/keys", "post", "201"): {
        "GetKey": ("/api/v1/keys/{key_id}", "get", {"key_id": KEY_ID}),
        "RotateKey": ("/api/v1/keys/{key_id}/rotate", "post", {"key_id": KEY_ID}),
        "RevokeKey": ("/api/v1/keys/{key_id}", "delete", {"key_id": KEY_ID}),
    },
    ("/api/v1/keys/{key_id}/rotate", "post", "200"): {
        "GetRotatedKey": ("/api/v1/keys/{key_id}", "get", {"key_id": KEY_ID}),
        "RevokeRotatedKey": ("/api/v1/keys/{key_id}", "delete", {"key_id": KEY_ID}),
    },
    ("/api/v1/organizations/{org_id}/api-keys", "post", "201"): {
        "RevokeOrgKey": (
            "/api/v1/organizations/{org_id}/api-keys/{key_id}",
            "delete",
            {"org_id": "$request.path.org_id", "key_id": KEY_ID},
        ),
    },
    ("/api/models/{modelId}/contributions", "post", "202"): {
        "GetContribution": (
            "/api/models/{modelId}/contributions/{jobId}",
            "get",
            {"modelId": "$request.path.modelId", "jobId": "$response.body#/jobId"},
        ),
    },
    **{
        ("/api/v1/models/{model_id}/evaluation-schedule", method, status): {
            f"{verb}Schedule": (
                "/api/v1/models/{model_id}/evaluation-schedule",
                target,
                {"model_id": "$request.path.model_id"},
            )
            for verb, target in (("Read", "get"), ("Update", "put"), ("Delete", "delete"))
        }
        for method, status in (("post", "201"), ("put", "200"))
    },
}


def install_openapi(app: FastAPI, settings: Settings) -> None:
    """Serve the completed document at /openapi.json (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            complete(document, settings)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def complete(document: dict[str, Any], settings: Settings) -> None:
    """Add the statuses, bodies and credentials the generated document leaves out."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas[ERROR_BODY] = ERROR_SCHEMA
    manifest = ContributorManifest.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(manifest.pop("$defs", {}))
    schemas["ContributorManifest"] = manifest
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemes = components.setdefault("securitySchemes", {})
    schemes["SessionCookie"] = {
        "type": "apiKey",
        "in": "cookie",
        "name": settings.session_cookie_name(),
        "description": "the session JWT as a cookie (spec §5)",
    }
    paths = document.get("paths", {})
    for path, item in paths.items():
        for method, operation in item.items():
            if method in METHODS:
                _complete_operation(path, operation)
    for (path, method, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {
                "operationId": paths[target][target_method]["operationId"],
                "parameters": parameters,
            }
            for name, (target, target_method, parameters) in links.items()
        }


def _complete_operation(path: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    declared_422 = responses.get("422", {}).get("description") != FASTAPI_VALIDATION_DESCRIPTION
    if not declared_422:
        responses.pop("422", None)
    parameters = operation.get("parameters", [])
    security = [name for requirement in operation.get("security", []) for name in requirement]
    statuses: set[int] = set()
    if "requestBody" in operation or any(map(_can_fail_validation, parameters)):
        statuses.add(400)
    else:
        # Declared by habit on routes whose only parameter is a UUID in the path: any other
        # text matches no route (404), so a 400 never comes.
        responses.pop("400", None)
    if "requestBody" in operation:
        statuses.add(413)
    if security:
        statuses.add(401)
    if "PlatformApiKey" in security:
        statuses.update({403, 429})
    if "SessionToken" in security:
        operation["security"].append({"SessionCookie": []})
    if any(parameter.get("in") == "path" for parameter in parameters):
        statuses.add(404)
    if path not in NO_DATABASE:
        statuses.add(503)
    for added in statuses:
        responses.setdefault(str(added), {})
    for status, response in responses.items():
        code = int(status)
        if code < 400:
            continue
        response.setdefault("description", DEFAULT_DESCRIPTIONS.get(code, "error"))
        content = response.setdefault("content", {})
        body = content.setdefault("application/json", {})
        body.setdefault("schema", {"$ref": f"#/components/schemas/{ERROR_BODY}"})
        if code in (429, 503):
            response.setdefault("headers", RETRY_AFTER)


def _can_fail_validation(parameter: dict[str, Any]) -> bool:
    """Whether some value of this parameter (or its absence) is refused with 400."""
    if parameter.get("required") and parameter.get("in") != "path":
        return True
    schema = parameter.get("schema", {})
    if parameter.get("in") == "path" and schema.get("format") == "uuid":
        return False
    constraints = {"minLength", "maxLength", "pattern", "enum", "format", "minimum", "maximum"}
    return schema.get("type") != "string" or bool(constraints & set(schema))
