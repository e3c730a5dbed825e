"""Row contributions: validate against the data-spec, store as a dataset version, track the job."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from pipeline.checks.disclosure import submitter_quality
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import Conflict, InvalidInput, NotFound, RowValidationFailed
from pipeline.core.tables import (
    CONTRIBUTION_VERSION,
    QUEUED,
    Contribution,
    DatasetArrival,
    DatasetVersion,
    isoformat_utc,
    utcnow,
)
from pipeline.intake.jsonrows import ListRows, RowSource
from pipeline.intake.parquet_rows import RowTableBuilder, table_to_parquet_bytes
from pipeline.intake.versions import VersionRecord, new_dataset_version
from pipeline.models.dataspec import MAX_ERRORS_TOTAL, RowError, dedupe, validator_for
from pipeline.models.registry import get_model
from pipeline.rewards.manifests import (
    MANIFEST_FILENAME,
    InvalidManifest,
    encode_manifest,
    parse_manifest,
)
from pipeline.rewards.valuation_view import valuation_view
from pipeline.store.formats import PARQUET
from pipeline.store.objectstore import ObjectStore
from pipeline.triggers.debounce import run_request_due

ROWS_FILENAME = "rows.parquet"


@dataclass(frozen=True)
class ContributionRequest:
    model_id: int
    benchmark_spec_id: str | None
    rows: RowSource | Sequence[dict[str, Any]]
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


def row_source(rows: RowSource | Sequence[Any]) -> RowSource:
    return rows if isinstance(rows, RowSource) else ListRows(rows)


def check_rows(
    model: ModelSnapshot, rows: RowSource, manifest: dict[str, Any] | None = None
) -> pa.Table:
    """The valid rows as the table to store, built while they are validated a chunk at a time.

    Raises RowValidationFailed listing every failing row (spec §2.4, at most
    MAX_ERRORS_TOTAL errors); each problem of an invalid contributor manifest is one more
    error, at path `manifest.<field>` with rowIndex -1. Once a row has failed, later chunks
    are only validated, not converted.
    """
    validator = validator_for(model.id, model.spec_version, model.data_spec)
    builder = RowTableBuilder(model.data_spec)
    errors: list[RowError] = []
    for chunk in rows.chunks():
        broken = {p.rowIndex for p in chunk.problems}
        remaining = MAX_ERRORS_TOTAL - len(errors)
        found = chunk.problems + list(
            itertools.islice(
                (
                    e
                    for e in validator.iter_errors(chunk.rows, chunk.start, nulls=chunk.nulls)
                    if e.rowIndex not in broken
                ),
                remaining,
            )
        )
        if not found and not errors:
            found = builder.add(chunk.rows, chunk.start)
        errors.extend(sorted(found, key=lambda e: e.rowIndex)[:remaining])
        if len(errors) >= MAX_ERRORS_TOTAL:
            break
    rows.release()
    manifest_error = _manifest_error(manifest)
    if errors:
        failing = len({e.rowIndex for e in errors})
        listed = errors if len(errors) >= MAX_ERRORS_TOTAL else dedupe(errors)
        raise RowValidationFailed(
            f"{failing} of {len(rows)} rows failed validation against the model's data-spec",
            [e.as_dict() for e in listed] + manifest_error,
        )
    if manifest_error:
        raise RowValidationFailed("the contributor manifest is invalid", manifest_error)
    table = builder.table()
    if not table.num_columns:
        # No declared property and no member in any row: a file of no columns keeps no rows.
        raise RowValidationFailed(
            "the rows hold no values, so there is nothing to store",
            [{"path": "rows", "message": "every row is an empty object", "rowIndex": -1}],
        )
    return table


def _manifest_error(manifest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One spec §2.4 error per manifest problem, at `manifest.<field>` (rowIndex -1)."""
    if manifest is None:
        return []
    try:
        parse_manifest(manifest)
    except InvalidManifest as exc:
        return [
            {
                "path": f"manifest.{problem.field}" if problem.field else "manifest",
                "message": problem.message,
                "rowIndex": -1,
            }
            for problem in exc.problems
        ]
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
    A repeated `idempotency_key` from the same submitter returns the first job unchanged, once
    the request has passed the same validation as the first (a bad body is a 400 whatever its
    key); a key reused for another model or another number of rows is a Conflict (409).
    """
    model = load_model_snapshot(db, request.model_id)
    rows = row_source(request.rows)
    if not len(rows):
        raise InvalidInput("rows must contain at least one row")
    table = check_rows(model, rows, request.manifest)
    row_count = table.num_rows
    if idempotency_key is not None:
        earlier = _existing(db, submitter_id, idempotency_key)
        if earlier is not None:
            return _same_request(earlier, model.id, row_count)
    manifest_bytes = encode_manifest(request.manifest) if request.manifest is not None else None
    payload = table_to_parquet_bytes(table)
    columns = table.column_names  # the declared properties, then the undeclared members
    del table  # the Parquet bytes are all that is kept from here on

    record = VersionRecord(CONTRIBUTION_VERSION, PARQUET, row_count, columns, request.manifest)
    try:
        with new_dataset_version(db, store, model.id) as draft:
            if manifest_bytes is not None:
                draft.put_bytes(draft.key(MANIFEST_FILENAME), manifest_bytes)
            stored = draft.put_bytes(draft.key(ROWS_FILENAME), payload)
            with draft.recording(stored, record, local_queue=local_queue) as (session, dataset):
                job = Contribution(
                    model_id=model.id,
                    dataset_version_id=dataset.id,
                    submitter_id=submitter_id,
                    status=QUEUED,
                    submitted_rows=row_count,
                    benchmark_spec_id=request.benchmark_spec_id,
                    schema_version=request.schema_version,
                    template_id=request.template_id,
                    idempotency_key=idempotency_key,
                )
                session.add(job)
        return job
    except IntegrityError:
        # A concurrent retry with the same key won the race: answer with its job.
        earlier = _existing(db, submitter_id, idempotency_key) if idempotency_key else None
        if earlier is None:
            raise
        return _same_request(earlier, model.id, row_count)


def _same_request(earlier: Contribution, model_id: int, row_count: int) -> Contribution:
    """The first job of an idempotency key, unless the retry is visibly another request."""
    if earlier.model_id != model_id or earlier.submitted_rows != row_count:
        raise Conflict(
            "this Idempotency-Key was already used for another request "
            f"(model {earlier.model_id}, {earlier.submitted_rows} rows); use a new key"
        )
    return earlier


def get_contribution(db: Database, model_id: int, job_id: str, user_id: str) -> Contribution:
    """A job as its submitter sees it; other users get NotFound, not a hint it exists."""
    with db.session() as session:
        get_model(session, model_id)
        job = session.get(Contribution, job_id) if len(job_id) <= 36 else None
        if job is None or job.model_id != model_id or job.submitter_id != user_id:
            raise NotFound(f"contribution {job_id} not found")
        return job


@dataclass(frozen=True)
class QueueWait:
    """What a queued job waits for, and when its evaluation run is expected to be requested."""

    due_at: datetime
    reason: str


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _when(value: datetime) -> str:
    """A time for a sentence: to the second."""
    return isoformat_utc(value.replace(microsecond=0)) or ""


@dataclass(frozen=True)
class _Batch:
    """A queued job's arrival row (None before the sensor records it) and when its batch opened."""

    arrival: DatasetArrival | None
    first_seen: datetime | None


