"""Benchmark upload (spec §2.6, §2.10, §4.3, §6, §7, §8): intake, rules, PII, storage, limits."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.core.tables import ArrivalEvent, BenchmarkSpec, DatasetVersion
from pipeline.intake.profiles import csv_error_reason, profile_path
from pipeline.intake.receiving import stored_filename, upload_tmp_root
from pipeline.intake.sniffing import sniff_format
from pipeline.intake.uploads import BenchmarkForm, parse_form
from pipeline.store.formats import CSV, PARQUET
from pipeline.store.queue import parse_arrival_message

URL = "/api/v1/benchmarks/upload/1"
TARGET = "churned"
FEATURES = ["tenure_months", "monthly_charges", "contract", "support_calls"]
SECRET_EMAIL = "jane.doe@example.com"


# Files.


def table(rows: int = 60, /, **columns: list[Any]) -> pa.Table:
    """A churn-shaped table; keyword arguments replace or add columns."""
    data: dict[str, list[Any]] = {
        "tenure_months": [i % 121 for i in range(rows)],
        "monthly_charges": [round(20 + i * 0.5, 2) for i in range(rows)],
        "contract": [("month-to-month", "one-year", "two-year")[i % 3] for i in range(rows)],
        "support_calls": [i % 7 for i in range(rows)],
        TARGET: [i % 2 for i in range(rows)],
    }
    data.update(columns)
    return pa.table(data)


def csv_bytes(source: pa.Table | None = None, **columns: list[Any]) -> bytes:
    """CSV text of a table, written by hand so that None is an empty cell."""
    source = source if source is not None else table(**columns)
    names = source.column_names
    lines = [",".join(names)]
    for row in source.to_pylist():
        cells = []
        for name in names:
            value = row[name]
            text = "" if value is None else str(value)
            cells.append(f'"{text}"' if ("," in text or "\n" in text) else text)
        lines.append(",".join(cells))
    return ("\n".join(lines) + "\n").encode()


def parquet_bytes(source: pa.Table | None = None, **columns: list[Any]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(source if source is not None else table(**columns), sink)
    return sink.getvalue()


def encode(file_format: str, source: pa.Table | None = None, **columns: list[Any]) -> bytes:
    return (csv_bytes if file_format == CSV else parquet_bytes)(source, **columns)


def name_for(file_format: str) -> str:
    return "bench.csv" if file_format == CSV else "bench.parquet"


FIELDS = {"target_column": TARGET, "input_columns": ",".join(FEATURES)}


# HTTP helpers.


# The demo model belongs to the admin user (docs/ownership.md): its keys may upload.
OWNER = "admin"


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key(OWNER, scopes=['benchmarks:write'])}"}


def upload(
    client: Any,
    headers: dict[str, str],
    data: bytes,
    filename: str = "bench.csv",
    url: str = URL,
    **fields: str,
) -> Any:
    form = {**FIELDS, **fields}
    form = {k: v for k, v in form.items() if v is not None}
    return client.post(url, headers=headers, files={"file": (filename, data)}, data=form)


def counts(db: Database) -> tuple[int, int, int]:
    with db.session() as session:
        return (
            session.scalar(select(func.count()).select_from(BenchmarkSpec)) or 0,
            session.scalar(select(func.count()).select_from(DatasetVersion)) or 0,
            session.scalar(select(func.count()).select_from(ArrivalEvent)) or 0,
        )


def stored_files(settings: Settings) -> list[str]:
    root = settings.objects_dir
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def assert_nothing_stored(db: Database, settings: Settings) -> None:
    assert counts(db) == (0, 0, 0)
    assert stored_files(settings) == []


@pytest.fixture(autouse=True)
def no_temp_files_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test with a store: whatever happened, no upload temp file outlives its request."""
    if "make_settings" not in request.fixturenames:
        yield
        return
    root = upload_tmp_root(request.getfixturevalue("make_settings")())
    yield
    leftovers = list(root.iterdir()) if root.exists() else []
    assert leftovers == []


