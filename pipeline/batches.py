"""Batches of dataset versions: claiming the pending versions of a run, and job status moves.

A run for the partition `{model_id}__{version}` works on a *batch*: every dataset version of
the model up to and including `version` that is not yet processed, in version order, so that
arrivals debounced into one run are all handled. What is pending:

- a contribution version whose job is `queued` (claimed by an atomic `queued → validating`
  update, so two runs never process the same job);
- a benchmark version for which no evaluation is recorded yet (a new benchmark re-scores the
  model on it);
- an `external` version (an object that arrived in the store without going through the API)
  is given a contribution job owned by `external` and then handled as a contribution.

Contribution status: `queued → validating` (the checks of `pipeline.checks`) `→ evaluating`
(`pipeline.scoring`) `→ rewarded` (`pipeline.payouts`) or `rejected` (a check failed, or no
improvement) or `failed` (an unexpected error); `reason` says why. Every move is a conditional
update (`transition`), so concurrent runs cannot both move the same job.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import exists, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.config import Settings
from pipeline.db import Database
from pipeline.errors import InvalidInput
from pipeline.objectstore import ObjectStore, object_store_from_settings
from pipeline.tables import (
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    utcnow,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

QUEUED = "queued"
VALIDATING = "validating"
EVALUATING = "evaluating"
REWARDED = "rewarded"
REJECTED = "rejected"
FAILED = "failed"
STATUSES = (QUEUED, VALIDATING, EVALUATING, REWARDED, REJECTED, FAILED)

TRIGGERS = ("arrival", "schedule", "manual")
EXTERNAL_SUBMITTER = "external"


# --- services ------------------------------------------------------------------------------


class Services:
    """Settings, database and object store of one process (what the Dagster resource holds)."""

    def __init__(
        self, settings: Settings, db: Database | None = None, store: ObjectStore | None = None
    ) -> None:
        self.settings = settings
        self._owns_db = db is None
        self.db = db or Database.from_settings(settings)
        self.store: ObjectStore = store or object_store_from_settings(settings)
        logging.getLogger("pipeline").setLevel(settings.pipeline_log_level)

    def close(self) -> None:
        if self._owns_db:
            self.db.dispose()


# --- batches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VersionItem:
    """One dataset version in a batch."""

    dataset_version_id: int
    model_id: int
    version: str
    version_number: int
    kind: str  # contribution | benchmark | external
    object_key: str
    file_format: str
    contribution_id: str | None = None
    benchmark_spec_id: str | None = None

    @property
    def partition_key(self) -> str:
        return f"{self.model_id}__{self.version}"

    @property
    def is_contribution(self) -> bool:
        return self.contribution_id is not None


@dataclass(frozen=True)
class Batch:
    """What one run processes: pending versions in version order, and whether to re-score."""

    model_id: int
    version: str
    trigger: str
    items: tuple[VersionItem, ...] = ()
    rescore: bool = False
    run_id: str | None = None

    @property
    def partition_key(self) -> str:
        return f"{self.model_id}__{self.version}"

    @property
    def versions(self) -> list[str]:
        return [item.version for item in self.items]

    def contributions(self) -> list[VersionItem]:
        return [item for item in self.items if item.is_contribution]

    def other_partition_keys(self) -> list[str]:
        """Partitions this run also processed (debounced arrivals), for the UI."""
        return [item.partition_key for item in self.items if item.version != self.version]


@dataclass(frozen=True)
class StepResult:
    """What a step hands to the next: the batch and this step's per-version outcomes."""

    batch: Batch
    outcomes: tuple[Any, ...] = ()


def normalize_trigger(value: str | None) -> str:
    return value if value in TRIGGERS else "manual"


def claim_batch(
    svc: Services,
    model_id: int,
    version: str,
    *,
    trigger: str | None = None,
    run_id: str | None = None,
) -> Batch:
    """Claim every pending version of `model_id` up to `version` (see the module docstring)."""
    trigger = normalize_trigger(trigger)
    with svc.db.session() as session:
        if session.get(Model, model_id) is None:
            raise InvalidInput(f"model {model_id} not found")
    target = _find_version(svc, model_id, version)
    up_to: int | None
    with svc.db.session() as session:
        if target is not None:
            up_to = target.version_number
        else:
            up_to = session.scalar(
                select(DatasetVersion.version_number)
                .where(DatasetVersion.model_id == model_id)
                .order_by(DatasetVersion.version_number.desc())
                .limit(1)
            )
    if up_to is None:
        return Batch(model_id, version, trigger, (), rescore=True, run_id=run_id)
    _open_external_jobs(svc, model_id, up_to)
    items = sorted(
        [*_claim_contributions(svc, model_id, up_to), *_pending_benchmarks(svc, model_id, up_to)],
        key=lambda item: (item.version_number, item.dataset_version_id),
    )
    rescore = trigger == "schedule" or not items
    log.info(
        "model %s run for %s: versions %s%s",
        model_id,
        version,
        ", ".join(item.version for item in items) or "none pending",
        " and a re-score" if rescore else "",
    )
    return Batch(model_id, version, trigger, tuple(items), rescore=rescore, run_id=run_id)


