"""Payouts held for the operator: a valuation by the owner's code its reference check disputes.

When `pipeline.rewards.reference_check` disputes a valuation made with the owner's training
code, the contributions it accepted are written as usual (`evaluating`, their shares and the
figures) but held: `payout_hold` holds the check's figures, the reason says the payout waits for
the operator, and

- the payer skips them (`pipeline.rewards.payouts`): nothing is paid, no ledger row;
- they are not accepted training data (`pipeline.evaluation.jobs.accepted_contribution`): the
  next batch is valued without them;
- the operator decides, per valuation: `release` pays it as valued (the payer's caps apply as
  at any payment); `reject` rejects its held contributions (`rejected`, nothing paid, not
  trained on). `marketplace payouts held | release VALUATION_ID | reject VALUATION_ID`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from pipeline.core.db import Database
from pipeline.core.errors import NotFound
from pipeline.core.tables import EVALUATING, REJECTED, Contribution, Evaluation, utcnow
from pipeline.rewards.reference_check import ReferenceCheck

if TYPE_CHECKING:
    from pipeline.rewards.payouts import RewardOutcome
    from pipeline.services import Services

HELD = "payout held for the operator"


def held_reason(check: ReferenceCheck) -> str:
    """A held job's reason: the figures of the check, no owner text."""
    return (
        f"accepted; {HELD}: the model's training code and the marketplace's reference estimator "
        f"disagree on this batch ({check.describe()}); rewards pending the operator's review"
    )


@dataclass(frozen=True)
class HeldValuation:
    valuation_id: str
    model_id: int
    evaluation_ids: list[str]
    job_ids: list[str]
    hold: str


def held_valuations(db: Database) -> list[HeldValuation]:
    """Every valuation with a held payout, oldest first."""
    with db.session() as session:
        rows = session.execute(
            select(
                Evaluation.valuation_id,
                Evaluation.id,
                Contribution.id,
                Contribution.model_id,
                Contribution.payout_hold,
            )
            .join(Contribution, Contribution.dataset_version_id == Evaluation.dataset_version_id)
            .where(
                Contribution.status == EVALUATING,
                Contribution.payout_hold.is_not(None),
                Evaluation.valuation_id.is_not(None),
            )
            .order_by(Evaluation.created_at)
        ).all()
    grouped: dict[str, list[tuple[str, str, int, str]]] = defaultdict(list)
    for valuation_id, evaluation_id, job_id, model_id, hold in rows:
        grouped[str(valuation_id)].append((evaluation_id, job_id, model_id, str(hold)))
    return [
        HeldValuation(
            valuation_id,
            members[0][2],
            [m[0] for m in members],
            [m[1] for m in members],
            members[0][3],
        )
        for valuation_id, members in grouped.items()
    ]


def _held(db: Database, valuation_id: str) -> HeldValuation:
    for held in held_valuations(db):
        if held.valuation_id == valuation_id:
            return held
    raise NotFound(f"no payout is held for valuation {valuation_id}")


def release(svc: Services, valuation_id: str) -> list[RewardOutcome]:
    """Pay a held valuation as it was valued (the operator's decision). While a run holds the
    model, its payer pays the released jobs (they are left `evaluating` with a positive share,
    no longer held): then nothing is paid here and the list is empty."""
    from pipeline.evaluation.model_claims import ModelClaimLost
    from pipeline.rewards.payouts import pay_valuation

    held = _held(svc.db, valuation_id)
    with svc.db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id.in_(held.job_ids), Contribution.status == EVALUATING)
            .values(payout_hold=None, updated_at=utcnow())
        )
    try:
        paid = pay_valuation(svc, held.evaluation_ids[0])
    except ModelClaimLost:
        return []
    return [paid[e] for e in held.evaluation_ids if e in paid]


def reject(db: Database, valuation_id: str) -> list[str]:
    """Reject a held valuation's contributions: nothing paid, not trained on. Their job ids."""
    held = _held(db, valuation_id)
    reason = (
        f"rejected by the operator after the {HELD}: the model's training code and the "
        "marketplace's reference estimator disagreed on this batch; nothing paid, not trained on"
    )
    with db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id.in_(held.job_ids), Contribution.status == EVALUATING)
            .values(status=REJECTED, reason=reason, updated_at=utcnow())
        )
    return held.job_ids