# Accepted uploads.


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
def test_accepted_upload_answers_201_with_the_stored_object(
    client, key_headers, db, settings, file_format
) -> None:
    data = encode(file_format)
    fields = {"eval_split": "holdout", "metric_name": "f1", "allow_pii": "false"}
    response = upload(client, key_headers, data, name_for(file_format), **fields)

    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"s3_uri", "sha256_hash", "spec_id", "filename", "file_size_bytes"}
    assert body["sha256_hash"] == hashlib.sha256(data).hexdigest()
    assert body["file_size_bytes"] == len(data)
    assert body["filename"] == name_for(file_format)
    # The local store has no bucket: the object key, never the server's folders (issue 21).
    assert body["s3_uri"] == f"datasets/1/v1/{name_for(file_format)}"
    assert str(settings.objects_dir) not in response.text
    uuid.UUID(body["spec_id"])
    stored = settings.objects_dir / "datasets" / "1" / "v1" / name_for(file_format)
    assert stored.read_bytes() == data

    with db.session() as session:
        spec = session.get(BenchmarkSpec, body["spec_id"])
        assert spec is not None
        version = session.get(DatasetVersion, spec.dataset_version_id)
        assert (spec.eval_split, spec.metric_name, spec.metric_direction) == (
            "holdout",
            "f1",
            "higher_is_better",
        )
        assert spec.target_column == TARGET
        assert spec.input_columns == FEATURES
        assert spec.allow_pii is False
        assert spec.row_count == 60
        assert spec.columns == [*FEATURES, TARGET]
        assert spec.created_by == OWNER
        assert spec.filename == name_for(file_format)
        assert (version.kind, version.version, version.version_number) == ("benchmark", "v1", 1)
        assert version.file_format == file_format
        assert version.sha256 == body["sha256_hash"]
        assert version.row_count == 60
        events = session.scalars(select(ArrivalEvent)).all()
    # The embedded arrival queue gets the S3-shaped event for the new object.
    assert len(events) == 1
    (arrival,) = parse_arrival_message(events[0].body)
    assert arrival.key == f"datasets/1/v1/{name_for(file_format)}"


def test_each_upload_is_the_next_version(client, key_headers, db) -> None:
    first = upload(client, key_headers, csv_bytes())
    second = upload(client, key_headers, parquet_bytes(), "bench.parquet")
    assert first.status_code == second.status_code == 201
    assert first.json()["s3_uri"].startswith("datasets/1/v1/")
    assert second.json()["s3_uri"].startswith("datasets/1/v2/")
    assert first.json()["spec_id"] != second.json()["spec_id"]
    assert counts(db) == (2, 2, 2)


def test_form_defaults_are_the_spec_defaults(client, key_headers, db) -> None:
    data = csv_bytes(table(target=[i % 2 for i in range(60)]))
    response = client.post(URL, headers=key_headers, files={"file": ("b.csv", data)})
    assert response.status_code == 201, response.text
    with db.session() as session:
        spec = session.get(BenchmarkSpec, response.json()["spec_id"])
        assert (spec.eval_split, spec.metric_name, spec.metric_direction) == (
            "test",
            "accuracy",
            "higher_is_better",
        )
        assert (spec.target_column, spec.input_columns, spec.allow_pii) == ("target", [], False)


def test_format_is_decided_by_content_and_the_name_is_sanitised(client, key_headers) -> None:
    response = upload(client, key_headers, parquet_bytes(), "../../etc/my data")
    assert response.status_code == 201, response.text
    assert response.json()["filename"] == "my_data.parquet"
    assert response.json()["s3_uri"] == "datasets/1/v1/my_data.parquet"


