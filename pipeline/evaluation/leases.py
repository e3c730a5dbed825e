"""Leases of claimed jobs: renewal while a run lives, and giving back the jobs of a run that died.

A claim records who holds the job (`claimed_by`: the run id, or a fresh claim id) and until when
(`lease_expires_at`, now + CLAIM_LEASE_SECONDS). While the run's process lives a `LeaseKeeper`
renews the leases it holds every third of that time; a run that dies (out of memory, kill -9, a
daemon restart) stops renewing. `expire_leases` finds jobs whose lease has passed while
`validating`, or `evaluating` before their evaluation is recorded (one recorded is durable: the
next run pays it), and gives them back: to `queued` with the reason the first time, to `failed`
with the reason the second time (`expired_claims` counts them). It runs at the start of every
claim (`pipeline.evaluation.claims`, for that model, so the new run takes the job back at once)
and on every tick of the arrival sensor (for all models; `requeued_jobs` then tells the sensor
which runs to request). A run that cannot value its jobs through no fault of theirs (the
model's training code failed: `pipeline.evaluation.trainers`) gives them back the same way
(`give_back`), counted with the expired claims.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update

from pipeline.core.db import Database
from pipeline.core.tables import (
    EVALUATING,
    FAILED,
    QUEUED,
    VALIDATING,
    Contribution,
    DatasetVersion,
    isoformat_utc,
    utcnow,
)
from pipeline.evaluation.model_claims import renew_model_claims

log = logging.getLogger(__name__)

# The expired claim that fails a job instead of queueing it again.
MAX_EXPIRED_CLAIMS = 2
# Expired claims handled per call (a sensor tick must stay short).
EXPIRE_LIMIT = 500


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
    """Renews the leases of one claim (its jobs and its model claims) every third of the lease
    while its process lives.

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
                renew_model_claims(self.db, self.claim, self.lease_seconds)
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
        status, reason = _given_back(count, stopped, "its claim expired")
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


def _given_back(count: int, why: str, times: str) -> tuple[str, str]:
    """The status and reason of a job given back for the `count`-th time."""
    if count >= MAX_EXPIRED_CLAIMS:
        return FAILED, f"{why}; {times} {count} times, so it is not retried"
    return QUEUED, f"{why}; queued again"


def give_back(db: Database, job_ids: Sequence[str], why: str) -> dict[str, str]:
    """Give back `evaluating` jobs their run could not finish through no fault of theirs.

    Counted with expired claims: `queued` the first time (the arrival sensor requests a run
    for it, as for an expired claim), `failed` the second. The new status by job id.
    """
    moved: dict[str, str] = {}
    for job_id in job_ids:
        with db.session() as session:
            job = session.get(Contribution, job_id)
            if job is None or job.status != EVALUATING:
                continue
            count = job.expired_claims + 1
            status, reason = _given_back(count, why, "given back")
            done = session.execute(
                update(Contribution)
                .where(Contribution.id == job_id, Contribution.status == EVALUATING)
                .values(
                    status=status,
                    reason=reason,
                    claimed_by=None,
                    lease_expires_at=None,
                    expired_claims=count,
                    updated_at=utcnow(),
                )
            ).rowcount  # type: ignore[attr-defined]
        if done:
            moved[job_id] = status
    return moved


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