def _find_version(svc: Services, model_id: int, version: str) -> DatasetVersion | None:
    """The partition's version row (the arrival sensor records one for every arrival)."""
    with svc.db.session() as session:
        return session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )


def _open_external_jobs(svc: Services, model_id: int, up_to: int) -> None:
    """Give every external version without a job a queued contribution job."""
    with svc.db.session() as session:
        orphans = session.scalars(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id,
                DatasetVersion.kind == "external",
                DatasetVersion.version_number <= up_to,
                ~exists().where(Contribution.dataset_version_id == DatasetVersion.id),
            )
        ).all()
    for row in orphans:
        with suppress(IntegrityError), svc.db.session() as session:
            session.add(
                Contribution(
                    model_id=model_id,
                    dataset_version_id=row.id,
                    submitter_id=EXTERNAL_SUBMITTER,
                    status=QUEUED,
                    submitted_rows=row.row_count or 0,
                    benchmark_spec_id=None,
                    # Unique per submitter: a concurrent run cannot open a second job.
                    idempotency_key=f"dataset-version:{row.id}",
                )
            )


def _claim_contributions(svc: Services, model_id: int, up_to: int) -> list[VersionItem]:
    with svc.db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(
                Contribution.model_id == model_id,
                Contribution.status == QUEUED,
                DatasetVersion.version_number <= up_to,
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    claimed = []
    for job_id, dv in rows:
        if transition(svc.db, job_id, (QUEUED,), VALIDATING, reason=None):
            claimed.append(version_item(dv, contribution_id=job_id))
    return claimed


def _pending_benchmarks(svc: Services, model_id: int, up_to: int) -> list[VersionItem]:
    with svc.db.session() as session:
        rows = session.execute(
            select(BenchmarkSpec.id, DatasetVersion)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(
                BenchmarkSpec.model_id == model_id,
                DatasetVersion.version_number <= up_to,
                ~exists().where(Evaluation.dataset_version_id == DatasetVersion.id),
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    return [version_item(dv, benchmark_spec_id=spec_id) for spec_id, dv in rows]


def version_item(dv: DatasetVersion, **ids: Any) -> VersionItem:
    """A dataset version row as a batch item (`ids`: its contribution or benchmark id)."""
    return VersionItem(
        dataset_version_id=dv.id,
        model_id=dv.model_id,
        version=dv.version,
        version_number=dv.version_number,
        kind=dv.kind,
        object_key=dv.object_key,
        file_format=dv.file_format,
        **ids,
    )


def transition(
    db: Database, job_id: str, from_statuses: Sequence[str], to: str, **values: Any
) -> bool:
    """Move a job to `to` only if it is in one of `from_statuses`; True when it moved.

    One conditional UPDATE, so concurrent runs cannot both move the same job.
    """
    with db.session() as session:
        result = session.execute(
            update(Contribution)
            .where(Contribution.id == job_id, Contribution.status.in_(from_statuses))
            .values(status=to, updated_at=utcnow(), **values)
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]


def job_status(db: Database, job_id: str) -> str | None:
    with db.session() as session:
        return session.scalar(select(Contribution.status).where(Contribution.id == job_id))


def fail_job(db: Database, item: VersionItem, stage: str, exc: BaseException) -> None:
    """Log an unexpected error of `stage` and move the item's job to `failed`."""
    log.exception("model %s %s: %s failed", item.model_id, item.version, stage)
    if item.contribution_id:
        transition(
            db,
            item.contribution_id,
            (VALIDATING, EVALUATING),
            FAILED,
            reason=f"unexpected error during {stage}: {type(exc).__name__}",
        )


# --- reading dataset versions --------------------------------------------------------------


def load_frame(store: ObjectStore, item: VersionItem) -> pd.DataFrame:
    """A version's file as a DataFrame, read with pyarrow (UnreadableDataset when invalid)."""
    from pipeline.quality import read_dataset

    with store.local_path(item.object_key) as path:
        return read_dataset(path, item.file_format)
