"""Claiming the batch of a run: the pending dataset versions of a model up to a version.

A run for the partition of (`model_id`, `version`) works on a *batch*: every dataset version of
the model up to and including `version` that is not yet processed, in version order, so that
arrivals debounced into one run are all handled. What is pending:

- a contribution version whose job is `queued` (claimed by an atomic `queued → validating`
  update, so two runs never process the same job, with a lease: `pipeline.evaluation.leases`);
- a benchmark version for which no evaluation is recorded yet (a new benchmark re-scores the
  model on it);
- an `external` version (an object that arrived in the store without going through the API)
  is given a contribution job owned by `external` and then handled as a contribution.

A job this claim already holds while `validating` (taken over from a re-executed run,
`pipeline.evaluation.model_claims.adopt_jobs`) is part of the batch too. `claim_run_batch` is
what a Dagster run calls: it first takes the model's claim, so one run at a time works on a
model, and with `claim_new=False` (a step whose run did not claim: a re-execution, a partial
selection) it takes only what the run holds and the benchmarks not yet scored.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import ColumnElement, exists, select
from sqlalchemy.exc import IntegrityError

from pipeline.core.errors import InvalidInput
from pipeline.core.tables import (
    EXTERNAL_VERSION,
    QUEUED,
    VALIDATING,
    BenchmarkSpec,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
    utcnow,
)
from pipeline.evaluation.batches import Batch, VersionItem, version_item
from pipeline.evaluation.jobs import normalize_trigger, transition
from pipeline.evaluation.leases import expire_leases
from pipeline.evaluation.model_claims import (
    EndedFn,
    acquire_model,
    adopt_jobs,
)
from pipeline.evaluation.rescore import rescore_due

if TYPE_CHECKING:
    from pipeline.services import Services

log = logging.getLogger(__name__)

EXTERNAL_SUBMITTER = "external"


def claim_run_batch(
    svc: Services,
    model_id: int,
    version: str,
    *,
    trigger: str | None,
    run_id: str,
    ended: EndedFn,
    parents: tuple[str, ...] = (),
    claim_new: bool = True,
    on_wait: Callable[[str], None] | None = None,
) -> Batch:
    """The batch of run `run_id`, under the model's claim (see the module docstring).

    Waits while another live run holds the model; jobs of ended runs are adopted (from
    `parents`) or given back first.
    """
    _require_model(svc, model_id)
    lease = svc.settings.claim_lease_seconds
    acquire_model(svc.db, model_id, run_id, lease, ended=ended, on_wait=on_wait)
    adopt_jobs(svc.db, model_id, run_id, lease, ended=ended, parents=parents)
    batch = claim_batch(svc, model_id, version, trigger=trigger, run_id=run_id, claim_new=claim_new)
    return replace(batch, model_held=True)


def _require_model(svc: Services, model_id: int) -> None:
    with svc.db.session() as session:
        if session.get(Model, model_id) is None:
            raise InvalidInput(f"model {model_id} not found")


def claim_batch(
    svc: Services,
    model_id: int,
    version: str,
    *,
    trigger: str | None = None,
    run_id: str | None = None,
    claim_new: bool = True,
) -> Batch:
    """Claim every pending version of `model_id` up to `version` (see the module docstring).

    Jobs of the model whose claim expired are given back first, so this run takes them up.
    With `claim_new` false, nothing queued is claimed: the batch is what the claim holds.
    """
    trigger = normalize_trigger(trigger)
    claim = run_id or f"claim-{uuid.uuid4()}"
    _require_model(svc, model_id)
    expire_leases(svc.db, svc.settings.claim_lease_seconds, model_id=model_id)
    target = _find_version(svc, model_id, version)
    up_to: int | None
    with svc.db.session() as session:
        if target is not None:
            up_to = target.version_number
        else:
            up_to = session.scalar(
                select(DatasetVersion.version_number)
                .where(DatasetVersion.model_id == model_id)
                .order_by(DatasetVersion.version_number.desc())
                .limit(1)
            )
    if up_to is None:
        return Batch(model_id, version, trigger, (), rescore=claim_new, run_id=run_id, claim=claim)
    claimed = _held(svc, model_id, claim)
    if claim_new:
        _open_external_jobs(svc, model_id, up_to)
        lease = timedelta(seconds=svc.settings.claim_lease_seconds)
        claimed += _claim_contributions(svc, model_id, up_to, claim, lease)
    items = sorted(
        [*claimed, *_pending_benchmarks(svc, model_id, up_to)],
        key=lambda item: (item.version_number, item.dataset_version_id),
    )
    # A run with nothing pending scores the model as it stands, unless it was scored so since
    # its last change (a backfill of every partition scores it once, not once per partition).
    rescore = trigger == "schedule" or (claim_new and not items and rescore_due(svc.db, model_id))
    log.info(
        "model %s run for %s: versions %s%s",
        model_id,
        version,
        ", ".join(item.version for item in items) or "none pending",
        " and a re-score" if rescore else "",
    )
    return Batch(
        model_id, version, trigger, tuple(items), rescore=rescore, run_id=run_id, claim=claim
    )


def _find_version(svc: Services, model_id: int, version: str) -> DatasetVersion | None:
    """The partition's version row (the arrival sensor records one for every arrival)."""
    with svc.db.session() as session:
        return session.scalar(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id, DatasetVersion.version == version
            )
        )


