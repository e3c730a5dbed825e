"""Settled dataset versions: nothing will process them again, so their partitions can go.

Every dataset version is one Dagster partition, and Dagster slows down with the number of
partitions of an asset (docs/scale.md). A version is *settled* once no run will ever work on
it again, and its history is in this database for good:

- a contribution (or external) version: every job of it is final (`rewarded`, `rejected` or
  `failed`: no status moves out of these) and the last move is older than the keep window;
- a benchmark version: its re-score is recorded (an evaluation on it) and older than the
  keep window.

The model's last allocated version is never settled: it is the partition a scheduled re-score
asks for and the one an operator launches by hand. A version that is not in this database
(a partition added by hand) is left alone.

This module knows nothing of Dagster: `assets/partitions.py` asks it which of a page of
partitions are settled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import and_, exists, or_, select
from sqlalchemy.orm import Session

from pipeline.core.tables import (
    BENCHMARK_VERSION,
    FAILED,
    REJECTED,
    REWARDED,
    Contribution,
    DatasetVersion,
    Evaluation,
    Model,
)

FINAL_STATUSES = (REWARDED, REJECTED, FAILED)


def settled_cutoff(now: datetime, keep_hours: int) -> datetime:
    """Versions that settled at or before this time are out of the keep window."""
    return now - timedelta(hours=keep_hours)


def settled_versions(
    session: Session, versions: Iterable[tuple[int, str]], settled_before: datetime
) -> set[tuple[int, str]]:
    """Which of these (model id, version) pairs are settled at or before `settled_before`."""
    by_model: dict[int, set[str]] = defaultdict(set)
    for model_id, version in versions:
        by_model[model_id].add(version)
    if not by_model:
        return set()
    job = Contribution.dataset_version_id == DatasetVersion.id
    final_job = exists().where(
        job, Contribution.status.in_(FINAL_STATUSES), Contribution.updated_at <= settled_before
    )
    # A job still moving, or one that settled inside the window, keeps the version.
    open_job = exists().where(
        job,
        or_(Contribution.status.not_in(FINAL_STATUSES), Contribution.updated_at > settled_before),
    )
    scored_benchmark = and_(
        DatasetVersion.kind == BENCHMARK_VERSION,
        exists().where(
            Evaluation.dataset_version_id == DatasetVersion.id,
            Evaluation.created_at <= settled_before,
        ),
    )
    rows = session.execute(
        select(DatasetVersion.model_id, DatasetVersion.version)
        .join(Model, Model.id == DatasetVersion.model_id)
        .where(
            or_(
                *(
                    and_(DatasetVersion.model_id == model_id, DatasetVersion.version.in_(names))
                    for model_id, names in by_model.items()
                )
            ),
            DatasetVersion.version_number < Model.last_version,
            or_(final_job, scored_benchmark),
            ~open_job,
        )
    )
    return {(model_id, version) for model_id, version in rows}
