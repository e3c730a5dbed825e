"""The verdicts of a valued batch: each player's Evaluation row, job status, reason and the
figures kept in the job's `quality` JSON, written in one transaction (all or nothing)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from pipeline.core.tables import (
    EVALUATING,
    REJECTED,
    Contribution,
    Evaluation,
    new_uuid,
    utcnow,
)
from pipeline.evaluation.batches import Batch, VersionItem
from pipeline.evaluation.datasets import BenchmarkData
from pipeline.evaluation.model_claims import fence
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.models.paired_fits import DEFAULT_PAIRED_FITS
from pipeline.rewards.budget import BUDGET, Decision, TryGate, budget_reason
from pipeline.rewards.holds import held_reason
from pipeline.rewards.players import Player
from pipeline.rewards.reference_check import ReferenceCheck
from pipeline.rewards.stability import Stability
from pipeline.rewards.valuation import NOISE, BatchValuation

if TYPE_CHECKING:
    from pipeline.services import Services

# A batch's players by contribution id: the batch item and the rows valued.
Players = dict[str, tuple[VersionItem, Player]]


class LeftEvaluating(Exception):
    """A job of the batch is no longer `evaluating`: the valuation is not written at all."""


def record_valuation(
    svc: Services,
    batch: Batch,
    bench: BenchmarkData,
    players: Players,
    valuation: BatchValuation,
    gate: TryGate,
    check: ReferenceCheck | None = None,
    *,
    paired_fits: int = DEFAULT_PAIRED_FITS,
) -> dict[str, EvaluationOutcome]:
    """Write every player's Evaluation, job verdict and try in one transaction (all or nothing).

    `check`: the reference check of a valuation by the owner's code; when it holds, the accepted
    jobs are written held (`pipeline.rewards.holds`). `paired_fits`: the model's K the
    valuation was made with, kept beside the pool's band."""
    valuation_id = new_uuid()
    outcomes: dict[str, EvaluationOutcome] = {}
    with svc.db.session() as session:
        fence(session, svc, batch.model_id, batch.claim, strict=batch.model_held)
        for key, (item, player) in players.items():
            evaluation = _evaluation_row(batch, bench, item, valuation, valuation_id, key)
            session.add(evaluation)
            session.flush()
            decision = gate.decisions.get(key)
            detail = _valuation_detail(valuation, evaluation, player, paired_fits)
            hold = _write_verdict(session, key, valuation, detail, decision, check)
            outcome = _valued_outcome(evaluation, item, valuation, key, decision, paired_fits)
            if hold is not None and check is not None:
                outcome = dataclasses.replace(outcome, detail=held_reason(check), payout_hold=hold)
            outcomes[item.version] = outcome
        gate.record(session, valuation_id)
    return outcomes


def _evaluation_row(
    batch: Batch,
    bench: BenchmarkData,
    item: VersionItem,
    valuation: BatchValuation,
    valuation_id: str,
    key: str,
) -> Evaluation:
    """The Evaluation of one player: the batch's figures and the player's share."""
    interval = valuation.interval
    return Evaluation(
        model_id=batch.model_id,
        dataset_version_id=item.dataset_version_id,
        benchmark_spec_id=bench.spec_id,
        trigger=batch.trigger,
        metric_name=valuation.metric_name,
        metric_direction=valuation.direction,
        score=valuation.score_with,
        baseline_score=valuation.score_without,
        improvement_pct=valuation.shares[key],
        run_id=batch.run_id,
        valuation_id=valuation_id,
        pool_pct=valuation.pool_pct,
        interval_low=interval.low if interval else None,
        interval_high=interval.high if interval else None,
        interval_level=interval.level if interval else None,
        resamples=interval.resamples if interval else None,
        batch_size=valuation.players,
        batch_rows=valuation.accepted_rows,
        base_rows=bench.base_rows,
        valuation_method=valuation.method,
    )


def _valuation_detail(
    valuation: BatchValuation, evaluation: Evaluation, player: Player, paired_fits: int
) -> dict[str, Any]:
    """The figures kept in the job's `quality` JSON under `valuation`."""
    interval = valuation.interval
    return {
        "valuation_id": evaluation.valuation_id,
        "evaluation_id": evaluation.id,
        "accepted": player.key in valuation.accepted,
        "metric": valuation.metric_name,
        "score_without": valuation.score_without,
        "score_with": valuation.score_with,
        "denominator": valuation.denominator,
        "pool_pct": valuation.pool_pct,
        "share_pct": valuation.shares[player.key],
        "interval": interval.as_dict() if interval else None,
        "method": valuation.method,
        "batch_size": valuation.players,
        "batch_rows": valuation.accepted_rows,
        "valued_rows": player.rows,
        "base_rows": evaluation.base_rows,
        "sample_rows": valuation.sample_rows,
        "without_cache": valuation.without_cache,
        "models_trained": valuation.coalitions,
        # The pool's band over the model's paired fits; None with one fit (nothing measured).
        "stability": valuation.stability.as_dict() if valuation.stability else None,
        "paired_fits": paired_fits,
    }


