"""`marketplace serve --workers 2` on PostgreSQL + Redis (issue 19): concurrent requests on two
worker processes never store a contribution twice and never count a quota or a rate limit
twice, and the supervisor opens no database or Redis connection its workers would inherit.
Each request goes over a connection whose accepting worker is read from /proc, so both
workers are known to take part."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr
from sqlalchemy import select

from pipeline.auth.sessions import issue_token
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.tables import Contribution, DatasetVersion, KeyUsage
from pipeline.demo.churn_data import churn_rows
from tests.conftest import (
    PG_PORT,
    REDIS_URL,
    require_service,
    scratch_postgres,
)
from tests.support.processes import (
    ADMIN_TOKEN,
    JWT_SECRET,
    start_serve,
    started_processes,
)
from tests.support.workers import (
    Connection,
    connections_per_worker,
    established_to,
    worker_pids,
)

# One xdist worker runs the whole module, so its two-worker server (module fixture) starts once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("api-workers")]
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="module")
def scratch_database() -> Iterator[str]:
    require_service("Redis", "127.0.0.1", 6379)
    with scratch_postgres("mk_workers_") as url:
        yield url


@pytest.fixture(scope="module")
def serve_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's folder: its log, and its data dir `data` (the embedded object store's)."""
    return tmp_path_factory.mktemp("workers")


@pytest.fixture(scope="module")
def workers(
    scratch_database: str, serve_dir: Path
) -> Iterator[tuple[str, int, dict[int, list[Connection]]]]:
    """Two workers, and three kept-alive connections on each (database URL, supervisor pid,
    {worker pid: connections})."""
    tmp_path = serve_dir
    env = {
        "DATABASE_URL": scratch_database,
        "REDIS_URL": REDIS_URL,
        "HTTP_KEEPALIVE_SECONDS": "120",
    }
    processes = started_processes()
    started = next(processes)
    try:
        # A fresh database is migrated first, then two interpreters import the app: on a
        # loaded 2-core machine that can take minutes.
        proc, url = start_serve(
            tmp_path, started, args=["--workers", "2"], ready_seconds=240, **env
        )
        host, port = url.removeprefix("http://").split(":")
        pids = _wait_for_workers(proc.pid, tmp_path)
        held = connections_per_worker(host, int(port), pids, per_worker=3)
        yield scratch_database, proc.pid, held
        for conns in held.values():
            for conn in conns:
                conn.close()
    finally:
        processes.close()  # the supervisor and its workers, even after a failed set-up


