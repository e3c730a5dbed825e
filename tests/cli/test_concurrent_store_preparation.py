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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import create_engine, func, select, text

from pipeline.core.store_lock import LOCK_KEY, store_preparation_lock
from pipeline.core.tables import Model
from pipeline.models.definitions import DEMO_MODELS, demo_definition
from tests.conftest import scratch_postgres

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
POSTGRES_ONLY = pytest.mark.parametrize("fresh_store", ["postgres"], indirect=True)

# `marketplace ARGS` as on a loaded machine: SLOW_SECONDS (1 s by default) longer between
# finding the database unmigrated and creating the version table, and between counting the
# models and registering the demo models. Processes started together all land inside each
# window unless something makes them take turns: without the lock the test fails reliably (not
# provably: a process starting over a second late would find the work done), and with it no
# timing can make it fail. A process prints "slowing" as it enters the migration's window.
SLOWED = """
import os, sys, time

from sqlalchemy import event

import pipeline.core.db as db
import pipeline.models.registry as registry
from cli.main import main

make_engine, register = db.make_engine, registry.register_model_folder


def slow_engine(url):
    engine = make_engine(url)

    def before(conn, cursor, statement, *rest):
        if statement.lstrip().startswith("CREATE TABLE alembic_version"):
            print("slowing", flush=True)
            time.sleep(float(os.environ.get("SLOW_SECONDS", "1")))

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
    with scratch_postgres("scratch_") as url:
        yield url


def _start(args: list[str], url: str, data_dir: Path, slow: float = 1) -> subprocess.Popen[str]:
    """`marketplace ARGS` (SLOWED by `slow` seconds) on the store at `url`, started."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DAGSTER_HOME"}}
    env["MARKETPLACE_DATA_DIR"] = str(data_dir)
    env["SLOW_SECONDS"] = str(slow)
    if not url.startswith("sqlite"):
        env["DATABASE_URL"] = url
    return subprocess.Popen(
        [sys.executable, "-c", SLOWED, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _at_once(args: list[str], url: str, data_dir: Path) -> list[subprocess.CompletedProcess[str]]:
    """`marketplace ARGS` (SLOWED) in PROCESSES processes started together; their results."""
    return _results([_start(args, url, data_dir) for _ in range(PROCESSES)])


def _results(procs: list[subprocess.Popen[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Each process's result once it ends; any still running at a failure is killed."""
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
    with _held_elsewhere(fresh_store):
        preparer = _Preparer(fresh_store)
        assert not preparer.done.wait(1.5)  # the live holder keeps the next one waiting
    assert preparer.acquired.wait(15), preparer.errors


def test_entering_the_lock_again_in_the_thread_that_holds_it_fails_instead_of_hanging(
    fresh_store: str,
) -> None:
    outcome: list[str] = []

    def nest() -> None:
        with store_preparation_lock(fresh_store):
            try:
                with store_preparation_lock(fresh_store):
                    outcome.append("entered twice")
            except RuntimeError as exc:
                outcome.append(str(exc))

    thread = threading.Thread(target=nest, daemon=True)
    thread.start()
    thread.join(15)
    assert not thread.is_alive(), "the nested lock waits for itself"
    assert len(outcome) == 1 and "not re-entrant" in outcome[0]
    preparer = _Preparer(fresh_store)  # and the outer lock was released on the way out
    assert preparer.acquired.wait(15), preparer.errors


def test_another_thread_of_the_holding_process_waits_its_turn(fresh_store: str) -> None:
    with store_preparation_lock(fresh_store):
        preparer = _Preparer(fresh_store)
        assert not preparer.done.wait(1)
    assert preparer.acquired.wait(15), preparer.errors


@POSTGRES_ONLY
@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
def test_a_timeout_of_the_role_or_url_does_not_cut_the_wait_short(
    fresh_store: str, setting: str
) -> None:
    # A role's, a database's or the URL's timeout of half a second would fail every replica but
    # the first with LockNotAvailable (or QueryCanceled) instead of letting it wait its turn.
    url = f"{fresh_store}?options={quote(f'-c {setting}=500')}"
    with _held_elsewhere(fresh_store):
        preparer = _Preparer(url)
        assert not preparer.done.wait(2), preparer.errors
    assert preparer.acquired.wait(15), preparer.errors


@POSTGRES_ONLY
def test_an_idle_session_timeout_does_not_end_the_holders_session(fresh_store: str) -> None:
    # The lock's session sits idle while its process migrates; ending it would free the lock.
    if _server_version(fresh_store) < 140000:
        pytest.skip("idle_session_timeout is PostgreSQL 14's")
    with _held_elsewhere(f"{fresh_store}?options={quote('-c idle_session_timeout=500')}"):
        time.sleep(1.5)  # idle three times the timeout
        preparer = _Preparer(fresh_store)
        assert not preparer.done.wait(1), preparer.errors
    assert preparer.acquired.wait(15), preparer.errors


@POSTGRES_ONLY
def test_a_lost_lock_session_never_lets_two_migrations_run_together(
    fresh_store: str, tmp_path: Path
) -> None:
    # An operator's pg_terminate_backend (or a proxy cutting an idle connection) ends the lock's
    # session while its holder migrates: the next process then gets that lock, but its migration
    # waits for the first one's to commit, and finds the schema at head.
    data_dir = tmp_path / "data"
    first = _start(["db", "upgrade"], fresh_store, data_dir, slow=5)
    procs = [first]
    try:
        assert first.stdout is not None
        assert first.stdout.readline() == "slowing\n"  # migrating, holding the lock
        assert _terminate_lock_session(fresh_store) == 1
        procs.append(_start(["db", "upgrade"], fresh_store, data_dir, slow=0))
    finally:
        results = _results(procs)
    _assert_all_succeeded(results)
    assert _revision(fresh_store) == _head()


@contextmanager
def _held_elsewhere(url: str) -> Iterator[None]:
    """The store's preparation lock held by another process, which is killed at the end."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()


class _Preparer:
    """`store_preparation_lock(url)` entered (and left at once) in a thread of this process."""

    def __init__(self, url: str) -> None:
        self.acquired = threading.Event()
        self.done = threading.Event()  # acquired, or failed
        self.errors: list[Exception] = []
        threading.Thread(target=self._run, args=(url,), daemon=True).start()

    def _run(self, url: str) -> None:
        try:
            with store_preparation_lock(url):
                self.acquired.set()
        except Exception as exc:
            self.errors.append(exc)
        finally:
            self.done.set()


def _server_version(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SHOW server_version_num")).scalar_one())
    finally:
        engine.dispose()


def _terminate_lock_session(url: str) -> int:
    """Ends the sessions holding the store preparation lock of the database at `url`."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            # A bigint advisory key shows in pg_locks as classid (high half) and objid.
            return len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks"
                        " WHERE locktype = 'advisory' AND granted AND objsubid = 1"
                        " AND database = (SELECT oid FROM pg_database"
                        "                 WHERE datname = current_database())"
                        " AND classid::text::bigint = :high AND objid::text::bigint = :low"
                    ),
                    {"high": LOCK_KEY >> 32, "low": LOCK_KEY & 0xFFFFFFFF},
                ).all()
            )
    finally:
        engine.dispose()
