"""A contribution's integrity figures for the model's owner (docs/integrity.md).

The submitter sees a coarse verdict (pipeline.checks.disclosure); the owner of the model, whose
benchmark it is, sees every figure: matches per tier, chance rates, label disagreement.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from api.deps import ModelId, get_db, model_owner_key
from pipeline.auth.verification import KeyPrincipal
from pipeline.checks.disclosure import owner_integrity
from pipeline.core.db import Database

INTEGRITY_SCOPE = "integrity:read"

router = APIRouter(prefix="/api/v1/models", tags=["integrity"])


class OwnerIntegrity(BaseModel):
    jobId: str  # noqa: N815 - the job view's field names
    modelId: int  # noqa: N815
    submitterId: str  # noqa: N815
    status: str
    reason: str | None
    integrity: dict[str, Any] | None


@router.get(
    "/{model_id}/contributions/{jobId:any_uuid}/integrity",
    response_model=OwnerIntegrity,
    summary="Every integrity figure of a contribution, for the model's owner",
    responses={
        403: {"description": "the key does not act for the model's owner, or lacks the scope"},
        404: {"description": "unknown model, or no such contribution to it"},
    },
)
def contribution_integrity(
    model_id: ModelId,
    jobId: UUID,  # noqa: N803 - the job view's parameter name
    _: KeyPrincipal = Depends(model_owner_key(INTEGRITY_SCOPE)),
    db: Database = Depends(get_db),
) -> dict[str, Any]:
    return owner_integrity(db, model_id, str(jobId))
