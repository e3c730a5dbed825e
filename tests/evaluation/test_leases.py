"""Claims carry a lease (issue 9 §2): a job claimed by a run that died is not stuck.

A claim records who holds the job and until when; the holder renews it while its process lives.
An expired claim returns the job to `queued` with the reason, a second one marks it `failed`.
Expiry runs at the start of every claim and on every tick of the arrival sensor, which then
requests a run for the jobs given back. The last test SIGKILLs a real process holding a claim.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from sqlalchemy import update

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import EVALUATING, FAILED, QUEUED, VALIDATING, Contribution, utcnow
from pipeline.evaluation.claims import claim_batch
from pipeline.evaluation.jobs import transition
from pipeline.evaluation.leases import LeaseKeeper, expire_leases, renew_leases, requeued_jobs
from pipeline.services import Services
from pipeline.store.objectstore import LocalObjectStore
from tests.support.pipeline import add_benchmark, contribute, job

REPO = Path(__file__).resolve().parents[2]
LEASE = 600  # CLAIM_LEASE_SECONDS' default


@pytest.fixture
def svc(settings: Settings, db: Database, store: LocalObjectStore) -> Iterator[Services]:
    yield Services(settings, db=db, store=store)


def later(seconds: float) -> Any:
    return utcnow() + timedelta(seconds=seconds)


def test_a_claim_records_its_holder_and_lease(svc: Services, db: Database, store: Any) -> None:
    job_id, version = contribute(db, store)
    before = utcnow()
    batch = claim_batch(svc, 1, version, run_id="run-a")
    row = job(db, job_id)
    assert batch.claim == "run-a" and [i.contribution_id for i in batch.items] == [job_id]
    assert (row.status, row.claimed_by, row.expired_claims) == (VALIDATING, "run-a", 0)
    assert row.lease_expires_at is not None
    assert before + timedelta(seconds=LEASE - 5) < row.lease_expires_at < later(LEASE + 5)
    # Without a run id the claim gets an id of its own.
    _, other = contribute(db, store, seed=9)
    assert (claim_batch(svc, 1, other).claim or "").startswith("claim-")


def test_an_expired_claim_is_queued_again_then_failed(
    svc: Services, db: Database, store: Any
) -> None:
    job_id, version = contribute(db, store)
    claim_batch(svc, 1, version, run_id="run-a")
    assert expire_leases(db, LEASE) == []  # a live lease is kept
    assert job(db, job_id).status == VALIDATING

    [first] = expire_leases(db, LEASE, now=later(LEASE + 1))
    row = job(db, job_id)
    assert (first.job_id, first.status, first.version) == (job_id, QUEUED, version)
    assert (row.status, row.claimed_by, row.lease_expires_at, row.expired_claims) == (
        QUEUED,
        None,
        None,
        1,
    )
    assert row.reason == first.reason
    assert "(run-a) stopped while validating" in first.reason
    assert first.reason.endswith("queued again")
    assert expire_leases(db, LEASE, now=later(LEASE + 1)) == []  # nothing held: nothing to do

    claim_batch(svc, 1, version, run_id="run-b")  # the next run takes it back
    assert (job(db, job_id).status, job(db, job_id).claimed_by) == (VALIDATING, "run-b")
    [second] = expire_leases(db, LEASE, now=later(LEASE + 1))
    row = job(db, job_id)
    assert (second.status, row.status, row.expired_claims) == (FAILED, FAILED, 2)
    assert "(run-b) stopped while validating" in (row.reason or "")
    assert "expired 2 times, so it is not retried" in (row.reason or "")
    assert claim_batch(svc, 1, version).items == ()  # failed stays failed


def test_renewal_keeps_a_claim_and_only_the_holders(
    svc: Services, db: Database, store: Any
) -> None:
    job_id, version = contribute(db, store)
    claim_batch(svc, 1, version, run_id="run-a")
    updated = job(db, job_id).updated_at
    assert renew_leases(db, "run-b", 2 * LEASE) == 0
    assert renew_leases(db, "run-a", 2 * LEASE) == 1
    row = job(db, job_id)
    assert row.lease_expires_at is not None and row.lease_expires_at > later(2 * LEASE - 5)
    assert row.updated_at == updated  # a renewal is not a change of the job
    assert expire_leases(db, LEASE, now=later(LEASE + 1)) == []


def test_a_lease_keeper_renews_until_stopped(svc: Services, db: Database, store: Any) -> None:
    job_id, version = contribute(db, store)
    claim_batch(svc, 1, version, run_id="run-k")
    with db.session() as session:  # as if claimed with a three-second lease
        session.execute(
            update(Contribution).where(Contribution.id == job_id).values(lease_expires_at=later(3))
        )
    with LeaseKeeper(db, "run-k", lease_seconds=3):
        time.sleep(4.0)
        assert expire_leases(db, 3) == []
    time.sleep(3.5)
    [expired] = expire_leases(db, 3)
    assert expired.job_id == job_id and expired.status == QUEUED


def test_only_unfinished_work_is_given_back(svc: Services, db: Database, store: Any) -> None:
    """Evaluating before the evaluation is recorded: given back. Recorded: the next run pays it."""
    scoring, _ = contribute(db, store, seed=1)
    recorded, version_b = contribute(db, store, seed=2)
    claim_batch(svc, 1, version_b, run_id="run-a")
    for job_id in (scoring, recorded):
        assert transition(db, job_id, (VALIDATING,), EVALUATING)
    with db.session() as session:
        session.execute(
            update(Contribution).where(Contribution.id == recorded).values(improvement_pct=3.2)
        )
    expired = expire_leases(db, LEASE, now=later(LEASE + 1))
    assert [(e.job_id, e.status) for e in expired] == [(scoring, QUEUED)]
    assert "stopped while evaluating" in expired[0].reason
    assert job(db, recorded).status == EVALUATING


def test_a_claim_from_before_leases_counts_from_its_last_update(
    svc: Services, db: Database, store: Any
) -> None:
    job_id, version = contribute(db, store)
    claim_batch(svc, 1, version)
    with db.session() as session:
        session.execute(
            update(Contribution)
            .where(Contribution.id == job_id)
            .values(claimed_by=None, lease_expires_at=None, updated_at=later(-LEASE - 60))
        )
    [expired] = expire_leases(db, LEASE)
    assert expired.status == QUEUED and "an earlier run" in expired.reason


def test_a_new_claim_takes_back_the_models_dead_claims_at_once(
    make_settings: Any, db: Database, store: Any
) -> None:
    svc = Services(make_settings(claim_lease_seconds=60), db=db, store=store)
    job_id, version = contribute(db, store)
    claim_batch(svc, 1, version, run_id="dead-run")
    with db.session() as session:
        session.execute(
            update(Contribution).where(Contribution.id == job_id).values(lease_expires_at=later(-1))
        )
    batch = claim_batch(svc, 1, version, run_id="next-run")
    assert [i.contribution_id for i in batch.items] == [job_id]
    row = job(db, job_id)
    assert (row.status, row.claimed_by, row.expired_claims) == (VALIDATING, "next-run", 1)


# --- the arrival sensor -----------------------------------------------------------------------


def test_the_arrival_sensor_gives_back_dead_claims_and_requests_one_run(
    settings: Settings, db: Database, store: Any, svc: Services
) -> None:
    from assets.partitions import TAG_VERSIONS
    from sensors.arrivals import make_arrival_sensor
    from sensors.resources import SENSOR_STORE, SensorStore

    first, v1 = contribute(db, store, seed=1)
    second, v2 = contribute(db, store, seed=2)
    claim_batch(svc, 1, v2, run_id="dead-run")
    clock_now = later(LEASE + 1)
    sensor = make_arrival_sensor(clock=lambda: clock_now)
    sensor_store = SensorStore.from_settings(settings, evaluation_debounce_window_seconds=3600)

    instance = dg.DagsterInstance.ephemeral()

    def tick() -> Sequence[dg.RunRequest]:
        """The run requests of one sensor tick."""
        with dg.build_sensor_context(
            instance=instance, resources={SENSOR_STORE: sensor_store}
        ) as context:
            result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        assert result.run_requests is not None
        return result.run_requests

    retries = [r for r in tick() if (r.run_key or "").startswith("retry-")]
    assert len(retries) == 1
    [retry] = retries
    assert retry.partition_key == f"1__{v2}" and retry.tags[TAG_VERSIONS] == f"{v1},{v2}"
    assert {job(db, first).status, job(db, second).status} == {QUEUED}
    assert [j.job_id for j in requeued_jobs(db)] == [first, second]
    # The next tick asks for the same run: Dagster drops a repeated run_key.
    again = [r for r in tick() if (r.run_key or "").startswith("retry-")]
    assert [r.run_key for r in again] == [retry.run_key]
    claim_batch(svc, 1, v2, run_id="retry-run")
    assert not [r for r in tick() if (r.run_key or "").startswith("retry-")]
    instance.dispose()


def test_assets_claim_under_the_dagster_run_id(
    settings: Settings, db: Database, store: Any
) -> None:
    from assets import ASSETS
    from assets.partitions import PARTITIONS_DEF_NAME, TAG_TRIGGER, partition_key
    from assets.resources import MARKETPLACE, MarketplaceResource

    add_benchmark(db, store)
    job_id, version = contribute(db, store)
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(PARTITIONS_DEF_NAME, [partition_key(1, version)])
        result = dg.materialize(
            ASSETS,
            partition_key=partition_key(1, version),
            instance=instance,
            resources={MARKETPLACE: MarketplaceResource.from_settings(settings)},
            tags={TAG_TRIGGER: "arrival"},
            selection=["dataset_version"],
        )
    row = job(db, job_id)
    assert result.success and row.claimed_by == result.run_id
    assert row.lease_expires_at is not None and row.lease_expires_at > utcnow()


# --- a real process, killed ------------------------------------------------------------------

KILL_LEASE = 3  # seconds; renewed every second by the claimer
CLAIMER = textwrap.dedent(
    """
    import sys, time

    sys.path.insert(0, sys.argv[1])
    from pipeline.services import Services
    from pipeline.evaluation.claims import claim_batch
    from pipeline.evaluation.leases import LeaseKeeper
    from pipeline.core.config import load_settings

    settings = load_settings()
    svc = Services(settings)
    batch = claim_batch(svc, 1, sys.argv[2], trigger="arrival", run_id=sys.argv[3])
    LeaseKeeper(svc.db, sys.argv[3], settings.claim_lease_seconds).start()
    print("claimed", len(batch.contributions()), flush=True)
    time.sleep(600)
    """
)


def start_claimer(settings: Settings, version: str, run_id: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DATABASE_URL": settings.resolved_database_url,
        "MARKETPLACE_DATA_DIR": str(settings.data_dir),
        "CLAIM_LEASE_SECONDS": str(KILL_LEASE),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(REPO), version, run_id],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    ready, _, _ = select.select([process.stdout], [], [], 120)
    line = process.stdout.readline() if ready else "(no answer in 120 s)"
    if line.strip() != "claimed 1":
        process.kill()
        raise AssertionError(f"the claimer did not claim: {line!r} {process.stderr.read()!r}")
    return process


def wait_for_expiry(db: Database) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        expired = expire_leases(db, KILL_LEASE)
        if expired:
            return expired
        time.sleep(0.25)
    raise AssertionError("the dead claim never expired")


def test_a_sigkilled_claimer_gives_its_job_back_then_fails_it(
    settings: Settings, db: Database, store: Any
) -> None:
    job_id, version = contribute(db, store)
    processes = []
    try:
        first = start_claimer(settings, version, "run-killed-1")
        processes.append(first)
        assert job(db, job_id).claimed_by == "run-killed-1"
        time.sleep(KILL_LEASE + 1)  # longer than the lease: the live process renews it
        assert expire_leases(db, KILL_LEASE) == []
        assert job(db, job_id).status == VALIDATING

        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        [expired] = wait_for_expiry(db)
        assert expired.status == QUEUED and "(run-killed-1) stopped" in expired.reason
        assert job(db, job_id).status == QUEUED

        second = start_claimer(settings, version, "run-killed-2")
        processes.append(second)
        os.kill(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
        [expired] = wait_for_expiry(db)
        row = job(db, job_id)
        assert (expired.status, row.status, row.expired_claims) == (FAILED, FAILED, 2)
        assert "(run-killed-2) stopped while validating" in (row.reason or "")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
