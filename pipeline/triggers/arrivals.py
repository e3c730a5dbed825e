"""Recording dataset arrivals (spec §6): each stored data object once, with its version row.

Which keys are arrivals is `pipeline.triggers.arrival_keys`; a key whose model does not exist
is logged and dropped. Draining the queue is `pipeline.triggers.drain`, debouncing
`pipeline.triggers.debounce`.

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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.core.db import Database
from pipeline.core.tables import EXTERNAL_VERSION, DatasetArrival, DatasetVersion, Model
from pipeline.rewards.manifests import InvalidManifest, read_version_manifest
from pipeline.store.objectstore import ObjectStore, sha256_file
from pipeline.store.queue import ObjectArrival
from pipeline.triggers.arrival_keys import DatasetObjectKey, parse_dataset_key

log = logging.getLogger(__name__)

# How long an object without its database row may be an API upload whose commit is in flight.
INFLIGHT_GRACE_SECONDS = 300
# Deferred messages come back after this long at most (SQS visibility timeout).
MAX_DEFER_SECONDS = 60
# Local objects are hashed when recorded as external only up to this size.
LOCAL_HASH_MAX_BYTES = 64 * 1024 * 1024


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
    if version.object_key != key:
        return ArrivalOutcome(
            Outcome.DROPPED, key, f"version {parsed.version} already holds {version.object_key}"
        )
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


@dataclass(frozen=True)
class _Arrival:
    """One object-created event being recorded, with what recording it needs."""

    obj: ObjectArrival
    parsed: DatasetObjectKey
    source: str
    now: datetime

    @property
    def key(self) -> str:
        return self.obj.key


def _with_version_row(session: Session, arrival: _Arrival) -> ArrivalOutcome | None:
    """Decided by the database: a duplicate, a drop, or recorded against the existing version
    row; None when the version has no row yet."""
    known = _known(session, arrival.parsed, arrival.key)
    if known is not None:
        return known
    version = _version_row(session, arrival.parsed)
    if version is None:
        return None
    return _arrival_row(session, arrival.parsed, arrival.key, version, arrival.source, arrival.now)


def _claim_number(session: Session, parsed: DatasetObjectKey) -> bool:
    """Raise the model's last_version to the object's number; True when the API had not
    allocated it (then the object cannot be an in-flight upload)."""
    claimed = session.execute(  # type: ignore[attr-defined]
        update(Model)
        .where(Model.id == parsed.model_id, Model.last_version < parsed.version_number)
        .values(last_version=parsed.version_number)
    ).rowcount
    return bool(claimed)


def _external_version(
    session: Session,
    store: ObjectStore,
    arrival: _Arrival,
    facts: ObjectFacts,
    manifest: dict[str, Any] | None,
) -> DatasetVersion:
    """The `kind="external"` row of an object dropped into the store directly."""
    parsed, key = arrival.parsed, arrival.key
    version = DatasetVersion(
        model_id=parsed.model_id,
        version=parsed.version,
        version_number=parsed.version_number,
        kind=EXTERNAL_VERSION,
        object_key=key,
        uri=store.uri(key),
        file_format=parsed.file_format,
        sha256=facts.sha256,
        size_bytes=facts.size_bytes if facts.size_bytes is not None else arrival.obj.size_bytes,
        manifest=manifest,
        created_at=arrival.now,
    )
    session.add(version)
    session.flush()
    log.info("recorded external dataset version %s", key)
    return version


def _record_without_row(
    db: Database, store: ObjectStore, arrival: _Arrival, grace_seconds: int
) -> ArrivalOutcome:
    """An object whose version had no row: external, deferred (an upload's commit may be in
    flight) or dropped (gone); a concurrent writer may have recorded it meanwhile."""
    # The object is looked at outside any transaction.
    facts = object_facts(store, arrival.key)
    if facts is None:
        return ArrivalOutcome(Outcome.DROPPED, arrival.key, "object no longer exists")
    now = arrival.now
    age = (now - facts.last_modified).total_seconds() if facts.last_modified else grace_seconds
    manifest = read_manifest(store, arrival.parsed.model_id, arrival.parsed.version)
    with db.session() as session:
        decided = _with_version_row(session, arrival)
        if decided is not None:
            return decided
        if not _claim_number(session, arrival.parsed):
            # The update waited for any concurrent claim, so look again: another delivery of
            # this same message, or the API's commit, may just have landed.
            decided = _with_version_row(session, arrival)
            if decided is not None:
                return decided
            if age < grace_seconds:
                return ArrivalOutcome(
                    Outcome.DEFERRED,
                    arrival.key,
                    "no dataset version row yet (upload commit in flight?)",
                    retry_after=max(1, min(int(grace_seconds - age) + 1, MAX_DEFER_SECONDS)),
                )
        version = _external_version(session, store, arrival, facts, manifest)
        return _arrival_row(session, arrival.parsed, arrival.key, version, arrival.source, now)


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
    arrival = _Arrival(obj, parsed, source, now)
    try:
        with db.session() as session:
            decided = _with_version_row(session, arrival)
            if decided is not None:
                return decided
        return _record_without_row(db, store, arrival, grace_seconds)
    except IntegrityError:
        # A concurrent writer got there first: another delivery of this message (then this one
        # is a duplicate), or the API's commit (then look again soon).
        with db.session() as session:
            if session.scalar(select(DatasetArrival.id).where(DatasetArrival.object_key == key)):
                return ArrivalOutcome(Outcome.DUPLICATE, key, "recorded by a concurrent delivery")
        return ArrivalOutcome(Outcome.DEFERRED, key, "concurrent write", retry_after=5)
