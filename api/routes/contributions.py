"""Row contributions (spec §4.2): submit rows for a model and read a job back."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, Strict

from api.deps import current_user, get_db, get_settings, get_store
from api.errors import ContributionBodyInvalid
from pipeline.config import Settings
from pipeline.contributions import (
    ContributionRequest,
    contribution_view,
    get_contribution,
    queue_wait,
    submit_contribution,
)
from pipeline.db import Database
from pipeline.errors import RowValidationFailed
from pipeline.objectstore import ObjectStore
from pipeline.sessions import Identity


class SpecErrorRoute(APIRoute):
    """Request errors on these routes answer with the spec §2.4 body instead of {detail}."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                raise ContributionBodyInvalid(list(exc.errors())) from None

        return route


router = APIRouter(prefix="/api/models", tags=["contributions"], route_class=SpecErrorRoute)


class ContributionBody(BaseModel):
    """Spec §2.2; `benchmarkSpecId` must be present (null allowed)."""

    model_config = ConfigDict(extra="forbid")

    modelId: Annotated[int, Strict()]  # noqa: N815 - spec field names
    benchmarkSpecId: str | None  # noqa: N815
    rows: list[dict[str, Any]] = Field(min_length=1)
    schemaVersion: str | None = None  # noqa: N815
    templateId: str | None = None  # noqa: N815
    manifest: dict[str, Any] | None = Field(
        default=None, description="Contributor manifest (spec §2.5) for this contribution"
    )


class ContributionAccepted(BaseModel):
    ok: bool = True
    submittedRows: int  # noqa: N815
    jobId: str  # noqa: N815


class RowErrorModel(BaseModel):
    path: str
    message: str
    rowIndex: int  # noqa: N815


class ContributionRejected(BaseModel):
    ok: bool = False
    status: int = 400
    message: str
    errors: list[RowErrorModel]


@router.post(
    "/{modelId}/contributions",
    status_code=202,
    response_model=ContributionAccepted,
    responses={400: {"model": ContributionRejected}, 401: {}, 404: {}, 413: {}},
    summary="Submit contribution rows",
)
def post_contribution(
    modelId: int,  # noqa: N803
    body: ContributionBody,
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
    store: ObjectStore = Depends(get_store),
    settings: Settings = Depends(get_settings),
    idempotency_key: str | None = Header(default=None, max_length=200),
) -> ContributionAccepted:
    if body.modelId != modelId:
        raise RowValidationFailed(
            "modelId in the body does not match the path",
            [{"path": "modelId", "message": f"must equal {modelId}", "rowIndex": -1}],
        )
    job = submit_contribution(
        db,
        store,
        ContributionRequest(
            model_id=modelId,
            benchmark_spec_id=body.benchmarkSpecId,
            rows=body.rows,
            schema_version=body.schemaVersion,
            template_id=body.templateId,
            manifest=body.manifest,
        ),
        submitter_id=user.user_id,
        local_queue=not settings.dataset_arrival_sqs_queue_url,
        idempotency_key=idempotency_key,
    )
    return ContributionAccepted(submittedRows=job.submitted_rows, jobId=job.id)


@router.get("/{modelId}/contributions/{jobId}", summary="A contribution job, for its submitter")
def get_contribution_job(
    modelId: int,  # noqa: N803
    jobId: str,  # noqa: N803
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
    settings: Settings = Depends(get_settings),
) -> dict[str, Any]:
    job = get_contribution(db, modelId, jobId, user.user_id)
    return contribution_view(job, queue_wait(db, settings, job))