def test_csv_with_bom_quoted_newlines_and_many_blocks_is_accepted(client, key_headers) -> None:
    rows = 40_000  # about 2 MB: several of the checker's 1 MiB blocks
    notes = ["line one\nline two" if i % 1000 == 0 else "plain" for i in range(rows)]
    data = b"\xef\xbb\xbf" + csv_bytes(table(rows, notes=notes))
    response = upload(client, key_headers, data)
    assert response.status_code == 201, response.text
    assert response.json()["sha256_hash"] == hashlib.sha256(data).hexdigest()


def test_a_value_only_in_the_last_block_fills_the_column(client, key_headers) -> None:
    rows = 40_000
    late = [None] * (rows - 1) + [3]
    response = upload(client, key_headers, csv_bytes(table(rows, support_calls=late)))
    assert response.status_code == 201, response.text


# 422: content rules.


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
def test_fewer_than_50_rows_is_422(client, key_headers, db, settings, file_format) -> None:
    response = upload(client, key_headers, encode(file_format, table(49)), name_for(file_format))
    assert response.status_code == 422
    assert "49 rows" in response.json()["detail"]
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
@pytest.mark.parametrize(
    ("fields", "missing"),
    [
        ({"target_column": "label"}, "label"),
        ({"input_columns": "tenure_months,region"}, "region"),
    ],
)
def test_a_declared_column_missing_is_422(
    client, key_headers, db, settings, file_format, fields, missing
) -> None:
    response = upload(client, key_headers, encode(file_format), name_for(file_format), **fields)
    assert response.status_code == 422
    assert "missing" in response.json()["detail"]
    assert repr(missing) in response.json()["detail"]
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
@pytest.mark.parametrize(
    "empty",
    [
        {"support_calls": [None] * 60},
        {"contract": [None] * 30 + ["  "] * 30},
        {"monthly_charges": [float("nan")] * 60},
    ],
    ids=["nulls", "blanks", "nan"],
)
def test_a_declared_column_entirely_empty_is_422(
    client, key_headers, db, settings, file_format, empty
) -> None:
    (column,) = empty
    response = upload(client, key_headers, encode(file_format, **empty), name_for(file_format))
    assert response.status_code == 422
    assert "entirely empty" in response.json()["detail"]
    assert repr(column) in response.json()["detail"]
    assert_nothing_stored(db, settings)


def test_an_undeclared_empty_column_is_fine(client, key_headers) -> None:
    response = upload(client, key_headers, csv_bytes(table(notes=[None] * 60)))
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
def test_pii_is_422_naming_columns_and_types_never_values(
    client, key_headers, db, settings, file_format
) -> None:
    emails = [SECRET_EMAIL if i % 10 == 0 else "n/a" for i in range(60)]
    data = encode(file_format, table(contact=emails))
    response = upload(client, key_headers, data, name_for(file_format))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "contact" in detail and "EMAIL_ADDRESS" in detail
    assert SECRET_EMAIL not in detail and "jane" not in detail
    assert_nothing_stored(db, settings)

    allowed = upload(client, key_headers, data, name_for(file_format), allow_pii="true")
    assert allowed.status_code == 201, allowed.text


def test_pii_deep_in_a_large_csv_is_found(client, key_headers, db, settings) -> None:
    rows = 40_000
    ids = ["unknown"] * (rows - 1) + [SECRET_EMAIL]
    response = upload(client, key_headers, csv_bytes(table(rows, customer=ids)))
    assert response.status_code == 422
    assert "customer: EMAIL_ADDRESS" in response.json()["detail"]
    assert_nothing_stored(db, settings)


def test_pii_detection_disabled_accepts(make_settings, platform_key) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app

    app = create_app(make_settings(enable_pii_detection=False))
    headers = {"Authorization": f"Bearer {platform_key(OWNER)}"}
    with TestClient(app) as client:
        data = csv_bytes(table(contact=[SECRET_EMAIL] * 60))
        assert upload(client, headers, data).status_code == 201
    app.state.db.dispose()


