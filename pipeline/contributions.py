"""Row contributions: validate against the data-spec, store as a dataset version, track the job."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from pipeline.datasets import rows_to_parquet_bytes
from pipeline.db import Database
from pipeline.errors import InvalidInput, NotFound, RowValidationFailed
from pipeline.objectstore import ObjectStore, StoredObject, dataset_key
from pipeline.queue import enqueue_local_arrival
from pipeline.registry import allocate_version, get_model
from pipeline.tables import Contribution, DatasetVersion, isoformat_utc
from pipeline.validation import validator_for
from pipeline.valuation import valuation_view

ROWS_FILENAME = "rows.parquet"
MANIFEST_FILENAME = "manifest.json"


@dataclass(frozen=True)
class ContributionRequest:
    model_id: int
    benchmark_spec_id: str | None
    rows: list[dict[str, Any]]
    schema_version: str | None = None
    template_id: str | None = None
    manifest: dict[str, Any] | None = None


@dataclass(frozen=True)
class ModelSnapshot:
    id: int
    spec_version: int
    data_spec: dict[str, Any]


def load_model_snapshot(db: Database, model_id: int) -> ModelSnapshot:
    with db.session() as session:
        model = get_model(session, model_id)
        return ModelSnapshot(model.id, model.spec_version, model.data_spec)


def validate_rows(
    model: ModelSnapshot, rows: list[dict[str, Any]], manifest: dict[str, Any] | None = None
) -> None:
    """Raise RowValidationFailed listing every failing row (spec §2.4), and a bad manifest.

    An invalid contributor manifest is one more error, at path `manifest` with rowIndex -1.
    """
    errors = validator_for(model.id, model.spec_version, model.data_spec).errors_for(rows)
    manifest_error = _manifest_error(manifest)
    if errors:
        failing = len({e.rowIndex for e in errors})
        raise RowValidationFailed(
            f"{failing} of {len(rows)} rows failed validation against the model's data-spec",
            [e.as_dict() for e in errors] + manifest_error,
        )
    if manifest_error:
        raise RowValidationFailed("the contributor manifest is invalid", manifest_error)


def _manifest_error(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    from pipeline.rewards import parse_manifest

    if manifest is None:
        return []
    try:
        parse_manifest(manifest)
    except InvalidInput as exc:
        return [{"path": "manifest", "message": exc.detail, "rowIndex": -1}]
    return []


def _existing(db: Database, submitter_id: str, idempotency_key: str) -> Contribution | None:
    with db.session() as session:
        return session.scalar(
            select(Contribution).where(
                Contribution.submitter_id == submitter_id,
                Contribution.idempotency_key == idempotency_key,
            )
        )


def submit_contribution(
    db: Database,
    store: ObjectStore,
    request: ContributionRequest,
    *,
    submitter_id: str,
    local_queue: bool,
    idempotency_key: str | None = None,
) -> Contribution:
    """Store valid rows as the model's next dataset version and queue a contribution job.

    The Parquet object is complete before the database commit; if the commit fails, the
    object is deleted, so a failure leaves neither. With `local_queue`, the arrival event is
    written in the same transaction (on S3 the bucket notification announces the object).
    A repeated `idempotency_key` from the same submitter returns the first job unchanged.
    """
    if idempotency_key:
        earlier = _existing(db, submitter_id, idempotency_key)
        if earlier is not None:
            return earlier
    model = load_model_snapshot(db, request.model_id)
    if not request.rows:
        raise InvalidInput("rows must contain at least one row")
    validate_rows(model, request.rows, request.manifest)
    manifest_bytes = (
        json.dumps(request.manifest, indent=2).encode() if request.manifest is not None else None
    )
    payload = rows_to_parquet_bytes(request.rows, model.data_spec)

    number, version = allocate_version(db, model.id)
    written: list[StoredObject] = []
    try:
        if manifest_bytes is not None:
            written.append(
                store.put_bytes(dataset_key(model.id, version, MANIFEST_FILENAME), manifest_bytes)
            )
        # The data object goes last: its arrival is what starts the pipeline.
        stored = store.put_bytes(dataset_key(model.id, version, ROWS_FILENAME), payload)
        written.append(stored)
        with db.session() as session:
            dataset = DatasetVersion(
                model_id=model.id,
                version=version,
                version_number=number,
                kind="contribution",
                object_key=stored.key,
                uri=stored.uri,
                file_format="parquet",
                sha256=stored.sha256,
                size_bytes=stored.size_bytes,
                row_count=len(request.rows),
                columns=list(model.data_spec.get("properties", {})),
                manifest=request.manifest,
            )
            session.add(dataset)
            session.flush()
            job = Contribution(
                model_id=model.id,
                dataset_version_id=dataset.id,
                submitter_id=submitter_id,
                status="queued",
                submitted_rows=len(request.rows),
                benchmark_spec_id=request.benchmark_spec_id,
                schema_version=request.schema_version,
                template_id=request.template_id,
                idempotency_key=idempotency_key,
            )
            session.add(job)
            if local_queue:
                enqueue_local_arrival(session, stored)
        return job
    except BaseException as exc:
        for obj in written:
            store.delete(obj.key)
        if idempotency_key and isinstance(exc, IntegrityError):
            # A concurrent retry with the same key won the race: answer with its job.
            earlier = _existing(db, submitter_id, idempotency_key)
            if earlier is not None:
                return earlier
        raise


def get_contribution(db: Database, model_id: int, job_id: str, user_id: str) -> Contribution:
    """A job as its submitter sees it; other users get NotFound, not a hint it exists."""
    with db.session() as session:
        get_model(session, model_id)
        job = session.get(Contribution, job_id) if len(job_id) <= 36 else None
        if job is None or job.model_id != model_id or job.submitter_id != user_id:
            raise NotFound(f"contribution {job_id} not found")
        return job


def contribution_view(job: Contribution) -> dict[str, Any]:
    return {
        "jobId": job.id,
        "modelId": job.model_id,
        "status": job.status,
        "reason": job.reason,
        "submittedRows": job.submitted_rows,
        "benchmarkSpecId": job.benchmark_spec_id,
        "schemaVersion": job.schema_version,
        "templateId": job.template_id,
        "quality": job.quality,
        "improvementPct": job.improvement_pct,
        "tokens": job.tokens,
        "valuation": valuation_view(job.quality),
        "createdAt": isoformat_utc(job.created_at),
        "updatedAt": isoformat_utc(job.updated_at),
    }
