"""Database engine and sessions for SQLite (embedded default) and PostgreSQL (production)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.util import asbool

from pipeline.core.config import Settings
from pipeline.core.sqlite_writers import serialize_writers

# How long a writer waits for another to finish before it fails ("database is locked").
SQLITE_BUSY_SECONDS = 30


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the API, the CLI and the Dagster processes read while one writes.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_SECONDS * 1000}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        parsed = make_url(url)
        path = sqlite_file(parsed)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_SECONDS},
            hide_parameters=True,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        # A shared-cache in-memory database is one database for every connection of the
        # process, and a clash there fails at once ("table is locked"): queue its writers too.
        shared = parsed.query.get("cache") == "shared" and parsed.database
        writers = path if path is not None else shared
        if writers:
            serialize_writers(engine, writers, SQLITE_BUSY_SECONDS)
        return engine
    # A server that stops answering must fail a request in seconds (503), not hang it: libpq
    # waits forever by default. A connect_timeout in the URL wins.
    connect_args = {} if "connect_timeout" in make_url(url).query else {"connect_timeout": 5}
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args=connect_args,
        # An error's message (logged with a 500's traceback) carries the statement; its
        # parameters are request values, which may be secrets or megabytes: never logged.
        hide_parameters=True,
    )


def sqlite_file(url: URL) -> str | None:
    """The file the SQLite `url` opens, as SQLite reads it; None for an in-memory database.

    With `?uri=true` the database part is an SQLite URI (`file:data.db?mode=ro`,
    `file:x?mode=memory`, `file:///srv/data.db`); without it, a plain file name (SQLAlchemy
    then opens even `file:x` as a file of that name).
    """
    database = url.database or ""
    if not asbool(url.query.get("uri", False)):  # as SQLAlchemy reads it
        return database if database and database != ":memory:" else None
    if not database.startswith("file:"):
        return database if database and database != ":memory:" else None
    if url.query.get("mode") == "memory":
        return None
    path = database.removeprefix("file:")
    if path.startswith("//"):  # file://host/path: SQLite accepts only "" or "localhost"
        path = "/" + path[2:].partition("/")[2]
    path = unquote(path.partition("#")[0])
    # An empty name is a private temporary database: nothing else can reach it either.
    return path if path and path != ":memory:" else None


class Database:
    """An engine plus its session factory; one per process and settings."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(settings.resolved_database_url)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on any error."""
        session = self.sessionmaker()
        try:
            with session.begin():
                yield session
        finally:
            session.close()

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection on which every statement is its own transaction, committed by the
        database as it ends: for a one-statement write on a hot row, whose lock must not last
        until this thread (one of many sharing the interpreter) gets round to COMMIT."""
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()
