"""What the evaluation and rewards assets show: each version's figures, the run's tables, and
the final status of an evaluation.

Kept apart from the step that produces them (`assets.evaluation`): these only read outcomes.

Statuses shown are final: an evaluation says `accepted` (improved: the rewards asset pays it
next) or `rejected`, never the job's passing `evaluating`; rewards say the job's status after
payment.
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.check_steps import markdown_table
from assets.reporting import VersionResult, metadata_values
from pipeline.core.tables import EVALUATING, FAILED, REJECTED, REWARDED
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.rewards.payouts import RewardOutcome


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]"


def _integrity(counts: dict[str, Any] | None) -> str:
    """The integrity check's counts (benchmark copies, known and novel rows), when present."""
    if not counts:
        return ""
    return ", ".join(f"{k} {v}" for k, v in counts.items() if isinstance(v, int | float))


def evaluation_table(outcomes: Sequence[EvaluationOutcome]) -> dg.MetadataValue:
    return markdown_table(
        [
            "version",
            "kind",
            "metric",
            "score",
            "baseline",
            "share %",
            "pool %",
            "interval %",
            "batch",
            "shares by",
            "status",
            "detail",
        ],
        [
            (
                o.version or "(model)",
                o.kind,
                o.metric_name or "",
                _fmt(o.score),
                _fmt(o.baseline_score),
                _fmt(o.improvement_pct, 2),
                _fmt(o.pool_pct, 2),
                _interval(o.interval_low, o.interval_high),
                "" if o.batch_size is None else str(o.batch_size),
                shares_by(o),
                evaluation_status(o),
                evaluation_detail(o),
            )
            for o in outcomes
        ],
    )


def shares_by(outcome: EvaluationOutcome) -> str:
    """How the shares were computed: method, accepted rows trained on, "without" cached or not,
    and the pool's band over the model's paired fits."""
    if outcome.valuation_method is None:
        return ""
    band = f", pool {outcome.stability_band}" if outcome.stability_band else ""
    return (
        f"{outcome.valuation_method}, {outcome.sample_rows} accepted rows, "
        f"without: cache {outcome.without_cache}, {outcome.models_trained} models trained{band}"
    )


def evaluated(outcome: EvaluationOutcome) -> bool:
    """The run measured the version (scored it, or refused or failed its data); a job sent
    back to wait for a benchmark, or claimed by another run, was not."""
    return outcome.evaluation_id is not None or outcome.status in (REJECTED, FAILED)


def evaluation_status(outcome: EvaluationOutcome) -> str:
    """The evaluation's verdict, final: `evaluating` with an improvement is `accepted`, or
    `held` when its payout waits for the operator (`pipeline.rewards.holds`)."""
    if outcome.kind == "rescore":
        return outcome.status or "scored"
    if outcome.payout_hold:
        return "held"
    if outcome.status in (EVALUATING, REWARDED):
        return "accepted"
    return outcome.status or "not evaluated"


def evaluation_detail(outcome: EvaluationOutcome) -> str:
    """What the evaluation found, without the passing "rewards pending" of the job's reason."""
    if evaluation_status(outcome) != "accepted" or outcome.score is None:
        return outcome.detail
    return (
        f"improved {outcome.metric_name} {outcome.baseline_score or 0:.4f} → "
        f"{outcome.score:.4f} ({outcome.improvement_pct or 0:+.2f} %)"
    )


def evaluation_metadata(outcome: EvaluationOutcome) -> dict[str, Any]:
    """One evaluation's figures. A re-score measures the model against the trivial baseline,
    not a contribution against the model, so its figures have their own keys (a plot of
    `improvement_pct` across versions shows contributions only)."""
    prefix = "model_" if outcome.kind == "rescore" else ""
    return metadata_values(
        {
            "evaluation_kind": outcome.kind,
            "status": evaluation_status(outcome),
            "metric": outcome.metric_name,
            f"{prefix}score": outcome.score,
            f"{prefix}baseline_score": outcome.baseline_score,
            f"{prefix}improvement_pct": outcome.improvement_pct,
            "share_pct": outcome.improvement_pct if outcome.pool_pct is not None else None,
            "pool_pct": outcome.pool_pct,
            "interval": _interval(outcome.interval_low, outcome.interval_high),
            "interval_low_pct": outcome.interval_low,
            "interval_high_pct": outcome.interval_high,
            "batch_size": outcome.batch_size,
            "base_rows": outcome.base_rows,
            "valuation_method": outcome.valuation_method,
            # The pool's band over the model's paired fits ("not measured (one fit)" with one).
            "stability": outcome.stability_band,
            "paired_fits": outcome.paired_fits,
            "sample_rows": outcome.sample_rows,
            "without_cache": outcome.without_cache,
            "models_trained": outcome.models_trained,
            "payout_hold": outcome.payout_hold,
            "evaluation_id": outcome.evaluation_id,
            "detail": evaluation_detail(outcome),
        }
    )


def evaluation_result(outcome: EvaluationOutcome) -> VersionResult | None:
    """What `improves_model` says of an evaluated version: passed unless it was rejected or
    failed (a benchmark version passes when it scored the model)."""
    if outcome.version is None or not evaluated(outcome):
        return None
    passed = outcome.status not in (REJECTED, FAILED)
    detail = evaluation_detail(outcome)
    if passed and outcome.kind == "rescore":
        detail = f"benchmark scored the model: {detail}"
    figures = evaluation_metadata(outcome)
    return VersionResult(
        outcome.version,
        passed,
        detail,
        {k: v for k, v in figures.items() if k.endswith(("score", "improvement_pct"))},
    )


def reward_table(rewards: Sequence[RewardOutcome]) -> dg.MetadataValue:
    return markdown_table(
        [
            "version",
            "tokens paid",
            "tokens earned",
            "share %",
            "pool %",
            "interval %",
            "integrity",
            "recipients",
            "detail",
        ],
        [
            (
                r.version,
                f"{r.tokens:g}",
                f"{r.earned:g}",
                _fmt(r.share_pct, 2),
                _fmt(r.pool_pct, 2),
                _interval(*((r.interval or {}).get(k) for k in ("low", "high"))),
                _integrity(r.integrity),
                ", ".join(f"{p['wallet']} ({p['tokens']:g})" for p in r.recipients) or "none",
                r.detail,
            )
            for r in rewards
        ],
    )


def reward_metadata(reward: RewardOutcome, status: str | None) -> dict[str, Any]:
    interval = reward.interval or {}
    return metadata_values(
        {
            "status": status,
            "tokens": reward.tokens,
            "earned_tokens": reward.earned,
            "share_pct": reward.share_pct,
            "pool_pct": reward.pool_pct,
            "interval": _interval(interval.get("low"), interval.get("high")),
            "interval_low_pct": interval.get("low"),
            "interval_high_pct": interval.get("high"),
            **{k: v for k, v in (reward.integrity or {}).items() if isinstance(v, int | float)},
            "recipients": len(reward.recipients),
            "detail": reward.detail,
        }
    )


def unpaid_metadata(outcome: EvaluationOutcome) -> dict[str, Any]:
    """Rewards of a version evaluated in this run and not paid: explicitly nothing."""
    return metadata_values(
        {"status": outcome.status, "tokens": 0.0, "detail": f"nothing to pay: {outcome.detail}"}
    )
