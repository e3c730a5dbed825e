"""Per-partition reporting: each version of a run's batch shows its own result on its partition.

A run for the partition `{model_id}__{version}` processes a batch of versions
(`pipeline.evaluation.claims.claim_batch`), but Dagster scopes a step's output, and a partitioned
check's result, to the run's own partition. So every step reports the batch's other versions itself,
as events of the same run (they link to it in the UI):

- `report_materializations`: an AssetMaterialization on the partition of each other version the
  step produced something for;
- `report_check`: an AssetCheckEvaluation on the partition of each other version the check
  judged, aimed at that partition's latest materialization of the checked asset (Dagster shows a
  check result as the partition's status only while it targets the latest materialization), and
  the AssetCheckResult of the run's own partition.

A version a step did not handle gets nothing from that step: a version rejected by one check is
not handled by the next, so its partition keeps the failed check and misses the later assets.
The run's own partition must have an output and a check result; when its version was not
handled (rejected earlier, or not pending: a re-score), they say where the version stands.
Why events in the run, rather than one run per version or runless events: docs/dagster.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

# Not re-exported by dagster 1.13; it is the type of AssetCheckEvaluation's public
# `target_materialization_data` field.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from assets.partitions import dataset_versions, partition_key
from pipeline.core.db import Database
from pipeline.evaluation.batches import Batch
from pipeline.intake.catalog import VersionFacts, version_facts


@dataclass(frozen=True)
class VersionResult:
    """One version's result in a check: what its partition shows."""

    version: str
    passed: bool
    description: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


def metadata_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata without empty values; numbers stay numbers, so the UI plots them."""
    return {key: value for key, value in values.items() if value is not None and value != ""}


def _registered(instance: dg.DagsterInstance, key: str) -> bool:
    return instance.has_dynamic_partition(str(dataset_versions.name), key)


def report_materializations(
    context: dg.AssetExecutionContext,
    batch: Batch,
    per_version: Mapping[str, Mapping[str, Any]],
) -> int:
    """Log this asset's materialization on the partition of each version in `per_version` but
    the run's own (whose output the step returns)."""
    logged = 0
    run_partition = partition_key(batch.model_id, batch.version)
    for version, values in per_version.items():
        key = partition_key(batch.model_id, version)
        if version == batch.version or not _registered(context.instance, key):
            continue
        context.log_event(
            dg.AssetMaterialization(
                asset_key=context.asset_key,
                partition=key,
                metadata={"processed_in_partition": run_partition, **metadata_values(values)},
            )
        )
        logged += 1
    return logged


def _latest_materialization(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str
) -> AssetCheckEvaluationTargetMaterializationData | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=records[0].storage_id,
        run_id=records[0].run_id,
        timestamp=records[0].timestamp,
    )


def report_check(
    context: dg.AssetCheckExecutionContext,
    batch: Batch,
    results: Sequence[VersionResult],
    *,
    db: Database,
    stops_run: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> dg.AssetCheckResult:
    """Log the check's evaluation on each other judged version's partition; the own result.

    Another version's failure has ERROR severity. The own partition's failure has ERROR
    severity too, except on a blocking check in a run that goes on (`stops_run` false: other
    versions or a re-score still need evaluation and rewards), where ERROR would stop them:
    there it is WARN. `metadata` (the batch's figures) goes on the own result only.
    """
    [spec] = context.check_specs
    by_version = {result.version: result for result in results}
    for item in batch.items:
        result = by_version.get(item.version)
        if result is None or item.version == batch.version:
            continue
        key = partition_key(item.model_id, item.version)
        if not _registered(context.instance, key):
            continue
        # `log_event` handles an AssetCheckEvaluation (its own branch in dagster 1.13), though
        # its annotation names only materializations, observations and expectations.
        context.op_execution_context.log_event(
            dg.AssetCheckEvaluation(  # type: ignore[arg-type]
                asset_key=spec.asset_key,
                check_name=spec.name,
                passed=result.passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=result.description,
                blocking=spec.blocking,
                partition=key,
                target_materialization_data=_latest_materialization(
                    context.instance, spec.asset_key, key
                ),
                metadata={
                    "processed_in_partition": partition_key(batch.model_id, batch.version),
                    **metadata_values(result.metadata),
                },
            )
        )
    own = by_version.get(batch.version) or standing_result(db, batch)
    warn = not own.passed and spec.blocking and not stops_run
    return dg.AssetCheckResult(
        passed=own.passed,
        severity=dg.AssetCheckSeverity.WARN if warn else dg.AssetCheckSeverity.ERROR,
        description=own.description[:2000],
        metadata=metadata_values({**own.metadata, **(metadata or {})}),
    )


def own_facts(db: Database, batch: Batch) -> VersionFacts | None:
    """Facts of the run's own version (None when the partition names no stored version)."""
    return version_facts(db, batch.model_id, [batch.version]).get(batch.version)


def standing_result(db: Database, batch: Batch) -> VersionResult:
    """The own partition's result when the check did not judge its version in this run.

    A version whose job was rejected or failed (by an earlier check, or in an earlier run) fails
    the check with the job's reason: its partition must never look healthy. Anything else
    passes, saying what the version is.
    """
    facts = own_facts(db, batch)
    if facts is None:
        return VersionResult(batch.version, True, f"no stored version {batch.version}")
    standing = ", ".join(filter(None, [facts.kind, facts.status]))
    if facts.failed_or_rejected:
        return VersionResult(
            facts.version,
            False,
            f"not checked in this run: {facts.version} is {facts.status}: {facts.reason or ''}",
            {"status": facts.status},
        )
    return VersionResult(
        facts.version,
        True,
        f"nothing to check for {facts.version} in this run ({standing})",
        metadata_values({"status": facts.status}),
    )
