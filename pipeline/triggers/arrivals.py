"""Dataset arrivals (spec §6): which stored objects are arrivals, recording each once, debouncing.

An arrival is a data object under `datasets/{model_id}/v{n}/{file}` (`file` ending in .csv,
.parquet, .pq, .json, .jsonl or .ndjson). Other keys are ignored: `manifest.json` (it describes
the data beside it and is read with it, it is not data), hidden files, unknown extensions, and
version segments other than `v` + a positive number without leading zeros (the form the service
allocates; ordering the versions of a model depends on it). A key whose model does not exist is
logged and dropped.

Recording is idempotent: `dataset_arrivals.object_key` is unique, so a redelivered notification
records nothing new. Every recorded arrival has a `DatasetVersion` row:

- an upload through the API writes its object first and commits its row right after; on S3 the
  notification can come before that commit. The API allocates version numbers up front
  (`models.last_version`), so an object whose version number is above `last_version` cannot be
  an API upload: it was dropped into the store directly, and gets a `kind="external"` row (size
  and sha256 from the object's metadata when S3 has them; `last_version` is raised to its number
  so the API never hands that version out again). An object at or below `last_version` without a
  row is an upload whose commit has not landed yet: while the object is younger than
  `INFLIGHT_GRACE_SECONDS` the message is deferred (left on the queue, retried later); an older
  one is an abandoned or direct write and is recorded as external. An object that no longer exists
  (a failed upload deletes its object) is dropped.

Debounce (`DebounceCursor`), trailing edge: a model's first pending arrival opens a window of
`EVALUATION_DEBOUNCE_WINDOW_SECONDS`; every arrival for that model inside the window joins the
batch; once `now - first_seen >= window` the whole batch is released as ONE evaluation run for the
model's newest version in it. The next arrival opens a new window. A steady stream of arrivals
therefore yields one run per window (latency at most window + one sensor interval) and never
starves, which a "quiet for the whole window" rule would.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.core.db import Database
from pipeline.core.tables import DatasetArrival, DatasetVersion, Model, isoformat_utc
from pipeline.intake.formats import format_of
from pipeline.rewards.manifests import MANIFEST_FILENAME, InvalidManifest, read_version_manifest
from pipeline.store.objectstore import ObjectStore, sha256_file
from pipeline.store.queue import ArrivalQueue, ObjectArrival, QueueMessage, parse_arrival_message

log = logging.getLogger(__name__)

KEY_PATTERN = re.compile(r"^datasets/([1-9][0-9]{0,9})/(v[1-9][0-9]{0,8})/([^/]+)$")
MAX_MODEL_ID = 2**31 - 1
# How long an object without its database row may be an API upload whose commit is in flight.
INFLIGHT_GRACE_SECONDS = 300
# Deferred messages come back after this long at most (SQS visibility timeout).
MAX_DEFER_SECONDS = 60
# Local objects are hashed when recorded as external only up to this size.
LOCAL_HASH_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class DatasetObjectKey:
    model_id: int
    version: str
    version_number: int
    filename: str
    file_format: str


def parse_dataset_key(key: str) -> DatasetObjectKey | None:
    """The data object a key names, or None when the key is not an arrival (see module doc)."""
    match = KEY_PATTERN.match(key)
    if match is None:
        return None
    model, version, filename = match.groups()
    if filename.startswith(".") or filename == MANIFEST_FILENAME:
        return None
    file_format = format_of(filename)
    if file_format is None or int(model) > MAX_MODEL_ID:
        return None
    return DatasetObjectKey(int(model), version, int(version[1:]), filename, file_format)


def version_number(version: str) -> int:
    """`v12` → 12; anything else sorts first."""
    return int(version[1:]) if version[1:].isdigit() else 0


class Outcome(StrEnum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"  # already recorded: a redelivery
    IGNORED = "ignored"  # not an arrival (manifest, other key)
    DROPPED = "dropped"  # an arrival that cannot be recorded (unknown model, object gone)
    DEFERRED = "deferred"  # not decidable yet: leave the message on the queue


@dataclass(frozen=True)
class ArrivalOutcome:
    outcome: Outcome
    key: str
    reason: str = ""
    model_id: int | None = None
    version: str | None = None
    received_at: datetime | None = None
    retry_after: int | None = None


@dataclass(frozen=True)
class ObjectFacts:
    size_bytes: int | None
    sha256: str | None
    last_modified: datetime | None


def object_facts(store: ObjectStore, key: str) -> ObjectFacts | None:
    """Size, sha256 and modification time of a stored object without reading it; None if gone."""
    head: Callable[[str], dict[str, Any] | None] | None = getattr(store, "head", None)
    if head is not None:
        info = head(key)
        if info is None:
            return None
        metadata = info.get("Metadata") or {}
        sha = metadata.get("sha256")
        modified = info.get("LastModified")
        return ObjectFacts(
            size_bytes=int(info["ContentLength"]) if "ContentLength" in info else None,
            sha256=sha if isinstance(sha, str) and len(sha) == 64 else None,
            last_modified=modified.astimezone(UTC) if isinstance(modified, datetime) else None,
        )
    with store.local_path(key) as path:
        if not path.is_file():
            return None
        stat = path.stat()
        return ObjectFacts(
            size_bytes=stat.st_size,
            sha256=sha256_file(path) if stat.st_size <= LOCAL_HASH_MAX_BYTES else None,
            last_modified=datetime.fromtimestamp(stat.st_mtime, UTC),
        )


def read_manifest(store: ObjectStore, model_id: int, version: str) -> dict[str, Any] | None:
    """The `manifest.json` beside a version's data, when there is a small, valid JSON object.

    An unusable file is left out here; the payout reads it again and names its problem.
    """
    try:
        return read_version_manifest(store, model_id, version)
    except InvalidManifest:
        return None


def _arrival_row(
    session: Session,
    parsed: DatasetObjectKey,
    key: str,
    version: DatasetVersion,
    source: str,
    now: datetime,
) -> ArrivalOutcome:
    session.add(
        DatasetArrival(
            model_id=parsed.model_id,
            version=parsed.version,
            object_key=key,
            uri=version.uri,
            size_bytes=version.size_bytes,
            sha256=version.sha256,
            source=source,
            received_at=now,
        )
    )
    session.flush()
    return ArrivalOutcome(
        Outcome.RECORDED, key, "", parsed.model_id, parsed.version, received_at=now
    )


def _version_row(session: Session, parsed: DatasetObjectKey) -> DatasetVersion | None:
    return session.scalar(
        select(DatasetVersion).where(
            DatasetVersion.model_id == parsed.model_id, DatasetVersion.version == parsed.version
        )
    )


def _known(session: Session, parsed: DatasetObjectKey, key: str) -> ArrivalOutcome | None:
    """An outcome decided by the database alone, or None when the object must be looked at."""
    if session.scalar(select(DatasetArrival.id).where(DatasetArrival.object_key == key)):
        return ArrivalOutcome(Outcome.DUPLICATE, key, "already recorded")
    if session.get(Model, parsed.model_id) is None:
        return ArrivalOutcome(Outcome.DROPPED, key, f"model {parsed.model_id} does not exist")
    return None


def record_arrival(
    db: Database,
    store: ObjectStore,
    obj: ObjectArrival,
    *,
    source: str,
    now: datetime,
    expected_bucket: str | None = None,
    grace_seconds: int = INFLIGHT_GRACE_SECONDS,
) -> ArrivalOutcome:
    """Record one object-created event at most once; see the module doc for the rules."""
    key = obj.key
    parsed = parse_dataset_key(key)
    if parsed is None:
        return ArrivalOutcome(Outcome.IGNORED, key, "not a dataset object")
    if expected_bucket is not None and obj.bucket != expected_bucket:
        return ArrivalOutcome(
            Outcome.DROPPED, key, f"bucket {obj.bucket!r} is not the dataset bucket"
        )
    try:
        with db.session() as session:
            known = _known(session, parsed, key)
            if known is not None:
                return known
            version = _version_row(session, parsed)
            if version is not None:
                if version.object_key != key:
                    return ArrivalOutcome(
                        Outcome.DROPPED,
                        key,
                        f"version {parsed.version} already holds {version.object_key}",
                    )
                return _arrival_row(session, parsed, key, version, source, now)

        # No row yet: look at the object itself, outside any transaction.
        facts = object_facts(store, key)
        if facts is None:
            return ArrivalOutcome(Outcome.DROPPED, key, "object no longer exists")
        age = (now - facts.last_modified).total_seconds() if facts.last_modified else grace_seconds
        manifest = read_manifest(store, parsed.model_id, parsed.version)

        with db.session() as session:
            known = _known(session, parsed, key)
            if known is not None:
                return known
            version = _version_row(session, parsed)
            claimed = 0
            if version is None:
                # Claiming the number (raising last_version to it) succeeds only when the API
                # has not allocated it: then the object cannot be an in-flight upload.
                claimed = session.execute(  # type: ignore[attr-defined]
                    update(Model)
                    .where(Model.id == parsed.model_id, Model.last_version < parsed.version_number)
                    .values(last_version=parsed.version_number)
                ).rowcount
                if not claimed:
                    # The update waited for any concurrent claim, so look again: another
                    # delivery of this same message may just have recorded it.
                    known = _known(session, parsed, key)
                    if known is not None:
                        return known
                    version = _version_row(session, parsed)
            if version is None:
                if not claimed and age < grace_seconds:
                    wait = int(grace_seconds - age) + 1
                    return ArrivalOutcome(
                        Outcome.DEFERRED,
                        key,
                        "no dataset version row yet (upload commit in flight?)",
                        retry_after=max(1, min(wait, MAX_DEFER_SECONDS)),
                    )
                version = DatasetVersion(
                    model_id=parsed.model_id,
                    version=parsed.version,
                    version_number=parsed.version_number,
                    kind="external",
                    object_key=key,
                    uri=store.uri(key),
                    file_format=parsed.file_format,
                    sha256=facts.sha256,
                    size_bytes=facts.size_bytes if facts.size_bytes is not None else obj.size_bytes,
                    manifest=manifest,
                    created_at=now,
                )
                session.add(version)
                session.flush()
                log.info("recorded external dataset version %s", key)
            elif version.object_key != key:
                return ArrivalOutcome(
                    Outcome.DROPPED,
                    key,
                    f"version {parsed.version} already holds {version.object_key}",
                )
            return _arrival_row(session, parsed, key, version, source, now)
    except IntegrityError:
        # A concurrent writer got there first: another delivery of this message (then this one
        # is a duplicate), or the API's commit (then look again soon).
        with db.session() as session:
            if session.scalar(select(DatasetArrival.id).where(DatasetArrival.object_key == key)):
                return ArrivalOutcome(Outcome.DUPLICATE, key, "recorded by a concurrent delivery")
        return ArrivalOutcome(Outcome.DEFERRED, key, "concurrent write", retry_after=5)


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


def list_arrivals(session: Session, model_id: int | None, limit: int) -> list[DatasetArrival]:
    """Newest first (received_at, then id for a stable order)."""
    query = select(DatasetArrival)
    if model_id is not None:
        query = query.where(DatasetArrival.model_id == model_id)
    query = query.order_by(DatasetArrival.received_at.desc(), DatasetArrival.id.desc())
    return list(session.scalars(query.limit(limit)))


def arrival_view(row: DatasetArrival) -> dict[str, Any]:
    return {
        "id": row.id,
        "model_id": str(row.model_id),
        "version": row.version,
        "object_key": row.object_key,
        "uri": row.uri,
        "size_bytes": row.size_bytes,
        "sha256": row.sha256,
        "source": row.source,
        "received_at": isoformat_utc(row.received_at),
        "run_key": row.run_key,
    }


# --- Debounce -----------------------------------------------------------------------------------


# Dagster's sensor ticks are about, not exactly, one interval apart: a window that is a whole
# number of intervals may close at the tick after the one it seems to.
TICK_JITTER_SECONDS = 1.0


def run_request_due(first_seen: datetime, window_seconds: float, poll_seconds: float) -> datetime:
    """By when the arrival sensor requests the run of a batch that opened at `first_seen`.

    The batch opens at the tick that recorded its first arrival; the sensor ticks about every
    `poll_seconds` after that and releases the batch at the first tick at least
    `window_seconds` later (the same tick when the window is 0).
    """
    if window_seconds <= 0:
        return first_seen
    ticks = math.ceil((window_seconds + TICK_JITTER_SECONDS) / poll_seconds)
    return first_seen + timedelta(seconds=ticks * poll_seconds)


def batch_run_key(model_id: int, versions: list[str]) -> str:
    """The same model and set of versions always give the same key, so a re-evaluated tick
    requests nothing new; a different batch of the same model gets a different key."""
    ordered = sorted(set(versions), key=version_number)
    digest = hashlib.sha256(",".join(ordered).encode()).hexdigest()[:12]
    return f"arrival-{model_id}-{ordered[-1]}-{digest}"


def _parse_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("time is not a string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass
class PendingBatch:
    """A model's arrivals waiting for the end of their debounce window."""

    first_seen: datetime
    last_seen: datetime
    versions: list[str]

    @property
    def latest(self) -> str:
        return self.versions[-1]


