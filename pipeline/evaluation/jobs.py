"""Contribution job status: the states a job moves through and the conditional moves between them.

Contribution status: `queued → validating` (the checks of `pipeline.checks.batch`) `→ evaluating`
(`pipeline.rewards.batch_valuation`) `→ rewarded` (`pipeline.rewards.payouts`) or `rejected` (a
check failed, or no improvement) or `failed` (an unexpected error); `reason` says why. Every move is
a conditional update (`transition`), so concurrent runs cannot both move the same job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, and_, or_, select, update

from pipeline.core.db import Database
from pipeline.core.tables import (
    EVALUATING,
    FAILED,
    REWARDED,
    VALIDATING,
    Contribution,
    utcnow,
)

if TYPE_CHECKING:
    from pipeline.evaluation.batches import VersionItem

log = logging.getLogger(__name__)

TRIGGERS = ("arrival", "schedule", "manual")


def normalize_trigger(value: str | None) -> str:
    return value if value in TRIGGERS else "manual"


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


def accepted_contribution() -> ColumnElement[bool]:
    """SQL condition of a contribution whose rows train the model: status `rewarded`, or
    `evaluating` with a positive share (valued, rewards pending) and no payout held for the
    operator (`pipeline.rewards.holds`).

    `pipeline.evaluation.datasets` reads these rows; `pipeline.rewards.ledger` audits them.
    """
    return or_(
        Contribution.status == REWARDED,
        and_(
            Contribution.status == EVALUATING,
            Contribution.improvement_pct > 0,
            Contribution.payout_hold.is_(None),
        ),
    )


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
