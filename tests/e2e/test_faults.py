"""Faults (issue 13): a server killed mid-upload, a database that drops away, a Redis that is down,
an SQS message delivered twice. Each leaves the documented state (docs/operations.md)."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from sqlalchemy import func, make_url, select

from pipeline.auth.keys import KeyCreate, create_key
from pipeline.auth.ratelimit import REDIS_KEY_PREFIX, KeyRateLimiter, storage_for
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import RateLimited
from pipeline.core.tables import (
    ArrivalEvent,
    BenchmarkSpec,
    Contribution,
    DatasetArrival,
    DatasetVersion,
    Model,
    utcnow,
)
from pipeline.core.tempfiles import locked_temp_dir, locked_temp_file, sweep
from pipeline.demo.churn_data import churn_rows
from pipeline.intake.receiving import DatasetIntake, upload_tmp_root
from pipeline.store.objectstore import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    dataset_key,
    object_store_from_settings,
)
from pipeline.store.queue import QueueMessage, SqsArrivalQueue
from pipeline.triggers.drain import DrainReport, handle_message
from tests.conftest import TEST_ADMIN_TOKEN
from tests.support.processes import ADMIN_TOKEN, Started, log_of, start_serve, started_processes

MB = 1024 * 1024


@pytest.fixture
def started() -> Iterator[Started]:
    yield from started_processes()


# --- abandoned temp files ------------------------------------------------------------------------


def test_sweep_removes_only_temp_dirs_whose_process_died(tmp_path: Path) -> None:
    root = tmp_path / "uploads"
    # A process that takes a temp folder the way an upload does, then dies by SIGKILL.
    code = (
        "import os, sys, time; from pathlib import Path; "
        "from pipeline.core.tempfiles import locked_temp_dir; "
        f"path, fd = locked_temp_dir(Path({str(root)!r}), 'upload-'); "
        "(path / 'upload.part').write_bytes(b'x' * 1000); print(path, flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    dead_dir = Path(child.stdout.readline().decode().strip())
    assert sweep(root, "upload-*") == 0  # its writer is alive: left alone
    child.send_signal(signal.SIGKILL)
    child.wait()

    live = DatasetIntake(root, max_bytes=MB, pii=None)
    live.write(b"a,b\n1,2\n")
    assert sweep(root, "upload-*") == 1
    assert not dead_dir.exists()
    assert live.dir.is_dir() and live.path.is_file()  # an upload in progress keeps its file
    live.close()
    assert list(root.iterdir()) == []


def test_a_temp_dir_removed_before_its_lock_is_replaced(tmp_path: Path) -> None:
    # The sweep may take a brand-new folder's lock first; the writer then gets another folder.
    first, fd = locked_temp_dir(tmp_path, "upload-")
    os.close(fd)
    assert sweep(tmp_path, "upload-*") == 1
    second, fd = locked_temp_dir(tmp_path, "upload-")
    assert second.is_dir() and second != first
    os.close(fd)


# --- a server killed halfway through a 200 MB upload ----------------------------------------------

UPLOAD_BYTES = 200 * MB
FORM = {"target_column": "churned", "input_columns": "tenure_months,monthly_charges,contract"}


def csv_block(rows: int = 5000) -> tuple[bytes, bytes]:
    """The header line and a block of real-shaped demo rows, repeated to make a large file."""
    data = churn_rows(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(data[0]))
    writer.writeheader()
    header = out.getvalue().encode()
    writer.writerows(data)
    return header, out.getvalue().encode()[len(header) :]


class HalfSentUpload(threading.Thread):
    """A 200 MB multipart upload that sends half its bytes, then waits (it is never finished)."""

    def __init__(self, url: str, api_key: str) -> None:
        super().__init__(daemon=True)
        boundary = uuid.uuid4().hex
        self.head = "".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
            for name, value in FORM.items()
        ).encode()
        self.head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="bench.csv"\r\nContent-Type: text/csv\r\n\r\n'
        ).encode()
        self.tail = f"\r\n--{boundary}--\r\n".encode()
        self.header, self.block = csv_block()
        self.blocks = math.ceil((UPLOAD_BYTES - len(self.header)) / len(self.block))
        self.length = len(self.head) + len(self.header) + self.blocks * len(self.block)
        self.length += len(self.tail)
        self.url = url
        self.headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(self.length),
        }
        self.half_sent = threading.Event()
        self.release = threading.Event()

    def body(self) -> Iterator[bytes]:
        yield self.head + self.header
        for i in range(self.blocks):
            if i == self.blocks // 2:
                self.half_sent.set()
                self.release.wait(60)
            yield self.block
        yield self.tail

    def run(self) -> None:
        # The server is killed under it.
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(self.url, content=self.body(), headers=self.headers, timeout=60)


def upload_parts(data_dir: Path) -> list[Path]:
    root = data_dir / "tmp" / "uploads"
    return sorted(root.rglob("*")) if root.exists() else []


def create_upload_key(url: str) -> str:
    response = httpx.post(
        f"{url}/api/v1/keys",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        json={"name": "fault test", "service_id": "platform", "scopes": ["benchmarks:write"]},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["api_key"])


@pytest.mark.slow
def test_sigkill_halfway_through_a_200mb_upload_leaves_nothing_after_restart(
    tmp_path: Path, started: Started
) -> None:
    data_dir = tmp_path / "data"
    proc, url = start_serve(tmp_path, started)
    api_key = create_upload_key(url)
    upload = HalfSentUpload(f"{url}/api/v1/benchmarks/upload/1", api_key)
    upload.start()
    assert upload.half_sent.wait(60)
    # Wait until the server has written what it received: about 100 MB in its temp file.
    deadline = time.monotonic() + 30
    part = None
    while time.monotonic() < deadline:
        parts = [p for p in upload_parts(data_dir) if p.name == "upload.part"]
        if parts and parts[0].stat().st_size >= 95 * MB:
            part = parts[0]
            break
        time.sleep(0.05)
    assert part is not None, log_of(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    upload.release.set()
    upload.join(30)
    assert part.exists()  # what a killed process leaves behind

    proc, url = start_serve(tmp_path, started)
    assert upload_parts(data_dir) == []
    objects = data_dir / "objects"
    # The demo owner's code, stored when `serve` seeded the models, is the only object expected.
    stored = [p.relative_to(objects) for p in objects.rglob("*") if p.is_file()]
    assert [p for p in stored if p.parts[0] != "trainers"] == []
    db = Database(f"sqlite:///{data_dir / 'marketplace.db'}")
    try:
        with db.session() as session:
            for table in (BenchmarkSpec, DatasetVersion, ArrivalEvent):
                assert session.scalar(select(func.count()).select_from(table)) == 0
            model = session.get(Model, 1)
            assert model is not None
            assert model.last_version == 0  # no version number used
    finally:
        db.dispose()

    # The next upload is the first version.
    header, block = csv_block(200)
    response = httpx.post(
        f"{url}/api/v1/benchmarks/upload/1",
        headers={"Authorization": f"Bearer {api_key}"},
        files={"file": ("bench.csv", header + block)},
        data=FORM,
        timeout=60,
    )
    assert response.status_code == 201, response.text
    assert response.json()["s3_uri"].startswith("datasets/1/v1/")


def test_app_start_removes_abandoned_upload_dirs_and_object_temp_files(
    settings: Settings,
) -> None:
    from api.app import create_app

    stale, fd = locked_temp_dir(upload_tmp_root(settings), "upload-")
    (stale / "upload.part").write_bytes(b"x" * 1024)
    os.close(fd)  # as the kernel does when the process dies
    version_dir = settings.objects_dir / "datasets" / "1" / "v9"
    version_dir.mkdir(parents=True)
    half_object, fd = locked_temp_file(version_dir, TEMP_PREFIX, TEMP_SUFFIX)
    os.write(fd, b"half an object")
    os.close(fd)
    in_use, in_use_fd = locked_temp_file(version_dir, TEMP_PREFIX, TEMP_SUFFIX)

    app = create_app(settings)
    app.state.db.dispose()
    assert not stale.exists()
    assert not half_object.exists()
    assert in_use.exists()  # a live writer's (here: ours) is left alone
    os.close(in_use_fd)


# --- PostgreSQL unreachable for a moment ----------------------------------------------------------


class TcpProxy:
    """A loopback TCP proxy to `upstream` that the test can cut (connections reset, new ones
    refused) and restore on the same port."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.listener: socket.socket | None = None
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.restore()

    def restore(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and reset every open one, as a network outage would."""
        if self.listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone would not.
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
            self.listener = None
        with self.lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    # An RST instead of a polite FIN: SO_LINGER with a zero timeout.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    conn.close()
            self.connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self.lock:
                self.connections += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.close()


def contribution(rows: int = 5) -> dict[str, Any]:
    return {"modelId": 1, "benchmarkSpecId": None, "rows": churn_rows(rows)}


def stored_objects(settings: Settings) -> list[Path]:
    root = settings.objects_dir
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@pytest.mark.parametrize("backend", ["postgres"])
def test_postgres_unreachable_gives_503_with_retry_after_and_recovers(
    database_url: str,
    make_settings: Callable[..., Settings],
    auth_headers: Callable[..., dict[str, str]],
    db: Database,
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    url = make_url(database_url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    settings = make_settings(database_url=url.set(port=proxy.port).render_as_string(False))
    app = create_app(settings)
    with db.session() as session:
        key = create_key(
            session, KeyCreate(name="k", service_id="platform"), user_id="alice"
        ).api_key
    headers = auth_headers()
    contributions = "/api/models/1/contributions"
    try:
        with TestClient(app) as client:
            assert (
                client.post(contributions, json=contribution(), headers=headers).status_code == 202
            )
            objects_before = stored_objects(settings)

            proxy.cut()
            for method, path, extra in (
                ("POST", contributions, {"json": contribution()}),
                ("GET", "/api/models/1/data-spec", {}),
                ("GET", "/api/v1/whoami", {"headers": {"Authorization": f"Bearer {key}"}}),
            ):
                response = client.request(method, path, **{"headers": headers, **extra})
                assert response.status_code == 503, (path, response.text)
                assert response.json() == {"detail": "the database is unavailable; retry shortly"}
                assert int(response.headers["Retry-After"]) > 0
            assert stored_objects(settings) == objects_before  # nothing half-written

            proxy.restore()
            # Recovers by itself: the pool drops the dead connections on its next checkout.
            again = client.post(contributions, json=contribution(), headers=headers)
            assert again.status_code == 202, again.text
            who = client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {key}"})
            assert who.status_code == 200
    finally:
        proxy.cut()
        app.state.db.dispose()
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Contribution)) == 2
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 2
    assert len(stored_objects(settings)) == 2


# --- Redis unreachable: the limits still hold, per process ---------------------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_redis_unreachable_limits_still_hold_in_memory(caplog: pytest.LogCaptureFixture) -> None:
    limiter = KeyRateLimiter(storage_for(f"redis://127.0.0.1:{closed_port()}/0"))
    key_id = str(uuid.uuid4())
    with caplog.at_level(logging.WARNING, logger="pipeline.auth.ratelimit"):
        for _ in range(10):
            limiter.hit(key_id, 10)
        with pytest.raises(RateLimited) as refused:
            limiter.hit(key_id, 10)
    assert 3590 <= (refused.value.retry_after or 0) <= 3600
    assert limiter.degraded
    warnings = [r for r in caplog.records if r.name == "pipeline.auth.ratelimit"]
    assert len(warnings) == 1
    assert "memory" in warnings[0].getMessage()


def test_redis_back_after_an_outage_is_used_again(redis_url: str) -> None:
    import redis

    target = urlsplit(redis_url)
    proxy = TcpProxy((target.hostname or "127.0.0.1", target.port or 6379))
    try:
        limiter = KeyRateLimiter(
            storage_for(f"redis://127.0.0.1:{proxy.port}/0"), retry_seconds=0.3
        )
        key_id = str(uuid.uuid4())
        proxy.cut()
        limiter.hit(key_id, 10)
        assert limiter.degraded
        proxy.restore()
        time.sleep(0.4)
        limiter.hit(key_id, 10)
        assert not limiter.degraded
        server = redis.Redis.from_url(redis_url)
        names = list(server.scan_iter(f"{REDIS_KEY_PREFIX}:*{key_id}*"))
        assert names, "the hit after the outage is not in Redis"
        server.delete(*names)
    finally:
        proxy.cut()


def test_api_with_redis_unreachable_answers_429_past_the_limit(
    make_settings: Callable[..., Settings],
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(make_settings(redis_url=f"redis://127.0.0.1:{closed_port()}/0"))
    admin = {"Authorization": f"Bearer {TEST_ADMIN_TOKEN}"}
    try:
        with TestClient(app) as client:
            created = client.post(
                "/api/v1/keys",
                json={"name": "limited", "service_id": "platform", "rate_limit_per_hour": 10},
                headers=admin,
            ).json()
            key = {"Authorization": f"Bearer {created['api_key']}"}
            answers = [client.get("/api/v1/whoami", headers=key) for _ in range(12)]
    finally:
        app.state.db.dispose()
    assert [r.status_code for r in answers] == [200] * 10 + [429] * 2
    assert int(answers[-1].headers["Retry-After"]) > 0


# --- the same SQS message delivered more than once, at the same time -----------------------------


def queue_depth(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def notification_for(sqs: Any, queue_url: str, key: str) -> dict[str, Any]:
    """The bucket's notification for `key` as received (other messages are deleted)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for message in sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
        ).get("Messages", []):
            if quote(key, safe="") in message["Body"]:  # moto URL-encodes keys, as S3 does
                return dict(message)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    raise AssertionError(f"no notification for {key}")


