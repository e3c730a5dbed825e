"""The runtime parts of one process or unit of work: settings, database, object store, queue.

`Services` sits below every package that works with it (models, checks, evaluation, rewards,
triggers, intake), so they take it as an argument without importing the composition root
(`pipeline.bootstrap`, which builds it in the entry points: the API's `create_app`, the Dagster
resources and the CLI). Settings are read when a caller builds a `Services`, never at import.
"""

from __future__ import annotations

import logging
import threading
from typing import Self

from pipeline.auth.ratelimit import KeyRateLimiter
from pipeline.auth.verification import KeyVerifier
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.store.objectstore import ObjectStore, object_store_from_settings
from pipeline.store.queue import ArrivalQueue, arrival_queue_from_settings


class Services:
    """Settings, database, object store and arrival queue of one process or one unit of work.

    A part passed in is used as is (tests share one database between several); a part left out
    is built from the settings on first use, so a caller that never touches the queue never
    opens an SQS client. `close()` disposes the database when this object built it.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database | None = None,
        store: ObjectStore | None = None,
        queue: ArrivalQueue | None = None,
        *,
        sqs_wait_seconds: int = 1,
    ) -> None:
        self.settings = settings
        self.sqs_wait_seconds = sqs_wait_seconds
        self._db = db
        self._owns_db = db is None
        self._store = store
        self._queue = queue
        # Parts are built on first use, possibly from a worker thread (the API's thread pool,
        # the lease keeper); one lock keeps two threads from building two engines.
        self._lock = threading.Lock()
        logging.getLogger("pipeline").setLevel(settings.pipeline_log_level)

    @property
    def db(self) -> Database:
        if self._db is None:
            with self._lock:
                if self._db is None:
                    self._db = Database.from_settings(self.settings)
        return self._db

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store = object_store_from_settings(self.settings)
        return self._store

    @property
    def queue(self) -> ArrivalQueue:
        """SQS when DATASET_ARRIVAL_SQS_QUEUE_URL is set, else the embedded queue table."""
        if self._queue is None:
            db = self.db  # outside the lock: building it takes the lock too
            with self._lock:
                if self._queue is None:
                    self._queue = arrival_queue_from_settings(
                        self.settings, db, sqs_wait_seconds=self.sqs_wait_seconds
                    )
        return self._queue

    def key_verifier(self) -> KeyVerifier:
        """A key verifier on this database, with the rate limiter of REDIS_URL (one per app)."""
        return KeyVerifier(self.db, KeyRateLimiter.from_settings(self.settings))

    def close(self) -> None:
        if self._owns_db and self._db is not None:
            self._db.dispose()
            self._db = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
