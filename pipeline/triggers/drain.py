"""Draining the arrival queue: each message's objects recorded, then the message deleted.

A message is deleted only once every object it announces is recorded (or was never to be
recorded: not an arrival, or an arrival that cannot be); an object that is not decidable yet
defers the whole message (it comes back later). Malformed messages and test events are logged
and deleted. A message whose handling raises (store or database trouble) stays on the queue.
Redelivery is harmless: recording is idempotent (`pipeline.triggers.arrivals`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from pipeline.core.db import Database
from pipeline.store.objectstore import ObjectStore
from pipeline.store.queue import ArrivalQueue, QueueMessage, parse_arrival_message
from pipeline.triggers.arrivals import (
    INFLIGHT_GRACE_SECONDS,
    ArrivalOutcome,
    Outcome,
    record_arrival,
)

log = logging.getLogger(__name__)


@dataclass
class DrainReport:
    """What one pass over the queue did."""

    received: int = 0
    recorded: list[ArrivalOutcome] = field(default_factory=list)
    duplicates: int = 0
    ignored: int = 0
    dropped: int = 0
    deferred: int = 0
    malformed: int = 0
    empty: int = 0  # test events and messages without object-created records
    failed: int = 0  # raised while handling (store or database trouble): left on the queue

    def summary(self) -> str:
        return (
            f"received={self.received} recorded={len(self.recorded)} "
            f"duplicates={self.duplicates} ignored={self.ignored} dropped={self.dropped} "
            f"deferred={self.deferred} malformed={self.malformed} empty={self.empty} "
            f"failed={self.failed}"
        )


def _delete(queue: ArrivalQueue, message: QueueMessage) -> None:
    try:
        queue.delete(message)
    except Exception:
        # Redelivery is harmless: recording is idempotent.
        log.warning("could not delete arrival message; it will be redelivered", exc_info=True)


def handle_message(
    queue: ArrivalQueue,
    message: QueueMessage,
    db: Database,
    store: ObjectStore,
    report: DrainReport,
    *,
    now: datetime,
    expected_bucket: str | None,
    grace_seconds: int = INFLIGHT_GRACE_SECONDS,
) -> None:
    """Record a message's objects, then delete it, or defer it when one is not decidable yet."""
    try:
        objects = parse_arrival_message(message.body)
    except ValueError as exc:
        log.warning("dropping malformed arrival message: %s", exc)
        report.malformed += 1
        _delete(queue, message)
        return
    if not objects:
        log.info("dropping arrival message without object-created records (e.g. s3:TestEvent)")
        report.empty += 1
        _delete(queue, message)
        return
    retry_after = 0
    for obj in objects:
        outcome = record_arrival(
            db,
            store,
            obj,
            source=queue.source,
            now=now,
            expected_bucket=expected_bucket,
            grace_seconds=grace_seconds,
        )
        if outcome.outcome is Outcome.RECORDED:
            report.recorded.append(outcome)
        elif outcome.outcome is Outcome.DUPLICATE:
            report.duplicates += 1
        elif outcome.outcome is Outcome.IGNORED:
            report.ignored += 1
            log.debug("ignoring %s: %s", outcome.key, outcome.reason)
        elif outcome.outcome is Outcome.DROPPED:
            report.dropped += 1
            log.warning("dropping arrival %s: %s", outcome.key, outcome.reason)
        else:
            report.deferred += 1
            retry_after = max(retry_after, outcome.retry_after or 1)
            log.info("deferring arrival %s: %s", outcome.key, outcome.reason)
    if retry_after:
        try:
            queue.defer(message, retry_after)
        except Exception:
            log.warning("could not defer arrival message", exc_info=True)
    else:
        # Only now: every record of this message is committed (or was never to be recorded).
        _delete(queue, message)


def drain_queue(
    queue: ArrivalQueue,
    db: Database,
    store: ObjectStore,
    *,
    now: datetime,
    max_messages: int,
    time_budget_seconds: float,
    expected_bucket: str | None = None,
    grace_seconds: int = INFLIGHT_GRACE_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> DrainReport:
    """Handle at most `max_messages` messages, stopping once the time budget is spent."""
    report = DrainReport()
    deadline = monotonic() + time_budget_seconds
    seen: set[str] = set()
    while report.received < max_messages and monotonic() < deadline:
        batch = [m for m in queue.receive(max_messages - report.received) if m.handle not in seen]
        if not batch:
            break
        for message in batch:
            seen.add(message.handle)
            report.received += 1
            try:
                handle_message(
                    queue,
                    message,
                    db,
                    store,
                    report,
                    now=now,
                    expected_bucket=expected_bucket,
                    grace_seconds=grace_seconds,
                )
            except Exception:
                # One bad object or a passing outage must not stop the others; the message
                # stays on the queue and is tried again.
                log.exception("arrival message failed; leaving it on the queue")
                report.failed += 1
    return report
