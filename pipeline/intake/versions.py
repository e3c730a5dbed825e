"""Writing a new dataset version: the one sequence every writer of data through the API follows.

1. The model's next version number is allocated in its own short transaction, only once the data
   has passed its checks (a refused upload uses no number). A failure later leaves a gap rather
   than reusing a number whose object may already have been announced.
2. The objects are written completely, companions first (a `manifest.json`, the benchmark's
   fingerprints), the data object last: its arrival is what starts the pipeline, and it must
   find its companions there.
3. One transaction adds the `DatasetVersion` row, the writer's own rows (its job or benchmark
   spec) and, on the local backend, the arrival event (on S3 the bucket notification announces
   the object).
4. Any failure after step 1 deletes every object the draft wrote or started to write, so no
   object outlives a rollback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from pipeline.core.db import Database
from pipeline.core.tables import DatasetVersion
from pipeline.models.registry import allocate_version
from pipeline.store.objectstore import ObjectStore, StoredObject, dataset_key
from pipeline.store.queue import enqueue_local_arrival

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionRecord:
    """What the version row records beyond what the store reports about the data object."""

    kind: str  # contribution | benchmark
    file_format: str
    row_count: int
    columns: list[str]
    manifest: dict[str, Any] | None = None


class VersionDraft:
    """A dataset version being written: its number and every object key it has written to."""

    def __init__(self, db: Database, store: ObjectStore, model_id: int) -> None:
        self.db = db
        self.store = store
        self.model_id = model_id
        self.number, self.version = allocate_version(db, model_id)
        self._keys: list[str] = []

    def key(self, filename: str) -> str:
        """The key of a file in this version's folder."""
        return dataset_key(self.model_id, self.version, filename)

    def put_bytes(self, key: str, data: bytes) -> StoredObject:
        self._keys.append(key)  # before the write: a half-written object is deleted too
        return self.store.put_bytes(key, data)

    def put_file(
        self, key: str, path: Path, *, sha256: str | None = None, move: bool = False
    ) -> StoredObject:
        self._keys.append(key)
        return self.store.put_file(key, path, sha256=sha256, move=move)

    @contextmanager
    def recording(
        self, data: StoredObject, record: VersionRecord, *, local_queue: bool
    ) -> Iterator[tuple[Session, DatasetVersion]]:
        """The one transaction: the version row (flushed, so its id is known), then the
        caller's rows in the block, then the arrival event with `local_queue`."""
        with self.db.session() as session:
            dataset = DatasetVersion(
                model_id=self.model_id,
                version=self.version,
                version_number=self.number,
                kind=record.kind,
                object_key=data.key,
                uri=data.uri,
                file_format=record.file_format,
                sha256=data.sha256,
                size_bytes=data.size_bytes,
                row_count=record.row_count,
                columns=record.columns,
                manifest=record.manifest,
            )
            session.add(dataset)
            session.flush()
            yield session, dataset
            if local_queue:
                enqueue_local_arrival(session, data)

    def discard(self) -> None:
        """Delete every object written; a delete that fails is logged, never raised."""
        for key in reversed(self._keys):
            try:
                self.store.delete(key)
            except Exception:  # the original failure matters more; the key is logged
                log.exception("could not delete %s after a failed version write", key)


@contextmanager
def new_dataset_version(db: Database, store: ObjectStore, model_id: int) -> Iterator[VersionDraft]:
    """Allocate the model's next version; on any failure in the block, delete what was written."""
    draft = VersionDraft(db, store, model_id)
    try:
        yield draft
    except BaseException:
        draft.discard()
        raise
