"""Dataset-version assets and their blocking checks: the stored object, quality, PII, integrity.

One partition per dataset version (`{model_id}__{version}`). A run for a partition claims every
pending version of the model up to it (`pipeline.batches.claim_batch`), so the assets below
work on that batch and log materializations for the batch's other partitions too.

The checks are blocking: when a version fails one, it is `rejected` at once, and when nothing is
left for evaluation (no other version of the batch, no re-score), the check fails with ERROR
severity so evaluation and rewards do not run. A failure beside versions that go on is reported
with WARN severity: the failed version is already out of the batch.
"""

import warnings
from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.partitions import TAG_TRIGGER, dataset_versions, parse_partition_key
from assets.resources import MarketplaceResource
from pipeline.batches import Batch, StepResult, claim_batch
from pipeline.checks import (
    CheckOutcome,
    CheckVerdict,
    VersionSummary,
    describe_batch,
    integrity_outcomes,
    readability_outcomes,
    run_integrity_checks,
    run_pii_scans,
    run_quality_checks,
    verdict,
)

GROUP = "dataset_versions"

# Partitioned asset checks (one result per dataset version, and the check's input is the
# partition's value, not every partition's) are "preview" in dagster 1.13; an unpartitioned
# check on a partitioned asset would load all partitions. The warning says no more than that.
warnings.filterwarnings(
    "ignore",
    message="Specifying a partitions_def on an AssetCheckSpec",
    category=dg.PreviewWarning,
)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> dg.MetadataValue:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return dg.MetadataValue.md("\n".join(lines) if rows else "_nothing in this run_")


def log_other_partitions(
    context: dg.AssetExecutionContext,
    batch: Batch,
    metadata: dict[str, dict[str, Any]] | None = None,
) -> int:
    """Record this asset's materialization for the batch's other (debounced) partitions."""
    logged = 0
    for item in batch.items:
        key = item.partition_key
        if item.version == batch.version:
            continue
        if not context.instance.has_dynamic_partition(dataset_versions.name, key):
            continue
        context.log_event(
            dg.AssetMaterialization(
                asset_key=context.asset_key,
                partition=key,
                metadata={
                    "processed_in_partition": batch.partition_key,
                    "run_id": context.run_id,
                    **(metadata or {}).get(item.version, {}),
                },
            )
        )
        logged += 1
    return logged


def check_result(result: CheckVerdict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=result.passed,
        severity=dg.AssetCheckSeverity.ERROR if result.blocking else dg.AssetCheckSeverity.WARN,
        description=result.description,
        metadata={
            "failed_versions": ", ".join(result.failed_versions) or "none",
            "versions": dg.MetadataValue.json(result.metadata),
        },
    )


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    kinds={"pyarrow"},
    description="The stored dataset version(s) of this run, read with pyarrow; claims every "
    "pending version of the model up to the partition's version.",
)
def dataset_version(
    context: dg.AssetExecutionContext, marketplace: MarketplaceResource
) -> dg.MaterializeResult:
    svc = marketplace.services
    model_id, version = parse_partition_key(context.partition_key)
    batch = claim_batch(
        svc,
        model_id,
        version,
        trigger=context.run.tags.get(TAG_TRIGGER),
        run_id=context.run_id,
    )
    summaries = describe_batch(svc, batch)
    per_version = {
        s.version: {"rows": s.rows, "kind": s.kind, "readable": s.readable} for s in summaries
    }
    log_other_partitions(context, batch, per_version)
    context.log.info(
        f"model {model_id}: processing {', '.join(batch.versions) or 'no pending version'}"
        + ("; re-scoring the model" if batch.rescore else "")
    )
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(summaries)),
        metadata={
            "model_id": model_id,
            "trigger": batch.trigger,
            "versions": ", ".join(batch.versions) or "none pending",
            "row_count": sum(s.rows for s in summaries),
            "rescore": batch.rescore,
            "datasets": _summary_table(summaries),
        },
    )


def _summary_table(summaries: Sequence[VersionSummary]) -> dg.MetadataValue:
    return markdown_table(
        ["version", "kind", "rows", "columns", "bytes", "readable"],
        [
            (s.version, s.kind, s.rows, len(s.columns), s.size_bytes or "", s.error or "yes")
            for s in summaries
        ],
    )


@dg.asset_check(
    asset=dataset_version,
    name="readable",
    blocking=True,
    partitions_def=dataset_versions,
    description="Every version of the batch is a valid CSV, JSON or Parquet file (spec §8).",
)
def dataset_version_readable(
    dataset_version: StepResult, marketplace: MarketplaceResource
) -> dg.AssetCheckResult:
    outcomes = readability_outcomes(dataset_version.outcomes)
    return check_result(
        verdict(dataset_version.batch, outcomes, marketplace.services.db, "reading")
    )


def _outcome_table(outcomes: Sequence[CheckOutcome], columns: Sequence[str]) -> dg.MetadataValue:
    return markdown_table(
        ["version", "passed", *columns, "summary"],
        [
            (
                o.version,
                "yes" if o.passed else "no",
                *(o.figures.get(c, "") for c in columns),
                o.summary,
            )
            for o in outcomes
        ],
    )


QUALITY_COLUMNS = ("row_count", "completeness", "uniqueness", "schema_violations")


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    kinds={"great_expectations"},
    description="Spec §8 quality thresholds (Great Expectations) and data-spec compliance of "
    "each contribution in the batch; a failing contribution is rejected.",
)
def quality_report(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    dataset_version: StepResult,
) -> dg.MaterializeResult:
    batch = dataset_version.batch
    outcomes = run_quality_checks(marketplace.services, batch)
    log_other_partitions(
        context, batch, {o.version: {"passed": o.passed, **o.figures} for o in outcomes}
    )
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(outcomes)),
        metadata={
            "checked": len(outcomes),
            "failed": sum(not o.passed for o in outcomes),
            "strict": marketplace.services.settings.data_validation_strict,
            "checks": _outcome_table(outcomes, QUALITY_COLUMNS),
        },
    )


