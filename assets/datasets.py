"""Dataset-version assets and their blocking checks: the stored object, quality, PII, integrity.

One partition per dataset version (`{model_id}__{version}`). A run for a partition claims every
pending version of the model up to it (`pipeline.evaluation.claims.claim_batch`), so the assets
below work on that batch and report each version on its own partition (`assets.reporting`): the
version's file with Dagster's standard metadata, its figures, and its check results.

The checks are blocking: when a version fails one, it is `rejected` at once, and when nothing is
left for evaluation (no other version of the batch, no re-score), the check fails with ERROR
severity so evaluation and rewards do not run. When the run's own version fails beside versions
that go on, its failure has WARN severity (ERROR would stop the others); the failed version is
already out of the batch.
"""

import warnings
from collections.abc import Sequence
from typing import Any

import dagster as dg

from assets.check_steps import (
    judge,
    markdown_table,
    standing,
    step_output,
    version_check,
)
from assets.partitions import dataset_versions, parse_partition_key
from assets.reporting import metadata_values, report_materializations
from assets.resources import MarketplaceResource
from pipeline.checks.batch import (
    CheckOutcome,
    VersionSummary,
    describe_batch,
    integrity_outcomes,
    readability_outcomes,
    run_integrity_checks,
    run_pii_scans,
    run_quality_checks,
)
from pipeline.evaluation.batches import StepResult
from pipeline.intake import standing as stages
from pipeline.intake.catalog import SpecColumn, VersionFacts, model_spec_columns, version_facts

GROUP = "dataset_versions"

# Partitioned asset checks (one result per dataset version, and the check's input is the
# partition's value, not every partition's) are "preview" in dagster 1.13; an unpartitioned
# check on a partitioned asset would load all partitions. The warning says no more than that.
warnings.filterwarnings(
    "ignore",
    message="Specifying a partitions_def on an AssetCheckSpec",
    category=dg.PreviewWarning,
)


def column_schema(columns: Sequence[SpecColumn]) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=c.name,
                type=c.type,
                description=c.description or None,
                constraints=dg.TableColumnConstraints(nullable=not c.required, other=c.constraints),
            )
            for c in columns
        ]
    )


