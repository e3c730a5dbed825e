"""Evaluation and reward assets: score the model with and without each contribution, then pay.

One step (`evaluation_and_rewards`) materializes both assets, each optional and selectable
alone: the run pays what it must even when its own version has no evaluation to show (a version
never evaluated has no `evaluation` partition: it is not green). Both run only when the blocking
checks of `assets/datasets.py` let them; both are idempotent per contribution (a job is
evaluated once, an evaluation is paid once, and only while the run holds the model's claim).
Each version's figures go on its own partition (`assets.reporting`); the `improves_model` check
fails the partition of a contribution rejected by its evaluation, with the reason.
What each partition shows is `assets.evaluation_figures`.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg

from assets.check_steps import standing
from assets.datasets import GROUP
from assets.evaluation_figures import (
    evaluated,
    evaluation_metadata,
    evaluation_result,
    evaluation_table,
    reward_metadata,
    reward_table,
    unpaid_metadata,
)
from assets.partitions import dataset_versions
from assets.reporting import report_check, report_materializations
from assets.resources import MarketplaceResource
from assets.trainers import PipesTrainerRunner
from pipeline.core.db import Database
from pipeline.core.tables import BENCHMARK_VERSION, REWARDED
from pipeline.evaluation.batches import Batch, StepResult
from pipeline.evaluation.outcomes import EvaluationOutcome
from pipeline.intake import standing as stages
from pipeline.intake.catalog import version_facts
from pipeline.intake.standing import VersionStanding, version_standing
from pipeline.rewards.batch_scoring import evaluate_batch
from pipeline.rewards.payouts import ALREADY_PAID, pay_batch

EVALUATION = dg.AssetKey("evaluation")
REWARDS = dg.AssetKey("rewards")
IMPROVES_MODEL = dg.AssetCheckSpec(
    "improves_model",
    asset=EVALUATION,
    partitions_def=dataset_versions,
    description="A contribution improves the model's score on the latest benchmark (else it is "
    "rejected); a benchmark version scores the model. Not blocking: rewards pay the others.",
)


@dg.multi_asset(
    name="evaluation_and_rewards",
    outs={
        "evaluation": dg.AssetOut(
            key=EVALUATION,
            is_required=False,
            group_name=GROUP,
            kinds={"scikitlearn"},
            description="Trains the model's estimator on its accepted rows with and without "
            "each contribution and scores it on the latest BenchmarkSpec; re-scores the model "
            "on a new benchmark, on a schedule, or when nothing was pending and it changed since "
            "its last score. Only evaluated versions have an evaluation partition.",
        ),
        "rewards": dg.AssetOut(
            key=REWARDS,
            is_required=False,
            group_name=GROUP,
            description="Reward tokens for each contribution that improved the model, split "
            "among the wallets of its contributor manifest; the ledger is written once per "
            "evaluation. Every evaluated version has a rewards partition: the tokens paid, or "
            "why nothing is paid.",
        ),
    },
    ins={"integrity_report": dg.AssetIn("integrity_report")},
    deps=["quality_report", "pii_report"],
    internal_asset_deps={
        "evaluation": {
            dg.AssetKey("quality_report"),
            dg.AssetKey("pii_report"),
            dg.AssetKey("integrity_report"),
        },
        "rewards": {EVALUATION},
    },
    partitions_def=dataset_versions,
    check_specs=[IMPROVES_MODEL],
    can_subset=True,
)
def evaluation_and_rewards(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    integrity_report: StepResult | None,
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """One step, so that `rewards` runs whenever the run has something to pay even when the
    own version has no evaluation to show (a version rejected before valuation is not green)."""
    batch = marketplace.run_batch(context, integrity_report)
    selected = context.selected_asset_keys
    outcomes: list[EvaluationOutcome] = []
    if EVALUATION in selected:
        svc = marketplace.services
        outcomes = evaluate_batch(svc, batch, PipesTrainerRunner(context, svc.settings))
        _fail_on_trainer_failure(context, batch, outcomes)
        yield from _evaluation_outputs(context, marketplace, batch, outcomes)
    if REWARDS in selected:
        yield from _rewards_output(context, marketplace, batch, outcomes)


def _fail_on_trainer_failure(
    context: dg.AssetExecutionContext, batch: Batch, outcomes: Sequence[EvaluationOutcome]
) -> None:
    """The jobs are already given back (queued, or failed the second time); the run fails so
    the owner sees why, with the last lines of the trainer's stderr."""
    failures = [o.trainer_failure for o in outcomes if o.trainer_failure]
    if not failures:
        return
    for failure in dict.fromkeys(failures):
        context.log.error(f"model {batch.model_id}: the model's training code failed: {failure}")
    raise dg.Failure(
        description=f"the model's training code failed: {failures[0]}",
        metadata={"results": evaluation_table(outcomes)},
    )


