"""The evaluation asset runs the owner's training code through Dagster Pipes (docs/sandbox.md).

A good trainer's progress lines reach the step's log through Pipes and the contribution is
paid; a failing trainer fails the evaluation step with the reason and the last lines of its
stderr, and the contribution goes back to `queued`, unpaid.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import QUEUED, REWARDED
from pipeline.sandbox.runs import bwrap_path
from pipeline.store.objectstore import LocalObjectStore
from tests.support.dagster_runs import materialize
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest
from tests.support.trainers import FAILING_TRAINER, GOOD_TRAINER, owner_model

pytestmark = [
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed"),
    pytest.mark.parametrize("backend", ["sqlite"]),
]


def step_log(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> str:
    return "\n".join(entry.user_message for entry in instance.all_logs(result.run_id))


def test_trainer_runs_through_pipes_and_the_contribution_is_paid(
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    instance: dg.DagsterInstance,
    tmp_path: Path,
) -> None:
    model_id = owner_model(db, store, tmp_path, GOOD_TRAINER)
    _, bench = add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    result = materialize(settings, instance, model_id, [bench, version])

    assert result.success
    assert job(db, job_id).status == REWARDED
    # The harness's progress, reported through Pipes from inside the sandbox.
    assert "fitting train:fit on 200 rows" in step_log(instance, result)


def test_failing_trainer_fails_the_step_with_its_reason_and_stderr(
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    instance: dg.DagsterInstance,
    tmp_path: Path,
) -> None:
    model_id = owner_model(db, store, tmp_path, FAILING_TRAINER)
    _, bench = add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    result = materialize(settings, instance, model_id, [bench, version])

    assert not result.success
    [failure] = [
        e for e in result.all_events if e.is_step_failure and e.step_key == "evaluation_and_rewards"
    ]
    user_failure = failure.step_failure_data.user_failure_data
    assert user_failure is not None
    description = user_failure.description or ""
    assert "the training code raised ValueError: my secret feature engineering broke" in description
    assert "last lines of the trainer's stderr" in description and "Traceback" in description
    assert job(db, job_id).status == QUEUED
    assert not instance.get_materialized_partitions(dg.AssetKey("rewards"))


# A good trainer that first floods the Pipes messages file of its box with training rows.
FLOODING_TRAINER = (
    GOOD_TRAINER
    + """
import json
import os

_fit = fit


def fit(train, target):
    with open(os.path.join(os.environ["HOME"], "pipes-messages.jsonl"), "a") as fh:
        for n in range(2000):
            message = {"message": f"row {n}: 14.95,18.77,leaked", "level": "INFO"}
            fh.write(json.dumps({"__dagster_pipes_version": "0.1", "method": "log",
                                 "params": message}) + "\\n")
    return _fit(train, target)
"""
)


def test_a_pipes_flood_is_capped_and_keeps_its_text_out_of_the_event_log(
    settings: Settings,
    db: Database,
    store: LocalObjectStore,
    instance: dg.DagsterInstance,
    tmp_path: Path,
) -> None:
    """Issue 34: each trainer line was one Dagster event (20,000 lines, 60,000 events)."""
    model_id = owner_model(db, store, tmp_path, FLOODING_TRAINER)
    _, bench = add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    result = materialize(settings, instance, model_id, [bench, version])

    assert result.success
    assert job(db, job_id).status == REWARDED
    logged = step_log(instance, result)
    assert "fitting train:fit on 200 rows" in logged  # the harness's progress still arrives
    assert "leaked" not in logged and "14.95" not in logged
    assert "Pipes messages or" in logged  # the step says reading stopped, with counts only
    # Two sandboxed runs (without and with the contribution): well below one event per line.
    assert len(instance.all_logs(result.run_id)) < 1000