def _wait_for_workers(supervisor: int, tmp_path: Path) -> list[int]:
    """The two worker pids, once both have logged that they serve."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        pids = worker_pids(supervisor)
        log = (tmp_path / "server.log").read_text(errors="replace")
        if len(pids) == 2 and log.count("Application startup complete.") >= 2:
            return pids
        time.sleep(0.2)
    raise RuntimeError("two workers did not start")


def all_at_once(calls: list[tuple[Connection, tuple[Any, ...], dict[str, str]]]) -> list[Any]:
    """Send every request first (each on its own connection), then read every answer."""
    barrier = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        conn, args, headers = calls[index]
        barrier.wait()
        answers[index] = conn.request(*args, **headers)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return answers


def spread(held: dict[int, list[Connection]]) -> list[Connection]:
    """Connections alternating between the workers."""
    columns = list(held.values())
    return [conn for row in zip(*columns, strict=True) for conn in row]


def stored_objects(serve_dir: Path) -> set[str]:
    """The keys of the dataset objects in the server's embedded (local folder) object store,
    leftover temp files included: `datasets/{model_id}/{version}/{filename}`."""
    objects = Settings(marketplace_data_dir=serve_dir / "data").objects_dir
    root = objects / "datasets"
    if not root.exists():
        return set()
    return {path.relative_to(objects).as_posix() for path in root.rglob("*") if path.is_file()}


def test_the_same_idempotency_key_on_both_workers_stores_one_contribution(
    workers: tuple[str, int, dict[int, list[Connection]]], serve_dir: Path
) -> None:
    database_url, _, held = workers
    before = stored_objects(serve_dir)
    token = issue_token(Settings(jwt_secret=SecretStr(JWT_SECRET)), "twice")
    keys = [f"retry-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    conns = spread(held)
    for seed, key in enumerate(keys):
        body = {"modelId": 1, "benchmarkSpecId": None, "rows": churn_rows(50, seed=seed)}
        headers = {"Authorization": f"Bearer {token}", "Idempotency_Key": key}
        # The same request on every held connection: three per worker, at the same moment.
        answers = all_at_once(
            [(conn, ("POST", "/api/models/1/contributions", body), headers) for conn in conns]
        )
        assert {status for status, _ in answers} == {202}, answers
        assert len({answer["jobId"] for _, answer in answers}) == 1
    db = Database(database_url)
    try:
        with db.session() as session:
            stored = session.scalars(
                select(Contribution).where(Contribution.idempotency_key.in_(keys))
            ).all()
            versions = session.scalars(
                select(DatasetVersion.object_key)
                .join(Contribution, Contribution.dataset_version_id == DatasetVersion.id)
                .where(Contribution.idempotency_key.in_(keys))
            ).all()
    finally:
        db.dispose()
    stored_keys = [c.idempotency_key for c in stored if c.idempotency_key is not None]
    assert len(stored_keys) == len(stored)  # every stored contribution carries its key
    assert sorted(stored_keys) == sorted(keys)
    assert len(versions) == len(keys)
    # One object per key in the store, the one its version row names: a racing request that
    # lost to the first wrote its own version's object, which must be gone (not orphaned).
    assert stored_objects(serve_dir) - before == set(versions)


def _create_key(conn: Connection, **fields: Any) -> str:
    status, body = conn.request("POST", "/api/v1/keys", {"name": "workers", **fields}, **ADMIN)
    assert status == 201, body
    return str(body["api_key"])


def test_a_monthly_quota_is_counted_once_across_workers(
    workers: tuple[str, int, dict[int, list[Connection]]],
) -> None:
    database_url, _, held = workers
    conns = spread(held)
    key = _create_key(conns[0], service_id="prediction", monthly_prediction_limit=10)
    verify = ("POST", "/api/v1/keys/verify", {"api_key": key, "service_id": "prediction"})
    # 18 uses in three rounds of six at once (three on each worker), against a limit of 10.
    answers = []
    for _ in range(3):
        answers += all_at_once([(conn, verify, {}) for conn in conns])
    allowed = [a for s, a in answers if s == 200 and a["valid"]]
    assert len(allowed) == 10
    assert sorted({s for s, _ in answers}) == [200, 429]
    db = Database(database_url)
    try:
        with db.session() as session:
            counted = session.scalar(
                select(KeyUsage.count).where(KeyUsage.key_id == allowed[0]["key_id"])
            )
    finally:
        db.dispose()
    assert counted == 10


def test_an_hourly_rate_limit_is_shared_by_the_workers(
    workers: tuple[str, int, dict[int, list[Connection]]],
) -> None:
    _, _, held = workers
    conns = spread(held)
    key = _create_key(conns[0], service_id="platform", rate_limit_per_hour=10)
    whoami = ("GET", "/api/v1/whoami")
    answers = []
    for _ in range(4):
        answers += all_at_once(
            [(conn, whoami, {"Authorization": f"Bearer {key}"}) for conn in conns]
        )
    statuses = [status for status, _ in answers]
    # In-memory limits would let each worker allow 10 (20 in all); Redis holds them to 10.
    assert statuses.count(200) == 10
    assert statuses.count(429) == len(answers) - 10


def test_every_worker_took_part(workers: tuple[str, int, dict[int, list[Connection]]]) -> None:
    _, supervisor, held = workers
    assert sorted(held) == worker_pids(supervisor)
    assert all(len(conns) == 3 for conns in held.values())


def test_the_supervisor_holds_no_database_or_redis_connection(
    workers: tuple[str, int, dict[int, list[Connection]]],
) -> None:
    """`serve --workers N` creates its pools and clients in each worker, none before the spawn:
    a supervisor's connection would be idle for the server's lifetime, or shared by workers."""
    _, supervisor, held = workers
    ports = {PG_PORT, urlsplit(REDIS_URL).port or 6379}
    key = _create_key(spread(held)[0], service_id="platform", rate_limit_per_hour=100)
    for conns in held.values():  # each worker reads the key (PostgreSQL), counts it (Redis)
        status, body = conns[0].request("GET", "/api/v1/whoami", Authorization=f"Bearer {key}")
        assert status == 200, body
    for pid in held:
        assert set(established_to(pid, ports)) == ports, pid  # so the check below can fail
    assert established_to(supervisor, ports) == {}
