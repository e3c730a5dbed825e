"""Contributions valued with the owner's training code, run in the sandbox (docs/sandbox.md).

Domain level, on SQLite and PostgreSQL: a good trainer values and pays a contribution; a
trainer that fails gives the contribution back (`queued`, then `failed`), pays nothing, and
leaves its reason and stderr for the owner only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import (
    FAILED,
    QUEUED,
    REWARDED,
    Evaluation,
    Model,
    RewardEntry,
)
from pipeline.evaluation.leases import requeued_jobs
from pipeline.sandbox.runs import bwrap_path
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest, run_pipeline
from tests.support.trainers import FAILING_TRAINER, GOOD_TRAINER, owner_model

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def test_contribution_is_valued_and_paid_with_the_owners_code(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path
) -> None:
    model_id = owner_model(db, store, tmp_path, GOOD_TRAINER)
    add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == REWARDED, row.reason
    assert row.improvement_pct is not None and row.improvement_pct > 0
    with db.session() as session:
        evaluation = session.scalars(
            select(Evaluation).where(Evaluation.dataset_version_id == row.dataset_version_id)
        ).one()
        paid = session.scalar(select(func.count()).select_from(RewardEntry))
        model = session.get(Model, model_id)
        assert model is not None and model.trainer_failure is None
    assert evaluation.baseline_score is not None
    assert evaluation.score > evaluation.baseline_score
    assert paid == 1


def test_failing_trainer_gives_the_contribution_back_then_fails_it_never_paid(
    svc: Services, db: Database, store: LocalObjectStore, tmp_path: Path
) -> None:
    model_id = owner_model(db, store, tmp_path, FAILING_TRAINER)
    add_benchmark(db, store, model_id=model_id)
    job_id, version = contribute(db, store, model_id=model_id, with_manifest=manifest(WALLET_A))

    first = run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == QUEUED
    assert row.reason is not None
    assert row.reason.startswith("not evaluated: the model's training code failed; not the")
    # Not even the exception's type: its name is the owner's text (issue 34).
    assert "ValueError" not in row.reason
    assert "not the contribution's fault" in row.reason and "queued again" in row.reason
    # The owner's message and stderr are for the owner, never in the contributor's reason.
    assert "secret feature engineering" not in row.reason and "fitting" not in row.reason
    # Given back like a job of a dead run: the arrival sensor requests its retry.
    assert [j.job_id for j in requeued_jobs(db)] == [job_id]
    [outcome] = [o for o in first.evaluations if o.version == version]
    assert outcome.trainer_failure is not None
    assert "my secret feature engineering broke" in outcome.trainer_failure
    with db.session() as session:
        model = session.get(Model, model_id)
        assert model is not None and model.trainer_failure is not None
        assert "ValueError: my secret feature engineering broke" in model.trainer_failure
        assert "last lines of the trainer's stderr" in model.trainer_failure
        assert "fitting 200 rows" in model.trainer_failure

    run_pipeline(svc, version, model_id=model_id)

    row = job(db, job_id)
    assert row.status == FAILED
    assert "given back 2 times, so it is not retried" in (row.reason or "")
    assert row.tokens is None
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(RewardEntry)) == 0
        valued = select(func.count()).select_from(Evaluation)
        assert (
            session.scalar(valued.where(Evaluation.dataset_version_id == row.dataset_version_id))
            == 0
        )