def _job_batch(db: Database, job: Contribution) -> _Batch:
    with db.session() as session:
        object_key = session.scalar(
            select(DatasetVersion.object_key).where(DatasetVersion.id == job.dataset_version_id)
        )
        arrival = session.scalar(
            select(DatasetArrival).where(DatasetArrival.object_key == object_key)
        )
        if arrival is not None and arrival.run_key is not None:
            batch = DatasetArrival.run_key == arrival.run_key
        else:  # the model's pending batch, which this arrival opened, joined or will join
            batch = (DatasetArrival.model_id == job.model_id) & DatasetArrival.run_key.is_(None)
        first_seen = session.scalar(select(func.min(DatasetArrival.received_at)).where(batch))
    return _Batch(arrival, first_seen)


def _wait_for_recording(
    job: Contribution, first_seen: datetime | None, now: datetime, window: int, poll: int
) -> QueueWait:
    """Before the sensor recorded the arrival: it does at its next tick at the latest; the
    arrival then joins the model's pending batch if that is not released by then, else opens a
    new one."""
    recorded_by = _aware(job.created_at) + timedelta(seconds=poll)
    due = run_request_due(recorded_by, window, poll)
    if first_seen is not None:
        pending_due = run_request_due(_aware(first_seen), window, poll)
        due = pending_due if pending_due >= recorded_by else due
    if now > recorded_by + timedelta(seconds=poll):
        return QueueWait(
            due,
            "the arrival sensor has not recorded this dataset version yet "
            f"(it reads the queue every {poll} s): is the Dagster daemon running?",
        )
    then = f", then for the {window} s debounce window to close" if window else ""
    return QueueWait(
        due,
        f"waiting for the arrival sensor to record the dataset version (every {poll} s)"
        f"{then}; evaluation due at {_when(due)}",
    )