@dataclass
class DebounceCursor:
    """Per-model pending batches; the arrival sensor's cursor (JSON), pure logic, no I/O.

    Trailing edge from the first arrival: a batch is due when `now - first_seen >= window`.
    """

    pending: dict[int, PendingBatch] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str | None) -> DebounceCursor:
        """Parse a cursor; None or "" is empty. ValueError when the text is not a cursor."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
            pending = {}
            for model, batch in data["pending"].items():
                versions = [str(v) for v in batch["versions"]]
                if not versions:
                    continue
                pending[int(model)] = PendingBatch(
                    first_seen=_parse_time(batch["first_seen"]),
                    last_seen=_parse_time(batch["last_seen"]),
                    versions=sorted(set(versions), key=version_number),
                )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a debounce cursor: {exc!r}") from None
        return cls(pending)

    def to_json(self) -> str:
        return json.dumps(
            {
                "pending": {
                    str(model): {
                        "first_seen": isoformat_utc(batch.first_seen),
                        "last_seen": isoformat_utc(batch.last_seen),
                        "versions": batch.versions,
                    }
                    for model, batch in sorted(self.pending.items())
                }
            },
            separators=(",", ":"),
        )

    def contains(self, model_id: int, version: str) -> bool:
        batch = self.pending.get(model_id)
        return batch is not None and version in batch.versions

    def add(self, model_id: int, version: str, seen_at: datetime) -> bool:
        """Add an arrival to its model's batch (opening one if none); False if already there."""
        batch = self.pending.get(model_id)
        if batch is None:
            self.pending[model_id] = PendingBatch(seen_at, seen_at, [version])
            return True
        batch.first_seen = min(batch.first_seen, seen_at)
        batch.last_seen = max(batch.last_seen, seen_at)
        if version in batch.versions:
            return False
        batch.versions = sorted([*batch.versions, version], key=version_number)
        return True

    def due(self, now: datetime, window_seconds: float) -> list[int]:
        """Models whose batch has reached the trailing edge of its window, in id order."""
        return sorted(
            model
            for model, batch in self.pending.items()
            if (now - batch.first_seen).total_seconds() >= window_seconds
        )

    def pop(self, model_id: int) -> PendingBatch:
        return self.pending.pop(model_id)
