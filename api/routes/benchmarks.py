"""Benchmark dataset upload (spec §4.3): a CSV or Parquet file becomes a BenchmarkSpec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from api.deps import ModelId, get_db, get_store, model_owner_key, request_settings
from api.streaming_form import read_streaming_form
from pipeline.auth.verification import KeyPrincipal
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.text import NO_CONTROL_CHARACTERS
from pipeline.evaluation.metrics import DIRECTIONS, METRICS
from pipeline.intake.receiving import DatasetIntake, upload_tmp_root
from pipeline.intake.uploads import (
    FORM_FIELDS,
    INPUT_COLUMNS_MAX_CHARS,
    accept_benchmark_upload,
    early_fingerprint_plan,
    load_upload_target,
)
from pipeline.store.objectstore import ObjectStore

UPLOAD_SCOPE = "benchmarks:write"

router = APIRouter(prefix="/api/v1/benchmarks", tags=["benchmarks"])


class BenchmarkUploadResult(BaseModel):
    """Spec §2.6."""

    s3_uri: str
    sha256_hash: str
    spec_id: str
    filename: str
    file_size_bytes: int


class ErrorBody(BaseModel):
    detail: str


UPLOAD_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["file"],
    "properties": {
        "file": {
            "type": "string",
            "format": "binary",
            "contentMediaType": "application/octet-stream",
            "description": "CSV (UTF-8, header line) or Parquet; at most 500 MB",
        },
        "eval_split": {
            "type": "string",
            "default": "test",
            "maxLength": 100,
            "pattern": NO_CONTROL_CHARACTERS,
            "description": "split used for evaluation",
        },
        "metric_name": {
            "type": "string",
            "default": "accuracy",
            "enum": list(METRICS),
            "description": "metric tracked; must suit the model's task type",
        },
        "metric_direction": {
            "type": "string",
            "default": "higher_is_better",
            "enum": list(DIRECTIONS),
        },
        "target_column": {
            "type": "string",
            "default": "target",
            "maxLength": 200,
            "pattern": NO_CONTROL_CHARACTERS,
            "description": "column with ground-truth labels",
        },
        "input_columns": {
            "type": "string",
            "default": "",
            "maxLength": INPUT_COLUMNS_MAX_CHARS,
            "pattern": NO_CONTROL_CHARACTERS,
            "description": "comma-separated feature columns; empty means every other column",
        },
        "allow_pii": {
            "type": "boolean",
            "default": False,
            "description": "when false, PII found in the file's text columns rejects it",
        },
    },
}

UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": UPLOAD_FORM_SCHEMA}},
    }
}


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


@router.post(
    "/upload/{model_id}",
    status_code=201,
    response_model=BenchmarkUploadResult,
    summary="Upload a benchmark dataset (CSV or Parquet)",
    openapi_extra=UPLOAD_BODY,
    responses={
        400: _error("not CSV or Parquet, malformed form, or a bad form value"),
        401: _error("missing or invalid API key"),
        403: _error(
            "the key is not a platform key, lacks the scope or the address, or does not act "
            "for the model's owner"
        ),
        404: _error("unknown model"),
        413: _error("the file exceeds 500 MB"),
        422: _error("fewer than 50 rows, a declared column missing or empty, or PII found"),
        429: _error("the key's hourly rate limit is exhausted"),
    },
)
async def upload_benchmark(
    model_id: ModelId,
    request: Request,
    principal: KeyPrincipal = Depends(model_owner_key(UPLOAD_SCOPE)),
    db: Database = Depends(get_db),
    store: ObjectStore = Depends(get_store),
    settings: Settings = Depends(request_settings),
) -> BenchmarkUploadResult:
    """Stream the file to a temp file while checking it, then store it as the next version.

    Only the model's owner may (docs/ownership.md); that is checked before a byte is read.
    """
    target = await run_in_threadpool(load_upload_target, db, model_id)
    intake = DatasetIntake(
        upload_tmp_root(settings),
        max_bytes=settings.upload_max_bytes,
        pii=settings,
    )

    def on_file(filename: str | None, fields: Mapping[str, str]) -> None:
        intake.filename = filename
        # Fields sent before the file (as browsers and the CLI send them): fingerprint it
        # while it arrives.
        plan = early_fingerprint_plan(fields, target.task_type)
        if plan is not None:
            intake.plan_fingerprints(plan)

    try:
        form = await read_streaming_form(
            request,
            file_field="file",
            text_fields=FORM_FIELDS,
            sink=intake.write_chunks,
            on_file=on_file,
            max_file_bytes=settings.upload_max_bytes,
        )
        if not form.file_received:
            raise InvalidInput("the form field 'file' is required")
        upload = await run_in_threadpool(
            accept_benchmark_upload,
            db,
            store,
            settings,
            target=target,
            intake=intake,
            fields=form.fields,
            created_by=principal.user_id,
            local_queue=not settings.dataset_arrival_sqs_queue_url,
        )
    finally:
        await run_in_threadpool(intake.close)
    return BenchmarkUploadResult(**upload.response())