def standing_outcome(found: VersionStanding) -> EvaluationOutcome:
    """A version's recorded evaluation as this run reports it, without evaluating it again."""
    e = found.evaluation
    assert e is not None
    return EvaluationOutcome(
        e.id,
        found.version,
        "rescore" if e.valuation_id is None else "contribution",
        metric_name=e.metric_name,
        score=e.score,
        baseline_score=e.baseline_score,
        improvement_pct=e.improvement_pct,
        status=found.facts.status or "scored",
        detail=found.summary(),
        pool_pct=e.pool_pct,
        interval_low=e.interval_low,
        interval_high=e.interval_high,
        batch_size=e.batch_size,
    )


def _evaluation_outputs(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    batch: Batch,
    outcomes: Sequence[EvaluationOutcome],
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """`evaluation` on each evaluated version's partition and its `improves_model` result; on
    the own partition the standing evaluation when it was evaluated earlier, else nothing."""
    db = marketplace.services.db
    per_version = {
        o.version: evaluation_metadata(o) for o in outcomes if o.version and evaluated(o)
    }
    report_materializations(context, batch, per_version, EVALUATION)
    rescore = next((o for o in outcomes if o.version is None), None)
    if rescore is not None:
        context.log.info(f"model {batch.model_id} re-scored: {rescore.detail}")
    own = per_version.get(batch.version)
    if own is None:
        found = version_standing(db, batch.model_id, batch.version)
        if found is not None and found.evaluation is not None:
            own = {**evaluation_metadata(standing_outcome(found)), **standing(db, batch)}
        what = found.summary() if found is not None else "no stored version"
        context.log.info(f"nothing to evaluate for {batch.version}: {what}")
    if own is not None:
        yield dg.MaterializeResult(
            asset_key=EVALUATION,
            value=StepResult(batch, tuple(outcomes)),
            metadata={
                **own,
                "evaluations": len([o for o in outcomes if o.evaluation_id]),
                "results": evaluation_table(outcomes),
            },
        )
    # The other versions' results are logged even when the own version has no evaluation.
    results = [r for r in map(evaluation_result, outcomes) if r is not None]
    result = report_check(
        context,
        IMPROVES_MODEL,
        batch,
        results,
        db=db,
        stage=stages.EVALUATION,
        metadata={
            "rejected_versions": ", ".join(r.version for r in results if not r.passed) or "none"
        },
    )
    if result is not None and own is not None:
        yield result


def _rewards_output(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    batch: Batch,
    outcomes: Sequence[EvaluationOutcome],
) -> Iterator[dg.MaterializeResult]:
    """Pay, then `rewards` on each evaluated version's partition (tokens paid, or why none)."""
    svc = marketplace.services
    paid = pay_batch(svc, batch.model_id, outcomes, claim=batch.claim, strict=batch.model_held)
    facts = version_facts(svc.db, batch.model_id, [*(r.version for r in paid), batch.version])
    per_version = {
        r.version: reward_metadata(r, facts[r.version].status if r.version in facts else None)
        for r in paid
    }
    for o in outcomes:
        if o.kind == "contribution" and o.version and evaluated(o) and o.version not in per_version:
            per_version[o.version] = unpaid_metadata(o)
    report_materializations(context, batch, per_version, REWARDS)
    now = [r for r in paid if r.detail != ALREADY_PAID and r.tokens > 0]
    before = [r.version for r in paid if r.detail == ALREADY_PAID]
    context.log.info(
        f"model {batch.model_id}: "
        + (
            f"paid {', '.join(r.version for r in now)}; {sum(r.tokens for r in now):g} tokens"
            if now
            else "nothing paid in this run"
        )
        + (f" ({', '.join(before)} paid before)" if before else "")
    )
    own = per_version.get(batch.version) or _standing_reward(context, svc.db, batch)
    if own is None:
        return
    yield dg.MaterializeResult(
        asset_key=REWARDS,
        metadata={
            **own,
            "batch_tokens": sum(r.tokens for r in now),
            "rewarded_versions": ", ".join(r.version for r in now) or "none",
            "ledger_entries": sum(len(r.recipients) for r in now),
            "rewards": reward_table(paid),
        },
    )


def _standing_reward(
    context: dg.AssetExecutionContext, db: Database, batch: Batch
) -> dict[str, Any] | None:
    """The own version's rewards when this run paid nothing for it: what it was paid before,
    or why nothing is paid; None (no rewards partition) for a version never evaluated."""
    found = version_standing(db, batch.model_id, batch.version)
    if found is None or found.evaluation is None:
        what = found.summary() if found is not None else "no stored version"
        context.log.info(f"nothing to pay for {batch.version}: {what}")
        return None
    facts = found.facts
    if facts.kind == BENCHMARK_VERSION:
        detail = f"nothing to pay: {facts.version} is a benchmark"
    elif facts.status == REWARDED:
        detail = f"paid before: {found.summary()}"
    else:
        detail = f"nothing to pay: {found.summary()}"
    context.log.info(f"nothing to pay for {batch.version} in this run: {detail}")
    return {
        **standing(db, batch),
        "tokens": float(facts.tokens or 0.0),
        "detail": detail,
    }
