"""Row contributions (spec §4.2): submit rows for a model and read a job back."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from api.deps import (
    JSON_ONLY_RESPONSES,
    ModelId,
    current_user,
    get_db,
    get_store,
    json_write_request,
    request_settings,
)
from api.errors import ContributionBodyInvalid
from pipeline.auth.sessions import Identity
from pipeline.checks.disclosure import require_leak_allowance
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, RowValidationFailed
from pipeline.core.tables import INT32_MAX, Contribution
from pipeline.core.text import END, NO_CONTROL_CHARACTERS, printable
from pipeline.intake.contributions import (
    ContributionRequest,
    contribution_view,
    get_contribution,
    queue_wait,
    submit_contribution,
)
from pipeline.intake.jsonrows import SplitBody, split_body
from pipeline.store.objectstore import ObjectStore


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
    # Bounded as their columns are, control characters refused (NUL breaks PostgreSQL text).
    benchmarkSpecId: str | None = Field(  # noqa: N815
        max_length=36,
        description="a benchmark spec id (UUID), or null",
        json_schema_extra={"pattern": NO_CONTROL_CHARACTERS},
    )
    rows: list[dict[str, Any]] = Field(
        min_length=1,
        description="rows, each conforming to the model's data-spec "
        "(GET /api/models/{modelId}/data-spec)",
    )
    schemaVersion: str | None = Field(  # noqa: N815
        default=None, max_length=100, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    )
    templateId: str | None = Field(  # noqa: N815
        default=None, max_length=100, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    )
    manifest: dict[str, Any] | None = Field(
        default=None, description="Contributor manifest (spec §2.5) for this contribution"
    )

    @field_validator("benchmarkSpecId", "schemaVersion", "templateId")
    @classmethod
    def _printable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else printable(value, str(info.field_name))


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


def _contribution_body_schema() -> dict[str, Any]:
    schema = ContributionBody.model_json_schema()
    properties = schema["properties"]
    properties["modelId"].update(minimum=1, maximum=INT32_MAX, description="the path's model id")
    # The manifest is read as a plain object and checked by
    # pipeline.rewards.manifests.parse_manifest.
    properties["manifest"]["anyOf"] = [
        {"$ref": "#/components/schemas/ContributorManifest"},
        {"type": "null"},
    ]
    return schema


# Printable ASCII, no space at either end: what survives HTTP header handling unchanged.
IDEMPOTENCY_KEY_PATTERN = rf"^[!-~](?:[ -~]*[!-~])?{END}"


@router.post(
    "/{modelId}/contributions",
    status_code=202,
    response_model=ContributionAccepted,
    responses={
        400: {"model": ContributionRejected, "description": "invalid request or rows"},
        409: {"description": "the Idempotency-Key was used for another request"},
        429: {
            "description": "the caller's contributions to this model contained benchmark rows "
            "INTEGRITY_LEAK_VERDICTS_PER_DAY times in 24 hours (Retry-After)"
        },
        **JSON_ONLY_RESPONSES,
    },
    # Checked before the session and the body: no page of another origin writes with the cookie.
    dependencies=[Depends(json_write_request)],
    # The body is read and parsed by the route itself (see pipeline/intake/jsonrows.py); its shape
    # is still documented as ContributionBody.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _contribution_body_schema()}},
        }
    },
    summary="Submit contribution rows",
)
async def post_contribution(
    modelId: ModelId,  # noqa: N803
    request: Request,
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
    store: ObjectStore = Depends(get_store),
    settings: Settings = Depends(request_settings),
    idempotency_key: str | None = Header(
        default=None,
        min_length=1,
        max_length=200,
        pattern=IDEMPOTENCY_KEY_PATTERN.removesuffix(END) + "$",
        json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
        description="a retry with the same key and the same request returns the first job",
    ),
) -> ContributionAccepted:
    # Before the body: a supplier whose rows keep containing the benchmark waits (429).
    await run_in_threadpool(
        require_leak_allowance,
        db,
        user.user_id,
        modelId,
        settings.integrity_leak_verdicts_per_day,
    )
    # One growing buffer rather than a list of chunks joined at the end: a 50 MB body is
    # held once. The size limit is enforced while it streams in (api/limits.py).
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    split = await run_in_threadpool(split_body, body)
    del body  # the raw rows keep what they need and let go of it once parsed
    job = await run_in_threadpool(
        _accept,
        split,
        modelId,
        db=db,
        store=store,
        submitter_id=user.user_id,
        local_queue=not settings.dataset_arrival_sqs_queue_url,
        idempotency_key=idempotency_key,
    )
    return ContributionAccepted(submittedRows=job.submitted_rows, jobId=job.id)


def _accept(
    split: SplitBody,
    model_id: int,
    *,
    db: Database,
    store: ObjectStore,
    submitter_id: str,
    local_queue: bool,
    idempotency_key: str | None,
) -> Contribution:
    try:
        envelope = ContributionBody.model_validate(split.envelope())
    except ValidationError as exc:
        raise ContributionBodyInvalid(list(exc.errors())) from None
    if envelope.modelId != model_id:
        raise RowValidationFailed(
            "modelId in the body does not match the path",
            [{"path": "modelId", "message": f"must equal {model_id}", "rowIndex": -1}],
        )
    if split.rows is None:  # unreachable: the envelope check wants a rows array
        raise InvalidInput("rows must be an array of objects")
    return submit_contribution(
        db,
        store,
        ContributionRequest(
            model_id=model_id,
            benchmark_spec_id=envelope.benchmarkSpecId,
            rows=split.rows,
            schema_version=envelope.schemaVersion,
            template_id=envelope.templateId,
            manifest=envelope.manifest,
        ),
        submitter_id=submitter_id,
        local_queue=local_queue,
        idempotency_key=idempotency_key,
    )


@router.get(
    "/{modelId}/contributions/{jobId:any_uuid}",
    summary="A contribution job, for its submitter",
    responses={400: {"model": ContributionRejected, "description": "invalid model id"}},
)
def get_contribution_job(
    modelId: ModelId,  # noqa: N803
    jobId: UUID,  # noqa: N803
    user: Identity = Depends(current_user),
    db: Database = Depends(get_db),
    settings: Settings = Depends(request_settings),
) -> dict[str, Any]:
    job = get_contribution(db, modelId, str(jobId), user.user_id)
    return contribution_view(job, queue_wait(db, settings, job))