def _open_external_jobs(svc: Services, model_id: int, up_to: int) -> None:
    """Give every external version without a job a queued contribution job."""
    with svc.db.session() as session:
        orphans = session.scalars(
            select(DatasetVersion).where(
                DatasetVersion.model_id == model_id,
                DatasetVersion.kind == EXTERNAL_VERSION,
                DatasetVersion.version_number <= up_to,
                ~exists().where(Contribution.dataset_version_id == DatasetVersion.id),
            )
        ).all()
    for row in orphans:
        with suppress(IntegrityError), svc.db.session() as session:
            session.add(
                Contribution(
                    model_id=model_id,
                    dataset_version_id=row.id,
                    submitter_id=EXTERNAL_SUBMITTER,
                    status=QUEUED,
                    submitted_rows=row.row_count or 0,
                    benchmark_spec_id=None,
                    # Unique per submitter: a concurrent run cannot open a second job.
                    idempotency_key=f"dataset-version:{row.id}",
                )
            )


def _jobs(
    svc: Services, model_id: int, *conditions: ColumnElement[bool]
) -> list[tuple[str, DatasetVersion]]:
    """The model's contributions that meet `conditions`, with their versions, oldest first."""
    with svc.db.session() as session:
        rows = session.execute(
            select(Contribution.id, DatasetVersion)
            .join(DatasetVersion, Contribution.dataset_version_id == DatasetVersion.id)
            .where(Contribution.model_id == model_id, *conditions)
            .order_by(DatasetVersion.version_number)
        ).all()
    return [(job_id, dv) for job_id, dv in rows]


def _held(svc: Services, model_id: int, claim: str) -> list[VersionItem]:
    """Jobs this claim already holds while `validating` (adopted from a re-executed run)."""
    rows = _jobs(svc, model_id, Contribution.claimed_by == claim, Contribution.status == VALIDATING)
    return [version_item(dv, contribution_id=job_id) for job_id, dv in rows]


def _claim_contributions(
    svc: Services, model_id: int, up_to: int, claim: str, lease: timedelta
) -> list[VersionItem]:
    rows = _jobs(
        svc, model_id, Contribution.status == QUEUED, DatasetVersion.version_number <= up_to
    )
    claimed = []
    for job_id, dv in rows:
        if transition(
            svc.db,
            job_id,
            (QUEUED,),
            VALIDATING,
            reason=None,
            claimed_by=claim,
            lease_expires_at=utcnow() + lease,
        ):
            claimed.append(version_item(dv, contribution_id=job_id))
    return claimed


def _pending_benchmarks(svc: Services, model_id: int, up_to: int) -> list[VersionItem]:
    with svc.db.session() as session:
        rows = session.execute(
            select(BenchmarkSpec.id, DatasetVersion)
            .join(DatasetVersion, BenchmarkSpec.dataset_version_id == DatasetVersion.id)
            .where(
                BenchmarkSpec.model_id == model_id,
                DatasetVersion.version_number <= up_to,
                ~exists().where(Evaluation.dataset_version_id == DatasetVersion.id),
            )
            .order_by(DatasetVersion.version_number)
        ).all()
    return [version_item(dv, benchmark_spec_id=spec_id) for spec_id, dv in rows]
