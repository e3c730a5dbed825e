"""Recorded arrivals as rows: the pending ones, the run a released batch fed, the API listing.

The listing shows a key only the arrivals of models it acts for the owner of (the rule of
docs/ownership.md; the operator's own keys see every model), and never a server path: the
local store's `file://` URIs are shown as object keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.core.tables import DatasetArrival, Model, isoformat_utc
from pipeline.models.registry import owned_models_clause
from pipeline.store.objectstore import public_uri


@dataclass(frozen=True)
class PendingArrival:
    model_id: int
    version: str
    received_at: datetime


def pending_arrivals(session: Session, limit: int) -> list[PendingArrival]:
    """Recorded arrivals no run has been requested for yet, oldest first."""
    rows = session.execute(
        select(DatasetArrival.model_id, DatasetArrival.version, DatasetArrival.received_at)
        .where(DatasetArrival.run_key.is_(None))
        .order_by(DatasetArrival.received_at)
        .limit(limit)
    )
    return [PendingArrival(m, v, r) for m, v, r in rows]


def mark_run_key(session: Session, model_id: int, versions: list[str], run_key: str) -> int:
    """Record which run the arrivals of a released batch fed; returns the rows marked."""
    result = session.execute(
        update(DatasetArrival)
        .where(
            DatasetArrival.model_id == model_id,
            DatasetArrival.version.in_(versions),
            DatasetArrival.run_key.is_(None),
        )
        .values(run_key=run_key)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def list_arrivals(
    session: Session, model_id: int | None, limit: int, *, reader: ArrivalReader | None = None
) -> list[DatasetArrival]:
    """Newest first (received_at, then id for a stable order); only `reader`'s models if given."""
    query = select(DatasetArrival)
    if model_id is not None:
        query = query.where(DatasetArrival.model_id == model_id)
    if reader is not None and not reader.operator:
        owned = select(Model.id).where(owned_models_clause(reader.user_id, reader.key_org_id))
        query = query.where(DatasetArrival.model_id.in_(owned))
    query = query.order_by(DatasetArrival.received_at.desc(), DatasetArrival.id.desc())
    return list(session.scalars(query.limit(limit)))


@dataclass(frozen=True)
class ArrivalReader:
    """Who lists arrivals: a key's user and organization; the operator reads every model's."""

    user_id: str
    key_org_id: str | None
    operator: bool = False


def arrival_view(row: DatasetArrival) -> dict[str, Any]:
    return {
        "id": row.id,
        "model_id": str(row.model_id),
        "version": row.version,
        "object_key": row.object_key,
        "uri": public_uri(row.uri, row.object_key),
        "size_bytes": row.size_bytes,
        "sha256": row.sha256,
        "source": row.source,
        "received_at": isoformat_utc(row.received_at),
        "run_key": row.run_key,
    }
