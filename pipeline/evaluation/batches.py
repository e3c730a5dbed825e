"""Batches of dataset versions: claiming the pending versions of a run, and job status moves.

A run for a model's dataset version works on a *batch*: every dataset version of
the model up to and including `version` that is not yet processed, in version order, so that
arrivals debounced into one run are all handled. What is pending:

- a contribution version whose job is `queued` (claimed by an atomic `queued → validating`
  update, so two runs never process the same job, with a lease: see below);
- a benchmark version for which no evaluation is recorded yet (a new benchmark re-scores the
  model on it);
- an `external` version (an object that arrived in the store without going through the API)
  is given a contribution job owned by `external` and then handled as a contribution.

Contribution status: `queued → validating` (the checks of `pipeline.checks.batch`) `→ evaluating`
(`pipeline.evaluation.batch_scoring`) `→ rewarded` (`pipeline.rewards.payouts`) or `rejected` (a
check failed, or no improvement) or `failed` (an unexpected error); `reason` says why. Every move is
a conditional update (`transition`), so concurrent runs cannot both move the same job.

Leases. A claim records who holds the job (`claimed_by`: the run id, or a fresh claim id) and
until when (`lease_expires_at`, now + CLAIM_LEASE_SECONDS). While the run's process lives a
`LeaseKeeper` renews the leases it holds every third of that time; a run that dies (out of
memory, kill -9, a daemon restart) stops renewing. `expire_leases` finds jobs whose lease has
passed while `validating`, or `evaluating` before their evaluation is recorded (one recorded is
durable: the next run pays it), and gives them back: to `queued` with the reason the first time,
to `failed` with the reason the second time (`expired_claims` counts them). It runs at the start
of every claim (for that model, so the new run takes the job back at once) and on every tick of
the arrival sensor (for all models; `requeued_jobs` then tells the sensor which runs to request).

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, and_, exists, or_, select, update
from sqlalchemy.exc import IntegrityError

from pipeline.bootstrap import Services
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.core.tables import (
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    isoformat_utc,
    utcnow,
)
from pipeline.store.objectstore import ObjectStore

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
# The expired claim that fails a job instead of queueing it again.
MAX_EXPIRED_CLAIMS = 2
# Expired claims handled per call (a sensor tick must stay short).
EXPIRE_LIMIT = 500


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
    claim: str | None = None  # `claimed_by` of the jobs this batch holds

    @property
    def versions(self) -> list[str]:
        return [item.version for item in self.items]

    def contributions(self) -> list[VersionItem]:
        return [item for item in self.items if item.is_contribution]


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
    """Claim every pending version of `model_id` up to `version` (see the module docstring).

    Jobs of the model whose claim expired are given back first, so this run takes them up.
    """
    trigger = normalize_trigger(trigger)
    claim = run_id or f"claim-{uuid.uuid4()}"
    with svc.db.session() as session:
        if session.get(Model, model_id) is None:
            raise InvalidInput(f"model {model_id} not found")
    expire_leases(svc.db, svc.settings.claim_lease_seconds, model_id=model_id)
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
        return Batch(model_id, version, trigger, (), rescore=True, run_id=run_id, claim=claim)
    _open_external_jobs(svc, model_id, up_to)
    lease = timedelta(seconds=svc.settings.claim_lease_seconds)
    claimed = _claim_contributions(svc, model_id, up_to, claim, lease)
    items = sorted(
        [*claimed, *_pending_benchmarks(svc, model_id, up_to)],
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
    return Batch(
        model_id, version, trigger, tuple(items), rescore=rescore, run_id=run_id, claim=claim
    )


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


def _claim_contributions(
    svc: Services, model_id: int, up_to: int, claim: str, lease: timedelta
) -> list[VersionItem]:
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
        if transition(
            svc.db,
            job_id,
            (QUEUED,),
            VALIDATING,
            reason=None,
            claimed_by=claim,
            lease_expires_at=utcnow() + lease,
        ):
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


# --- leases --------------------------------------------------------------------------------


def renew_leases(db: Database, claim: str, lease_seconds: int) -> int:
    """Extend the leases of the jobs `claim` holds; the number of jobs renewed."""
    with db.session() as session:
        result = session.execute(
            update(Contribution)
            .where(
                Contribution.claimed_by == claim,
                Contribution.status.in_((VALIDATING, EVALUATING)),
            )
            # A renewal is not a change of the job: updated_at keeps its value.
            .values(
                lease_expires_at=utcnow() + timedelta(seconds=lease_seconds),
                updated_at=Contribution.updated_at,
            )
        )
        return int(result.rowcount)  # type: ignore[attr-defined]


class LeaseKeeper:
    """Renews the leases of one claim every third of the lease while its process lives.

    Started where a run's step runs (the Dagster resource of the assets); a process that dies
    takes its thread with it, which is the point: its leases then run out.
    """

    def __init__(self, db: Database, claim: str, lease_seconds: int) -> None:
        self.db = db
        self.claim = claim
        self.lease_seconds = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        interval = self.lease_seconds / 3
        while True:
            try:
                renew_leases(self.db, self.claim, self.lease_seconds)
            except Exception:  # a database hiccup must not end the run; the next try may work
                log.exception("could not renew the leases of %s", self.claim)
            if self._stop.wait(interval):
                return


@dataclass(frozen=True)
class ExpiredClaim:
    """A job given back because the run holding it stopped renewing its lease."""

    job_id: str
    model_id: int
    version: str | None
    status: str  # what the job became: queued or failed
    reason: str


def _lease_expired(now: datetime, lease_seconds: int) -> ColumnElement[bool]:
    """Claims past their lease; a claim from before leases existed counts from updated_at."""
    unfinished = or_(
        Contribution.status == VALIDATING,
        and_(Contribution.status == EVALUATING, Contribution.improvement_pct.is_(None)),
    )
    passed = or_(
        Contribution.lease_expires_at < now,
        and_(
            Contribution.lease_expires_at.is_(None),
            Contribution.updated_at < now - timedelta(seconds=lease_seconds),
        ),
    )
    return and_(unfinished, passed)


def expire_leases(
    db: Database,
    lease_seconds: int,
    *,
    model_id: int | None = None,
    now: datetime | None = None,
) -> list[ExpiredClaim]:
    """Give back the jobs whose claim expired (see the module docstring); what was done."""
    now = now or utcnow()
    expired = _lease_expired(now, lease_seconds)
    query = (
        select(Contribution, DatasetVersion.version)
        .outerjoin(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
        .where(expired)
        .order_by(Contribution.lease_expires_at)
        .limit(EXPIRE_LIMIT)
    )
    if model_id is not None:
        query = query.where(Contribution.model_id == model_id)
    with db.session() as session:
        rows = session.execute(query).all()
    done = []
    for job, version in rows:
        count = job.expired_claims + 1
        holder = job.claimed_by or "an earlier run"
        until = isoformat_utc(job.lease_expires_at) or "its last update"
        stopped = f"the run holding it ({holder}) stopped while {job.status}, lease expired {until}"
        if count >= MAX_EXPIRED_CLAIMS:
            status = FAILED
            reason = f"{stopped}; its claim expired {count} times, so it is not retried"
        else:
            status = QUEUED
            reason = f"{stopped}; queued again"
        with db.session() as session:
            moved = session.execute(
                update(Contribution)
                # Conditional: a renewal or a finished step in the meantime keeps the job.
                .where(Contribution.id == job.id, Contribution.status == job.status, expired)
                .values(
                    status=status,
                    reason=reason,
                    claimed_by=None,
                    lease_expires_at=None,
                    expired_claims=count,
                    updated_at=now,
                )
            ).rowcount  # type: ignore[attr-defined]
        if moved:
            log.warning("model %s %s: %s", job.model_id, version, reason)
            done.append(ExpiredClaim(job.id, job.model_id, version, status, reason))
    return done


@dataclass(frozen=True)
class RequeuedJob:
    job_id: str
    model_id: int
    version: str
    version_number: int
    expired_claims: int


def requeued_jobs(db: Database, limit: int = EXPIRE_LIMIT) -> list[RequeuedJob]:
    """Queued jobs that were given back after an expired claim, oldest version first."""
    with db.session() as session:
        rows = session.execute(
            select(
                Contribution.id,
                Contribution.model_id,
                DatasetVersion.version,
                DatasetVersion.version_number,
                Contribution.expired_claims,
            )
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(Contribution.status == QUEUED, Contribution.expired_claims > 0)
            .order_by(Contribution.model_id, DatasetVersion.version_number)
            .limit(limit)
        ).all()
    return [RequeuedJob(*row) for row in rows]


def retry_run_key(model_id: int, jobs: Sequence[RequeuedJob]) -> str:
    """One key per model and set of (job, expired claims): a tick that sees the same requeued
    jobs again requests nothing new; a job requeued a second time gets a new key."""
    ordered = sorted(f"{job.job_id}:{job.expired_claims}" for job in jobs)
    digest = hashlib.sha256(",".join(ordered).encode()).hexdigest()[:12]
    return f"retry-{model_id}-{digest}"


# --- reading dataset versions --------------------------------------------------------------


def load_frame(store: ObjectStore, item: VersionItem) -> pd.DataFrame:
    """A version's file as a DataFrame, read with pyarrow (UnreadableDataset when invalid)."""
    from pipeline.checks.quality import read_dataset

    with store.local_path(item.object_key) as path:
        return read_dataset(path, item.file_format)
