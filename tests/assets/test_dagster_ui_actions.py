"""The Dagster UI is safe to use (issue 22): its actions, through the webserver's GraphQL API.

One `dagster-webserver` and one `dagster-daemon` (the run queue, backfills) serve every test of
this module, on a temp DAGSTER_HOME with the repository's dagster.yaml; each test works on a
model of its own. The mutations are the ones the UI sends: "Materialize" (a run of the implicit
asset job with only the partition's tag), "Materialize all" (an asset backfill), "Terminate",
"Re-execute all". The arrival sensor is kept from requesting runs (a debounce window of a year);
the daemon's backfill loop wakes every 5 s, not 30 (tests/support/dagster_daemon.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from sqlalchemy import func, select

from assets.partitions import TAG_MODEL, TAG_TRIGGER, partition_key
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetVersion, Evaluation, RewardEntry
from pipeline.demo.churn_data import churn_rows
from pipeline.models.definitions import demo_definition
from pipeline.models.registry import register_model
from pipeline.store.objectstore import LocalObjectStore
from tests.assets.test_dagster_ui import GraphQL, create_instance_storage, entries
from tests.cli.test_dev_command import free_port
from tests.conftest import TEST_ADMIN_TOKEN, TEST_JWT_SECRET
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest
from tests.support.processes import stop_groups

ROOT = Path(__file__).resolve().parents[2]
RUN_SECONDS = 300
ASSETS = ["dataset_version", "quality_report", "pii_report", "integrity_report", "evaluation",
          "rewards"]  # fmt: skip
CHECKS = {
    "dataset_version": ["readable"],
    "quality_report": ["quality_thresholds"],
    "pii_report": ["no_pii"],
    "integrity_report": ["no_benchmark_copies", "new_rows", "labels_consistent"],
    "evaluation": ["improves_model"],
}
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""
BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}
"""
BACKFILL_STATUS = """
query BackfillStatus($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    ... on PartitionBackfill { status runs(limit: 50) { runId status tags { key value } } }
  }
}
"""
TERMINATE = """
mutation Terminate($runId: String!) {
  terminateRun(runId: $runId) { __typename }
}
"""
REEXECUTE = """
mutation Reexecute($params: ReexecutionParams!) {
  launchPipelineReexecution(reexecutionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
  }
}
"""
RUN = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run { status startTime endTime tags { key value } }
  }
}
"""
LOGS = """
query Logs($runId: ID!) {
  logsForRun(runId: $runId, limit: 2000) {
    ... on EventConnection { events { __typename ... on MessageEvent { message } } }
  }
}
"""


@dataclass
class Dagster:
    gql: GraphQL
    db: Database
    store: LocalObjectStore
    home: Path

    def add_partitions(self, keys: list[str]) -> None:
        """Register the keys as the UI's "Add partition" would.

        The daemon's arrival sensor registers the same keys when it sees the versions, so
        either side may win: a key the sensor added first is not an error here.
        """
        import dagster as dg
        from sqlalchemy.exc import IntegrityError

        with dg.DagsterInstance.from_config(str(self.home)) as instance:
            for key in keys:
                if instance.has_dynamic_partition("dataset_versions", key):
                    continue
                # The sensor may add it between the check and the insert.
                with contextlib.suppress(IntegrityError):
                    instance.add_dynamic_partitions("dataset_versions", [key])
            assert all(instance.has_dynamic_partition("dataset_versions", k) for k in keys)

    def materialize(self, key: str, assets: list[str] = ASSETS) -> str:
        """What the UI's "Materialize" sends: the implicit asset job, the partition's tag only."""
        params = {
            "mode": "default",
            "runConfigData": "{}",
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": key}]},
            "selector": {
                "repositoryLocationName": "marketplace",
                "repositoryName": "__repository__",
                "pipelineName": "__ASSET_JOB",
                "assetSelection": [{"path": [a]} for a in assets],
                "assetCheckSelection": [
                    {"assetKey": {"path": [a]}, "name": c}
                    for a in assets
                    for c in CHECKS.get(a, [])
                ],
            },
        }
        launched = self.gql(LAUNCH, params=params)["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return str(launched["run"]["runId"])

    def run(self, run_id: str) -> dict[str, Any]:
        run = dict(self.gql(RUN, runId=run_id)["runOrError"])
        run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        return run

    def wait(self, run_id: str, until: set[str] = FINISHED) -> dict[str, Any]:
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            run = self.run(run_id)
            if run["status"] in until:
                return run
            time.sleep(1)
        pytest.fail(f"run {run_id} still {run['status']}:\n{self.log_tail()}")

    def messages(self, run_id: str) -> list[str]:
        events = self.gql(LOGS, runId=run_id)["logsForRun"]["events"]
        return [e.get("message") or "" for e in events]

    def log_tail(self) -> str:
        return "".join(
            (self.home / name).read_text(errors="replace")[-2000:]
            for name in ("daemon.log", "webserver.log")
        )


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def dagster(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Dagster]:
    """A webserver and a daemon on one instance and one marketplace store, for the module."""
    root = tmp_path_factory.mktemp("dagster-ui-actions")
    shutil.copyfile(sqlite_template, root / "marketplace.db")
    settings = Settings(
        marketplace_data_dir=root / "data",
        database_url=f"sqlite:///{root / 'marketplace.db'}",
        jwt_secret=SecretStr(TEST_JWT_SECRET),
        admin_token=SecretStr(TEST_ADMIN_TOKEN),
    )
    home = root / "dagster_home"
    home.mkdir()
    config = yaml.safe_load((ROOT / "dagster.yaml").read_text())
    config["run_coordinator"]["config"] = {"dequeue_interval_seconds": 1}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    create_instance_storage(home)  # the webserver and the daemon start together
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MARKETPLACE_DATA_DIR": str(settings.marketplace_data_dir),
        "DATABASE_URL": settings.resolved_database_url,
        "EVALUATION_DEBOUNCE_WINDOW_SECONDS": str(365 * 24 * 3600),
        # Not what these tests are about, and the slowest step of a run (tests/checks cover it).
        "ENABLE_PII_DETECTION": "false",
        "PYTHONUNBUFFERED": "1",
    }
    port = free_port()
    webserver = str(Path(sys.executable).with_name("dagster-webserver"))
    web = _start([webserver, "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
                  env, home / "webserver.log")  # fmt: skip
    # Dagster's own daemon, its backfill loop waking every 5 s instead of 30 (see the module).
    daemon = _start([sys.executable, "-m", "tests.support.dagster_daemon", "run", "-w",
                     "workspace.yaml"], env, home / "daemon.log")  # fmt: skip
    db = Database.from_settings(settings)
    try:
        gql = GraphQL(f"http://127.0.0.1:{port}", home)
        gql.wait_for_code_location()
        yield Dagster(gql, db, LocalObjectStore(settings.objects_dir), home)
    finally:
        stop_groups([daemon, web])
        db.dispose()


def new_model(dagster: Dagster, name: str) -> int:
    with dagster.db.session() as session:
        return register_model(session, demo_definition().model_copy(update={"name": name})).id


def ledger(db: Database, model_id: int) -> list[tuple[str, float]]:
    with db.session() as session:
        rows = session.execute(
            select(RewardEntry.contribution_id, RewardEntry.tokens).where(
                RewardEntry.model_id == model_id
            )
        ).all()
    return sorted((str(c), float(t)) for c, t in rows)


def evaluations(db: Database, model_id: int) -> list[Evaluation]:
    with db.session() as session:
        return list(
            session.scalars(
                select(Evaluation)
                .where(Evaluation.model_id == model_id)
                .order_by(Evaluation.created_at)
            )
        )


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def materialize_all(dagster: Dagster, keys: list[str]) -> dict[str, Any]:
    """What the UI's "Materialize all" sends: an asset backfill of every asset and partition;
    the backfill once it is no longer in progress."""
    launched = dagster.gql(
        BACKFILL,
        params={
            "assetSelection": [{"path": [a]} for a in ASSETS],
            "partitionNames": keys,
            "fromFailure": False,
            "tags": [],
        },
    )["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    status: dict[str, Any] = {}
    deadline = time.monotonic() + RUN_SECONDS * 2
    while time.monotonic() < deadline:
        status = dagster.gql(BACKFILL_STATUS, id=launched["backfillId"])["partitionBackfillOrError"]
        if status["status"] != "REQUESTED":
            break
        time.sleep(2)
    return status


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dagster-processes")]


def test_ui_launches_of_one_model_run_one_at_a_time_and_pay_once_then_materialize_all(
    dagster: Dagster,
) -> None:
    model = new_model(dagster, "churn-ui-launches")
    db, store = dagster.db, dagster.store
    _, bench = add_benchmark(db, store, model_id=model)
    jobs = [
        contribute(db, store, model_id=model, seed=40 + i, with_manifest=manifest(WALLET_A))
        for i in range(3)
    ]
    versions = [bench, *(v for _, v in jobs)]
    keys = [partition_key(model, v) for v in versions]
    dagster.add_partitions(keys)

    # Two operators press "Materialize" at once, on v3 and on v4 (the sensor is quiet).
    first = dagster.materialize(keys[2])
    second = dagster.materialize(keys[3])
    runs = [dagster.wait(first), dagster.wait(second)]

    for run in runs:
        assert run["status"] == "SUCCESS", dagster.log_tail()
        assert run["tags"][TAG_MODEL] == str(model)  # the run queue's per-model tag
        assert run["tags"][TAG_TRIGGER] == "manual"
    assert runs[1]["startTime"] >= runs[0]["endTime"]  # one after the other
    valued = [e for e in evaluations(db, model) if e.valuation_id is not None]
    by_run = {e.run_id for e in valued}
    assert by_run == {first, second}
    # The second run measured v4 against the model the first run's acceptances made.
    first_score = {e.score for e in valued if e.run_id == first}
    assert {e.baseline_score for e in valued if e.run_id == second} <= first_score
    paid = ledger(db, model)
    assert len({c for c, _ in paid}) == len(paid)  # one payment per contribution
    for job_id, _ in jobs:
        row = job(db, job_id)
        assert sum(t for c, t in paid if c == job_id) == pytest.approx(row.tokens or 0.0)

    # Re-materializing v2, which the first run processed inside v3's partition, ends cleanly
    # and writes nothing.
    before = len(evaluations(db, model))
    again = dagster.materialize(keys[1], ["evaluation", "rewards"])
    assert dagster.wait(again)["status"] == "SUCCESS", dagster.log_tail()
    assert len(evaluations(db, model)) == before
    said = "\n".join(dagster.messages(again))
    assert f"nothing to evaluate for {versions[1]}: {versions[1]} was " in said
    assert f"in run {first}" in said
    assert "FileNotFoundError" not in said and f"model {model}: paid" not in said
    assert f"model {model}: nothing paid in this run" in said
    [shown] = [
        e for e in dagster.gql.materializations("evaluation", keys[1]) if e["runId"] == again
    ]
    assert entries(shown)["score"]["floatValue"] > 0  # the version keeps its figures

    # "Materialize all": every partition of every asset, as an asset backfill.
    status = materialize_all(dagster, keys)
    assert status["status"] == "COMPLETED_SUCCESS", (status, dagster.log_tail())
    assert len(status["runs"]) == len(keys)
    for run in status["runs"]:
        assert run["status"] == "SUCCESS"
        assert {t["key"]: t["value"] for t in run["tags"]}[TAG_MODEL] == str(model)
    assert ledger(db, model) == paid  # nothing new paid
    rescored = [e for e in evaluations(db, model)[before:] if e.valuation_id is None]
    assert len(rescored) <= 1  # the model as it stands is scored once, not once per partition


def test_a_canceled_runs_reexecution_checks_the_version_for_real(dagster: Dagster) -> None:
    model = new_model(dagster, "churn-ui-cancel")
    db, store = dagster.db, dagster.store
    _, bench = add_benchmark(db, store, model_id=model)
    job_id, version = contribute(
        db, store, churn_rows(1000, seed=77), model_id=model, with_manifest=manifest(WALLET_A)
    )
    keys = [partition_key(model, v) for v in (bench, version)]
    dagster.add_partitions(keys)

    parent = dagster.materialize(keys[1])
    wait_for(lambda: job(db, job_id).claimed_by == parent, RUN_SECONDS, "the run's claim")
    dagster.gql(TERMINATE, runId=parent)
    assert dagster.wait(parent)["status"] == "CANCELED", dagster.log_tail()

    launched = dagster.gql(REEXECUTE, params={"parentRunId": parent, "strategy": "ALL_STEPS"})
    child = launched["launchPipelineReexecution"]["run"]["runId"]
    run = dagster.wait(child)
    assert run["status"] == "SUCCESS", dagster.log_tail()
    assert run["tags"][TAG_TRIGGER] == "manual" and run["tags"][TAG_MODEL] == str(model)

    row = job(db, job_id)
    assert row.status in ("rewarded", "rejected") and row.claimed_by == child  # taken over
    # Every check result the version shows is a judgment of the re-execution, which checked
    # it again: no check passes a version it did not look at.
    judged = 0
    for asset, names in CHECKS.items():
        for name in names:
            results = [
                e
                for e in dagster.gql.check_executions(asset, name, keys[1])
                if e["status"] in ("SUCCEEDED", "FAILED")
            ]
            if not results:
                continue
            judged += 1
            latest = results[0]
            assert latest["runId"] == child, (name, latest)
            described = latest["evaluation"]["description"] or ""
            assert not described.startswith("passed in run"), (name, described)
    assert judged >= 1
    assert dagster.gql.check_executions("dataset_version", "readable", keys[1])[0]["runId"] == child


def test_a_rejected_version_shows_the_check_that_rejected_it(dagster: Dagster) -> None:
    model = new_model(dagster, "churn-ui-rejected")
    db, store = dagster.db, dagster.store
    _, bench = add_benchmark(db, store, model_id=model)
    bad_id, bad = contribute(db, store, churn_rows(30, seed=9), model_id=model)
    keys = [partition_key(model, v) for v in (bench, bad)]
    dagster.add_partitions(keys)

    rejected_in = dagster.materialize(keys[1])  # the benchmark goes on: the run succeeds
    assert dagster.wait(rejected_in)["status"] == "SUCCESS", dagster.log_tail()
    reason = job(db, bad_id).reason or ""
    assert reason.startswith("quality checks failed")

    again = dagster.materialize(keys[1])  # an operator re-runs the red partition
    assert dagster.wait(again)["status"] == "SUCCESS", dagster.log_tail()

    red = dagster.gql.check_statuses("quality_report", "quality_thresholds")
    assert keys[1] in red["failedPartitions"]
    [latest, *_] = dagster.gql.check_executions("quality_report", "quality_thresholds", keys[1])
    assert latest["evaluation"]["description"] == reason
    assert {e["label"]: e for e in latest["evaluation"]["metadataEntries"]}["decided_in_run"][
        "text"
    ] == rejected_in
    assert (
        keys[1] in dagster.gql.check_statuses("dataset_version", "readable")["succeededPartitions"]
    )
    for asset, name in (("pii_report", "no_pii"), ("integrity_report", "new_rows"),
                        ("evaluation", "improves_model")):  # fmt: skip
        statuses = dagster.gql.check_statuses(asset, name)
        assert keys[1] not in statuses["succeededPartitions"] + statuses["failedPartitions"]
    for asset in ("evaluation", "rewards"):  # not green
        assert keys[1] not in dagster.gql.materialized_partitions(asset)
    with db.session() as session:
        assert (
            session.scalar(
                select(func.count())
                .select_from(Contribution)
                .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
                .where(DatasetVersion.model_id == model, Contribution.status == "rejected")
            )
            == 1
        )
