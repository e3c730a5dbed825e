"""Dataset arrivals (spec §4.5): the datasets received, newest first; platform API key auth."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from api.deps import get_db, platform_key, request_settings
from pipeline.auth.verification import KeyPrincipal
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import INT32_MAX
from pipeline.triggers.arrival_rows import ArrivalReader, arrival_view, list_arrivals

router = APIRouter(prefix="/api/v1", tags=["dataset arrivals"])


class ArrivalOut(BaseModel):
    id: str
    model_id: str
    version: str
    object_key: str
    uri: str
    size_bytes: int | None
    sha256: str | None
    source: str
    received_at: str
    run_key: str | None


class ArrivalList(BaseModel):
    arrivals: list[ArrivalOut]


@router.get(
    "/dataset-arrivals",
    response_model=ArrivalList,
    summary="List dataset arrivals of the models the key acts for the owner of, newest first",
    description="A key sees the arrivals of the models it acts for the owner of "
    "(docs/ownership.md); the operator's keys (ADMIN_USER_ID's own keys) see every model's. "
    "`uri` is an s3:// URI on S3 and the object key with the local store: never a server path.",
    responses={
        400: {"description": "model_id or limit out of range"},
        401: {"description": "missing or invalid API key"},
    },
)
def get_arrivals(
    model_id: int | None = Query(None, ge=1, le=INT32_MAX, description="only this model"),
    limit: int = Query(100, ge=1, le=1000),
    principal: KeyPrincipal = Depends(platform_key("arrivals:read")),
    db: Database = Depends(get_db),
    settings: Settings = Depends(request_settings),
) -> dict[str, Any]:
    reader = ArrivalReader(
        principal.user_id,
        principal.org_id,
        operator=principal.org_id is None and principal.user_id == settings.admin_user_id,
    )
    with db.session() as session:
        rows = list_arrivals(session, model_id, limit, reader=reader)
        return {"arrivals": [arrival_view(row) for row in rows]}
