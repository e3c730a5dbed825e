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
  that crashed or was killed mid-way never leaves it held. That session turns off every timeout
  a role, a database or the URL may set (`SESSION_TIMEOUTS`): a `lock_timeout` would abort the
  wait, an `idle_session_timeout` would end the idle session, and the lock with it, while the
  holder still migrates. The migrations also take a transaction-level lock of their own
  (`pipeline/core/migrations/env.py`), so that even a lost session (killed by an operator, cut
  by a proxy) never lets two migrations run together, and a demo seeding that loses the race
  on the unique model name finds the other's models (`pipeline.models.registry`).
- SQLite: an exclusive `flock` on a lock file beside the database file (in the data dir by
  default); the kernel drops it when the process ends, however it ends. A `file:` URI
  (`?uri=true`) locks the file it names; an in-memory one takes no lock.
- Anything else (an in-memory SQLite): no lock; nothing else can reach that store.

The lock is not re-entrant: a thread that entered it again for the same store would wait for
itself forever, so it raises RuntimeError instead. `upgrade` in `pipeline.core.migrate` takes no
lock; its callers (`prepare_store`, `marketplace db upgrade`) hold this one around it. This
module imports no Alembic (the API process must not hold it).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import URL, make_url, text
from sqlalchemy.exc import SQLAlchemyError

from pipeline.core.db import make_engine, sqlite_file

log = logging.getLogger(__name__)

# Any fixed 64-bit value, the same in every version of the service: "mktprep" in ASCII.
LOCK_KEY = 0x6D6B7470726570
LOCK_SUFFIX = ".prepare-lock"
WAITING = "another process is preparing the store (migrations, demo models); waiting for it"
# Set to 0 (off) on the lock's session, those this server has: idle_session_timeout exists
# from PostgreSQL 14, transaction_timeout (which bounds a single statement too) from 17.
SESSION_TIMEOUTS = (
    "lock_timeout",
    "statement_timeout",
    "idle_session_timeout",
    "transaction_timeout",
)

# The stores this process holds the lock of, each with the thread that holds it. Another thread
# of this process waits for the lock like another process would; the holding thread must not.
_held: dict[str, int] = {}
_held_guard = threading.Lock()


@contextmanager
def store_preparation_lock(url: str) -> Iterator[None]:
    """Hold the store's preparation lock (see above) for the database at `url`."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        with _holding(_postgres_target(parsed), _advisory_lock(url)):
            yield
        return
    database = sqlite_file(parsed) if backend == "sqlite" else None
    if database is None:
        yield
        return
    path = sqlite_lock_path(database)
    with _holding(str(path), _file_lock(path)):
        yield


def sqlite_lock_path(database: str) -> Path:
    """The lock file of the SQLite file `database`: beside it, one per database file."""
    # Resolved as SQLAlchemy opens it (no "~" expansion), through symlinks: one lock per file.
    path = Path(os.path.abspath(database)).resolve()
    return path.with_name(path.name + LOCK_SUFFIX)


def _postgres_target(url: URL) -> str:
    # The advisory lock is per database: server and database name identify it (a Unix socket
    # may be named by the query's host).
    host = url.host or url.query.get("host") or ""
    return f"postgresql://{host}:{url.port or ''}/{url.database or ''}"


@contextmanager
def _holding(target: str, lock: AbstractContextManager[None]) -> Iterator[None]:
    """Take `lock`, the lock of `target`, unless this thread already holds it (RuntimeError)."""
    me = threading.get_ident()
    with _held_guard:
        if _held.get(target) == me:
            raise RuntimeError(
                f"store_preparation_lock entered again for {target} by the thread that holds "
                "it: the lock is not re-entrant and would wait for itself forever; take it "
                "once, around the whole preparation"
            )
    with lock:
        with _held_guard:
            _held[target] = me
        try:
            yield
        finally:
            with _held_guard:
                if _held.get(target) == me:
                    del _held[target]


@contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    engine = make_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # Turned off for this session only, before the wait; a setting this server does
            # not have is simply not in pg_settings.
            conn.execute(
                text(
                    "SELECT set_config(name, '0', false) FROM pg_settings WHERE name = ANY(:names)"
                ),
                {"names": list(SESSION_TIMEOUTS)},
            )
            key = {"key": LOCK_KEY}
            if not conn.scalar(text("SELECT pg_try_advisory_lock(:key)"), key):
                log.info(WAITING)
                conn.execute(text("SELECT pg_advisory_lock(:key)"), key)
            try:
                yield
            finally:
                try:
                    released = conn.scalar(text("SELECT pg_advisory_unlock(:key)"), key)
                except SQLAlchemyError:
                    # The session is gone (server restart, dropped connection), and the
                    # server released its lock with it; the caller's own error, if any, wins.
                    log.warning("could not release the store preparation lock", exc_info=True)
                else:
                    if not released:  # a new session after a reconnect: the lock was lost
                        log.warning("the store preparation lock was lost before its release")
    finally:
        # Closes the connection: the session ends, and with it any lock it still holds.
        engine.dispose()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The file is never removed: a process that deleted and recreated it would lock another
    # inode than a process already waiting on the old one, and both would go ahead. flock needs
    # no write access: read-only, and readable by all, a file another user created first (root
    # through `docker exec`) does not stop the service's user from taking the lock.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.fchmod(fd, 0o644)  # whatever the creator's umask
    except FileExistsError:
        fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(WAITING)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
