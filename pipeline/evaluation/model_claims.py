"""Model claims: one run at a time works on a model's versions, values them and pays them.

Runs of one model are serialized by Dagster's run queue (a per-model tag limited to 1); this
claim is the domain's own guarantee for two runs that slip through (another launcher, another
instance config). A row per model in `model_claims` says who holds it (`claimed_by`, the run id)
and until when (`lease_expires_at`, renewed by `pipeline.evaluation.leases.LeaseKeeper` while the
run's process lives).

- `acquire_model` takes the claim, or waits for it while another live run holds it. A claim
  whose lease passed, or whose holder has ended (the caller says which runs ended: Dagster
  knows, the domain does not), is taken over.
- `hold_model` is the fence: the transactions that record a valuation and that pay it first
  renew the claim *in the same transaction* and abort when this run no longer holds it, so a run
  that lost its claim (a stalled process whose lease passed) writes nothing, and no two runs
  ever value against the same accepted state.
- `adopt_jobs` runs after the claim is taken: the jobs still held by a run that has ended go to
  this run when it re-executes that run (its parent), else back to `queued`.
- `release_model` ends the claim when the run ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.core.db import Database
from pipeline.core.errors import Conflict
from pipeline.core.tables import (
    EVALUATING,
    QUEUED,
    VALIDATING,
    Contribution,
    ModelClaim,
    utcnow,
)

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)

# How long a run waits for a model another live run holds before it gives up (its versions stay
# queued for the next run). The run queue normally makes this wait zero.
MODEL_WAIT_SECONDS = 1800.0
POLL_SECONDS = 1.0

# Says whether a claim holder has ended, and how ("canceled", "failed", "succeeded"); None while
# it runs or when it is not known (a claim that is not a run id).
EndedFn = Callable[[str], str | None]


def _never_ended(_claim: str) -> str | None:
    return None


class ModelBusy(Conflict):
    """Another live run holds the model past the wait."""


class ModelClaimLost(Conflict):
    """This run no longer holds the model's claim: it must not record anything."""


@dataclass(frozen=True)
class ModelHold:
    """A model claimed by a run; `taken_from` is the ended or expired holder it replaced."""

    model_id: int
    claim: str
    taken_from: str | None = None
    why: str | None = None


