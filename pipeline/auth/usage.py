"""API key usage: the monthly prediction quota (an atomic upsert per dialect) and last-use times.

The quota counts per key and calendar month (UTC) in `key_usage`; `last_used_at` is written at
most once per interval per key, so a busy key does not cost a write per request.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.core.db import Database
from pipeline.core.errors import RateLimited
from pipeline.core.tables import ApiKey, KeyUsage, utcnow

log = logging.getLogger(__name__)


def billing_month(moment: datetime) -> str:
    """The calendar month (UTC) a use counts towards, as YYYY-MM."""
    return moment.astimezone(UTC).strftime("%Y-%m")


def _next_month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


_COUNT_STATEMENTS: dict[str, Any] = {}


def _count_prediction_statement(db: Database) -> Any:
    """The upsert of `consume_prediction`, built once per dialect (building costs more)."""
    name = db.engine.dialect.name
    statement = _COUNT_STATEMENTS.get(name)
    if statement is None:
        dialect = postgresql if name == "postgresql" else sqlite
        statement = (
            dialect.insert(KeyUsage)
            .values(key_id=bindparam("key_id"), month=bindparam("month"), count=1)
            .on_conflict_do_update(
                index_elements=[KeyUsage.key_id, KeyUsage.month],
                set_={"count": KeyUsage.count + 1},
                where=KeyUsage.count < bindparam("limit"),
            )
            .returning(KeyUsage.count)
        )
        _COUNT_STATEMENTS[name] = statement
    return statement


def consume_prediction(
    db: Database, key_id: str, limit: int, *, now: datetime | None = None
) -> int:
    """Count one prediction for the key this month; RateLimited once `limit` is reached.

    One atomic upsert: INSERT … ON CONFLICT DO UPDATE SET count = count + 1 WHERE count < limit
    RETURNING count. PostgreSQL locks the row and re-checks the WHERE on the latest version;
    SQLite serialises writers; so concurrent callers never push the count past the limit.
    """
    now = now or utcnow()
    if limit > 0:
        params = {"key_id": key_id, "month": billing_month(now), "limit": limit}
        with db.engine.begin() as conn:
            count = conn.execute(_count_prediction_statement(db), params).scalar()
        if count is not None:
            return int(count)
    retry_after = max(1, math.ceil((_next_month_start(now) - now).total_seconds()))
    raise RateLimited(
        f"monthly prediction limit of {limit} reached for this key", retry_after=retry_after
    )


def predictions_this_month(session: Session, key_id: str, *, now: datetime | None = None) -> int:
    usage = session.get(KeyUsage, {"key_id": key_id, "month": billing_month(now or utcnow())})
    return usage.count if usage else 0


class LastUsedRecorder:
    """Writes `last_used_at` at most once per `interval` seconds per key.

    A process skips the write when it wrote for the key within the interval; the UPDATE itself
    only changes a row whose value is older than the interval, so several processes together
    still write about once per interval. `last_used_at` is therefore accurate to `interval`.
    """

    def __init__(self, interval: float = 60.0, clock: Any = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._written: dict[str, float] = {}
        self._lock = threading.Lock()

    def _due(self, key_id: str) -> bool:
        now = self.clock()
        with self._lock:
            last = self._written.get(key_id)
            if last is not None and now - last < self.interval:
                return False
            self._written[key_id] = now
            if len(self._written) > 50_000:
                cutoff = now - self.interval
                self._written = {k: t for k, t in self._written.items() if t >= cutoff}
            return True

    def touch(self, db: Database, key_id: str) -> None:
        if not self._due(key_id):
            return
        now = utcnow()
        stmt = (
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .where(
                ApiKey.last_used_at.is_(None)
                | (ApiKey.last_used_at < now - timedelta(seconds=self.interval))
            )
            .values(last_used_at=now)
        )
        try:
            with db.engine.begin() as conn:
                conn.execute(stmt)
        except Exception as exc:  # best effort: a failed timestamp must not fail the request
            log.warning("could not record last use of key %s: %s", key_id, type(exc).__name__)
