"""Dataset arrivals (spec §4.5): the datasets received, newest first; platform API key auth."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from api.deps import get_db, platform_key
from pipeline.auth.verification import KeyPrincipal
from pipeline.core.db import Database
from pipeline.core.tables import INT32_MAX
from pipeline.triggers.arrival_rows import arrival_view, list_arrivals

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
    summary="List dataset arrivals, newest first",
    responses={
        400: {"description": "model_id or limit out of range"},
        401: {"description": "missing or invalid API key"},
    },
)
def get_arrivals(
    model_id: int | None = Query(None, ge=1, le=INT32_MAX, description="only this model"),
    limit: int = Query(100, ge=1, le=1000),
    _: KeyPrincipal = Depends(platform_key("arrivals:read")),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    with db.session() as session:
        return {"arrivals": [arrival_view(row) for row in list_arrivals(session, model_id, limit)]}