# 400: not CSV or Parquet, bad form values.


# A file name and its content: bytes as they are, or the name of a recipe (None: a CSV file).
NOT_TABULAR: dict[str, tuple[str, bytes | str | None]] = {
    "png": ("image.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8),
    "zip": ("data.csv", b"PK\x03\x04\x14\x00\x00\x00" + b"x" * 100),
    "json": ("rows.csv", json.dumps([{"a": 1}] * 60).encode()),
    "latin-1": ("data.csv", "latin-1"),
    "empty": ("data.csv", b""),
    "parquet-named-csv": ("data.parquet", None),
    "csv-named-parquet": ("data.csv", "parquet"),
    "truncated-parquet": ("data.parquet", "truncated"),
    "parquet-magic-junk": ("data.parquet", b"PAR1" + b"\x00garbage" * 50 + b"PAR1"),
}


@pytest.mark.parametrize("case", list(NOT_TABULAR))
def test_content_that_is_not_csv_or_parquet_is_400(client, key_headers, db, settings, case) -> None:
    filename, data = NOT_TABULAR[case]
    if data is None:
        data = csv_bytes()
    elif data == "parquet":
        data = parquet_bytes()
    elif data == "truncated":
        data = parquet_bytes()[:-100]
    elif data == "latin-1":
        data = b"name,city\n" + "Zoë,Köln\n".encode("latin-1") * 60
    assert isinstance(data, bytes), data  # a recipe not handled above
    response = upload(client, key_headers, data, filename)
    assert response.status_code == 400, response.text
    assert response.json()["detail"]
    assert_nothing_stored(db, settings)


def test_a_malformed_csv_row_is_400_without_quoting_it(client, key_headers, db, settings) -> None:
    data = csv_bytes() + f"1,2,{SECRET_EMAIL},4,5,6\n".encode()
    response = upload(client, key_headers, data)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "6 fields where the header has 5" in detail
    assert SECRET_EMAIL not in detail
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize(
    "fields",
    [
        {"metric_direction": "sideways"},
        {"metric_name": "bleu"},
        {"metric_name": "rmse", "metric_direction": "lower_is_better"},  # regression metric
        {"metric_name": "accuracy", "metric_direction": "lower_is_better"},
        {"allow_pii": "maybe"},
        {"input_columns": f"{TARGET},tenure_months"},
        {"eval_split": "x" * 101},
    ],
)
def test_bad_form_values_are_400(client, key_headers, db, settings, fields) -> None:
    response = upload(client, key_headers, csv_bytes(), **fields)
    assert response.status_code == 400
    assert response.json()["detail"]
    assert_nothing_stored(db, settings)


def test_malformed_requests_are_400(client, key_headers, db, settings) -> None:
    no_file = client.post(URL, headers=key_headers, data=FIELDS, files={"other": ("x", b"1")})
    assert no_file.status_code == 400
    only_fields = client.post(
        URL,
        headers={**key_headers, "Content-Type": "multipart/form-data; boundary=xyz"},
        content=b'--xyz\r\nContent-Disposition: form-data; name="eval_split"\r\n\r\ntest\r\n'
        b"--xyz--\r\n",
    )
    assert only_fields.status_code == 400
    assert "'file' is required" in only_fields.json()["detail"]
    unknown = upload(client, key_headers, csv_bytes(), metric="accuracy")
    assert unknown.status_code == 400
    assert "metric" in unknown.json()["detail"]
    not_multipart = client.post(URL, headers=key_headers, json={"file": "a,b"})
    assert not_multipart.status_code == 400
    truncated = client.post(
        URL,
        headers={**key_headers, "Content-Type": "multipart/form-data; boundary=xyz"},
        content=b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n\r\n'
        + csv_bytes(),
    )
    assert truncated.status_code == 400
    two_files = client.post(
        URL,
        headers=key_headers,
        files=[("file", ("a.csv", csv_bytes())), ("file", ("b.csv", csv_bytes()))],
    )
    assert two_files.status_code == 400
    assert_nothing_stored(db, settings)


# 401, 403, 404.


def test_upload_needs_a_platform_key_with_the_scope(client, db, platform_key) -> None:
    from pipeline.auth.keys import KeyCreate, create_key

    data = csv_bytes()
    assert upload(client, {}, data).status_code == 401
    assert upload(client, {"Authorization": "Bearer nope"}, data).status_code == 401
    other_scope = {"Authorization": f"Bearer {platform_key(OWNER, scopes=['schedules:write'])}"}
    assert upload(client, other_scope, data).status_code == 403
    with db.session() as session:
        prediction = create_key(
            session, KeyCreate(name="p", service_id="prediction"), user_id=OWNER
        ).api_key
    assert upload(client, {"Authorization": f"Bearer {prediction}"}, data).status_code == 403
    assert counts(db) == (0, 0, 0)


@pytest.mark.parametrize(("model_id", "status"), [("999", 404), (str(2**40), 400)])
def test_unknown_model_is_404(client, key_headers, db, model_id, status) -> None:
    # An id beyond the 32-bit range the document states is a bad request, not a lookup.
    url = f"/api/v1/benchmarks/upload/{model_id}"
    response = upload(client, key_headers, csv_bytes(), url=url)
    assert response.status_code == status
    assert counts(db) == (0, 0, 0)


# 413: the size limit, enforced while streaming.


LIMIT = 200_000


@pytest.fixture
def small_app(make_settings: Callable[..., Settings]) -> Iterator[Any]:
    from api.app import create_app

    app = create_app(make_settings(upload_max_bytes=LIMIT))
    yield app
    app.state.db.dispose()


def test_a_file_over_the_limit_is_413(small_app, key_headers, db, settings) -> None:
    from fastapi.testclient import TestClient

    big = csv_bytes(table(9000))
    assert len(big) > LIMIT
    with TestClient(small_app) as client:
        response = upload(client, key_headers, big)
        assert response.status_code == 413
        at_limit = big[:LIMIT]
        at_limit = at_limit[: at_limit.rfind(b"\n") + 1]
        assert upload(client, key_headers, at_limit).status_code == 201
    assert counts(db)[0] == 1


def _scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def _call(app: Any, headers: dict[str, str], chunks: Iterator[bytes]) -> tuple[int, dict, int]:
    """Drive the ASGI app with a streamed body; (status, JSON body, body bytes it pulled)."""
    pulled = 0

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(_scope(headers), receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), pulled


def endless_csv_body(boundary: str, chunk_size: int = 64 * 1024) -> Iterator[bytes]:
    """A multipart body whose file never ends: only a reader that stops can answer."""
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="target_column"\r\n\r\n'
        f"{TARGET}\r\n--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="big.csv"\r\n\r\n'
    ).encode()
    yield csv_bytes()
    line = b"1,20.5,one-year,3,0\n"
    block = line * (chunk_size // len(line))
    for _ in range(10_000):  # ~650 MB: far beyond any limit used here
        yield block
    raise AssertionError("the server read the whole endless body")


def test_a_chunked_body_without_content_length_stops_at_the_limit(
    small_app, key_headers, db, settings
) -> None:
    boundary = uuid.uuid4().hex
    headers = {
        **key_headers,
        "Content-Type": f"multipart/form-data; boundary={boundary}",
        "Transfer-Encoding": "chunked",
    }
    status, body, pulled = _call(small_app, headers, endless_csv_body(boundary))
    assert status == 413
    assert "exceeds" in body["detail"]
    assert pulled < LIMIT + 3 * 64 * 1024
    assert_nothing_stored(db, settings)


def test_a_declared_content_length_over_the_limit_is_413_before_reading(
    small_app, key_headers
) -> None:
    headers = {
        **key_headers,
        "Content-Type": "multipart/form-data; boundary=x",
        "Content-Length": str(LIMIT + 2 * 1024 * 1024),
    }
    status, _, pulled = _call(small_app, headers, endless_csv_body("x"))
    assert status == 413
    assert pulled == 0


# Failures between the object write and the commit.


def _failing_record(monkeypatch: pytest.MonkeyPatch) -> None:
    import pipeline.intake.uploads as uploads

    real = uploads.record_benchmark

    def record_then_fail(session: Any, **kwargs: Any) -> Any:
        real(session, **kwargs)  # rows flushed inside the transaction ...
        raise RuntimeError("injected failure before commit")  # ... then it fails

    monkeypatch.setattr(uploads, "record_benchmark", record_then_fail)


def test_a_failure_before_commit_leaves_neither_object_nor_rows(
    app, key_headers, db, settings, monkeypatch
) -> None:
    from fastapi.testclient import TestClient

    _failing_record(monkeypatch)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = upload(client, key_headers, csv_bytes())
    assert response.status_code == 500
    assert_nothing_stored(db, settings)


# S3 (moto over HTTP) with the S3 → SQS notification.


def _bucket_keys(settings: Settings) -> list[str]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=settings.s3_endpoint_url, region_name="us-east-1")
    listing = s3.list_objects_v2(Bucket=settings.service_dataset_bucket)
    return [obj["Key"] for obj in listing.get("Contents", [])]


