"""One process at a time prepares a store: its migrations and its demo models.

Several processes prepare one store at once as a matter of course: each API replica's init
container runs `marketplace db upgrade` and its `marketplace serve` then runs `prepare_store`
(deploy/k8s/api.yaml), and locally `marketplace dev` and a CLI command share one SQLite file.
Unserialized, two migrations of an empty database both create `alembic_version` or the same
table and one fails ("already exists", or a unique violation in PostgreSQL's catalog), and two
demo seedings both find no model and one fails on the unique model name. Under
`store_preparation_lock` the next process waits, then finds the schema at head and the models
present, and does nothing.

- PostgreSQL: a session-level advisory lock (`pg_advisory_lock`, fixed key `LOCK_KEY`, per
  database) on a connection of its own, in autocommit so that it is never an open transaction
  while the migrations run on theirs. The server drops it when that session ends, so a process
  that crashed or was killed mid-way never leaves it held.
- SQLite: an exclusive `flock` on a lock file beside the database file (in the data dir by
  default); the kernel drops it when the process ends, however it ends.
- Anything else (an in-memory SQLite): no lock; nothing else can reach that store.

The lock is not re-entrant: a process that nested it would wait for itself. `upgrade` in
`pipeline.core.migrate` takes no lock; its callers (`prepare_store`, `marketplace db upgrade`)
hold this one around it. This module imports no Alembic (the API process must not hold it).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import make_url, text
from sqlalchemy.exc import SQLAlchemyError

from pipeline.core.db import make_engine

log = logging.getLogger(__name__)

# Any fixed 64-bit value, the same in every version of the service: "mktprep" in ASCII.
LOCK_KEY = 0x6D6B7470726570
LOCK_SUFFIX = ".prepare-lock"
WAITING = "another process is preparing the store (migrations, demo models); waiting for it"


@contextmanager
def store_preparation_lock(url: str) -> Iterator[None]:
    """Hold the store's preparation lock (see above) for the database at `url`."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        with _advisory_lock(url):
            yield
    elif backend == "sqlite" and parsed.database and parsed.database != ":memory:":
        with _file_lock(sqlite_lock_path(parsed.database)):
            yield
    else:
        yield


def sqlite_lock_path(database: str) -> Path:
    """The lock file of the SQLite file `database`: beside it, one per database file."""
    path = Path(database).expanduser().resolve()
    return path.with_name(path.name + LOCK_SUFFIX)


@contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    engine = make_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            key = {"key": LOCK_KEY}
            if not conn.scalar(text("SELECT pg_try_advisory_lock(:key)"), key):
                log.info(WAITING)
                conn.execute(text("SELECT pg_advisory_lock(:key)"), key)
            try:
                yield
            finally:
                try:
                    conn.execute(text("SELECT pg_advisory_unlock(:key)"), key)
                except SQLAlchemyError:
                    # The session is gone (server restart, dropped connection), and the
                    # server released its lock with it; the caller's own error, if any, wins.
                    log.warning("could not release the store preparation lock", exc_info=True)
    finally:
        # Closes the connection: the session ends, and with it any lock it still holds.
        engine.dispose()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file is never removed: a process that deleted and recreated it would lock another
    # inode than a process already waiting on the old one, and both would go ahead.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(WAITING)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
