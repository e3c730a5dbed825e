"""The composition root: the one place that builds the runtime parts of a process, and start-up.

`Services` holds the settings, database, object store and arrival queue that the API
(`api.app.create_app`), the Dagster resources (`assets.resources`, `sensors.resources`) and the
CLI work with; none of them builds a part itself. Settings are read when a caller builds a
`Services` (from `get_settings()`/`load_settings()`), never at import, so importing the code
location or the app reads no environment. The PII analyzer is not held here: it is one
lazily built instance per process (`pipeline.checks.pii`), loaded on the first scan.

`prepare_store` brings a store up to date on start (data dir, migrations, the demo models), one
process at a time (`pipeline.core.store_lock`); `remove_abandoned_temp_files` removes what a
process that died left behind.
"""

from __future__ import annotations

import logging
import threading
from typing import Self

from pipeline.auth.ratelimit import KeyRateLimiter
from pipeline.auth.verification import KeyVerifier
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.store_lock import store_preparation_lock
from pipeline.core.tempfiles import sweep
from pipeline.intake.receiving import UPLOAD_DIR_PREFIX, upload_tmp_root
from pipeline.models.registry import seed_demo_models
from pipeline.store.objectstore import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    ObjectStore,
    object_store_from_settings,
)
from pipeline.store.queue import ArrivalQueue, arrival_queue_from_settings

log = logging.getLogger(__name__)


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


def prepare_store(settings: Settings) -> None:
    # Alembic (with Mako and Pygments, about 12 MB) is imported here only: an API process,
    # whose store `marketplace serve` prepares in a child, never holds it.
    from pipeline.core.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    # Other processes may be preparing the same store right now (every API replica, `dev` and a
    # CLI command): the first migrates and registers the demo models, the next find it done.
    with store_preparation_lock(url):
        upgrade(url)
        with Services(settings) as services:
            demo = seed_demo_models(services.db, services.store, settings.admin_user_id)
            for model in demo:
                log.info("registered demo model %s as id %s", model.name, model.id)


def remove_abandoned_temp_files(settings: Settings) -> int:
    """Upload temp folders and half-written local objects left by a process that died."""
    removed = sweep(upload_tmp_root(settings), f"{UPLOAD_DIR_PREFIX}*")
    if not settings.uses_s3:
        removed += sweep(settings.objects_dir, f"{TEMP_PREFIX}*{TEMP_SUFFIX}", recursive=True)
    return removed
