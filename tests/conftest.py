"""Shared fixtures: every store-backed test runs on SQLite and on the real PostgreSQL.

PostgreSQL: one fresh database per test session (per xdist worker), migrated and seeded once,
then put back to that seeded state before each test (tests/support/pg_reset.py). Outside CI a
missing PostgreSQL skips those tests; with CI=true it fails them. S3 and SQS come from moto's
server mode over real HTTP.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

# boto3 needs credentials even for moto; never real ones in tests.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
for _name in [n for n in os.environ if n.startswith(("DATASET_", "SERVICE_", "ENABLE_"))]:
    os.environ.pop(_name, None)

from sqlalchemy import create_engine, text  # noqa: E402

from cli.main import main  # noqa: E402
from pipeline.core.config import Settings  # noqa: E402
from pipeline.core.db import Database  # noqa: E402
from pipeline.core.migrate import upgrade  # noqa: E402
from pipeline.core.tables import Base  # noqa: E402
from pipeline.models.registry import seed_demo_model  # noqa: E402
from pipeline.store.objectstore import LocalObjectStore  # noqa: E402
from tests.support.live_server import serve  # noqa: E402
from tests.support.pg_reset import PgReset  # noqa: E402

PG_HOST = os.environ.get("TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("TEST_PG_PORT", "5432"))
PG_ADMIN_URL = os.environ.get(
    "TEST_PG_ADMIN_URL", f"postgresql://postgres@{PG_HOST}:{PG_PORT}/test"
)
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# Random, so the same values would pass `marketplace serve`'s floor (secret_strength.py).
TEST_JWT_SECRET = "WSrWhMJlOT_-JNE3_fYC4uqeBrGhEZlRDTVwkG4-kZY"
TEST_ADMIN_TOKEN = "iTAyawEkTgAMJcmIPdEKmJ1sDq4L9rED35wQXUtYIQw"


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    if _port_open(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing service is a failure)")
    pytest.skip(message)


def _with_database(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


@contextmanager
def scratch_postgres(prefix: str) -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database named `prefix` and a random suffix, dropped
    (connections and all) afterwards; skipped where PostgreSQL does not answer."""
    require_service("PostgreSQL", PG_HOST, PG_PORT)
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
        # A commit need not wait for its WAL flush: only a crash of the server itself could
        # lose one, and a throw-away test database does not outlive the server.
        conn.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    try:
        yield _with_database(PG_ADMIN_URL, name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_base_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session (worker)."""
    with scratch_postgres("mk_") as url:
        upgrade(url)
        yield url


@pytest.fixture(scope="session")
def pg_reset(pg_base_url: str) -> Iterator[PgReset]:
    """The session database emptied and seeded with the demo model once, then snapshotted."""
    _truncate_all(pg_base_url)
    db = Database(pg_base_url)
    seed_demo_model(db)
    db.dispose()
    reset = PgReset(pg_base_url)
    yield reset
    reset.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file with the demo model; each test gets a copy."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    db = Database(url)
    seed_demo_model(db)
    db.dispose()
    return path


def _truncate_all(url: str) -> None:
    engine = create_engine(url)
    names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> str:
    if backend == "sqlite":
        path = tmp_path / "marketplace.db"
        shutil.copyfile(sqlite_template, path)
        return f"sqlite:///{path}"
    reset: PgReset = request.getfixturevalue("pg_reset")
    reset.reset()
    return reset.url


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings for this test's store; keyword overrides win."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "marketplace_data_dir": tmp_path / "data",
            "database_url": database_url,
            "jwt_secret": TEST_JWT_SECRET,
            "admin_token": TEST_ADMIN_TOKEN,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database.from_settings(settings)
    yield database
    database.dispose()


@pytest.fixture
def store(settings: Settings) -> LocalObjectStore:
    return LocalObjectStore(settings.objects_dir)


@pytest.fixture
def instance() -> Iterator[Any]:
    """An ephemeral Dagster instance (dagster imported only by the tests that ask for one)."""
    import dagster as dg

    with dg.DagsterInstance.ephemeral() as ephemeral:
        yield ephemeral


@pytest.fixture
def app(settings: Settings) -> Iterator[Any]:
    from api.app import create_app

    application = create_app(settings)
    yield application
    application.state.db.dispose()


@pytest.fixture
def client(app: Any) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def session_token(settings: Settings) -> Callable[..., str]:
    """Mint a session JWT for a user (admin=True also makes it an admin token)."""
    from pipeline.auth.sessions import issue_token

    def mint(user_id: str = "alice", admin: bool = False) -> str:
        return issue_token(settings, user_id, admin=admin)

    return mint


@pytest.fixture
def auth_headers(session_token: Callable[..., str]) -> Callable[..., dict[str, str]]:
    def headers(user_id: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {session_token(user_id)}"}

    return headers


@pytest.fixture
def platform_key(db: Database) -> Callable[..., str]:
    """Create a `platform` API key for a user and return its full value."""
    from pipeline.auth.keys import KeyCreate, create_key

    def create(user_id: str = "alice", **fields: Any) -> str:
        body = KeyCreate(name=fields.pop("name", "test key"), service_id="platform", **fields)
        with db.session() as session:
            return create_key(session, body, user_id=user_id).api_key

    return create


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's S3 and SQS over HTTP on a free loopback port."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_resources(moto_endpoint: str) -> dict[str, str]:
    """A fresh bucket whose object-created events go to a fresh SQS queue."""
    import boto3

    suffix = uuid.uuid4().hex[:10]
    bucket = f"mk-datasets-{suffix}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    queue_url = sqs.create_queue(QueueName=f"mk-arrivals-{suffix}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": queue_arn,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "datasets/"}]}},
                }
            ]
        },
    )
    return {"endpoint": moto_endpoint, "bucket": bucket, "queue_url": queue_url}


@pytest.fixture
def s3_settings(make_settings: Callable[..., Settings], s3_resources: dict[str, str]) -> Settings:
    return make_settings(
        service_dataset_bucket=s3_resources["bucket"],
        s3_endpoint_url=s3_resources["endpoint"],
        dataset_arrival_sqs_queue_url=s3_resources["queue_url"],
    )


@pytest.fixture
def redis_url() -> str:
    require_service("Redis", "127.0.0.1", 6379)
    return REDIS_URL


@pytest.fixture
def live(settings: Settings) -> Iterator[str]:
    """The app for the test's settings on a free loopback port (a real uvicorn); its base URL."""
    with serve(settings) as (base_url, _):
        yield base_url


@pytest.fixture
def run(live: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run `marketplace ARGS --url LIVE` in process; returns (exit status, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main([*args, "--url", live])
        out, err = capsys.readouterr()
        return status, out, err

    return invoke


@pytest.fixture
def cli(settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Any:
    """Run `marketplace ARGS` in process on this test's store (operator commands)."""
    from pipeline.core.config import get_settings

    monkeypatch.setenv("MARKETPLACE_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("DATABASE_URL", settings.resolved_database_url)
    get_settings.cache_clear()

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    yield run
    get_settings.cache_clear()