def _queued_keys(settings: Settings, wait_for: str | None, seconds: float = 10) -> list[str]:
    import boto3

    sqs = boto3.client("sqs", endpoint_url=settings.s3_endpoint_url, region_name="us-east-1")
    keys: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        messages = sqs.receive_message(
            QueueUrl=settings.dataset_arrival_sqs_queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
        ).get("Messages", [])
        for message in messages:
            keys += [arrival.key for arrival in parse_arrival_message(message["Body"])]
        if wait_for is None or wait_for in keys:
            break
    return keys


@pytest.fixture
def s3_app(s3_settings: Settings) -> Iterator[Any]:
    from api.app import create_app

    app = create_app(s3_settings)
    yield app
    app.state.db.dispose()


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
def test_on_s3_the_object_is_put_and_announced_through_sqs(
    s3_app, s3_settings, key_headers, db, file_format
) -> None:
    from fastapi.testclient import TestClient

    data = encode(file_format)
    with TestClient(s3_app) as client:
        response = upload(client, key_headers, data, name_for(file_format))
    assert response.status_code == 201, response.text
    key = f"datasets/1/v1/{name_for(file_format)}"
    assert response.json()["s3_uri"] == f"s3://{s3_settings.service_dataset_bucket}/{key}"
    assert response.json()["sha256_hash"] == hashlib.sha256(data).hexdigest()
    # The rows' fingerprints are kept outside `datasets/`, where nothing counts as an arrival.
    assert _bucket_keys(s3_settings) == [key, "integrity/1/v1/benchmark.fingerprints"]
    assert key in _queued_keys(s3_settings, wait_for=key)
    # The bucket notification announces the object: no local arrival event is written.
    assert counts(db) == (1, 1, 0)


