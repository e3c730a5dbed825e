"""One run at a time values and pays a model (issue 22): the model claim, on both backends.

Dagster's run queue serializes a model's runs; these tests are about the two runs that slip
through anyway. A run takes the model's claim before it claims versions; another run waits for
it, takes it over when its holder ended or its lease passed, and a run that lost its claim
records no valuation and pays nothing. A re-execution adopts the jobs of its ended parent; jobs
of other ended runs go back to the queue (a strike only when the run failed).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import (
    QUEUED,
    VALIDATING,
    Contribution,
    Evaluation,
    ModelClaim,
    RewardEntry,
    utcnow,
)
from pipeline.evaluation.claims import claim_run_batch
from pipeline.evaluation.model_claims import (
    ModelBusy,
    acquire_model,
    model_holder,
    release_model,
)
from pipeline.rewards.batch_scoring import evaluate_batch
from pipeline.rewards.payouts import pay_batch
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import WALLET_A, add_benchmark, contribute, job, manifest

LEASE = 600


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def no_wait(db: Database, claim: str, **kwargs: Any) -> Any:
    return acquire_model(db, 1, claim, LEASE, wait_seconds=0, **kwargs)


def test_one_run_holds_a_model_and_the_next_waits_for_it(db: Database) -> None:
    assert no_wait(db, "run-a").taken_from is None
    assert no_wait(db, "run-a").claim == "run-a"  # holding it again is harmless
    waited: list[str] = []
    with pytest.raises(ModelBusy, match="held by run run-a"):
        acquire_model(
            db, 1, "run-b", LEASE, wait_seconds=0.05, on_wait=waited.append, sleep=lambda _: None
        )
    assert waited == ["run-a"]
    assert release_model(db, 1, "run-b") == 0  # only the holder releases
    assert release_model(db, 1, "run-a") == 1
    assert no_wait(db, "run-b").claim == "run-b"
    assert model_holder(db, 1) == "run-b"


def test_a_claim_is_taken_over_when_its_holder_ended_or_its_lease_passed(db: Database) -> None:
    no_wait(db, "run-a")
    hold = no_wait(db, "run-b", ended={"run-a": "canceled"}.get)
    assert (hold.taken_from, hold.why) == ("run-a", "canceled")
    with db.session() as session:
        session.execute(update(ModelClaim).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    hold = no_wait(db, "run-c")
    assert (hold.taken_from, hold.why) == ("run-b", "its lease expired")


def test_a_run_that_lost_the_model_records_no_valuation_and_pays_nothing(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    job_id, version = contribute(db, store, seed=40, with_manifest=manifest(WALLET_A))
    stale = claim_run_batch(svc, 1, version, trigger="manual", run_id="run-a", ended=lambda _: None)
    assert stale.model_held and [i.contribution_id for i in stale.contributions()] == [job_id]
    # run-a stalls; its lease passes and run-b takes the model over.
    with db.session() as session:
        session.execute(update(ModelClaim).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    no_wait(db, "run-b")

    outcomes = evaluate_batch(svc, stale)  # what run-a computed is not written
    assert pay_batch(svc, 1, outcomes, claim=stale.claim, strict=True) == []
    row = job(db, job_id)
    assert row.status == QUEUED and "no longer holds model 1" in (row.reason or "")
    with db.session() as session:
        valued = session.scalar(
            select(func.count()).select_from(Evaluation).where(Evaluation.run_id == "run-a")
        )
        paid = session.scalar(select(func.count()).select_from(RewardEntry))
    assert (valued, paid) == (0, 0)


def test_a_reexecution_adopts_its_parents_jobs_and_other_ended_runs_give_theirs_back(
    svc: Services, db: Database, store: LocalObjectStore
) -> None:
    add_benchmark(db, store)
    first_id, first = contribute(db, store, seed=40)
    claim_run_batch(svc, 1, first, trigger="arrival", run_id="parent", ended=lambda _: None)
    release_model(db, 1, "parent")  # the parent was canceled after it claimed
    ended = {"parent": "canceled"}.get

    child = claim_run_batch(
        svc, 1, first, trigger="manual", run_id="child", ended=ended, parents=("parent",)
    )
    assert [i.contribution_id for i in child.contributions()] == [first_id]
    row = job(db, first_id)
    assert (row.status, row.claimed_by, row.expired_claims) == (VALIDATING, "child", 0)
    release_model(db, 1, "child")

    # A run that is not the child of a failed holder gives its jobs back, with a strike.
    second_id, second = contribute(db, store, seed=41)
    with db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id.in_([first_id, second_id]))
            .values(status=VALIDATING, claimed_by="crashed")
        )
    other = claim_run_batch(
        svc, 1, second, trigger="manual", run_id="other", ended={"crashed": "failed"}.get
    )
    assert {i.contribution_id for i in other.contributions()} == {
        first_id,
        second_id,
    }  # claimed again
    for job_id in (first_id, second_id):
        row = job(db, job_id)
        assert (row.status, row.claimed_by, row.expired_claims) == (VALIDATING, "other", 1)
