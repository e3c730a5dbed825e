"""SQLite writers of one process queue in the file's lock, never in SQLite's busy handler."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import IntegrityError, OperationalError

from pipeline.core.db import Database
from pipeline.core.sqlite_writers import file_lock, serialize_writers


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "writers.db")


@pytest.fixture
def db(path: str) -> Iterator[Database]:
    database = Database(f"sqlite:///{path}")
    with database.engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO t (id, v) VALUES (1, 0)"))
    yield database
    database.dispose()


def no_busy_handler(engine: Engine) -> None:
    """A locked file fails at once instead of being retried: only the process lock queues."""

    def pragma(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute("PRAGMA busy_timeout=0")

    event.listen(engine, "connect", pragma)


def test_concurrent_writers_all_commit_without_the_busy_handler(db: Database) -> None:
    no_busy_handler(db.engine)
    db.engine.dispose()  # new connections get the pragma
    failures: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            for i in range(20):
                with db.session() as session:  # a transaction of two writes
                    session.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": worker * 100 + i})
                    session.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))
                with db.autocommit() as conn:  # and a statement on its own
                    conn.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with db.session() as session:
        assert session.scalar(text("SELECT v FROM t WHERE id = 1")) == 8 * 20 * 2
        assert session.scalar(text("SELECT count(*) FROM t")) == 1 + 8 * 20


def test_the_lock_is_free_after_a_commit_a_rollback_and_a_failed_statement(
    db: Database, path: str
) -> None:
    lock = file_lock(path)
    with db.session() as session:
        session.execute(text("UPDATE t SET v = 5 WHERE id = 1"))
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(RuntimeError), db.session() as session:
        session.execute(text("UPDATE t SET v = 6 WHERE id = 1"))
        raise RuntimeError("the request failed after its write")
    assert not lock.locked()
    with pytest.raises(IntegrityError), db.autocommit() as conn:
        conn.execute(text("INSERT INTO t (id, v) VALUES (1, 0)"))
    assert not lock.locked()
    with db.session() as session:
        assert session.scalar(text("SELECT v FROM t WHERE id = 1")) == 5


def test_a_connection_kept_after_its_commit_lets_the_next_writer_in(db: Database) -> None:
    with db.engine.connect() as kept:
        kept.execute(text("UPDATE t SET v = 9 WHERE id = 1"))
        kept.commit()
        assert kept.execute(text("SELECT v FROM t WHERE id = 1")).scalar() == 9
        other = threading.Thread(target=lambda: _add_one(db))
        other.start()
        other.join(timeout=5)
        assert not other.is_alive()
    with db.session() as session:
        assert session.scalar(text("SELECT v FROM t WHERE id = 1")) == 10


def _add_one(db: Database) -> None:
    with db.session() as session:
        session.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))


def test_reads_do_not_wait_for_a_writer(db: Database, path: str) -> None:
    with file_lock(path), db.session() as session:  # another thread's write in progress
        assert session.scalar(text("SELECT v FROM t WHERE id = 1")) == 0


def test_a_writer_waiting_past_the_timeout_fails_as_a_locked_database(
    db: Database, path: str
) -> None:
    impatient = create_engine(f"sqlite:///{path}")
    serialize_writers(impatient, path, timeout=0.05)
    try:
        with (
            file_lock(path),  # another thread's write transaction in progress
            pytest.raises(OperationalError, match="database is locked"),
            impatient.begin() as conn,
        ):
            conn.execute(text("UPDATE t SET v = 7 WHERE id = 1"))
        with impatient.begin() as conn:  # once free, the same engine writes
            conn.execute(text("UPDATE t SET v = 8 WHERE id = 1"))
    finally:
        impatient.dispose()
    with db.session() as session:
        assert session.scalar(text("SELECT v FROM t WHERE id = 1")) == 8
