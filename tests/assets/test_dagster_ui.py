"""What a data engineer sees in the Dagster UI, read from a real `dagster-webserver` (issue 11).

A benchmark, a rejected contribution (too few rows) and an accepted one are processed by ONE
debounced run of the evaluation job, for the accepted version's partition, on an instance in a
temp DAGSTER_HOME. The webserver serves that instance and the workspace; its GraphQL API (what
the UI reads) must show each version on its own partition: the rejected one with its failed
check and reason and no evaluation or reward, the others healthy; Dagster's standard dataset
metadata; figures as numbers; final statuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from assets import ASSET_CHECKS, ASSETS, JOBS
from assets.partitions import EVALUATION_JOB, TAG_TRIGGER, TAG_VERSIONS, partition_key
from assets.resources import resource_defs
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.demo.churn_data import churn_rows
from pipeline.intake.catalog import version_facts
from pipeline.store.objectstore import LocalObjectStore
from tests.cli.test_dev_command import free_port
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 120

ENTRY = """
fragment Entry on MetadataEntry {
  label
  __typename
  ... on IntMetadataEntry { intValue }
  ... on FloatMetadataEntry { floatValue }
  ... on TextMetadataEntry { text }
  ... on BoolMetadataEntry { boolValue }
  ... on TableSchemaMetadataEntry {
    schema { columns { name type description constraints { nullable other } } }
  }
}
"""

CHECK_STATUSES = """
query CheckStatuses($asset: AssetKeyInput!, $check: String!) {
  assetNodeOrError(assetKey: $asset) {
    ... on AssetNode {
      assetCheckOrError(checkName: $check) {
        __typename
        ... on AssetCheck {
          partitionStatuses {
            ... on AssetCheckDefaultPartitionStatuses {
              succeededPartitions failedPartitions skippedPartitions
              inProgressPartitions executionFailedPartitions
            }
          }
        }
      }
    }
  }
}
"""

CHECK_EXECUTIONS = (
    """
query CheckExecutions($asset: AssetKeyInput!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: $asset, checkName: $check, partition: $partition, limit: 10) {
    runId status partition
    evaluation { success severity description partition metadataEntries { ...Entry } }
  }
}
"""
    + ENTRY
)

MATERIALIZATIONS = (
    """
query Materializations($asset: AssetKeyInput!, $partitions: [String!]) {
  assetOrError(assetKey: $asset) {
    __typename
    ... on Asset {
      assetMaterializations(partitions: $partitions) {
        partition runId metadataEntries { ...Entry }
      }
    }
  }
}
"""
    + ENTRY
)

PARTITION_STATUSES = """
query PartitionStatuses($asset: AssetKeyInput!) {
  assetNodeOrError(assetKey: $asset) {
    __typename
    ... on AssetNode {
      assetPartitionStatuses {
        ... on DefaultPartitionStatuses { materializedPartitions failedPartitions }
      }
    }
  }
}
"""


def create_instance_storage(home: Path) -> None:
    """Create the instance's SQLite storage in `home` once, before any Dagster process starts:
    processes that open an empty DAGSTER_HOME together race to migrate it, and the loser
    fails with alembic's CommandError."""
    with dg.DagsterInstance.from_config(str(home)):
        pass


