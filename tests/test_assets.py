"""The Dagster assets on real small data: `dg.materialize` of every asset and its checks.

A good contribution is rewarded with ledger rows; a low-quality or PII contribution is rejected
and its blocking check stops evaluation and rewards; a re-run writes no second ledger row; one
debounced run processes every pending version and shows each partition materialized.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import func, select

from assets import ASSET_CHECKS, ASSETS, JOBS
from assets.partitions import (
    EVALUATION_JOB,
    TAG_CONCURRENCY,
    TAG_TRIGGER,
    TAG_VERSIONS,
    dataset_versions,
    partition_key,
)
from assets.resources import MARKETPLACE, MarketplaceResource
from pipeline.config import Settings
from pipeline.db import Database
from pipeline.demo.churn_data import churn_rows
from pipeline.objectstore import LocalObjectStore
from pipeline.tables import Evaluation, RewardEntry
from tests.pipeline_support import (
    WALLET_A,
    add_benchmark,
    add_tickets_model,
    contribute,
    job,
    manifest,
    ticket_rows,
)

ASSET_NAMES = [
    "dataset_version",
    "quality_report",
    "pii_report",
    "integrity_report",
    "evaluation",
    "rewards",
]
CHECK_NAMES = {
    "readable",
    "quality_thresholds",
    "no_pii",
    "no_benchmark_copies",
    "new_rows",
    "labels_consistent",
}

# The domain runs on both backends in test_processing.py; here only the good path does too.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


@pytest.fixture
def store(settings: Settings) -> LocalObjectStore:
    return LocalObjectStore(settings.objects_dir)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


def materialize(
    settings: Settings,
    instance: dg.DagsterInstance,
    model_id: int,
    versions: list[str],
    *,
    trigger: str = "arrival",
    selection: list[str] | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize every asset (and check) for the partition of the newest of `versions`."""
    keys = [partition_key(model_id, v) for v in versions]
    instance.add_dynamic_partitions(dataset_versions.name, keys)
    return dg.materialize(
        [*ASSETS, *ASSET_CHECKS],
        partition_key=keys[-1],
        instance=instance,
        resources={MARKETPLACE: MarketplaceResource.from_settings(settings)},
        tags={TAG_TRIGGER: trigger, TAG_VERSIONS: ",".join(versions)},
        raise_on_error=False,
        selection=selection,
    )


def metadata(result: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    """The metadata of the node's materialization for the run's own partition."""
    [own] = [
        m
        for m in result.asset_materializations_for_node(node)
        if m.partition == result.dagster_run.tags.get("dagster/partition")
    ]
    return {key: value.value for key, value in own.metadata.items()}


def checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def materialized(instance: dg.DagsterInstance, name: str) -> set[str]:
    return set(instance.get_materialized_partitions(dg.AssetKey(name)))


def ledger_count(db: Database) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(RewardEntry)) or 0)


def test_good_contribution_is_evaluated_and_rewarded(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    _, bench = add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest(WALLET_A))

    result = materialize(settings, instance, 1, [bench, version])

    assert result.success
    for name in ASSET_NAMES:
        assert materialized(instance, name) == {f"1__{bench}", f"1__{version}"}
    assert all(c.passed for c in checks(result).values())
    assert set(checks(result)) == CHECK_NAMES
    read = metadata(result, "dataset_version")
    assert read["row_count"] == 300 + 200 and read["versions"] == f"{bench}, {version}"
    quality = metadata(result, "quality_report")
    assert quality["checked"] == 1 and quality["failed"] == 0
    evaluated = metadata(result, "evaluation")
    assert evaluated["metric"] == "accuracy"
    assert evaluated["improvement_pct"] > 10
    assert evaluated["score"] > evaluated["baseline_score"]
    paid = metadata(result, "rewards")
    row = job(db, job_id)
    assert row.status == "rewarded"
    assert paid["tokens"] == pytest.approx(row.tokens) and paid["tokens"] > 0
    assert paid["ledger_entries"] == 1
    assert ledger_count(db) == 1


