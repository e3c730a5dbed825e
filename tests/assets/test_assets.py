"""The Dagster assets on real small data: `dg.materialize` of every asset and its checks.

A good contribution is rewarded with ledger rows; a low-quality or PII contribution is rejected
and its blocking check stops evaluation and rewards; a re-run writes no second ledger row; one
debounced run processes every pending version and reports each on its own partition: the
rejected one with its failed check and no evaluation or reward, even as the run's own partition
or in a later re-score of it. (The same seen through the webserver: test_dagster_ui.py.)
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest
from sqlalchemy import func, select

from assets import ASSET_CHECKS, ASSETS, JOBS
from assets.partitions import (
    EVALUATION_JOB,
    TAG_CONCURRENCY,
    dataset_versions,
)
from assets.resources import MarketplaceResource, resource_defs
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Evaluation, RewardEntry
from pipeline.demo.churn_data import churn_rows
from pipeline.intake.catalog import version_facts
from pipeline.store.objectstore import LocalObjectStore
from tests.support.dagster_runs import materialize
from tests.support.pipeline import (
    WALLET_A,
    add_benchmark,
    add_external,
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
    "improves_model",
}

# The domain runs on both backends in test_processing.py; here only the good path does too.
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"])


def materializations(result: dg.ExecuteInProcessResult, asset: str) -> list[Any]:
    """The run's materializations of `asset`, on every partition."""
    return [
        e.step_materialization_data.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey(asset)
    ]