def _write_verdict(
    session: Session,
    key: str,
    valuation: BatchValuation,
    detail: dict[str, Any],
    decision: Decision | None,
    check: ReferenceCheck | None,
) -> str | None:
    """Move the job to its verdict; raises LeftEvaluating when it is no longer `evaluating`.
    For an accepted job whose payout `check` holds, the hold (the check's figures), else None."""
    job = session.get(Contribution, key, with_for_update=True)
    if job is None or job.status != EVALUATING:
        # Shares only add up to the pool as a whole: nothing of the batch is written.
        raise LeftEvaluating(f"contribution {key} left `evaluating` meanwhile")
    job.status = EVALUATING if key in valuation.accepted else REJECTED
    job.reason = valuation_reason(valuation, key, decision) + known_rows_note(
        job.quality, detail["valued_rows"]
    )
    job.improvement_pct = valuation.shares[key]
    job.updated_at = utcnow()
    budget = {"budget": decision.view()} if decision is not None else {}
    reference = {"reference_check": check.as_dict()} if check is not None else {}
    job.quality = {**(job.quality or {}), "valuation": detail, **budget, **reference}
    if check is None or not check.holds or key not in valuation.accepted:
        return None
    job.reason = held_reason(check)
    job.payout_hold = check.describe()
    return job.payout_hold


def _valued_outcome(
    evaluation: Evaluation,
    item: VersionItem,
    valuation: BatchValuation,
    key: str,
    decision: Decision | None,
    paired_fits: int,
) -> EvaluationOutcome:
    interval = valuation.interval
    return EvaluationOutcome(
        evaluation.id,
        item.version,
        "contribution",
        metric_name=valuation.metric_name,
        score=valuation.score_with,
        baseline_score=valuation.score_without,
        improvement_pct=valuation.shares[key],
        status=EVALUATING if key in valuation.accepted else REJECTED,
        detail=valuation_reason(valuation, key, decision),
        pool_pct=valuation.pool_pct,
        interval_low=interval.low if interval else None,
        interval_high=interval.high if interval else None,
        batch_size=valuation.players,
        base_rows=evaluation.base_rows,
        valuation_method=valuation.method,
        sample_rows=valuation.sample_rows,
        without_cache=valuation.without_cache,
        models_trained=valuation.coalitions,
        stability_band=band_text(valuation.stability, paired_fits),
        paired_fits=paired_fits,
    )


def band_text(stability: Stability | None, paired_fits: int) -> str:
    """The pool's band as operators read it: measured over K paired fits, or why not."""
    if stability is not None:
        return stability.describe()
    return "not measured (one fit)" if paired_fits <= 1 else "not measured"


def known_rows_note(quality: dict[str, Any] | None, valued_rows: int) -> str:
    """Why some of a contribution's rows were not valued: the model already trains on them."""
    integrity = (quality or {}).get("integrity") or {}
    rows = integrity.get("rows") or 0
    if valued_rows >= rows:
        return ""
    known = rows - valued_rows
    base = min(known, integrity.get("known_base_rows") or 0)
    where = f" ({base} in the owner's base training data)" if base else ""
    return (
        f"; {known} of {rows} rows are already in the model's training data{where} and earn nothing"
    )


def valuation_reason(valuation: BatchValuation, key: str, decision: Decision | None = None) -> str:
    """A job's reason after valuation: the figures that accepted or rejected it; for a rejected
    try, what the supplier's budget asks of the next ones."""
    reason = _verdict_reason(valuation, key, decision)
    if decision is not None and not decision.accepted:
        reason += f". {decision.summary()}"
    return reason


def _verdict_reason(valuation: BatchValuation, key: str, decision: Decision | None) -> str:
    if decision is not None and valuation.rejected.get(key) == BUDGET:
        return budget_reason(valuation, decision)

    metric = valuation.metric_name
    change = f"{metric} {valuation.score_without:.4f} → {valuation.score_with:.4f}"
    share = valuation.shares[key]
    together = (
        f"; {valuation.players} contributions valued together, {valuation.method} Shapley shares"
        if valuation.players > 1
        else ""
    )
    interval = valuation.interval.describe() if valuation.interval else ""
    if key in valuation.accepted:
        if valuation.players == 1:
            return f"improved {change} ({share:+.2f} %, {interval}); rewards pending"
        return (
            f"improved: share {share:+.2f} % of the batch's {valuation.pool_pct:+.2f} % "
            f"({change}, {interval}{together}); rewards pending"
        )
    if valuation.rejected.get(key) == NOISE:
        return (
            f"within noise: {change} ({valuation.pool_pct:+.2f} %, {interval}: the lower bound "
            f"is not above 0); not trained on"
        )
    if valuation.players == 1:
        return f"no improvement: {change} ({share:+.2f} %)"
    return (
        f"no improvement: its share of the batch's {metric} change is {share:+.2f} %"
        f"{together}; not trained on"
    )