def acquire_model(
    db: Database,
    model_id: int,
    claim: str,
    lease_seconds: int,
    *,
    ended: EndedFn = _never_ended,
    wait_seconds: float = MODEL_WAIT_SECONDS,
    on_wait: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> ModelHold:
    """Take the model's claim for `claim` (see the module docstring); ModelBusy after the wait."""
    deadline = monotonic() + wait_seconds
    told = False
    while True:
        hold = _try_acquire(db, model_id, claim, lease_seconds, ended)
        if isinstance(hold, ModelHold):
            return hold
        if monotonic() >= deadline:
            raise ModelBusy(f"model {model_id} is held by run {hold}; its versions stay queued")
        if on_wait is not None and not told:
            on_wait(hold)
            told = True
        sleep(POLL_SECONDS)


def _try_acquire(
    db: Database, model_id: int, claim: str, lease_seconds: int, ended: EndedFn
) -> ModelHold | str:
    """The hold, or the claim of the live holder."""
    now = utcnow()
    lease = now + timedelta(seconds=lease_seconds)
    try:
        with db.session() as session:
            session.add(
                ModelClaim(
                    model_id=model_id, claimed_by=claim, lease_expires_at=lease, claimed_at=now
                )
            )
        return ModelHold(model_id, claim)
    except IntegrityError:
        pass  # held, by us or by another run
    with db.session() as session:
        row = session.get(ModelClaim, model_id)
        if row is None:
            return "(released meanwhile)"
        holder, expires = row.claimed_by, row.lease_expires_at
    if holder == claim:
        _renew(db, model_id, claim, lease_seconds)
        return ModelHold(model_id, claim)
    why = "its lease expired" if expires < now else ended(holder)
    if why is None:
        return holder
    with db.session() as session:
        moved = session.execute(
            update(ModelClaim)
            .where(ModelClaim.model_id == model_id, ModelClaim.claimed_by == holder)
            .values(claimed_by=claim, lease_expires_at=lease, claimed_at=now)
        ).rowcount  # type: ignore[attr-defined]
    if not moved:
        return holder  # another run took it first; look again
    log.warning("model %s: run %s takes over the claim of %s (%s)", model_id, claim, holder, why)
    return ModelHold(model_id, claim, taken_from=holder, why=why)


def _renew(db: Database, model_id: int, claim: str, lease_seconds: int) -> int:
    with db.session() as session:
        return _renew_in(session, model_id, claim, lease_seconds)


def _renew_in(session: Session, model_id: int | None, claim: str, lease_seconds: int) -> int:
    query = update(ModelClaim).where(ModelClaim.claimed_by == claim)
    if model_id is not None:
        query = query.where(ModelClaim.model_id == model_id)
    result = session.execute(
        query.values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def renew_model_claims(db: Database, claim: str, lease_seconds: int) -> int:
    """Extend the leases of the models `claim` holds (the LeaseKeeper calls it)."""
    with db.session() as session:
        return _renew_in(session, None, claim, lease_seconds)


def hold_model(session: Session, model_id: int, claim: str, lease_seconds: int) -> None:
    """The fence: renew the claim inside `session`'s transaction, or raise ModelClaimLost.

    The update takes the row's write lock (PostgreSQL) or the database's (SQLite) until the
    transaction ends, so a run taking the claim over waits for this transaction.
    """
    if not _renew_in(session, model_id, claim, lease_seconds):
        raise ModelClaimLost(f"run {claim} no longer holds model {model_id}; nothing is recorded")


def release_model(db: Database, model_id: int | None, claim: str) -> int:
    """End the claims `claim` holds (of one model, or all of them); how many were held."""
    query = delete(ModelClaim).where(ModelClaim.claimed_by == claim)
    if model_id is not None:
        query = query.where(ModelClaim.model_id == model_id)
    with db.session() as session:
        return int(session.execute(query).rowcount)  # type: ignore[attr-defined]


def model_holder(db: Database, model_id: int) -> str | None:
    with db.session() as session:
        return session.scalar(select(ModelClaim.claimed_by).where(ModelClaim.model_id == model_id))


@dataclass(frozen=True)
class AdoptedJobs:
    """What `adopt_jobs` did: jobs taken over from a re-executed run, jobs given back."""

    adopted: list[str]
    requeued: list[str]


def _unfinished() -> object:
    """A job a run still works on: checking, or valuing without a recorded valuation."""
    return or_(
        Contribution.status == VALIDATING,
        and_(Contribution.status == EVALUATING, Contribution.improvement_pct.is_(None)),
    )


def adopt_jobs(
    db: Database,
    model_id: int,
    claim: str,
    lease_seconds: int,
    *,
    ended: EndedFn,
    parents: Collection[str] = (),
) -> AdoptedJobs:
    """Jobs of the model still held by runs that ended: this run's parents' become this run's
    (checking again from `validating`), the others go back to `queued` with the reason.

    Called by the model's claim holder only, so no live run can hold these jobs. A run that
    failed counts as an expired claim of its jobs (`pipeline.evaluation.leases`); a canceled
    one does not: an operator stopped it, the data did not.
    """
    with db.session() as session:
        rows = session.execute(
            select(Contribution.id, Contribution.claimed_by, Contribution.expired_claims).where(
                Contribution.model_id == model_id,
                Contribution.claimed_by.is_not(None),
                Contribution.claimed_by != claim,
                _unfinished(),  # type: ignore[arg-type]
            )
        ).all()
    adopted: list[str] = []
    requeued: list[str] = []
    verdicts: dict[str, str | None] = {}
    for job_id, holder, strikes in rows:
        if holder is None:
            continue
        if holder not in verdicts:
            verdicts[holder] = ended(holder)
        why = verdicts[holder]
        if why is None:
            continue  # a live run (its lease decides, `expire_leases`)
        values = _handover(holder, why, claim, lease_seconds, strikes, adopt=holder in parents)
        target = adopted if holder in parents else requeued
        with db.session() as session:
            moved = session.execute(
                update(Contribution)
                .where(Contribution.id == job_id, Contribution.claimed_by == holder, _unfinished())  # type: ignore[arg-type]
                .values(updated_at=utcnow(), **values)
            ).rowcount  # type: ignore[attr-defined]
        if moved:
            target.append(job_id)
    if adopted or requeued:
        log.warning(
            "model %s: run %s adopted %d job(s) and gave back %d of ended runs",
            model_id,
            claim,
            len(adopted),
            len(requeued),
        )
    return AdoptedJobs(adopted, requeued)


def _handover(
    holder: str, why: str, claim: str, lease_seconds: int, strikes: int, *, adopt: bool
) -> dict[str, Any]:
    """The new values of a job an ended run held: this run's (adopted), else queued again."""
    if adopt:
        return {
            "status": VALIDATING,
            "claimed_by": claim,
            "lease_expires_at": utcnow() + timedelta(seconds=lease_seconds),
            "reason": None,
        }
    return {
        "status": QUEUED,
        "claimed_by": None,
        "lease_expires_at": None,
        "reason": f"the run holding it ({holder}) ended ({why}) before finishing it; queued again",
        "expired_claims": strikes + (why == "failed"),
    }


def fence(
    session: Session, svc: Services, model_id: int, claim: str | None, *, strict: bool
) -> None:
    """The check a recording transaction makes first (see `hold_model`).

    `strict` (a batch claimed under the model's claim): this claim must hold the model. Else
    (the domain used without Dagster: tests, tools) no other claim may hold it.
    """
    lease = svc.settings.claim_lease_seconds
    if strict and claim is not None:
        hold_model(session, model_id, claim, lease)
        return
    holder = session.scalar(select(ModelClaim.claimed_by).where(ModelClaim.model_id == model_id))
    if holder is not None and holder != claim:
        raise ModelClaimLost(f"model {model_id} is held by run {holder}; nothing is recorded")
