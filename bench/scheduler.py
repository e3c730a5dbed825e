"""Benchmark: one schedule-sensor tick with 10,000 enabled schedules (50 due) vs 100 (50 due).

    python bench/scheduler.py                                  # temp SQLite stores
    python bench/scheduler.py --database-url postgresql://user@host/scratch

`--database-url` must name a scratch database: the bench migrates it, inserts its models and
schedules, and deletes them again after each scenario. Each scenario times the full sensor tick
(resource, engine, due selection, latest versions, advancing, run requests; median of
`--repeat` ticks after a warm-up, the due rows reset between ticks) and the domain function
alone, and counts the rows the ORM fetched during a tick. On PostgreSQL it also reads the table
statistics: rows the server itself read (sequential + index fetches) from `evaluation_schedules`
and `dataset_versions` during a tick.

Prints `figure: value` lines and, last, `ratio: X` = tick time at 10,000 ÷ tick time at 100
(goal: tick < 1 s and nearly flat, i.e. ratio close to 1).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg
from sqlalchemy import create_engine, delete, event, insert, text, update
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.pool import NullPool

from pipeline.core.config import load_settings
from pipeline.core.db import Database
from pipeline.core.migrate import upgrade
from pipeline.core.tables import DatasetVersion, EvaluationSchedule, Model
from pipeline.triggers.schedules import fire_due_schedules
from sensors.resources import SENSOR_STORE, SensorStore
from sensors.schedules import make_schedule_sensor

NOW = datetime(2025, 6, 1, 12, 0, 30, tzinfo=UTC)
DUE_AT = NOW - timedelta(minutes=5)
CRON = "0 * * * *"


class RowCounter:
    """Rows the ORM fetched from SELECTs (every session in the process)."""

    def __init__(self) -> None:
        self.rows = 0
        self.statements = 0
        event.listen(Session, "do_orm_execute", self._count)

    def _count(self, state: ORMExecuteState) -> Any:
        if not state.is_select:
            return None
        frozen = state.invoke_statement().freeze()
        self.rows += len(frozen.data)
        self.statements += 1
        return frozen()

    def reset(self) -> None:
        self.rows = 0
        self.statements = 0


def populate(db: Database, total: int, due: int, tag: str) -> list[int]:
    """`total` models, each with one dataset version and an enabled hourly schedule; the
    first `due` schedules are due at NOW, the rest later. Returns the model ids."""
    names = [f"bench-{tag}-{i}" for i in range(total)]
    with db.session() as session:
        session.execute(
            insert(Model),
            [
                {
                    "name": name, "description": "", "task_type": "classification",
                    "target_column": "y", "estimator": "logistic_regression",
                    "data_spec": {"type": "object"}, "example_row": {}, "spec_version": 1,
                    "last_version": 1, "created_at": NOW,
                }
                for name in names
            ],
        )  # fmt: skip
        ids = list(
            session.scalars(text("SELECT id FROM models WHERE name LIKE :p ORDER BY id"), {
                "p": f"bench-{tag}-%"
            })
        )  # fmt: skip
        session.execute(
            insert(DatasetVersion),
            [
                {
                    "model_id": model_id, "version": "v1", "version_number": 1,
                    "kind": "external", "object_key": f"datasets/{model_id}/v1/data.csv",
                    "uri": f"file:///datasets/{model_id}/v1/data.csv", "file_format": "csv",
                    "created_at": NOW,
                }
                for model_id in ids
            ],
        )  # fmt: skip
        session.execute(
            insert(EvaluationSchedule),
            [
                {
                    "id": str(uuid.uuid4()), "model_id": model_id, "cron_expression": CRON,
                    "enabled": True,
                    "next_run_at": DUE_AT if i < due else NOW + timedelta(minutes=1 + i),
                    "created_at": NOW, "updated_at": NOW,
                }
                for i, model_id in enumerate(ids)
            ],
        )  # fmt: skip
    if db.engine.dialect.name == "postgresql":
        with db.engine.connect() as conn:
            conn.execute(text("ANALYZE evaluation_schedules, dataset_versions"))
            conn.commit()
    return ids[:due]


def reset_due(db: Database, due_ids: list[int]) -> None:
    with db.session() as session:
        session.execute(
            update(EvaluationSchedule)
            .where(EvaluationSchedule.model_id.in_(due_ids))
            .values(next_run_at=DUE_AT, last_run_at=None)
        )


def cleanup(db: Database, tag: str) -> None:
    with db.session() as session:
        pattern = {"p": f"bench-{tag}-%"}
        ids = list(session.scalars(text("SELECT id FROM models WHERE name LIKE :p"), pattern))
        for table in (EvaluationSchedule, DatasetVersion):
            session.execute(delete(table).where(table.model_id.in_(ids)))
        session.execute(delete(Model).where(Model.id.in_(ids)))


def server_rows_read(db: Database) -> int | None:
    """Rows PostgreSQL has read from the tables a tick touches, so far (None on SQLite).

    Backends flush their statistics when they exit: the bench closes its own connections first
    (the sensor closes its engine at the end of every tick), waits, and reads with a fresh one.
    """
    if db.engine.dialect.name != "postgresql":
        return None
    db.dispose()
    time.sleep(0.5)
    engine = create_engine(db.url, poolclass=NullPool)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        value = conn.execute(
            text(
                "SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)) "
                "FROM pg_stat_user_tables "
                "WHERE relname IN ('evaluation_schedules', 'dataset_versions')"
            )
        ).scalar_one()
    engine.dispose()
    return int(value)


def query_plan(db: Database) -> str:
    sql = (
        "SELECT id FROM evaluation_schedules WHERE enabled = {t} AND next_run_at <= :now "
        "ORDER BY next_run_at LIMIT 200"
    )
    with db.engine.connect() as conn:
        if db.engine.dialect.name == "sqlite":
            rows = conn.execute(text("EXPLAIN QUERY PLAN " + sql.format(t="1")), {"now": NOW})
            return " / ".join(str(r[-1]) for r in rows)
        rows = conn.execute(text("EXPLAIN " + sql.format(t="true")), {"now": NOW})
        return " / ".join(str(r[0]).strip() for r in rows)


@contextmanager
def scratch_database(url: str | None, label: str) -> Iterator[str]:
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix=f"bench-scheduler-{label}-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


def scenario(
    url: str | None, total: int, due: int, repeats: int, counter: RowCounter
) -> dict[str, Any]:
    label = str(total)
    with scratch_database(url, label) as db_url:
        upgrade(db_url)
        db = Database(db_url)
        tag = f"{label}-{uuid.uuid4().hex[:6]}"
        try:
            due_ids = populate(db, total, due, tag)
            store = SensorStore.from_settings(
                load_settings(database_url=db_url, enable_evaluation_scheduler=True)
            )
            sensor = make_schedule_sensor(minimum_interval_seconds=60, clock=lambda: NOW)
            ticks, domain, fetched, server, requests = [], [], [], [], 0
            with dg.DagsterInstance.ephemeral() as instance:
                for attempt in range(repeats + 1):
                    reset_due(db, due_ids)
                    before = server_rows_read(db)
                    counter.reset()
                    with dg.build_sensor_context(
                        instance=instance, resources={SENSOR_STORE: store}
                    ) as context:
                        start = time.perf_counter()
                        result = sensor(context)
                        elapsed = time.perf_counter() - start
                    assert isinstance(result, dg.SensorResult)
                    requests = len(result.run_requests or [])
                    after = server_rows_read(db)
                    if attempt:  # the first tick warms caches and imports
                        ticks.append(elapsed)
                        fetched.append(counter.rows)
                        if before is not None and after is not None:
                            server.append(after - before)

                    reset_due(db, due_ids)
                    session = db.sessionmaker()
                    try:
                        start = time.perf_counter()
                        runs = fire_due_schedules(session, NOW, 200)
                        elapsed = time.perf_counter() - start
                        assert len(runs) == due
                    finally:
                        session.rollback()
                        session.close()
                    if attempt:
                        domain.append(elapsed)
            return {
                "tick_s": statistics.median(ticks),
                "domain_s": statistics.median(domain),
                "rows_fetched": max(fetched),
                "run_requests": requests,
                "server_rows": statistics.median(server) if server else None,
                "plan": query_plan(db),
            }
        finally:
            if url:
                cleanup(db, tag)
            db.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a scratch database (default: temp SQLite)")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--due", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    logging.getLogger("dagster").setLevel(logging.WARNING)

    counter = RowCounter()
    large = scenario(args.database_url, args.schedules, args.due, args.repeat, counter)
    small = scenario(args.database_url, args.small, args.due, args.repeat, counter)
    backend = "postgresql" if (args.database_url or "").startswith("postgres") else "sqlite"

    print(f"backend: {backend}")
    print(f"schedules_large: {args.schedules}")
    print(f"schedules_small: {args.small}")
    print(f"due_per_tick: {args.due}")
    print(f"run_requests_large: {large['run_requests']}")
    print(f"run_requests_small: {small['run_requests']}")
    print(f"tick_ms_large: {large['tick_s'] * 1000:.1f}")
    print(f"tick_ms_small: {small['tick_s'] * 1000:.1f}")
    print(f"domain_ms_large: {large['domain_s'] * 1000:.1f}")
    print(f"domain_ms_small: {small['domain_s'] * 1000:.1f}")
    print(f"rows_fetched_large: {large['rows_fetched']}")
    print(f"rows_fetched_small: {small['rows_fetched']}")
    if large["server_rows"] is not None:
        print(f"server_rows_read_per_tick_large: {large['server_rows']:.0f}")
        print(f"server_rows_read_per_tick_small: {small['server_rows']:.0f}")
    print(f"due_query_plan: {large['plan']}")
    print(f"ratio: {large['tick_s'] / small['tick_s']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
