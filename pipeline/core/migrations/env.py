"""Alembic environment: runs migrations online against the URL given by pipeline.core.migrate."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from pipeline.core.db import make_engine
from pipeline.core.tables import Base

config = context.config
target_metadata = Base.metadata

# "mktmigr" in ASCII: not store_lock.LOCK_KEY, which the process running this migration holds
# on another session (the same key would make it wait for itself).
MIGRATION_LOCK_KEY = 0x6D6B746D696772


def _one_migration_at_a_time(connection: Connection) -> None:
    """On PostgreSQL, wait for any other migration of this database to commit.

    A backstop for `store_preparation_lock`, whose session can be lost while its holder still
    migrates (terminated by an operator, cut by a proxy): this lock is the migration's own
    transaction's, taken before Alembic reads the current revision, so the next migration reads
    the revision the previous one committed. Its wait must not be cut short by a `lock_timeout`
    or `statement_timeout` of the role or the URL; they apply again to the migration itself.
    """
    if connection.dialect.name != "postgresql":
        return
    names = ("lock_timeout", "statement_timeout")
    saved = {name: connection.scalar(text(f"SELECT current_setting('{name}')")) for name in names}
    for name in names:
        connection.execute(text(f"SELECT set_config('{name}', '0', true)"))
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    for name, value in saved.items():
        connection.execute(text(f"SELECT set_config('{name}', :value, true)"), {"value": value})


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url
    engine = make_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            _one_migration_at_a_time(connection)
            context.run_migrations()
    engine.dispose()


run_migrations_online()
