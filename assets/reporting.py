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
The run's own partition gets an output where the asset has one to give; when its version was
not handled in this run (settled earlier, or held by another run), it says where the version
stands. A check that did not judge the own version in this run reports no new verdict: it logs
the standing decision its stage made earlier (`pipeline.intake.standing`), so the check that
rejected a version stays the red one, and a check that never ran on a version shows nothing.
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
from pipeline.intake.standing import version_standing


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
    asset_key: dg.AssetKey | None = None,
) -> int:
    """Log this asset's (`asset_key`'s, in a step of several assets) materialization on the
    partition of each version in `per_version` but the run's own (whose output the step
    returns)."""
    asset_key = asset_key or context.asset_key
    logged = 0
    run_partition = partition_key(batch.model_id, batch.version)
    for version, values in per_version.items():
        key = partition_key(batch.model_id, version)
        if version == batch.version or not _registered(context.instance, key):
            continue
        context.log_event(
            dg.AssetMaterialization(
                asset_key=asset_key,
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


Context = dg.AssetCheckExecutionContext | dg.AssetExecutionContext


def _log_check(
    context: Context,
    spec: dg.AssetCheckSpec,
    run_partition: str,
    result: VersionResult,
    key: str,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """An AssetCheckEvaluation of this run on partition `key`, aimed at its latest
    materialization of the checked asset; ERROR severity and, logged, never blocking the run."""
    # `log_event` handles an AssetCheckEvaluation (its own branch in dagster 1.13), though
    # its annotation names only materializations, observations and expectations.
    context.op_execution_context.log_event(
        dg.AssetCheckEvaluation(  # type: ignore[arg-type]
            asset_key=spec.asset_key,
            check_name=spec.name,
            passed=result.passed,
            severity=dg.AssetCheckSeverity.ERROR,
            description=result.description[:2000],
            blocking=spec.blocking,
            partition=key,
            target_materialization_data=_latest_materialization(
                context.instance, spec.asset_key, key
            ),
            metadata={
                "processed_in_partition": run_partition,
                **metadata_values(result.metadata),
                **metadata_values(extra or {}),
            },
        )
    )


def report_check(
    context: Context,
    spec: dg.AssetCheckSpec,
    batch: Batch,
    results: Sequence[VersionResult],
    *,
    db: Database,
    stage: str,
    stops_run: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> dg.AssetCheckResult | None:
    """Log the check's evaluation on each other judged version's partition; the own result.

    Another version's failure has ERROR severity. The own partition's failure has ERROR
    severity too, except on a blocking check in a run that goes on (`stops_run` false: other
    versions or a re-score still need evaluation and rewards), where ERROR would stop them:
    there it is WARN. `metadata` (the batch's figures) goes on the own result only.

    When the check did not judge the own version in this run, None: the standing result of the
    check's `stage` is logged instead, from the decision an earlier step or run made (its run
    named), and nothing at all when that stage never judged the version.
    """
    run_partition = partition_key(batch.model_id, batch.version)
    by_version = {result.version: result for result in results}
    for item in batch.items:
        result = by_version.get(item.version)
        if result is None or item.version == batch.version:
            continue
        key = partition_key(item.model_id, item.version)
        if _registered(context.instance, key):
            _log_check(context, spec, run_partition, result, key)
    own = by_version.get(batch.version)
    if own is None:
        standing = standing_result(db, batch, stage)
        if standing is not None and _registered(context.instance, run_partition):
            _log_check(context, spec, run_partition, standing, run_partition, metadata)
        return None
    warn = not own.passed and spec.blocking and not stops_run
    return dg.AssetCheckResult(
        asset_key=spec.asset_key,
        check_name=spec.name,
        passed=own.passed,
        severity=dg.AssetCheckSeverity.WARN if warn else dg.AssetCheckSeverity.ERROR,
        description=own.description[:2000],
        metadata=metadata_values({**own.metadata, **(metadata or {})}),
    )


def own_facts(db: Database, batch: Batch) -> VersionFacts | None:
    """Facts of the run's own version (None when the partition names no stored version)."""
    return version_facts(db, batch.model_id, [batch.version]).get(batch.version)


def standing_result(db: Database, batch: Batch, stage: str) -> VersionResult | None:
    """The decision `stage` made on the run's own version in an earlier step or run, as that
    check's result; None when the stage never judged it (the check did not run on it)."""
    standing = version_standing(db, batch.model_id, batch.version)
    if standing is None or stage not in standing.decisions:
        return None
    passed = standing.decisions[stage]
    run = standing.decided_in_run or "an earlier run"
    if passed:
        description = f"passed in run {run} (standing result; not checked again): "
        description += standing.summary()
    else:
        description = standing.facts.reason or standing.summary()
    return VersionResult(
        standing.version,
        passed,
        description,
        metadata_values({"status": standing.facts.status, "decided_in_run": run}),
    )
