"""Evaluation and reward assets: score the model with and without each contribution, then pay.

Both run only when the blocking checks of `assets/datasets.py` let them; both are idempotent
per contribution (a job is evaluated once, an evaluation is paid once). Each version's figures go
on its own partition (`assets.reporting`); the `improves_model` check fails the partition of a
contribution rejected by its evaluation, with the reason.

Statuses shown are final: an evaluation says `accepted` (improved: the rewards asset pays it
next) or `rejected`, never the job's passing `evaluating`; rewards say the job's status after
payment.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg

from assets.datasets import GROUP, markdown_table, standing
from assets.partitions import dataset_versions
from assets.reporting import VersionResult, metadata_values, report_check, report_materializations
from assets.resources import MarketplaceResource
from pipeline.core.tables import EVALUATING, FAILED, REJECTED, REWARDED
from pipeline.evaluation.batch_scoring import evaluate_batch
from pipeline.evaluation.batches import StepResult
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.intake.catalog import version_facts
from pipeline.rewards.payouts import RewardOutcome, pay_batch


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]"


def _integrity(counts: dict[str, Any] | None) -> str:
    """The integrity check's counts (benchmark copies, known and novel rows), when present."""
    if not counts:
        return ""
    return ", ".join(f"{k} {v}" for k, v in counts.items() if isinstance(v, int | float))


def _evaluation_table(outcomes: Sequence[EvaluationOutcome]) -> dg.MetadataValue:
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


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    kinds={"scikitlearn"},
    description="Trains the model's estimator on its accepted rows with and without each "
    "contribution and scores it on the latest BenchmarkSpec; re-scores the model on a new "
    "benchmark, on a schedule, or when nothing was pending.",
)
def evaluation(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    quality_report: StepResult,
    pii_report: StepResult,
    integrity_report: StepResult,
) -> dg.MaterializeResult:
    batch = integrity_report.batch
    outcomes = evaluate_batch(marketplace.services, batch)
    per_version = {
        o.version: evaluation_metadata(o) for o in outcomes if o.version and evaluated(o)
    }
    report_materializations(context, batch, per_version)
    # The partition's own version, else where it stands and the model's re-score of this run.
    rescore = next((o for o in outcomes if o.version is None), None)
    own = per_version.get(batch.version) or {
        **(evaluation_metadata(rescore) if rescore is not None else {}),
        **standing(marketplace.services.db, batch),
    }
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(outcomes)),
        metadata={
            **own,
            "evaluations": len([o for o in outcomes if o.evaluation_id]),
            "results": _evaluation_table(outcomes),
        },
    )


def shares_by(outcome: EvaluationOutcome) -> str:
    """How the shares were computed: method, accepted rows trained on, "without" cached or not."""
    if outcome.valuation_method is None:
        return ""
    return (
        f"{outcome.valuation_method}, {outcome.sample_rows} accepted rows, "
        f"without: cache {outcome.without_cache}, {outcome.models_trained} models trained"
    )


def evaluated(outcome: EvaluationOutcome) -> bool:
    """The run measured the version (scored it, or refused or failed its data); a job sent
    back to wait for a benchmark, or claimed by another run, was not."""
    return outcome.evaluation_id is not None or outcome.status in (REJECTED, FAILED)


def evaluation_status(outcome: EvaluationOutcome) -> str:
    """The evaluation's verdict, final: `evaluating` with an improvement is `accepted`."""
    if outcome.kind == "rescore":
        return outcome.status or "scored"
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
            "valuation_method": outcome.valuation_method,
            "sample_rows": outcome.sample_rows,
            "without_cache": outcome.without_cache,
            "models_trained": outcome.models_trained,
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


@dg.asset_check(
    asset=evaluation,
    name="improves_model",
    partitions_def=dataset_versions,
    description="A contribution improves the model's score on the latest benchmark (else it is "
    "rejected); a benchmark version scores the model. Not blocking: rewards pay the others.",
)
def improves_model(
    context: dg.AssetCheckExecutionContext,
    evaluation: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult:
    results = [r for r in map(evaluation_result, evaluation.outcomes) if r is not None]
    return report_check(
        context,
        evaluation.batch,
        results,
        db=marketplace.services.db,
        metadata={
            "rejected_versions": ", ".join(r.version for r in results if not r.passed) or "none"
        },
    )


def _reward_table(rewards: Sequence[RewardOutcome]) -> dg.MetadataValue:
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


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    description="Reward tokens for each contribution that improved the model, split among the "
    "wallets of its contributor manifest; the ledger is written once per evaluation. Only paid "
    "versions have a rewards partition.",
    output_required=False,
)
def rewards(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    evaluation: StepResult,
) -> Iterator[dg.MaterializeResult]:
    batch = evaluation.batch
    svc = marketplace.services
    paid = pay_batch(svc, batch.model_id, evaluation.outcomes)
    # Statuses after payment, so each partition shows where its job ended.
    facts = version_facts(svc.db, batch.model_id, [*(r.version for r in paid), batch.version])
    per_version = {
        r.version: metadata_values(
            {
                "status": facts[r.version].status if r.version in facts else None,
                "tokens": r.tokens,
                "earned_tokens": r.earned,
                "share_pct": r.share_pct,
                "pool_pct": r.pool_pct,
                "interval": _interval(*((r.interval or {}).get(k) for k in ("low", "high"))),
                "interval_low_pct": (r.interval or {}).get("low"),
                "interval_high_pct": (r.interval or {}).get("high"),
                **{k: v for k, v in (r.integrity or {}).items() if isinstance(v, int | float)},
                "recipients": len(r.recipients),
                "detail": r.detail,
            }
        )
        for r in paid
    }
    report_materializations(context, batch, per_version)
    context.log.info(
        f"model {batch.model_id}: paid {', '.join(per_version) or 'no version'}; "
        f"{sum(r.tokens for r in paid):g} tokens"
    )
    # Only a paid version has rewards: the own partition of a rejected version stays
    # unmaterialized rather than showing a green "Materialized" with nothing in it.
    if batch.version not in per_version:
        return
    yield dg.MaterializeResult(
        metadata={
            **per_version[batch.version],
            "batch_tokens": sum(r.tokens for r in paid),
            "rewarded_versions": ", ".join(r.version for r in paid if r.tokens > 0) or "none",
            "ledger_entries": sum(len(r.recipients) for r in paid),
            "rewards": _reward_table(paid),
        }
    )
