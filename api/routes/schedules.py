"""Evaluation schedules (spec §2.7, §4.4): one cron schedule per model; platform API key auth.

POST creates (201), PUT updates (200; never creates: 404 when there is none), GET reads (200),
DELETE removes (204). Bodies are the spec §2.7 resource. POST, PUT and DELETE change when the
model is measured, so only keys acting for the model's owner may (403 otherwise,
docs/ownership.md); GET needs `schedules:read` only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, field_validator

from api.deps import ModelId, get_db, model_owner_key, platform_key
from pipeline.auth.verification import KeyPrincipal
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.triggers.schedules import (
    CRON_MAX_LENGTH,
    CRON_PATTERN,
    create_schedule,
    delete_schedule,
    get_schedule,
    schedule_view,
    update_schedule,
)

router = APIRouter(prefix="/api/v1/models", tags=["evaluation schedules"])

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "malformed body or parameters"},
    401: {"description": "missing or invalid API key"},
    404: {"description": "unknown model, or no schedule"},
}
OWNER_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"description": "the key lacks the scope, or does not act for the model's owner"},
}


CRON_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": CRON_MAX_LENGTH,
    "pattern": CRON_PATTERN,
    "description": "standard 5-field cron (UTC) or an alias such as @daily; croniter's "
    "extensions (L, W, #, ?, H, seconds) are refused. An expression that never fires "
    "(0 0 31 2 *) is 422 too.",
}


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    cron_expression: StrictStr = Field(
        max_length=CRON_MAX_LENGTH, json_schema_extra=lambda schema: schema.update(CRON_SCHEMA)
    )
    enabled: StrictBool = True


class ScheduleUpdate(BaseModel):
    """Both fields as in §4.4; a field left out keeps its current value; at least one is given."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"anyOf": [{"required": ["cron_expression"]}, {"required": ["enabled"]}]},
    )

    cron_expression: StrictStr | None = Field(
        default=None,
        max_length=CRON_MAX_LENGTH,
        json_schema_extra=lambda schema: _replace(schema, CRON_SCHEMA),
    )
    enabled: StrictBool | None = Field(
        default=None, json_schema_extra=lambda schema: _replace(schema, {"type": "boolean"})
    )

    @field_validator("cron_expression", "enabled", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        # Leaving a field out keeps it; null is not a value either field can take.
        if value is None:
            raise ValueError("must not be null; leave the field out to keep it")
        return value


def _replace(schema: dict[str, Any], by: dict[str, Any]) -> None:
    schema.clear()
    schema.update(by)


class EvaluationScheduleOut(BaseModel):
    """Spec §2.7."""

    id: str
    model_id: str
    cron_expression: str
    enabled: bool
    last_run_at: str | None
    next_run_at: str | None
    created_at: str
    updated_at: str


PATH = "/{model_id}/evaluation-schedule"


@router.post(
    PATH,
    status_code=201,
    response_model=EvaluationScheduleOut,
    summary="Create the model's evaluation schedule",
    responses={
        **ERRORS,
        **OWNER_ONLY,
        409: {"description": "a schedule exists, or the model has no benchmark spec"},
        422: {"description": "cron expression not valid"},
    },
)
def post_schedule(
    model_id: ModelId,
    body: ScheduleCreate,
    _: KeyPrincipal = Depends(model_owner_key("schedules:write")),
    db: Database = Depends(get_db),
) -> dict[str, object]:
    with db.session() as session:
        schedule = create_schedule(session, model_id, body.cron_expression, body.enabled)
        return schedule_view(schedule)


@router.put(
    PATH,
    response_model=EvaluationScheduleOut,
    summary="Update or disable the model's evaluation schedule",
    responses={**ERRORS, **OWNER_ONLY, 422: {"description": "cron expression not valid"}},
)
def put_schedule(
    model_id: ModelId,
    body: ScheduleUpdate,
    _: KeyPrincipal = Depends(model_owner_key("schedules:write")),
    db: Database = Depends(get_db),
) -> dict[str, object]:
    if body.cron_expression is None and body.enabled is None:
        raise InvalidInput("body needs cron_expression and/or enabled")
    with db.session() as session:
        schedule = update_schedule(session, model_id, body.cron_expression, body.enabled)
        return schedule_view(schedule)


@router.get(
    PATH,
    response_model=EvaluationScheduleOut,
    summary="Read the model's evaluation schedule",
    responses=ERRORS,
)
def read_schedule(
    model_id: ModelId,
    _: KeyPrincipal = Depends(platform_key("schedules:read")),
    db: Database = Depends(get_db),
) -> dict[str, object]:
    with db.session() as session:
        return schedule_view(get_schedule(session, model_id))


@router.delete(
    PATH,
    status_code=204,
    response_class=Response,
    summary="Delete the model's evaluation schedule",
    responses={**ERRORS, **OWNER_ONLY},
)
def remove_schedule(
    model_id: ModelId,
    _: KeyPrincipal = Depends(model_owner_key("schedules:write")),
    db: Database = Depends(get_db),
) -> Response:
    with db.session() as session:
        delete_schedule(session, model_id)
    return Response(status_code=204)