def test_on_s3_rejections_and_failures_leave_no_object(
    s3_app, s3_settings, key_headers, db, monkeypatch
) -> None:
    from fastapi.testclient import TestClient

    with TestClient(s3_app, raise_server_exceptions=False) as client:
        assert upload(client, key_headers, csv_bytes(table(10))).status_code == 422
        assert upload(client, key_headers, b"\x00\x01binary").status_code == 400
        _failing_record(monkeypatch)
        assert upload(client, key_headers, csv_bytes()).status_code == 500
    assert _bucket_keys(s3_settings) == []
    assert counts(db) == (0, 0, 0)


# OpenAPI.


def test_openapi_describes_the_multipart_body(client) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/api/v1/benchmarks/upload/{model_id}"][
        "post"
    ]
    schema = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["required"] == ["file"]
    props = schema["properties"]
    assert props["file"]["format"] == "binary"
    defaults = {name: props[name].get("default") for name in props if name != "file"}
    assert defaults == {
        "eval_split": "test",
        "metric_name": "accuracy",
        "metric_direction": "higher_is_better",
        "target_column": "target",
        "input_columns": "",
        "allow_pii": False,
    }
    assert {"201", "400", "401", "403", "404", "413", "422"} <= set(operation["responses"])


# Domain units.


def test_sniffing_by_content() -> None:
    assert sniff_format(b"PAR1\x15\x04", at_eof=False) == PARQUET
    assert sniff_format(b"a,b\n1,2\n", at_eof=True) == CSV
    # A multi-byte character cut at the end of the head is not an encoding error ...
    assert sniff_format("name\nZoë".encode()[:-1], at_eof=False) == CSV
    # ... but at the end of the file it is.
    with pytest.raises(InvalidInput):
        sniff_format("name\nZoë".encode()[:-1], at_eof=True)
    for data in (b"", b"  \n", b"\x00\x01\x02", b'{"a": 1}', b"\x1f\x8b\x08\x00"):
        with pytest.raises(InvalidInput):
            sniff_format(data, at_eof=True)


