"""One writer at a time per SQLite file in this process, queued in a lock instead of SQLite's
busy handler.

SQLite lets one connection write at a time. A connection that finds the file locked sleeps in
its busy handler (1, 2, 5, 10, ... then 100 ms between tries, until `busy_timeout`) and joins
no queue: a writer that has backed off to long sleeps is overtaken by every writer that comes
while it sleeps, again and again. Under 20 concurrent contributors the slowest 2 % of requests
waited 0.6-0.7 s in each of their two write transactions while the median waited about 25 ms
(bench/load.py, issue 19). Here this process's threads wait for the write in a lock, which
wakes a waiter as soon as it is free: a connection takes the lock at the first statement of a
transaction that is not a read, and gives it back once the transaction has ended (at the
connection's return to the pool, or at its next statement after a commit or rollback). Other
processes (Dagster's, the CLI's) still meet the busy handler, as before; a wait longer than the
busy timeout fails as SQLite's own would.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from sqlalchemy import Connection, Engine, event

# Statements that never take the write lock; anything else (INSERT, UPDATE, DELETE, DDL,
# SAVEPOINT, ...) is treated as a write, which at worst waits when it did not need to.
READS = ("SELECT", "PRAGMA", "EXPLAIN")
HELD = "marketplace_sqlite_write_lock"
ENDED = "marketplace_sqlite_write_ended"

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def file_lock(path: str) -> threading.Lock:
    """The process's one write lock for the SQLite file at `path` (however it is spelled)."""
    key = os.path.realpath(path)
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _release(info: dict[str, Any]) -> None:
    info.pop(ENDED, None)
    lock = info.pop(HELD, None)
    if lock is not None:
        lock.release()


def serialize_writers(engine: Engine, path: str, timeout: float) -> None:
    """Make `engine`'s connections to the file at `path` take its write lock (see above)."""
    lock = file_lock(path)

    def take(conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if conn.info.get(ENDED):  # the transaction that took the lock is over
            _release(conn.info)
        if HELD in conn.info or statement.lstrip()[:7].upper().startswith(READS):
            return
        if not lock.acquire(timeout=timeout):
            # Wrapped by SQLAlchemy like the busy handler's own failure (503 in the API).
            raise sqlite3.OperationalError("database is locked")
        conn.info[HELD] = lock

    def ending(conn: Connection) -> None:
        # Fired just before COMMIT or ROLLBACK: a writer let in now would find the file still
        # locked and fall back to the busy handler. The lock goes with the connection's next
        # statement or its return to the pool, whichever comes first.
        if HELD in conn.info:
            conn.info[ENDED] = True

    def returned(_dbapi_conn: Any, record: Any) -> None:
        _release(record.info)

    event.listen(engine, "before_cursor_execute", take)
    event.listen(engine, "commit", ending)
    event.listen(engine, "rollback", ending)
    event.listen(engine, "checkin", returned)
