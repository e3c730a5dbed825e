"""Payouts of accepted contributions: the manifest that says who is paid, caps, ledger writes.

The contributions one valuation accepted (`pipeline.rewards.batch_valuation`; left `evaluating`
with a positive share) are paid together: the reward formula of `pipeline.rewards.formula` turns
each share into tokens, each total is capped at `REWARD_MAX_TOKENS_PER_CONTRIBUTION`, and when the
batch would take the model past `REWARD_MAX_TOKENS_PER_MODEL_PER_DAY` (UTC day, counted on the
ledger) every payment of the batch is scaled down pro rata, so no one is paid more for being
first. The manifest splits each payment between wallets; the ledger rows of the whole batch
are written and the jobs move to `rewarded` in one transaction, with the model row locked so
that concurrent payers see each other's payments. Payment is idempotent per evaluation
(ledger rows are unique per evaluation and wallet). The manifest is the one stored with the
version, else a `manifest.json` beside it in the store, else the submitter's stored one
(`pipeline.rewards.manifest_sources`);
without a usable one the job is `rewarded` and nothing is paid. The reads of the ledger are in
`pipeline.rewards.ledger`.

This module knows nothing of Dagster; `assets/` wraps it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from pipeline.core.db import Database
from pipeline.core.tables import (
    EVALUATING,
    REWARDED,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    RewardEntry,
    utcnow,
)
from pipeline.core.token_units import UNITS_PER_TOKEN, units_from_tokens
from pipeline.evaluation.model_claims import fence
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.rewards.formula import (
    TOKEN_DECIMALS,
    QualityFactors,
    compute_reward,
    split_reward,
    to_checksum_address,
)
from pipeline.rewards.manifest_sources import resolve_manifest
from pipeline.rewards.manifests import recipients

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)

_TOKEN_UNITS = 10**TOKEN_DECIMALS
# The detail of a RewardOutcome for a valuation paid by an earlier run.
ALREADY_PAID = "already paid"


@dataclass(frozen=True)
class RewardOutcome:
    version: str
    evaluation_id: str
    tokens: float  # paid, the sum of the ledger entries
    earned: float  # what the formula gave, before the caps
    recipients: list[dict[str, Any]]
    detail: str
    share_pct: float | None = None
    pool_pct: float | None = None
    interval: dict[str, Any] | None = None
    batch_size: int | None = None
    integrity: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pay_batch(
    svc: Services,
    model_id: int,
    outcomes: Sequence[EvaluationOutcome],
    *,
    claim: str | None = None,
    strict: bool = False,
) -> list[RewardOutcome]:
    """Pay each valuation of this run's evaluations; idempotent per evaluation.

    Besides this run's evaluations, any of the model's contributions left `evaluating` with a
    positive share (a run that stopped between evaluation and rewards) is paid now. `claim`
    and `strict`: the model claim each payment's transaction checks first
    (`pipeline.evaluation.model_claims.fence`).
    """
    evaluation_ids = [
        o.evaluation_id for o in outcomes if o.kind == "contribution" and o.evaluation_id
    ]
    for stranded in stranded_evaluations(svc.db, model_id):
        if stranded not in evaluation_ids:
            evaluation_ids.append(stranded)
    paid: dict[str, RewardOutcome] = {}
    for evaluation_id in evaluation_ids:
        if evaluation_id not in paid:
            paid.update(pay_valuation(svc, evaluation_id, claim=claim, strict=strict))
    return [paid[e] for e in evaluation_ids if e in paid]


def stranded_evaluations(db: Database, model_id: int) -> list[str]:
    """Latest evaluation of each accepted contribution still waiting for its rewards."""
    with db.session() as session:
        rows = session.execute(
            select(Evaluation.id, Evaluation.dataset_version_id)
            .join(Contribution, Contribution.dataset_version_id == Evaluation.dataset_version_id)
            .where(
                Contribution.model_id == model_id,
                Contribution.status == EVALUATING,
                Contribution.improvement_pct > 0,
                Contribution.payout_hold.is_(None),
            )
            .order_by(Evaluation.created_at)
        ).all()
    latest = {dv_id: evaluation_id for evaluation_id, dv_id in rows}
    return list(latest.values())


def pay_evaluation(svc: Services, evaluation_id: str) -> RewardOutcome | None:
    """Pay the valuation `evaluation_id` belongs to; its outcome, None when it earns nothing."""
    return pay_valuation(svc, evaluation_id).get(evaluation_id)


@dataclass
class _Member:
    """One accepted contribution of a valuation, with what it earns."""

    evaluation: Evaluation
    job: Contribution
    version: str
    earned: float
    breakdown: dict[str, Any]
    manifest: Any
    source: str
    problem: str
    cap: str = ""
    units: int = 0  # millionths of a token paid, after the caps

    @property
    def payable(self) -> bool:
        return self.manifest is not None and self.units > 0


def pay_valuation(
    svc: Services, evaluation_id: str, *, claim: str | None = None, strict: bool = False
) -> dict[str, RewardOutcome]:
    """Pay every contribution accepted by the valuation of `evaluation_id`, in one transaction.

    Returns an outcome per accepted evaluation of the valuation ("already paid" for those paid
    before). Ledger rows are unique per (evaluation, wallet): a re-run writes nothing.
    """
    members, done = _valuation_members(svc, evaluation_id)
    if not members:
        return done
    settings = svc.settings
    per_contribution = round(settings.reward_max_tokens_per_contribution * _TOKEN_UNITS)
    for member in members:
        member.units = round(member.earned * _TOKEN_UNITS)
        if member.units > per_contribution:
            member.units = per_contribution
            member.cap = (
                f"capped at {settings.reward_max_tokens_per_contribution:g} tokens per contribution"
            )
    try:
        with svc.db.session() as session:
            fence(session, svc, members[0].job.model_id, claim, strict=strict)
            # Payers of one model queue here, so each sees the day's ledger complete.
            session.get(Model, members[0].job.model_id, with_for_update=True)
            _apply_daily_cap(session, settings.reward_max_tokens_per_model_per_day, members)
            for member in members:
                _write_payment(session, member)
    except (IntegrityError, _AlreadyPaid):
        log.info("valuation of evaluation %s was paid concurrently", evaluation_id)
        return pay_valuation(svc, evaluation_id, claim=claim, strict=strict)
    return {**done, **{m.evaluation.id: _outcome(m) for m in members}}


def _valuation_members(
    svc: Services, evaluation_id: str
) -> tuple[list[_Member], dict[str, RewardOutcome]]:
    """The valuation's accepted contributions still to pay, and outcomes of those paid before."""
    members: list[_Member] = []
    done: dict[str, RewardOutcome] = {}
    for evaluation, job, dv, existing in _valuation_rows(svc, evaluation_id):
        if job is None or dv is None or (evaluation.improvement_pct or 0) <= 0:
            continue
        if job.status not in (EVALUATING, REWARDED) or job.payout_hold is not None:
            continue  # held: paid when the operator releases it (pipeline.rewards.holds)
        if job.status == REWARDED or existing:
            done[evaluation.id] = _paid_before(evaluation, job, dv.version, existing)
            continue
        breakdown = compute_reward(
            float(evaluation.improvement_pct or 0.0), _factors(job, evaluation)
        )
        manifest, source, problem = resolve_manifest(svc, job, dv)
        members.append(
            _Member(
                evaluation,
                job,
                dv.version,
                breakdown.total_tokens,
                breakdown.as_dict(),
                manifest,
                source,
                problem,
            )
        )
    return members, done