def version_metadata(
    facts: VersionFacts | None, summary: VersionSummary | None, schema: dg.TableSchema
) -> dict[str, Any]:
    """A dataset version as a data engineer looks for it: Dagster's standard keys first."""
    if facts is None:
        return {}
    rows = summary.rows if summary is not None and summary.readable else facts.row_count
    return metadata_values(
        {
            "dagster/uri": facts.uri,
            "dagster/row_count": rows,
            "dagster/column_schema": schema,
            "kind": facts.kind,
            "file_format": facts.file_format,
            "size_bytes": facts.size_bytes,
            "sha256": facts.sha256,
            "job_id": facts.job_id,
            "spec_id": facts.spec_id,
            "submitter": facts.submitter,
            "readable": summary.readable if summary is not None else None,
            "error": summary.error if summary is not None else None,
        }
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
    batch = marketplace.run_batch(context, None, claim_new=True)
    summaries = describe_batch(svc, batch)
    facts = version_facts(svc.db, model_id, [*batch.versions, version])
    schema = column_schema(model_spec_columns(svc.db, model_id))
    per_version = {s.version: version_metadata(facts.get(s.version), s, schema) for s in summaries}
    report_materializations(context, batch, per_version)
    context.log.info(
        f"model {model_id}: processing {', '.join(batch.versions) or 'no pending version'}"
        + ("; re-scoring the model" if batch.rescore else "")
    )
    own = per_version.get(version) or {
        **version_metadata(facts.get(version), None, schema),
        **standing(svc.db, batch),
    }
    if version not in per_version:
        context.log.info(f"nothing to do for {version}: {own.get('nothing_to_do', '')}")
    return dg.MaterializeResult(
        value=StepResult(batch, tuple(summaries)),
        metadata={
            **own,
            "model_id": model_id,
            "trigger": batch.trigger,
            "versions": ", ".join(batch.versions) or "none pending",
            "batch_rows": sum(s.rows for s in summaries),
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


@version_check(
    asset=dataset_version,
    name="readable",
    description="Every version of the batch is a valid CSV, JSON or Parquet file (spec §8).",
)
def dataset_version_readable(
    context: dg.AssetCheckExecutionContext,
    dataset_version: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    rows = {s.version: s.rows for s in dataset_version.outcomes if s.readable}

    return judge(
        context,
        dataset_version.batch,
        readability_outcomes(dataset_version.outcomes),
        marketplace,
        "reading",
        lambda o: {"rows": rows.get(o.version)},
        lambda o: f"readable: {rows[o.version]} rows",
        stage=stages.READING,
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


def quality_figures(outcome: CheckOutcome) -> dict[str, Any]:
    return {name: outcome.figures.get(name) for name in QUALITY_COLUMNS}


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
    dataset_version: StepResult | None,
) -> dg.MaterializeResult:
    batch = marketplace.run_batch(context, dataset_version)
    outcomes = run_quality_checks(marketplace.services, batch)
    return step_output(
        context,
        marketplace,
        batch,
        outcomes,
        quality_figures,
        {
            "checked": len(outcomes),
            "failed": sum(not o.passed for o in outcomes),
            "strict": marketplace.services.settings.data_validation_strict,
            "checks": _outcome_table(outcomes, QUALITY_COLUMNS),
        },
    )


@version_check(
    asset=quality_report,
    name="quality_thresholds",
    description="≥ 100 rows, completeness > 95 %, unique rows > 80 %, 100 % data-spec "
    "compliance (warnings fail too with DATA_VALIDATION_STRICT=true).",
)
def quality_thresholds(
    context: dg.AssetCheckExecutionContext,
    quality_report: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    return judge(
        context,
        quality_report.batch,
        quality_report.outcomes,
        marketplace,
        "quality checks",
        quality_figures,
        stage=stages.QUALITY,
    )


def pii_figures(outcome: CheckOutcome) -> dict[str, Any]:
    """The scan's counts: findings is the number of distinct values holding PII (per type)."""
    findings: dict[str, dict[str, int]] = outcome.figures.get("findings") or {}
    return {
        "findings": sum(n for counts in findings.values() for n in counts.values()),
        "pii_columns": ", ".join(findings),
        "entity_types": ", ".join(sorted({e for counts in findings.values() for e in counts})),
        "scanned_values": outcome.figures.get("scanned_values"),
        "candidate_values": outcome.figures.get("candidate_values"),
        "confirmed_values": outcome.figures.get("confirmed_values"),
    }


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
    dataset_version: StepResult | None,
) -> dg.MaterializeResult:
    batch = marketplace.run_batch(context, dataset_version)
    outcomes = run_pii_scans(marketplace.services, batch)
    return step_output(
        context,
        marketplace,
        batch,
        outcomes,
        pii_figures,
        {
            "enabled": marketplace.services.settings.enable_pii_detection,
            "scanned": len(outcomes),
            "with_pii": sum(not o.passed for o in outcomes),
            "batch_scanned_values": sum(int(o.figures.get("scanned_values", 0)) for o in outcomes),
            "batch_findings": _outcome_table(outcomes, ("scanned_values",)),
        },
    )


@version_check(
    asset=pii_report,
    name="no_pii",
    description="No e-mail, phone, card, IBAN, SSN, IP, URL or wallet address in text columns.",
)
def no_pii(
    context: dg.AssetCheckExecutionContext,
    pii_report: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    return judge(
        context,
        pii_report.batch,
        pii_report.outcomes,
        marketplace,
        "PII scan",
        pii_figures,
        stage=stages.PII,
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
    quality_report: StepResult | None,
    pii_report: StepResult | None,
) -> dg.MaterializeResult:
    batch = marketplace.run_batch(context, pii_report or quality_report)
    outcomes = run_integrity_checks(marketplace.services, batch)
    return step_output(
        context,
        marketplace,
        batch,
        outcomes,
        integrity_figures,
        {
            "checked": len(outcomes),
            "failed": sum(not o.passed for o in outcomes),
            "batch_benchmark_copies": sum(
                int(o.figures.get("benchmark_copies") or 0) for o in outcomes
            ),
            "batch_known_rows": sum(int(o.figures.get("known_rows") or 0) for o in outcomes),
            "integrity": _outcome_table(outcomes, INTEGRITY_COLUMNS),
        },
    )


def integrity_figures(outcome: CheckOutcome) -> dict[str, Any]:
    """The integrity counts as numbers (Dagster plots them across versions)."""
    return {
        k: v
        for k, v in outcome.figures.items()
        if k in INTEGRITY_COLUMNS and isinstance(v, int | float) and not isinstance(v, bool)
    }


def _integrity_check(
    context: dg.AssetCheckExecutionContext,
    result: StepResult,
    marketplace: MarketplaceResource,
    check: str,
    what: str,
) -> dg.AssetCheckResult | None:
    outcomes = integrity_outcomes(result.outcomes, check)
    return judge(
        context,
        result.batch,
        outcomes,
        marketplace,
        what,
        integrity_figures,
        stage=check_stage(check),
    )


def check_stage(check: str) -> str:
    """The standing stage of an integrity check (`pipeline.checks.batch.INTEGRITY_VERDICTS`)."""
    return {"labels": stages.LABELS, "known_rows": stages.KNOWN_ROWS}.get(
        check, stages.BENCHMARK_COPIES
    )


@version_check(
    asset=integrity_report,
    name="no_benchmark_copies",
    description="No contribution copies or nearly copies the model's benchmark rows beyond "
    "chance plus INTEGRITY_COPY_TOLERANCE (default 1 % of its rows).",
)
def no_benchmark_copies(
    context: dg.AssetCheckExecutionContext,
    integrity_report: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    return _integrity_check(
        context, integrity_report, marketplace, "benchmark_copies", "leakage check"
    )


@version_check(
    asset=integrity_report,
    name="new_rows",
    description="At least INTEGRITY_MIN_NOVEL_SHARE (default 5 %) of each contribution's rows "
    "are not already accepted for the model; known rows are left out of valuation.",
)
def new_rows(
    context: dg.AssetCheckExecutionContext,
    integrity_report: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    return _integrity_check(
        context, integrity_report, marketplace, "known_rows", "known-rows check"
    )


@version_check(
    asset=integrity_report,
    name="labels_consistent",
    description="Labels disagree with the current model and with their own cross-validation "
    "no more than the reference data does, plus LABEL_DISAGREEMENT_MARGIN.",
)
def labels_consistent(
    context: dg.AssetCheckExecutionContext,
    integrity_report: StepResult,
    marketplace: MarketplaceResource,
) -> dg.AssetCheckResult | None:
    return _integrity_check(context, integrity_report, marketplace, "labels", "label check")
