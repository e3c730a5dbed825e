"""Evaluation and reward assets: score the model with and without each contribution, then pay.

Both run only when the blocking checks of `assets/datasets.py` let them; both are idempotent
per contribution (a job is evaluated once, an evaluation is paid once).
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.datasets import GROUP, log_other_partitions, markdown_table
from assets.partitions import dataset_versions
from assets.resources import MarketplaceResource
from pipeline.batches import StepResult
from pipeline.payouts import RewardOutcome, pay_batch
from pipeline.scoring import EvaluationOutcome, evaluate_batch


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _evaluation_table(outcomes: Sequence[EvaluationOutcome]) -> dg.MetadataValue:
    return markdown_table(
        ["version", "kind", "metric", "score", "baseline", "improvement %", "status", "detail"],
        [
            (
                o.version or "(model)",
                o.kind,
                o.metric_name or "",
                _fmt(o.score),
                _fmt(o.baseline_score),
                _fmt(o.improvement_pct, 2),
                o.status or "",
                o.detail,
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
    by_version = {o.version: o for o in outcomes if o.version}
    log_other_partitions(
        context,
        batch,
        {
            v: {"metric": o.metric_name or "", "score": o.score, "improvement": o.improvement_pct}
            for v, o in by_version.items()
        },
    )
    # The headline figures: this partition's own version, else the last evaluation of the run.
    main = by_version.get(batch.version) or (outcomes[-1] if outcomes else None)
    metadata: dict[str, Any] = {
        "evaluations": len([o for o in outcomes if o.evaluation_id]),
        "results": _evaluation_table(outcomes),
    }
    if main is not None and main.score is not None:
        metadata.update(
            metric=main.metric_name or "",
            score=main.score,
            baseline_score=main.baseline_score,
            improvement_pct=main.improvement_pct,
        )
    return dg.MaterializeResult(value=StepResult(batch, tuple(outcomes)), metadata=metadata)


def _reward_table(rewards: Sequence[RewardOutcome]) -> dg.MetadataValue:
    return markdown_table(
        ["version", "tokens paid", "tokens earned", "recipients", "detail"],
        [
            (
                r.version,
                f"{r.tokens:g}",
                f"{r.earned:g}",
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
    "wallets of its contributor manifest; the ledger is written once per evaluation.",
)
def rewards(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    evaluation: StepResult,
) -> dg.MaterializeResult:
    batch = evaluation.batch
    paid = pay_batch(marketplace.services, batch.model_id, evaluation.outcomes)
    log_other_partitions(
        context, batch, {r.version: {"tokens": r.tokens, "detail": r.detail} for r in paid}
    )
    return dg.MaterializeResult(
        metadata={
            "tokens": sum(r.tokens for r in paid),
            "rewarded_versions": ", ".join(r.version for r in paid if r.tokens > 0) or "none",
            "ledger_entries": sum(len(r.recipients) for r in paid),
            "rewards": _reward_table(paid),
        }
    )
