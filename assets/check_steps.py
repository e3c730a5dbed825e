"""How the steps of the evaluation job judge a batch and show each version: check steps that
may give no result, a step's output, and where a version stands when a step did not handle it.

`datasets.py` and `evaluation.py` build their assets and checks from these.
"""

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dagster as dg

from assets.partitions import dataset_versions
from assets.reporting import (
    VersionResult,
    metadata_values,
    report_check,
    report_materializations,
)
from assets.resources import MarketplaceResource
from pipeline.checks.batch import CheckOutcome, verdict
from pipeline.core.db import Database
from pipeline.evaluation.batches import Batch, StepResult
from pipeline.intake.catalog import version_facts
from pipeline.intake.standing import version_standing


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> dg.MetadataValue:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines) if rows else "_nothing in this run_")


def standing(db: Database, batch: Batch) -> dict[str, Any]:
    """Where the run's own version stands, for an asset that did not handle it in this run:
    `nothing_to_do` says so, e.g. `v3 was valued in run 1f2e… (rewarded, 9.58 tokens)`."""
    found = version_standing(db, batch.model_id, batch.version)
    if found is None:
        return {"nothing_to_do": f"no stored version {batch.version}"}
    facts = found.facts
    return metadata_values(
        {
            "kind": facts.kind,
            "status": facts.status,
            "reason": facts.reason,
            "nothing_to_do": found.summary(),
            "decided_in_run": found.decided_in_run,
        }
    )


CheckFn = Callable[
    [dg.AssetCheckExecutionContext, StepResult, MarketplaceResource], dg.AssetCheckResult | None
]


class _NoResultByDesign(logging.Filter):
    """Dagster warns, per run and per check, that a blocking check "emitted no result": for a
    version check that did not judge the run's own version, that is the design (see
    `version_check`), not news for an operator. Other checks' warnings still show."""

    def __init__(self) -> None:
        super().__init__()
        self.checks: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(
            message.startswith(f"Blocking asset check {check!r} emitted no result")
            for check in self.checks
        )


_NO_RESULT_BY_DESIGN = _NoResultByDesign()
logging.getLogger("dagster._core.execution.plan.active").addFilter(_NO_RESULT_BY_DESIGN)


def version_check(
    *, asset: dg.AssetsDefinition, name: str, description: str, blocking: bool = True
) -> Callable[[CheckFn], dg.AssetChecksDefinition]:
    """A partitioned check of `asset` that may give no result for its partition.

    An `@asset_check` must return a result; this check yields none when it did not judge the
    run's own version (`assets.reporting.report_check`), so Dagster shows it as not run there
    rather than passed or failed. Its input is the asset's value in this run, else (the asset
    was not materialized in this run) the run's batch from the database, with no outcomes.
    """

    def wrap(judge_fn: CheckFn) -> dg.AssetChecksDefinition:
        spec = dg.AssetCheckSpec(
            name,
            asset=asset,
            blocking=blocking,
            partitions_def=dataset_versions,
            description=description,
        )
        _NO_RESULT_BY_DESIGN.checks.add(spec.key.to_user_string())

        @dg.multi_asset_check(
            specs=[spec],
            ins={"step": dg.AssetIn(key=asset.key)},
            can_subset=True,
            name=f"{asset.key.path[-1]}_{name}",
            description=description,
        )
        def check(
            context: dg.AssetCheckExecutionContext,
            step: StepResult | None,
            marketplace: MarketplaceResource,
        ) -> Iterator[dg.AssetCheckResult]:
            value = step or StepResult(marketplace.run_batch(context, None))
            result = judge_fn(context, value, marketplace)
            if result is not None:
                yield result

        return check

    return wrap


def judge(
    context: dg.AssetCheckExecutionContext,
    batch: Batch,
    outcomes: Sequence[CheckOutcome],
    marketplace: MarketplaceResource,
    what: str,
    figures: Callable[[CheckOutcome], dict[str, Any]],
    describe: Callable[[CheckOutcome], str] | None = None,
    *,
    stage: str,
) -> dg.AssetCheckResult | None:
    """A check step's results on each version's partition (see `assets.reporting`).

    A failure's description is the step's own `detail` when it has one (the integrity check:
    the figures its submitter is not shown), else the job's reason (what the API shows), else
    `{what} failed: {summary}`; a pass says `describe(outcome)`, else `{what} passed: {summary}`.
    """
    db = marketplace.services.db
    batch_verdict = verdict(batch, outcomes, db, what)
    failed = [o.version for o in outcomes if not o.passed]
    reasons = {v: f.reason for v, f in version_facts(db, batch.model_id, failed).items()}

    def described(o: CheckOutcome) -> str:
        if not o.passed:
            detail = o.figures.get("detail")
            return str(detail or reasons.get(o.version) or f"{what} failed: {o.summary}")
        return describe(o) if describe is not None else f"{what} passed: {o.summary}"

    results = [
        VersionResult(o.version, o.passed, described(o), {"passed": o.passed, **figures(o)})
        for o in outcomes
    ]
    [spec] = context.check_specs
    return report_check(
        context,
        spec,
        batch,
        results,
        db=db,
        stage=stage,
        stops_run=batch_verdict.blocking,
        metadata={
            "failed_versions": ", ".join(batch_verdict.failed_versions) or "none",
            "batch": batch_verdict.description,
        },
    )


def step_output(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    batch: Batch,
    outcomes: Sequence[CheckOutcome],
    figures: Callable[[CheckOutcome], dict[str, Any]],
    batch_metadata: dict[str, Any],
) -> dg.MaterializeResult:
    """A check step's output: each version's verdict and figures on its own partition; on the
    run's partition its own version's (else where it stands) beside the batch's figures."""
    per_version = {
        o.version: {"verdict": verdict_of(o), **figures(o), "summary": o.summary} for o in outcomes
    }
    report_materializations(context, batch, per_version)
    own = per_version.get(batch.version) or standing(marketplace.services.db, batch)
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(outcomes)),
        metadata={**metadata_values(own), **batch_metadata},
    )


def verdict_of(outcome: CheckOutcome) -> str:
    """A check step's word on a version: a failure rejects it at once (`pipeline.checks.batch`)."""
    return "passed" if outcome.passed else "rejected"