def _valuation_rows(
    svc: Services, evaluation_id: str
) -> list[tuple[Evaluation, Contribution | None, DatasetVersion | None, Sequence[RewardEntry]]]:
    """Each Evaluation of the valuation `evaluation_id` belongs to, with its job, dataset
    version and reward entries already written."""
    with svc.db.session() as session:
        first = session.get(Evaluation, evaluation_id)
        if first is None or first.dataset_version_id is None:
            return []
        if first.valuation_id is None:
            evaluations = [first]
        else:
            evaluations = list(
                session.scalars(
                    select(Evaluation)
                    .where(Evaluation.valuation_id == first.valuation_id)
                    .order_by(Evaluation.id)
                )
            )
        rows = []
        for evaluation in evaluations:
            job = session.scalar(
                select(Contribution).where(
                    Contribution.dataset_version_id == evaluation.dataset_version_id
                )
            )
            dv = session.get(DatasetVersion, evaluation.dataset_version_id)
            existing = session.scalars(
                select(RewardEntry).where(RewardEntry.evaluation_id == evaluation.id)
            ).all()
            rows.append((evaluation, job, dv, existing))
    return rows


def _paid_before(
    evaluation: Evaluation, job: Contribution, version: str, existing: Sequence[RewardEntry]
) -> RewardOutcome:
    reward = (job.quality or {}).get("reward", {})
    return RewardOutcome(
        version,
        evaluation.id,
        float(job.tokens or math.fsum(e.tokens for e in existing)),
        float(reward.get("total_tokens", job.tokens or 0.0)),
        [{"wallet": e.wallet_address, "tokens": e.tokens} for e in existing],
        ALREADY_PAID,
        **_figures(evaluation, job),
    )


def _factors(job: Contribution, evaluation: Evaluation) -> Any:
    """Quality factors of the formula: completeness of the contribution, volume of the batch.

    Uniqueness counts against the model's accepted data when the integrity check measured it
    (`quality.integrity.novel_share`), else within the contribution. Volume is the rows the
    valuation accepted in the batch, so one dataset cut into pieces earns what it would whole.
    """
    quality = job.quality or {}
    checks = quality.get("checks", {})
    integrity = quality.get("integrity") or {}
    uniqueness = integrity.get("novel_share", checks.get("uniqueness", 1.0))
    rows = evaluation.batch_rows or checks.get("row_count", job.submitted_rows) or 0
    return QualityFactors(
        completeness=float(_clamp(checks.get("completeness", 1.0))),
        uniqueness=float(_clamp(uniqueness)),
        row_count=int(rows),
        passed=True,
    )