@sqlite_only
def test_low_quality_contribution_is_rejected_and_its_check_blocks_evaluation(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    add_benchmark(db, store)
    materialize(settings, instance, 1, ["v1"])  # the benchmark's own run
    job_id, version = contribute(db, store, churn_rows(50, seed=3) * 3, with_manifest=manifest())

    result = materialize(settings, instance, 1, [version])

    assert not result.success
    quality = checks(result)["quality_thresholds"]
    assert not quality.passed and quality.severity == dg.AssetCheckSeverity.ERROR
    assert result.is_node_success("quality_report")
    for blocked in ("evaluation", "rewards"):
        assert f"1__{version}" not in materialized(instance, blocked)
    row = job(db, job_id)
    assert row.status == "rejected"
    assert (row.reason or "").startswith("quality checks failed:")
    assert ledger_count(db) == 0


@sqlite_only
def test_benchmark_copy_is_rejected_and_its_integrity_check_blocks_evaluation(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    add_benchmark(db, store)  # churn_rows(300, seed=1) with a split column
    materialize(settings, instance, 1, ["v1"])
    job_id, version = contribute(db, store, churn_rows(200, seed=1), with_manifest=manifest())

    result = materialize(settings, instance, 1, [version])

    assert not result.success
    leak = checks(result)["no_benchmark_copies"]
    assert not leak.passed and leak.severity == dg.AssetCheckSeverity.ERROR
    assert "200 of 200 rows copy" in (leak.description or "")
    assert checks(result)["new_rows"].passed and checks(result)["labels_consistent"].passed
    assert metadata(result, "integrity_report")["benchmark_copies"] == 200
    for blocked in ("evaluation", "rewards"):
        assert f"1__{version}" not in materialized(instance, blocked)
    assert (job(db, job_id).reason or "").startswith("benchmark leakage: 200 of 200 rows")
    assert ledger_count(db) == 0


@sqlite_only
def test_pii_contribution_is_rejected_and_its_check_blocks_rewards(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    model_id = add_tickets_model(db)
    _, bench = add_benchmark(
        db, store, ticket_rows(150, seed=1), model_id=model_id, target_column="escalated"
    )
    materialize(settings, instance, model_id, [bench])
    job_id, version = contribute(
        db, store, ticket_rows(200, with_emails=True, seed=2), model_id=model_id
    )

    result = materialize(settings, instance, model_id, [version])

    assert not result.success
    pii = checks(result)["no_pii"]
    assert not pii.passed and pii.severity == dg.AssetCheckSeverity.ERROR
    assert "EMAIL_ADDRESS" in (pii.description or "")
    assert f"{model_id}__{version}" not in materialized(instance, "rewards")
    assert job(db, job_id).status == "rejected"


@sqlite_only
def test_rerun_of_a_partition_writes_no_duplicate_ledger_rows(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    _, bench = add_benchmark(db, store)
    job_id, version = contribute(db, store, with_manifest=manifest())
    assert materialize(settings, instance, 1, [bench, version]).success
    tokens = job(db, job_id).tokens

    # Re-executing the rewards step alone (its input loaded from the first run's output).
    again = materialize(settings, instance, 1, [version], selection=["rewards"])
    assert again.success
    assert metadata(again, "rewards")["tokens"] == pytest.approx(tokens)
    # A whole new run of the partition: nothing pending, so the model is re-scored.
    rerun = materialize(settings, instance, 1, [version], trigger="manual")
    assert rerun.success
    assert metadata(rerun, "dataset_version")["versions"] == "none pending"

    assert ledger_count(db) == 1
    assert job(db, job_id).tokens == tokens
    with db.session() as session:
        latest = session.scalars(select(Evaluation).order_by(Evaluation.created_at.desc())).first()
    assert latest is not None and latest.trigger == "manual" and latest.dataset_version_id is None


@sqlite_only
def test_debounced_run_processes_every_version_and_shows_each_partition(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    _, bench = add_benchmark(db, store)
    good = [contribute(db, store, seed=40 + i, with_manifest=manifest()) for i in range(2)]
    bad_id, bad = contribute(db, store, churn_rows(30, seed=9))
    versions = [bench, *(v for _, v in good), bad]

    result = materialize(settings, instance, 1, versions)

    # The bad version failed its check, but the others went on: the failure is a warning.
    assert result.success
    quality = checks(result)["quality_thresholds"]
    assert not quality.passed and quality.severity == dg.AssetCheckSeverity.WARN
    for name in ASSET_NAMES:
        assert materialized(instance, name) == {f"1__{v}" for v in versions}, name
    assert job(db, good[0][0]).status == "rewarded"
    assert job(db, good[1][0]).status in {"rewarded", "rejected"}
    assert job(db, bad_id).status == "rejected"
    assert ledger_count(db) >= 1
    other = [
        m
        for m in result.asset_materializations_for_node("evaluation")
        if m.partition == f"1__{good[0][1]}"
    ]
    assert other and other[0].metadata["processed_in_partition"].value == f"1__{bad}"


@sqlite_only
def test_evaluation_job_targets_the_six_assets_with_the_concurrency_tag(
    settings: Settings,
) -> None:
    defs = dg.Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=JOBS,
        resources={MARKETPLACE: MarketplaceResource.from_settings(settings)},
    )
    job_def = defs.resolve_job_def(EVALUATION_JOB)
    assert job_def.tags[TAG_CONCURRENCY] == "true"
    assert job_def.partitions_def == dataset_versions
    keys = {key.to_user_string() for key in job_def.asset_layer.executable_asset_keys}
    assert keys == set(ASSET_NAMES)
    assert {c.name for c in job_def.asset_layer.asset_graph.asset_check_keys} == CHECK_NAMES


@sqlite_only
def test_resource_reads_the_pipeline_settings_from_overrides(settings: Settings) -> None:
    resource = MarketplaceResource.from_settings(
        settings, enable_pii_detection=False, batch_size=7, pipeline_log_level="DEBUG"
    )
    pinned = resource.settings()
    assert pinned.resolved_database_url == settings.resolved_database_url
    assert (pinned.enable_pii_detection, pinned.batch_size) == (False, 7)
    assert pinned.pipeline_log_level == "DEBUG"
    assert resource.services.settings.batch_size == 7
    resource.services.close()