@pytest.mark.parametrize(
    ("name", "file_format", "expected"),
    [
        ("data.csv", CSV, "data.csv"),
        ("C:\\Users\\me\\Q3 data.CSV", CSV, "Q3_data.CSV"),
        ("../../x.parquet", PARQUET, "x.parquet"),
        (".hidden", CSV, "hidden.csv"),
        ("report.txt", CSV, "report.txt.csv"),
        ("..", PARQUET, "dataset.parquet"),
        (None, CSV, "dataset.csv"),
        ("é" * 300 + ".csv", CSV, "dataset.csv"),
        ("a" * 300 + ".csv", CSV, "a" * 200 + ".csv"),
    ],
)
def test_stored_filename(name: str | None, file_format: str, expected: str) -> None:
    assert stored_filename(name, file_format) == expected  # type: ignore[arg-type]


def test_form_parsing() -> None:
    assert parse_form({}) == BenchmarkForm()
    form = parse_form(
        {"input_columns": " a, b,,a ", "allow_pii": "TRUE", "eval_split": " ", "target_column": "y"}
    )
    assert form.input_columns == ("a", "b")
    assert form.allow_pii is True
    assert form.eval_split == "test"
    assert form.declared_columns == ["y", "a", "b"]
    with pytest.raises(InvalidInput):
        parse_form({"metric_name": "r2"}, "classification")
    assert parse_form({"metric_name": "r2"}, "regression").metric_name == "r2"


def test_csv_errors_never_quote_the_data() -> None:
    reason = csv_error_reason(
        pa.ArrowInvalid(f"CSV parse error: Expected 2 columns, got 3: {SECRET_EMAIL}")
    )
    assert SECRET_EMAIL not in reason


def test_profiles_of_complete_files(tmp_path: Path) -> None:
    path = tmp_path / "b.parquet"
    path.write_bytes(parquet_bytes(table(70, notes=[None] * 70)))
    profile = profile_path(path, Settings(marketplace_data_dir=tmp_path))
    assert (profile.file_format, profile.row_count) == (PARQUET, 70)
    assert "notes" not in profile.filled and "contract" in profile.filled
    report = profile.pii_report()  # every value of the text columns met the pre-filter
    assert (report.scanned_columns, report.scanned_values) == (("contract",), 70)
    assert not report.found
    assert profile_path(path, None).pii_report().skipped
    duplicate = tmp_path / "dup.csv"
    duplicate.write_bytes(b"a,a\n1,2\n")
    with pytest.raises(Unprocessable):
        profile_path(duplicate, None)
