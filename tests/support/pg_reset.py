"""Put a test PostgreSQL database back to its freshly seeded state in one round trip.

TRUNCATE gives every table (and index) a new file and was the slowest part of a PostgreSQL
test's set-up; deleting the few rows a test wrote and copying the seeded rows back from a
snapshot leaves the same rows and the same sequence positions, much faster.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, func, select, text

from pipeline.core.tables import Base

SNAPSHOT_SCHEMA = "test_seed"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PgReset:
    """A snapshot of the seeded database taken once; `reset()` restores it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url, pool_size=1, max_overflow=0)
        self.sql = self._snapshot()

    def _snapshot(self) -> str:
        tables = Base.metadata.sorted_tables
        statements = [f"DELETE FROM {_quoted(t.name)}" for t in reversed(tables)]
        with self.engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {SNAPSHOT_SCHEMA}"))
            for table in tables:
                if not conn.scalar(select(func.count()).select_from(table)):
                    continue
                name = _quoted(table.name)
                conn.execute(text(f"CREATE TABLE {SNAPSHOT_SCHEMA}.{name} AS TABLE {name}"))
                statements.append(
                    f"INSERT INTO {name} OVERRIDING SYSTEM VALUE "
                    f"SELECT * FROM {SNAPSHOT_SCHEMA}.{name}"
                )
            # Where every sequence stood after seeding (TRUNCATE ... RESTART IDENTITY, then
            # the seed, left them there).
            sequences = conn.execute(
                text(
                    "SELECT format('%I.%I', schemaname, sequencename), start_value, last_value "
                    "FROM pg_sequences WHERE schemaname = 'public'"
                )
            ).all()
        for name, start, last in sequences:
            if last is None:
                statements.append(f"SELECT setval('{name}', {start}, false)")
            else:
                statements.append(f"SELECT setval('{name}', {last}, true)")
        return ";\n".join(statements)

    def reset(self) -> None:
        raw = self.engine.raw_connection()
        try:
            # SQLAlchemy types the cursor as a bare PEP 249 cursor, which is not a context manager.
            cursor = raw.cursor()
            try:
                cursor.execute(self.sql)
            finally:
                cursor.close()
            raw.commit()
        finally:
            raw.close()

    def dispose(self) -> None:
        self.engine.dispose()
