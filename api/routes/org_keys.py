"""Organization-scoped keys (spec §4.7): session JWT plus the caller's role in the org (§5 matrix).

Order of checks: no or bad JWT 401; not a member (or no such org) 403; role lacks the action 403;
a key that is not this org's 404. Org keys are ordinary keys with `org_id` set and `user_id` the
member who created them, which is what the Developer rule ("own keys only") compares.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Query

from api.deps import (
    JSON_ONLY_RESPONSES,
    current_user,
    get_db,
    json_write_request,
    same_origin_request,
)
from api.routes.keys import KeyInfoBody, KeyResponseBody, MessageBody
from pipeline.auth.keys import KeyCreate, create_key, get_org_key, key_info, list_keys, revoke_key
from pipeline.auth.orgs import KeyAction, membership
from pipeline.auth.sessions import Identity
from pipeline.core.db import Database

router = APIRouter(prefix="/api/v1/organizations", tags=["organization keys"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid request body or parameters"},
    401: {"description": "missing or invalid session token"},
    403: {
        "description": "not a member of the organization, or the role may not do this "
        "(or, on writes, sent by a page of another origin)"
    },
}


@router.post(
    "/{org_id}/api-keys",
    status_code=201,
    response_model=KeyResponseBody,
    summary="Create an organization key (Developer and up); the full value is returned once",
    dependencies=[Depends(json_write_request)],
    description="Spec §4.7 body: name, service_id, scopes, environment (and the optional "
    "expires_in_days and allowed_ips, which only narrow a key). billing_plan, "
    "rate_limit_per_hour and monthly_prediction_limit may be sent by Owners and Admins only "
    "(403 for a Developer); without them the key gets the §4.6 defaults.",
    responses={**ERRORS, 415: JSON_ONLY_RESPONSES[415]},
)
def create(
    org_id: str,
    body: KeyCreate,
    caller: Identity = Depends(current_user),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    with db.session() as session:
        member = membership(session, org_id, caller.user_id)
        member.require(KeyAction.CREATE)
        member.require_plan_fields(body.model_fields_set)
        issued = create_key(session, body, user_id=caller.user_id, org_id=member.org_id)
        return issued.response()


@router.get(
    "/{org_id}/api-keys",
    response_model=list[KeyInfoBody],
    summary="List the organization's keys (any member)",
    responses=ERRORS,
)
def index(
    org_id: str,
    service_id: Literal["prediction", "platform"] | None = Query(None),
    active_only: bool = Query(False, description="only active and unexpired keys"),
    caller: Identity = Depends(current_user),
    db: Database = Depends(get_db),
) -> list[dict[str, Any]]:
    with db.session() as session:
        member = membership(session, org_id, caller.user_id)
        member.require(KeyAction.LIST)
        keys = list_keys(
            session, org_id=member.org_id, service_id=service_id, active_only=active_only
        )
        return [key_info(key) for key in keys]


@router.delete(
    "/{org_id}/api-keys/{key_id:any_uuid}",
    response_model=MessageBody,
    summary="Revoke an organization key (Admin and Owner any; Developer its own)",
    responses={**ERRORS, 404: {"description": "no such key in this organization"}},
    dependencies=[Depends(same_origin_request)],
)
def revoke(
    org_id: str,
    key_id: UUID,
    caller: Identity = Depends(current_user),
    db: Database = Depends(get_db),
) -> dict[str, str]:
    with db.session() as session:
        member = membership(session, org_id, caller.user_id)
        member.require_revoke_right()
        key = get_org_key(session, str(key_id), member.org_id)
        member.require_revoke(key)
        revoke_key(session, key)
        return {"message": f"API key {key.id} revoked"}