def queue_wait(
    db: Database, settings: Settings, job: Contribution, now: datetime | None = None
) -> QueueWait | None:
    """Why a `queued` job has not started, and when its evaluation is due; None otherwise.

    A queued job waits, in turn, for the arrival sensor to record its dataset version (it
    reads the queue every ARRIVAL_POLL_INTERVAL_SECONDS), for the model's debounce window
    (EVALUATION_DEBOUNCE_WINDOW_SECONDS from the batch's first arrival) to close at a sensor
    tick, and then for Dagster's run queue to start the requested run. A queued job that
    already carries a reason (checks passed, no benchmark yet) waits for an event with no
    date: None.
    """
    if job.status != QUEUED or job.reason or job.dataset_version_id is None:
        return None
    now = now or utcnow()
    window = settings.evaluation_debounce_window_seconds
    poll = settings.arrival_poll_interval_seconds
    batch = _job_batch(db, job)
    arrival, first_seen = batch.arrival, batch.first_seen
    if arrival is None:
        return _wait_for_recording(job, first_seen, now, window, poll)
    due = run_request_due(_aware(first_seen or arrival.received_at), window, poll)
    if arrival.run_key is not None:
        return QueueWait(
            due,
            "evaluation run requested; waiting for Dagster's run queue to start it (at most "
            f"{settings.scheduler_max_concurrent} evaluation runs at once, one per model)",
        )
    if now > due + timedelta(seconds=poll):
        return QueueWait(
            due,
            f"evaluation was due at {_when(due)} but no run has been requested: "
            "is the Dagster daemon running?",
        )
    waiting = (
        f"the {window} s debounce window to close"
        if window
        else f"the arrival sensor's next check (every {poll} s)"
    )
    return QueueWait(due, f"waiting for {waiting}; evaluation due at {_when(due)}")


def contribution_view(job: Contribution, wait: QueueWait | None = None) -> dict[str, Any]:
    """The job as its submitter reads it; a queued job's `wait` adds `evaluationDueAt`."""
    view: dict[str, Any] = {
        "jobId": job.id,
        "modelId": job.model_id,
        "status": job.status,
        "reason": job.reason,
    }
    if wait is not None:
        view["reason"] = wait.reason
        view["evaluationDueAt"] = isoformat_utc(wait.due_at)
    view.update(
        {
            "submittedRows": job.submitted_rows,
            "benchmarkSpecId": job.benchmark_spec_id,
            "schemaVersion": job.schema_version,
            "templateId": job.template_id,
            # The integrity figures as the submitter may see them (pipeline.checks.disclosure).
            "quality": submitter_quality(job.quality),
            "improvementPct": job.improvement_pct,
            "tokens": job.tokens,
            "valuation": valuation_view(job.quality),
            "createdAt": isoformat_utc(job.created_at),
            "updatedAt": isoformat_utc(job.updated_at),
        }
    )
    return view
