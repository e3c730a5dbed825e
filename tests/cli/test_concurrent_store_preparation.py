"""Several processes preparing one fresh store at once all succeed, and prepare it once.

In Kubernetes every API replica's init container runs `marketplace db upgrade` and then its
`marketplace serve` runs `prepare_store` (migrations, then the demo models); locally
`marketplace dev` and a CLI command do the same on one SQLite file. Without a lock between
them, concurrent migrations fail on tables another process has just created, and concurrent
demo seedings on the unique model name (pipeline/core/store_lock.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text

from pipeline.core.store_lock import store_preparation_lock
from pipeline.core.tables import Model
from pipeline.models.registry import DEMO_MODELS, demo_definition
from tests.conftest import PG_ADMIN_URL, PG_HOST, PG_PORT, require_service

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time

from pipeline.core.store_lock import store_preparation_lock

with store_preparation_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""
PROCESSES = 3
TIMEOUT = 300

# `marketplace ARGS` as on a loaded machine: a second longer between finding the database
# unmigrated and creating the version table, and between counting the models and registering
# the demo models. Processes started together are all inside each window at once, unless
# something makes them take turns; the outcome then never depends on luck.
SLOWED = """
import sys, time

from sqlalchemy import event

import pipeline.core.db as db
import pipeline.models.registry as registry
from cli.main import main

make_engine, register = db.make_engine, registry.register_model_folder


def slow_engine(url):
    engine = make_engine(url)

    def before(conn, cursor, statement, *rest):
        if statement.lstrip().startswith("CREATE TABLE alembic_version"):
            time.sleep(1)

    event.listen(engine, "before_cursor_execute", before)
    return engine


def slow_register(*args, **kwargs):
    time.sleep(1)
    return register(*args, **kwargs)


db.make_engine, registry.register_model_folder = slow_engine, slow_register
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The database URL of an empty store: nothing migrated, no model."""
    if request.param == "sqlite":
        # The default: the SQLite file in the data dir (DATABASE_URL unset).
        yield f"sqlite:///{tmp_path / 'data' / 'marketplace.db'}"
        return
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    name = f"scratch_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _at_once(args: list[str], url: str, data_dir: Path) -> list[subprocess.CompletedProcess[str]]:
    """`marketplace ARGS` (SLOWED) in PROCESSES processes started together; their results."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DAGSTER_HOME"}}
    env["MARKETPLACE_DATA_DIR"] = str(data_dir)
    if not url.startswith("sqlite"):
        env["DATABASE_URL"] = url
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SLOWED, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _assert_all_succeeded(results: list[subprocess.CompletedProcess[str]]) -> None:
    failed = [f"exit {r.returncode}:\n{r.stderr[-3000:]}" for r in results if r.returncode != 0]
    assert not failed, "\n\n".join(failed)


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()


def _model_rows(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Model.name, func.count()).group_by(Model.name)).all()
    finally:
        engine.dispose()
    return {name: count for name, count in rows}


def _head() -> str:
    from alembic.script import ScriptDirectory

    from pipeline.core.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


@pytest.mark.slow
def test_concurrent_upgrades_then_concurrent_starts_prepare_the_store_once(
    fresh_store: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"

    # Every replica's init container migrates the empty database at the same moment.
    upgrades = _at_once(["db", "upgrade"], fresh_store, data_dir)
    _assert_all_succeeded(upgrades)
    assert all("latest revision" in r.stdout for r in upgrades)
    assert _revision(fresh_store) == _head()
    assert _model_rows(fresh_store) == {}

    # Then each one prepares the store on start (`models list` runs `prepare_store` first):
    # the demo models are registered once, and every process lists them.
    starts = _at_once(["models", "list"], fresh_store, data_dir)
    _assert_all_succeeded(starts)
    demo_names = [demo_definition(name).name for name in DEMO_MODELS]
    assert _model_rows(fresh_store) == dict.fromkeys(demo_names, 1)
    for result in starts:
        listed = [line.split("\t")[1] for line in result.stdout.splitlines() if line[:1].isdigit()]
        assert listed == demo_names
    assert _revision(fresh_store) == _head()


def test_a_killed_preparation_leaves_the_store_free(fresh_store: str) -> None:
    # A pod evicted or a `marketplace dev` killed mid-migration must not block every later start.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, fresh_store], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        acquired = threading.Event()

        def prepare() -> None:
            with store_preparation_lock(fresh_store):
                acquired.set()

        threading.Thread(target=prepare, daemon=True).start()
        assert not acquired.wait(1.5)  # the live holder keeps the next one waiting
    finally:
        holder.kill()
        holder.wait()
    assert acquired.wait(15)