def test_same_sqs_message_delivered_four_times_at_once_records_one_arrival(
    s3_settings: Settings, s3_resources: dict[str, str], db: Database
) -> None:
    import boto3

    endpoint, bucket, queue_url = (s3_resources[k] for k in ("endpoint", "bucket", "queue_url"))
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
    key = dataset_key(1, "v1", "data.csv")
    header, block = csv_block(100)
    s3.put_object(Bucket=bucket, Key=key, Body=header + block)
    first = notification_for(sqs, queue_url, key)
    # At-least-once delivery: the visibility timeout lapses (the same message comes back) and
    # copies of it are in the queue too.
    sqs.change_message_visibility(
        QueueUrl=queue_url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    for _ in range(3):
        sqs.send_message(QueueUrl=queue_url, MessageBody=first["Body"])

    queue = SqsArrivalQueue(queue_url, sqs, wait_seconds=1)
    deliveries: list[QueueMessage] = []
    while len(deliveries) < 4:
        received = queue.receive(1)
        assert received, "a delivery went missing"
        deliveries += received
    store = object_store_from_settings(s3_settings)
    reports = [DrainReport() for _ in deliveries]
    together = threading.Barrier(len(deliveries))

    def consume(index: int) -> None:
        together.wait()
        handle_message(
            queue,
            deliveries[index],
            db,
            store,
            reports[index],
            now=utcnow(),
            expected_bucket=bucket,
        )

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(len(deliveries))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    with db.session() as session:
        rows = session.scalars(select(DatasetArrival).where(DatasetArrival.object_key == key))
        assert len(list(rows)) == 1
        assert session.scalar(select(func.count()).select_from(DatasetVersion)) == 1
    assert sum(len(r.recorded) for r in reports) == 1
    assert sum(r.duplicates for r in reports) == 3
    assert queue_depth(sqs, queue_url) == 0  # every delivery was settled, none left to retry