def _apply_daily_cap(session: Any, cap_tokens: float, members: list[_Member]) -> None:
    """Scale the batch's payments pro rata so the model's UTC day stays within the cap."""
    now = utcnow()
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    # The day's exact base units, summed as integers (not the float `tokens` column) and
    # rounded up to millionths, so the day never passes the cap by a rounding.
    paid_units = sum(
        session.scalars(
            select(RewardEntry.units).where(
                RewardEntry.model_id == members[0].job.model_id,
                RewardEntry.created_at >= day_start,
            )
        )
    )
    paid_today = -(-paid_units // (UNITS_PER_TOKEN // _TOKEN_UNITS))
    remaining = max(0, round(cap_tokens * _TOKEN_UNITS) - paid_today)
    payable = [m for m in members if m.payable]
    wanted = sum(m.units for m in payable)
    if wanted <= remaining:
        return
    for member in payable:
        # Integer millionths rounded down: the batch never exceeds what is left of the day.
        member.units = member.units * remaining // wanted
        member.cap = (
            f"scaled to {remaining / wanted:.1%} by the cap of {cap_tokens:g} tokens per model "
            "per day"
        )


def _write_payment(session: Any, member: _Member) -> None:
    job = member.job
    tokens = member.units / _TOKEN_UNITS
    parts: list[tuple[str, float]] = []
    if member.payable:
        parts = [(w, t) for w, t in split_reward(tokens, recipients(member.manifest)) if t > 0]
    for wallet, amount in parts:
        session.add(
            RewardEntry(
                evaluation_id=member.evaluation.id,
                contribution_id=job.id,
                model_id=job.model_id,
                wallet_address=canonical_wallet(wallet),
                tokens=amount,
                units=units_from_tokens(amount),
            )
        )
    session.flush()
    job_row = session.get(Contribution, job.id, with_for_update=True)
    if job_row is None or job_row.status != EVALUATING:
        raise _AlreadyPaid
    paid = [{"wallet": canonical_wallet(w), "tokens": t} for w, t in parts]
    job_row.status = REWARDED
    job_row.tokens = math.fsum(t for _, t in parts)
    job_row.reason = _detail(member, job_row.tokens)
    job_row.updated_at = utcnow()
    job_row.quality = {
        **(job_row.quality or {}),
        "reward": {
            **member.breakdown,
            "capped_tokens": tokens,
            "cap": member.cap or None,
            "manifest_source": member.source,
            "recipients": paid,
        },
    }
    member.job = job_row
    member.breakdown = {**member.breakdown, "recipients": paid}


def _detail(member: _Member, paid: float) -> str:
    evaluation = member.evaluation
    improvement = f"{evaluation.improvement_pct:+.2f} % {evaluation.metric_name}"
    if (evaluation.batch_size or 1) > 1:
        improvement += (
            f" (its share of the batch's {evaluation.pool_pct:+.2f} %, "
            f"{evaluation.batch_size} contributions)"
        )
    if evaluation.interval_low is not None and evaluation.interval_high is not None:
        improvement += (
            f", {evaluation.interval_level or 0:.0%} interval "
            f"[{evaluation.interval_low:+.2f}, {evaluation.interval_high:+.2f}] %"
        )
    cap = f"; {member.cap}" if member.cap else ""
    if member.manifest is None:
        return (
            f"accepted ({improvement}); earned {member.earned:g} tokens{cap} but nothing was "
            f"paid: {member.problem}"
        )
    return f"rewarded {paid:g} tokens for {improvement}{cap} (manifest: {member.source})"


def _figures(evaluation: Evaluation, job: Contribution) -> dict[str, Any]:
    interval = None
    if evaluation.interval_low is not None:
        interval = {
            "low": evaluation.interval_low,
            "high": evaluation.interval_high,
            "level": evaluation.interval_level,
        }
    return {
        "share_pct": evaluation.improvement_pct,
        "pool_pct": evaluation.pool_pct,
        "interval": interval,
        "batch_size": evaluation.batch_size,
        "integrity": (job.quality or {}).get("integrity"),
    }


def _outcome(member: _Member) -> RewardOutcome:
    recipients = member.breakdown.get("recipients", [])
    return RewardOutcome(
        member.version,
        member.evaluation.id,
        math.fsum(r["tokens"] for r in recipients),
        member.earned,
        recipients,
        member.job.reason or "",
        **_figures(member.evaluation, member.job),
    )


class _AlreadyPaid(Exception):
    pass


def _clamp(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, number)) if math.isfinite(number) else 0.0


def canonical_wallet(address: str) -> str:
    """The EIP-55 spelling: the ledger stores and looks wallets up in one spelling."""
    return to_checksum_address(address)