def metadata(result: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    """The metadata of the asset's materialization for the run's own partition."""
    [own] = [
        m
        for m in materializations(result, node)
        if m.partition == result.dagster_run.tags.get("dagster/partition")
    ]
    return {key: value.value for key, value in own.metadata.items()}


def checks(
    result: dg.ExecuteInProcessResult, partition: str | None = None
) -> dict[str, dg.AssetCheckEvaluation]:
    """The run's check evaluations on `partition` (default: the run's own), by check name."""
    wanted = partition or result.dagster_run.tags.get("dagster/partition")
    return {e.check_name: e for e in result.get_asset_check_evaluations() if e.partition == wanted}


def partition_metadata(result: dg.ExecuteInProcessResult, node: str, key: str) -> dict[str, Any]:
    """The raw metadata values of the node's materialization for partition `key`."""
    [event] = [m for m in materializations(result, node) if m.partition == key]
    return dict(event.metadata)


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
    both, contribution = {f"1__{bench}", f"1__{version}"}, {f"1__{version}"}
    # Benchmarks are read and scored, not checked for quality or PII, and not paid.
    for name, partitions in [
        ("dataset_version", both),
        ("quality_report", contribution),
        ("pii_report", contribution),
        ("evaluation", both),
        ("rewards", contribution),
    ]:
        assert materialized(instance, name) == partitions, name
    assert all(c.passed for c in checks(result).values())
    assert set(checks(result)) == CHECK_NAMES
    assert {c.check_name for c in checks(result, f"1__{bench}").values()} == {
        "readable",
        "improves_model",
    }
    read = metadata(result, "dataset_version")
    assert read["batch_rows"] == 300 + 200 and read["versions"] == f"{bench}, {version}"
    assert read["dagster/row_count"] == 200 and read["job_id"] == job_id
    quality = metadata(result, "quality_report")
    assert quality["checked"] == 1 and quality["failed"] == 0
    evaluated = metadata(result, "evaluation")
    assert evaluated["metric"] == "accuracy" and evaluated["status"] == "accepted"
    assert evaluated["detail"].startswith("improved accuracy")  # not "rewards pending"
    assert "pending" not in evaluated["detail"]
    assert evaluated["improvement_pct"] > 10
    assert evaluated["score"] > evaluated["baseline_score"]
    assert (checks(result)["improves_model"].description or "").startswith("improved accuracy")
    paid = metadata(result, "rewards")
    row = job(db, job_id)
    assert row.status == "rewarded"
    assert paid["tokens"] == pytest.approx(row.tokens) and paid["tokens"] > 0
    assert paid["ledger_entries"] == 1 and paid["status"] == "rewarded"
    assert ledger_count(db) == 1
    # Pool, share and interval of the valuation, in the evaluation and rewards metadata.
    valuation = (row.quality or {})["valuation"]
    interval = valuation["interval"]
    shown = f"[{interval['low']:+.2f}, {interval['high']:+.2f}]"
    assert evaluated["pool_pct"] == pytest.approx(valuation["pool_pct"])
    assert evaluated["interval"] == paid["interval"] == shown
    assert evaluated["batch_size"] == 1
    assert evaluated["base_rows"] == 0  # the benchmark has no base training data
    assert paid["pool_pct"] == pytest.approx(valuation["pool_pct"])
    assert "| share % | pool % | interval % | integrity |" in paid["rewards"]
    assert shown in paid["rewards"]
    assert shown in evaluated["results"]


@sqlite_only
def test_low_quality_contribution_is_rejected_and_its_check_blocks_evaluation(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    add_benchmark(db, store)
    first = materialize(settings, instance, 1, ["v1"])  # the benchmark's own run
    # Benchmarks are not checked for quality: the check says nothing of v1, neither passed
    # nor failed.
    assert "quality_thresholds" not in checks(first)
    assert checks(first)["readable"].passed
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
    assert (job(db, job_id).quality or {})["integrity"]["detail"].startswith(
        "benchmark leakage: 200 of 200 rows"
    )
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
def test_debounced_run_reports_a_rejected_version_on_its_own_partition(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    _, bench = add_benchmark(db, store)
    bad_id, bad = contribute(db, store, churn_rows(30, seed=9))
    good_id, good = contribute(db, store, seed=40, with_manifest=manifest())

    result = materialize(settings, instance, 1, [bench, bad, good])  # the run of `good`

    assert result.success
    assert (job(db, bad_id).status, job(db, good_id).status) == ("rejected", "rewarded")
    failed = checks(result, f"1__{bad}")["quality_thresholds"]
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.ERROR
    assert failed.description == job(db, bad_id).reason
    assert "rows 30 (at least 100 required)" in (failed.description or "")
    assert failed.metadata["row_count"] == dg.IntMetadataValue(30)
    assert failed.target_materialization_data is not None  # so the UI counts it as current
    # Its partition stops at the failed check, as a run of its own would (the PII scan runs
    # beside the quality checks, so it may have seen the version first).
    assert "improves_model" not in checks(result, f"1__{bad}")
    for name in ("evaluation", "rewards"):
        assert f"1__{bad}" not in materialized(instance, name), name
    assert checks(result)["quality_thresholds"].passed  # the run's own version
    assert checks(result)["improves_model"].passed
    # Every version's file is described on its partition, the rejected one too.
    described = partition_metadata(result, "dataset_version", f"1__{bad}")
    assert described["dagster/row_count"] == dg.IntMetadataValue(30)
    assert described["job_id"].value == bad_id and described["kind"].value == "contribution"
    assert described["processed_in_partition"].value == f"1__{good}"


@sqlite_only
def test_rejected_own_partition_fails_beside_versions_that_go_on(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    _, bench = add_benchmark(db, store)
    good = [contribute(db, store, seed=40 + i, with_manifest=manifest()) for i in range(2)]
    bad_id, bad = contribute(db, store, churn_rows(30, seed=9))
    versions = [bench, *(v for _, v in good), bad]

    result = materialize(settings, instance, 1, versions)  # the run of `bad`

    # The own version failed, the others went on: ERROR would have stopped them.
    assert result.success
    quality = checks(result)["quality_thresholds"]
    assert not quality.passed and quality.severity == dg.AssetCheckSeverity.WARN
    assert quality.description == job(db, bad_id).reason
    # The checks it never reached say nothing of it, and it has no evaluation (not green).
    for unreached in ("no_benchmark_copies", "new_rows", "labels_consistent", "improves_model"):
        assert unreached not in checks(result), unreached
    for name in ("evaluation", "rewards"):
        assert f"1__{bad}" not in materialized(instance, name), name
    assert job(db, good[0][0]).status == "rewarded"
    first = checks(result, f"1__{good[0][1]}")
    assert set(first) == CHECK_NAMES and all(c.passed for c in first.values())
    assert f"1__{good[0][1]}" in materialized(instance, "rewards")
    other = [m for m in materializations(result, "evaluation") if m.partition == f"1__{good[0][1]}"]
    assert other[0].metadata["processed_in_partition"].value == f"1__{bad}"
    assert other[0].metadata["status"].value == "accepted"
    assert ledger_count(db) >= 1

    # A scheduled re-score runs on the model's newest partition: it must not make it healthy.
    # Each check that decided on `bad` reports its standing decision again (so the red one
    # stays red on the re-materialized report); the checks that never ran on it say nothing.
    rescore = materialize(settings, instance, 1, [bad], trigger="schedule")
    assert rescore.success
    assert metadata(rescore, "dataset_version")["versions"] == "none pending"
    standing = checks(rescore)
    assert set(standing) == {"readable", "quality_thresholds"}
    assert standing["readable"].passed
    assert (standing["readable"].description or "").startswith(f"passed in run {result.run_id}")
    red = standing["quality_thresholds"]
    assert not red.passed and red.severity == dg.AssetCheckSeverity.ERROR
    assert red.description == job(db, bad_id).reason
    assert red.metadata["decided_in_run"] == dg.TextMetadataValue(result.run_id)
    assert f"1__{bad}" not in materialized(instance, "evaluation")
    with db.session() as session:
        latest = session.scalars(select(Evaluation).order_by(Evaluation.created_at.desc())).first()
    assert latest is not None and (latest.trigger, latest.run_id) == ("schedule", rescore.run_id)


@sqlite_only
def test_unreadable_version_and_one_waiting_for_a_benchmark_show_where_they_stand(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    junk = add_external(db, store, b"\x00\x01 not,a\ncsv\x00", filename="x.parquet",
                        file_format="parquet")  # fmt: skip
    waiting_id, waiting = contribute(db, store, with_manifest=manifest())  # no benchmark yet

    result = materialize(settings, instance, 1, [junk, waiting])

    assert result.success
    unreadable = checks(result, f"1__{junk}")["readable"]
    assert not unreadable.passed and unreadable.severity == dg.AssetCheckSeverity.ERROR
    [external] = version_facts(db, 1, [junk]).values()
    assert unreadable.description == external.reason
    assert (external.reason or "").startswith("unreadable dataset: not a valid PARQUET file")
    described = partition_metadata(result, "dataset_version", f"1__{junk}")
    assert described["readable"] == dg.BoolMetadataValue(False)
    assert (described["kind"].value, described["submitter"].value) == ("external", "external")
    assert "dagster/row_count" not in described
    for name in ("quality_report", "pii_report", "evaluation", "rewards"):
        assert f"1__{junk}" not in materialized(instance, name), name
    # Passed its checks, but nothing to measure against: not evaluated, not paid, not failed.
    assert job(db, waiting_id).status == "queued"
    assert "waiting for a benchmark" in (job(db, waiting_id).reason or "")
    assert "improves_model" not in checks(result)
    assert materialized(instance, "evaluation") == set()
    assert materialized(instance, "rewards") == set()


@sqlite_only
def test_figures_are_numbers_so_dagster_plots_them(
    settings: Settings, db: Database, store: LocalObjectStore, instance: dg.DagsterInstance
) -> None:
    model_id = add_tickets_model(db)
    _, bench = add_benchmark(
        db, store, ticket_rows(150, seed=1), model_id=model_id, target_column="escalated"
    )
    _, pii = contribute(db, store, ticket_rows(200, with_emails=True, seed=2), model_id=model_id)
    _, good = contribute(
        db, store, ticket_rows(200, seed=3), model_id=model_id, with_manifest=manifest()
    )

    result = materialize(settings, instance, model_id, [bench, pii, good])

    def values(node: str, version: str) -> dict[str, Any]:
        return partition_metadata(result, node, f"{model_id}__{version}")

    quality = values("quality_report", good)
    for name in ("completeness", "uniqueness"):
        assert isinstance(quality[name], dg.FloatMetadataValue), name
    assert isinstance(quality["row_count"], dg.IntMetadataValue)
    found = values("pii_report", pii)
    findings = found["findings"]
    assert isinstance(findings, dg.IntMetadataValue)
    assert findings.value is not None and findings.value >= 60
    assert found["pii_columns"].value == "comment"
    assert values("pii_report", good)["findings"] == dg.IntMetadataValue(0)
    no_pii = checks(result, f"{model_id}__{pii}")["no_pii"]
    assert not no_pii.passed and "EMAIL_ADDRESS" in (no_pii.description or "")
    scored = values("evaluation", good)
    for name in ("score", "baseline_score", "improvement_pct"):
        assert isinstance(scored[name], dg.FloatMetadataValue), name
    paid = values("rewards", good)
    assert isinstance(paid["tokens"], dg.FloatMetadataValue)
    assert paid["status"].value in {"rewarded", "rejected"}
    schema = values("dataset_version", good)["dagster/column_schema"].value
    assert [c.name for c in schema.columns] == ["wait_minutes", "comment", "escalated"]
    assert [c.type for c in schema.columns] == ["int64", "string", "int64"]


@sqlite_only
def test_evaluation_job_targets_the_six_assets_with_the_concurrency_tag(
    settings: Settings,
) -> None:
    defs = dg.Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=JOBS,
        resources=resource_defs(settings),
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