@contextmanager
def dagster_webserver(home: Path, port: int, settings: Settings) -> Iterator[str]:
    """`dagster-webserver` on the workspace and the instance in `home`, stopped on exit."""
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MARKETPLACE_DATA_DIR": str(settings.marketplace_data_dir),
        "DATABASE_URL": settings.resolved_database_url,
    }
    log = (home / "webserver.log").open("wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1",
         "-p", str(port), "-w", "workspace.yaml"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(server)
        log.close()


class GraphQL:
    """The webserver's GraphQL endpoint, as the UI calls it."""

    def __init__(self, url: str, home: Path) -> None:
        self.url = f"{url}/graphql"
        self.home = home

    def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        answer = httpx.post(self.url, json={"query": query, "variables": variables}, timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert not body.get("errors"), body["errors"]
        return dict(body["data"])

    def wait_for_code_location(self) -> None:
        """Until the webserver has loaded the workspace (it starts before its code server)."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            try:
                node = self(PARTITION_STATUSES, asset={"path": ["evaluation"]})
            except (httpx.TransportError, AssertionError):
                node = {}
            if (node.get("assetNodeOrError") or {}).get("__typename") == "AssetNode":
                return
            time.sleep(0.5)
        log = (self.home / "webserver.log").read_text(errors="replace")[-3000:]
        pytest.fail(f"the webserver did not load the workspace in {STARTUP_SECONDS} s:\n{log}")

    def check_statuses(self, asset: str, check: str) -> dict[str, list[str]]:
        node = self(CHECK_STATUSES, asset={"path": [asset]}, check=check)["assetNodeOrError"]
        assert node["assetCheckOrError"]["__typename"] == "AssetCheck", node
        return dict(node["assetCheckOrError"]["partitionStatuses"])

    def check_executions(self, asset: str, check: str, partition: str) -> list[dict[str, Any]]:
        return list(
            self(CHECK_EXECUTIONS, asset={"path": [asset]}, check=check, partition=partition)[
                "assetCheckExecutions"
            ]
        )

    def materializations(self, asset: str, partition: str) -> list[dict[str, Any]]:
        found = self(MATERIALIZATIONS, asset={"path": [asset]}, partitions=[partition])
        return list(found["assetOrError"]["assetMaterializations"])

    def materialized_partitions(self, asset: str) -> set[str]:
        node = self(PARTITION_STATUSES, asset={"path": [asset]})["assetNodeOrError"]
        return set(node["assetPartitionStatuses"]["materializedPartitions"])


def entries(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Metadata entries by label."""
    return {entry["label"]: entry for entry in event["metadataEntries"]}


def run_one_debounced_run(
    settings: Settings, home: Path, versions: list[str]
) -> dg.ExecuteInProcessResult:
    """The evaluation job for the newest version's partition, as the arrival sensor asks it."""
    defs = dg.Definitions(
        assets=ASSETS,
        asset_checks=ASSET_CHECKS,
        jobs=JOBS,
        resources=resource_defs(settings),
    )
    keys = [partition_key(1, v) for v in versions]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions("dataset_versions", keys)
        return defs.resolve_job_def(EVALUATION_JOB).execute_in_process(
            partition_key=keys[-1],
            instance=instance,
            tags={TAG_TRIGGER: "arrival", TAG_VERSIONS: ",".join(versions)},
            raise_on_error=False,
        )


@pytest.mark.slow
@pytest.mark.xdist_group("dagster-processes")
@pytest.mark.parametrize("backend", ["sqlite"])
def test_dagster_ui_shows_each_version_of_a_debounced_run_on_its_partition(
    settings: Settings, db: Database, tmp_path: Path
) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    create_instance_storage(home)
    store = LocalObjectStore(settings.objects_dir)
    spec_id, bench = add_benchmark(db, store)
    bad_id, bad = contribute(db, store, churn_rows(30, seed=9), user="mallory")
    good_id, good = contribute(db, store, seed=40, with_manifest=manifest(WALLET_A))
    keys = {v: partition_key(1, v) for v in (bench, bad, good)}

    # The webserver loads the workspace while the run goes.
    with dagster_webserver(home, free_port(), settings) as url:
        result = run_one_debounced_run(settings, home, [bench, bad, good])
        assert result.success
        run_id = result.run_id
        gql = GraphQL(url, home)
        gql.wait_for_code_location()

        # The rejected version's partition shows the failed check, with the job's reason.
        rejected = job(db, bad_id)
        assert rejected.status == "rejected"
        statuses = gql.check_statuses("quality_report", "quality_thresholds")
        assert statuses["failedPartitions"] == [keys[bad]]
        assert statuses["succeededPartitions"] == [keys[good]]
        [execution] = gql.check_executions("quality_report", "quality_thresholds", keys[bad])
        assert (execution["status"], execution["runId"]) == ("FAILED", run_id)  # the ONE run
        evaluation = execution["evaluation"]
        assert (evaluation["success"], evaluation["severity"]) == (False, "ERROR")
        assert evaluation["description"] == rejected.reason
        assert "rows 30 (at least 100 required)" in evaluation["description"]
        assert entries(evaluation)["row_count"]["intValue"] == 30
        # ... and nothing past it: no evaluation, no reward, no passed improvement check.
        for asset in ("evaluation", "rewards"):
            assert keys[bad] not in gql.materialized_partitions(asset), asset
            assert gql.materializations(asset, keys[bad]) == [], asset
        improves = gql.check_statuses("evaluation", "improves_model")
        assert keys[bad] not in improves["succeededPartitions"]
        assert set(improves["succeededPartitions"]) == {keys[bench], keys[good]}
        assert gql.check_statuses("dataset_version", "readable")["succeededPartitions"] == sorted(
            keys.values()
        )

        # Every dataset-version partition: Dagster's standard keys, then file, origin, kind.
        facts = version_facts(db, 1, keys)
        for version, (identity, owner) in {
            bench: (("spec_id", spec_id), None),
            bad: (("job_id", bad_id), "mallory"),
            good: (("job_id", good_id), "alice"),
        }.items():
            [event] = gql.materializations("dataset_version", keys[version])
            assert event["runId"] == run_id
            meta = entries(event)
            assert (
                meta["dagster/row_count"]["intValue"] == {bench: 300, bad: 30, good: 200}[version]
            )
            assert meta["dagster/uri"]["text"] == facts[version].uri
            assert meta["dagster/uri"]["text"].startswith("file://")
            columns = meta["dagster/column_schema"]["schema"]["columns"]
            assert [c["name"] for c in columns][:3] == [
                "tenure_months",
                "monthly_charges",
                "contract",
            ]
            assert columns[0]["type"] == "int64" and columns[0]["constraints"] == {
                "nullable": False,
                "other": ["minimum 0", "maximum 120"],
            }
            assert meta["sha256"]["text"] == facts[version].sha256
            assert len(meta["sha256"]["text"]) == 64
            assert meta[identity[0]]["text"] == identity[1]
            assert meta["kind"]["text"] == ("benchmark" if version == bench else "contribution")
            if owner:
                assert meta["submitter"]["text"] == owner

        # Figures are numbers (the UI plots them across versions), statuses final.
        def numbers(asset: str, version: str) -> dict[str, dict[str, Any]]:
            [event] = gql.materializations(asset, keys[version])
            return entries(event)

        quality = numbers("quality_report", good)
        assert quality["completeness"]["__typename"] == "FloatMetadataEntry"
        assert quality["uniqueness"]["__typename"] == "FloatMetadataEntry"
        assert quality["completeness"]["floatValue"] == pytest.approx(1.0)
        assert numbers("pii_report", good)["findings"] == {
            "label": "findings",
            "__typename": "IntMetadataEntry",
            "intValue": 0,
        }
        scored = numbers("evaluation", good)
        for name in ("score", "baseline_score", "improvement_pct"):
            assert scored[name]["__typename"] == "FloatMetadataEntry", name
        assert scored["improvement_pct"]["floatValue"] > 0
        assert scored["status"]["text"] == "accepted"  # not the passing "evaluating"
        paid = numbers("rewards", good)
        assert paid["status"]["text"] == "rewarded" == job(db, good_id).status
        assert paid["tokens"]["__typename"] == "FloatMetadataEntry"
        assert paid["tokens"]["floatValue"] > 0
        assert paid["tokens"]["floatValue"] == pytest.approx(job(db, good_id).tokens)
        assert numbers("evaluation", bench)["model_score"]["__typename"] == "FloatMetadataEntry"