@dg.asset_check(
    asset=quality_report,
    name="quality_thresholds",
    blocking=True,
    partitions_def=dataset_versions,
    description="≥ 100 rows, completeness > 95 %, unique rows > 80 %, 100 % data-spec "
    "compliance (warnings fail too with DATA_VALIDATION_STRICT=true).",
)
def quality_thresholds(
    quality_report: StepResult, marketplace: MarketplaceResource
) -> dg.AssetCheckResult:
    return check_result(
        verdict(
            quality_report.batch,
            quality_report.outcomes,
            marketplace.services.db,
            "quality checks",
        )
    )


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    kinds={"presidio"},
    description="PII scan (Presidio pattern recognizers) of each contribution in the batch; "
    "PII found rejects the contribution. Off with ENABLE_PII_DETECTION=false.",
)
def pii_report(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    dataset_version: StepResult,
) -> dg.MaterializeResult:
    batch = dataset_version.batch
    outcomes = run_pii_scans(marketplace.services, batch)
    log_other_partitions(
        context, batch, {o.version: {"passed": o.passed, "summary": o.summary} for o in outcomes}
    )
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(outcomes)),
        metadata={
            "enabled": marketplace.services.settings.enable_pii_detection,
            "scanned": len(outcomes),
            "with_pii": sum(not o.passed for o in outcomes),
            "scanned_values": sum(int(o.figures.get("scanned_values", 0)) for o in outcomes),
            "findings": _outcome_table(outcomes, ("scanned_values",)),
        },
    )


@dg.asset_check(
    asset=pii_report,
    name="no_pii",
    blocking=True,
    partitions_def=dataset_versions,
    description="No e-mail, phone, card, IBAN, SSN, IP, URL or wallet address in text columns.",
)
def no_pii(pii_report: StepResult, marketplace: MarketplaceResource) -> dg.AssetCheckResult:
    return check_result(
        verdict(pii_report.batch, pii_report.outcomes, marketplace.services.db, "PII scan")
    )


INTEGRITY_COLUMNS = ("benchmark_copies", "known_rows", "novel_rows", "label_disagreement")


@dg.asset(
    partitions_def=dataset_versions,
    group_name=GROUP,
    kinds={"numpy", "scikitlearn"},
    description="Integrity of each contribution still in the batch, after quality and PII: rows "
    "copying the model's benchmark (fingerprints), rows already accepted for the model, and "
    "labels checked against the current model and their own cross-validation. A failing "
    "contribution is rejected before it is valued (docs/integrity.md).",
)
def integrity_report(
    context: dg.AssetExecutionContext,
    marketplace: MarketplaceResource,
    quality_report: StepResult,
    pii_report: StepResult,
) -> dg.MaterializeResult:
    batch = pii_report.batch
    outcomes = run_integrity_checks(marketplace.services, batch)
    log_other_partitions(
        context, batch, {o.version: {"passed": o.passed, "summary": o.summary} for o in outcomes}
    )
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(outcomes)),
        metadata={
            "checked": len(outcomes),
            "failed": sum(not o.passed for o in outcomes),
            "benchmark_copies": sum(int(o.figures.get("benchmark_copies") or 0) for o in outcomes),
            "known_rows": sum(int(o.figures.get("known_rows") or 0) for o in outcomes),
            "integrity": _outcome_table(outcomes, INTEGRITY_COLUMNS),
        },
    )


def _integrity_check(
    result: StepResult, marketplace: MarketplaceResource, check: str, what: str
) -> dg.AssetCheckResult:
    outcomes = integrity_outcomes(result.outcomes, check)
    return check_result(verdict(result.batch, outcomes, marketplace.services.db, what))


@dg.asset_check(
    asset=integrity_report,
    name="no_benchmark_copies",
    blocking=True,
    partitions_def=dataset_versions,
    description="No contribution copies or nearly copies the model's benchmark rows beyond "
    "chance plus INTEGRITY_COPY_TOLERANCE (default 1 % of its rows).",
)
def no_benchmark_copies(
    integrity_report: StepResult, marketplace: MarketplaceResource
) -> dg.AssetCheckResult:
    return _integrity_check(integrity_report, marketplace, "benchmark_copies", "leakage check")


@dg.asset_check(
    asset=integrity_report,
    name="new_rows",
    blocking=True,
    partitions_def=dataset_versions,
    description="At least INTEGRITY_MIN_NOVEL_SHARE (default 5 %) of each contribution's rows "
    "are not already accepted for the model; known rows are left out of valuation.",
)
def new_rows(integrity_report: StepResult, marketplace: MarketplaceResource) -> dg.AssetCheckResult:
    return _integrity_check(integrity_report, marketplace, "known_rows", "known-rows check")


@dg.asset_check(
    asset=integrity_report,
    name="labels_consistent",
    blocking=True,
    partitions_def=dataset_versions,
    description="Labels disagree with the current model and with their own cross-validation "
    "no more than the reference data does, plus LABEL_DISAGREEMENT_MARGIN.",
)
def labels_consistent(
    integrity_report: StepResult, marketplace: MarketplaceResource
) -> dg.AssetCheckResult:
    return _integrity_check(integrity_report, marketplace, "labels", "label check")
