"""API key management (spec §4.6) with the admin token, the verify call, and `whoami`.

`/api/v1/keys…` authenticate with `Authorization: Bearer <ADMIN_TOKEN>` (or an admin JWT) and act
on the caller's own keys. `POST /api/v1/keys/verify` needs no admin token: it is how another
service (the prediction service) checks a key it was given. `GET /api/v1/whoami` is the smallest
route behind a `platform` API key.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field, ValidationInfo, field_validator
from starlette.concurrency import run_in_threadpool

from api.deps import admin_user, client_ip, get_db, get_key_verifier, platform_key
from pipeline.auth.keys import (
    KeyCreate,
    create_key,
    get_owned_key,
    key_info,
    list_keys,
    revoke_key,
    rotate_key,
)
from pipeline.auth.sessions import Identity
from pipeline.auth.verification import (
    MAX_PRESENTED_KEY_CHARS,
    KeyNotPermitted,
    KeyPrincipal,
    KeyRefused,
    verify_result,
)
from pipeline.core.db import Database
from pipeline.core.text import NO_CONTROL_CHARACTERS, printable

router = APIRouter(prefix="/api/v1", tags=["keys"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid request body or parameters"},
    401: {"description": "missing or invalid admin token"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "key not found"}}


class KeyInfoBody(BaseModel):
    """APIKeyInfo, spec §2.8."""

    key_id: str
    name: str
    key_prefix: str
    user_id: str
    service_id: str
    scopes: list[str]
    environment: str
    is_active: bool
    rate_limit_per_hour: int
    monthly_prediction_limit: int | None
    billing_plan: str
    created_at: str
    expires_at: str | None
    last_used_at: str | None


class KeyResponseBody(BaseModel):
    """APIKeyResponse, spec §2.9: the full key appears only here (create and rotate)."""

    api_key: str
    key_info: KeyInfoBody


class MessageBody(BaseModel):
    message: str


class VerifyRequest(BaseModel):
    """A key to check; optionally the service it must belong to and a scope it must carry."""

    model_config = {"extra": "forbid"}

    api_key: str = Field(
        min_length=1,
        max_length=MAX_PRESENTED_KEY_CHARS,
        json_schema_extra={"pattern": NO_CONTROL_CHARACTERS},
    )
    service_id: Literal["prediction", "platform"] | None = None
    scope: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        json_schema_extra={"pattern": NO_CONTROL_CHARACTERS},
    )

    @field_validator("api_key", "scope")
    @classmethod
    def _printable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else printable(value, str(info.field_name))


class VerifyResponse(BaseModel):
    valid: bool
    key_id: str | None = None
    service_id: str | None = None
    scopes: list[str] | None = None
    user_id: str | None = None
    reason: str | None = None


class WhoAmI(BaseModel):
    key_id: str
    user_id: str
    org_id: str | None
    service_id: str
    scopes: list[str]


@router.post(
    "/keys",
    status_code=201,
    response_model=KeyResponseBody,
    summary="Create a key (the full value is returned once)",
    responses=ERRORS,
)
def create(
    body: KeyCreate, caller: Identity = Depends(admin_user), db: Database = Depends(get_db)
) -> dict[str, Any]:
    with db.session() as session:
        return create_key(session, body, user_id=caller.user_id).response()


@router.get(
    "/keys",
    response_model=list[KeyInfoBody],
    summary="List the caller's keys (never the key value)",
    responses=ERRORS,
)
def index(
    service_id: Literal["prediction", "platform"] | None = Query(None),
    active_only: bool = Query(False, description="only active and unexpired keys"),
    caller: Identity = Depends(admin_user),
    db: Database = Depends(get_db),
) -> list[dict[str, Any]]:
    with db.session() as session:
        keys = list_keys(
            session, user_id=caller.user_id, service_id=service_id, active_only=active_only
        )
        return [key_info(key) for key in keys]


@router.post(
    "/keys/verify",
    response_model=VerifyResponse,
    response_model_exclude_none=True,
    summary="Verify a key (no admin token; counts as a use of the key)",
    responses={
        400: {"description": "invalid request body"},
        429: {"description": "rate limit or monthly prediction limit reached (Retry-After)"},
    },
)
async def verify(body: VerifyRequest, request: Request) -> dict[str, Any]:
    # Async, with the blocking check in one worker-thread hop: this is the hot path.
    try:
        principal = await run_in_threadpool(
            get_key_verifier(request).use,
            body.api_key,
            client_ip=client_ip(request),
            service_id=body.service_id,
            scope=body.scope,
        )
    except (KeyRefused, KeyNotPermitted) as exc:
        return {"valid": False, "reason": exc.reason}
    return verify_result(principal)


@router.get(
    "/keys/{key_id:any_uuid}",
    response_model=KeyInfoBody,
    summary="Get one of the caller's keys",
    responses={**ERRORS, **NOT_FOUND},
)
def show(
    key_id: UUID, caller: Identity = Depends(admin_user), db: Database = Depends(get_db)
) -> dict[str, Any]:
    with db.session() as session:
        return key_info(get_owned_key(session, str(key_id), caller.user_id))


@router.post(
    "/keys/{key_id:any_uuid}/rotate",
    response_model=KeyResponseBody,
    summary="Rotate: a new key_id and value, same configuration; the old key stops at once",
    responses={
        **ERRORS,
        **NOT_FOUND,
        409: {"description": "the key is revoked, rotated out or expired"},
    },
)
def rotate(
    key_id: UUID, caller: Identity = Depends(admin_user), db: Database = Depends(get_db)
) -> dict[str, Any]:
    with db.session() as session:
        key = get_owned_key(session, str(key_id), caller.user_id)
        return rotate_key(session, key).response()


@router.delete(
    "/keys/{key_id:any_uuid}",
    response_model=MessageBody,
    summary="Revoke a key (permanent)",
    responses={**ERRORS, **NOT_FOUND},
)
def revoke(
    key_id: UUID, caller: Identity = Depends(admin_user), db: Database = Depends(get_db)
) -> dict[str, str]:
    with db.session() as session:
        key = get_owned_key(session, str(key_id), caller.user_id)
        revoke_key(session, key)
        return {"message": f"API key {key.id} revoked"}


@router.get(
    "/whoami",
    response_model=WhoAmI,
    tags=["platform"],
    summary="Who a platform API key acts for",
    responses={
        401: {"description": "missing or invalid API key"},
        403: {"description": "not a platform key, or address not allowed"},
        429: {"description": "rate limit reached (Retry-After)"},
    },
)
async def whoami(principal: KeyPrincipal = Depends(platform_key())) -> dict[str, Any]:
    return {
        "key_id": principal.key_id,
        "user_id": principal.user_id,
        "org_id": principal.org_id,
        "service_id": principal.service_id,
        "scopes": list(principal.scopes),
    }
