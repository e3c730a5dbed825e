"""A benchmark upload fingerprinted while it arrives (pipeline/intake/streamed_fingerprints.py):
the same fingerprint file as the sequential builder's, and nothing left behind by a refusal."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline.checks.benchmark_fingerprints import fingerprint_benchmark_file
from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import InvalidInput
from pipeline.intake.profiles import profile_path
from pipeline.intake.receiving import DatasetIntake, upload_tmp_root
from pipeline.intake.streamed_fingerprints import FingerprintCancelled, FingerprintPlan
from pipeline.store import dataset_batches
from pipeline.store.formats import CSV, PARQUET
from tests.intake.test_uploads import _call, assert_nothing_stored, counts

MB = 1024 * 1024
TARGET = "churned"
INPUTS = ("tenure", "charges", "note")
PLAN = FingerprintPlan(TARGET, INPUTS, "test", "classification")
ROWS = 3_000


@pytest.fixture(autouse=True)
def small_csv_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Types are guessed from the first block: small blocks put the late text past it."""
    monkeypatch.setattr(dataset_batches, "CSV_BLOCK_BYTES", 4096)
    monkeypatch.setattr(dataset_batches, "CSV_HEAD_BYTES", 4096)


def benchmark_table(rows: int = ROWS) -> pa.Table:
    """Numbers, a number column that turns to text late, quoted text with newlines, a split."""
    tenure: list[Any] = [i % 121 for i in range(rows)]
    tenure[rows - 7] = "n/a-yet"  # far past the first block: the typed reader starts again
    notes = [f'ticket {i}, "asked"\nabout the\r\nplan {i % 13}' for i in range(rows)]
    return pa.table(
        {
            "tenure": pa.array([str(v) for v in tenure]),
            "charges": [round(20 + i * 0.37, 2) for i in range(rows)],
            "note": notes,
            "split": [("train", "test")[i % 3 == 0] for i in range(rows)],
            TARGET: [i % 2 for i in range(rows)],
        }
    )


def file_bytes(file_format: str, source: pa.Table) -> bytes:
    sink = io.BytesIO()
    if file_format == CSV:
        import pyarrow.csv as pacsv

        # Numbers as bare digits; text with commas, quotes or newlines inside quotes.
        pacsv.write_csv(source, sink, pacsv.WriteOptions(quoting_style="needed"))
    else:
        pq.write_table(source, sink, row_group_size=500)
    return sink.getvalue()


def sequential(
    path: Path, file_format: str, columns: list[str], tmp: Path, plan: FingerprintPlan = PLAN
) -> bytes:
    """The fingerprints of the whole file at `path`, built after its last byte."""
    out = tmp / f"sequential-{uuid.uuid4().hex}.fingerprints"
    fingerprint_benchmark_file(
        path,
        file_format,
        columns=columns,
        target_column=plan.target_column,
        input_columns=plan.input_columns,
        task_type=plan.task_type,
        eval_split=plan.eval_split,
        out=out,
        tmp_root=tmp,
    )
    return out.read_bytes()


def fingerprint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "upload-fingerprints"]


# The intake's job.


@pytest.mark.parametrize("file_format", [CSV, PARQUET])
def test_streamed_fingerprints_are_the_sequential_builders_byte_for_byte(
    tmp_path: Path, file_format: str
) -> None:
    data = file_bytes(file_format, benchmark_table())
    assert file_format == PARQUET or data.count(b"\n") > 2 * ROWS  # newlines inside values
    last = len(data) - 3000
    with DatasetIntake(tmp_path / "uploads", max_bytes=10 * MB, pii=None) as intake:
        intake.plan_fingerprints(PLAN)
        for start in range(0, last, 3000):
            intake.write(data[start : min(start + 3000, last)])
        if file_format == CSV:
            # Issue 19: the job has fingerprinted rows before the last byte has arrived, not
            # merely started (a job waiting for `finish` would take none).
            assert taken_before_the_end(intake) > 0
        intake.write(data[last:])
        received = intake.finish()
        job = intake.fingerprint_job
        assert job is not None
        summary = job.result()
        streamed = job.out.read_bytes()
        expected = sequential(received.path, file_format, received.profile.columns, tmp_path)
    assert summary.rows == ROWS // 3  # the evaluation split only
    assert streamed == expected


def taken_before_the_end(intake: DatasetIntake, timeout: float = 30.0) -> int:
    """The rows the intake's job has taken, once above zero or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        job = intake.fingerprint_job
        taken = 0 if job is None else job.rows_taken
        if taken > 0 or time.monotonic() > deadline:
            return taken
        time.sleep(0.01)


TYPED_PLAN = FingerprintPlan(TARGET, ("calls", "fiber", "plan"), "test", "classification")


def typed_csv(rows: int = ROWS, late: dict[str, str] | None = None) -> bytes:
    """Padded numbers, missing values, the CSV reader's boolean spellings, and `late` values
    put far past the first block."""
    calls = [(" 3", "4 ", "", "NA", "12")[i % 5] for i in range(rows)]
    fiber = [("True", "false", "1", "0", "TRUE", "")[i % 6] for i in range(rows)]
    columns = {"calls": calls, "fiber": fiber}
    for name, value in (late or {}).items():
        columns[name][rows - 12] = value  # an evaluation row
    lines = ["calls,fiber,plan,split,churned"] + [
        f"{c},{f},plan {i % 7},{('train', 'test')[i % 3 == 0]},{i % 2}"
        for i, (c, f) in enumerate(zip(columns["calls"], columns["fiber"], strict=True))
    ]
    return "\n".join(lines).encode() + b"\n"


def streamed(data: bytes, plan: FingerprintPlan, tmp_path: Path) -> tuple[Any, bytes]:
    """The upload of `data` in 3,000-byte writes: its received file and the job's fingerprints."""
    with DatasetIntake(tmp_path / "uploads", max_bytes=10 * MB, pii=None) as intake:
        intake.plan_fingerprints(plan)
        for start in range(0, len(data), 3000):
            intake.write(data[start : start + 3000])
        received = intake.finish()
        job = intake.fingerprint_job
        assert job is not None
        job.result()
        return received, job.out.read_bytes()


def streamed_and_sequential(data: bytes, tmp_path: Path) -> tuple[bytes, bytes]:
    path = tmp_path / "whole.csv"
    path.write_bytes(data)
    received, fingerprints = streamed(data, TYPED_PLAN, tmp_path)
    return fingerprints, sequential(path, CSV, received.profile.columns, tmp_path, TYPED_PLAN)


def test_the_job_fingerprints_the_checks_batches_without_reading_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    typed_read = dataset_batches.CsvSource.__call__

    def counted(self: dataset_batches.CsvSource) -> Any:
        reads.append(threading.get_ident())
        return typed_read(self)

    monkeypatch.setattr(dataset_batches.CsvSource, "__call__", counted)
    streamed, expected = streamed_and_sequential(typed_csv(), tmp_path)
    main = threading.get_ident()
    assert [ident for ident in reads if ident != main] == []  # the job read no file itself
    assert streamed == expected


RATE_PLAN = FingerprintPlan(TARGET, ("calls", "fiber", "rate", "plan"), "test", "classification")


@pytest.mark.parametrize("late", [None, {"calls": "n/a-yet"}, {"fiber": "tRuE"}])
def test_the_checks_profile_is_the_same_whether_they_read_numbers_typed_or_as_text(
    tmp_path: Path, late: dict[str, str] | None
) -> None:
    # `rate` holds only "NAN" (a number: NaN) and blanks: a value as text, so filled.
    lines = typed_csv(late=late).decode().splitlines()
    rows = [f"{line},{('NAN', '')[i % 2]}" for i, line in enumerate(lines[1:])]
    data = "\n".join([lines[0] + ",rate", *rows]).encode() + b"\n"
    path = tmp_path / "b.csv"
    path.write_bytes(data)
    as_text = profile_path(path, None)  # every column read as text
    received, fingerprints = streamed(data, RATE_PLAN, tmp_path)
    profile = received.profile
    assert (profile.row_count, profile.columns, profile.filled) == (
        as_text.row_count,
        as_text.columns,
        as_text.filled,
    )
    assert "rate" in profile.filled
    assert fingerprints == sequential(path, CSV, as_text.columns, tmp_path, RATE_PLAN)


def test_a_card_number_column_reaches_the_scan_as_its_digits_and_fingerprints_alike(
    tmp_path: Path,
) -> None:
    # Read as the job's float64, 41111111111111113 is 41111111111111112 (Luhn fails): the
    # checks read the column as text, the job converts it as its own reader parses it.
    cards = [41111111111111113, 60110009901394249, 4111111111111111, None, 12]
    lines = typed_csv().decode().splitlines()
    rows = [f"{line},{cards[i % 5] or ''}" for i, line in enumerate(lines[1:])]
    data = "\n".join([lines[0] + ",card_number", *rows]).encode() + b"\n"
    path = tmp_path / "cards.csv"
    path.write_bytes(data)
    plan = FingerprintPlan(TARGET, ("calls", "fiber", "card_number"), "test", "classification")
    settings = Settings(marketplace_data_dir=tmp_path / "data")
    with DatasetIntake(tmp_path / "uploads", max_bytes=10 * MB, pii=settings) as intake:
        intake.plan_fingerprints(plan)
        for start in range(0, len(data), 3000):
            intake.write(data[start : start + 3000])
        received = intake.finish()
        assert intake.fingerprint_job is not None
        intake.fingerprint_job.result()
        fingerprints = intake.fingerprint_job.out.read_bytes()
    assert received.profile.pii_report().findings == {"card_number": {"CREDIT_CARD": 3}}
    assert fingerprints == sequential(path, CSV, received.profile.columns, tmp_path, plan)


@pytest.mark.parametrize(
    "late",
    [
        {"fiber": "tRuE"},  # pyarrow's cast takes it, the CSV reader does not
        {"fiber": " true"},
        {"calls": "\u00a03"},  # padding the CSV reader does not strip
        {"calls": " NA"},
        {"calls": "3.5e2"},
    ],
)
def test_a_converted_batch_is_the_typed_readers_or_none(
    tmp_path: Path, late: dict[str, str]
) -> None:
    path = tmp_path / "b.csv"
    path.write_bytes(typed_csv(late=late))
    source = dataset_batches.csv_batches(lambda: path.open("rb"), ["calls", "fiber", "plan"])
    converted = [source.convert(batch) for batch in csv_batches_as_text(path)]
    try:
        typed: list[pa.RecordBatch] | None = list(source())
    except dataset_batches.RetypeColumns:
        typed = None  # the typed reader restarts with the column as text
    if typed is None:
        assert None in converted
    else:
        assert converted == typed
    # Either way the job's fingerprints are the sequential builder's.
    streamed, expected = streamed_and_sequential(path.read_bytes(), tmp_path)
    assert streamed == expected


def csv_batches_as_text(path: Path) -> list[pa.RecordBatch]:
    """The batches the intake's checks read (every column as text, the fingerprints' blocks)."""
    columns = path.read_text().split("\n", 1)[0].split(",")
    reader = pacsv.open_csv(
        str(path),
        read_options=pacsv.ReadOptions(
            use_threads=False, block_size=dataset_batches.CSV_BLOCK_BYTES
        ),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(columns, pa.string()), strings_can_be_null=True
        ),
    )
    return list(reader)


def test_closing_the_intake_mid_stream_cancels_the_job_and_removes_everything(
    tmp_path: Path,
) -> None:
    data = file_bytes(CSV, benchmark_table())
    intake = DatasetIntake(tmp_path / "uploads", max_bytes=10 * MB, pii=None)
    intake.plan_fingerprints(PLAN)
    intake.write(data[: len(data) // 2])
    job = intake.fingerprint_job
    assert job is not None
    intake.close()  # a refusal: the job waits for bytes that never come
    assert fingerprint_threads() == []
    with pytest.raises(FingerprintCancelled):
        job.result()
    assert not intake.dir.exists()


def test_a_csv_the_checks_refuse_cancels_the_job(tmp_path: Path) -> None:
    data = file_bytes(CSV, benchmark_table())
    broken = data + b'1,2.0,"x",test,1,surplus\n' + data.split(b"\n", 1)[1]
    with DatasetIntake(tmp_path / "uploads", max_bytes=10 * MB, pii=None) as intake:
        intake.plan_fingerprints(PLAN)
        for start in range(0, len(broken), 3000):
            intake.write(broken[start : start + 3000])
        with pytest.raises(InvalidInput, match="a row has 6 fields"):
            intake.finish()
        job = intake.fingerprint_job
    assert job is not None and fingerprint_threads() == []
    with pytest.raises(FingerprintCancelled):
        job.result()
    assert list((tmp_path / "uploads").iterdir()) == []


# Over HTTP.


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key('admin', scopes=['benchmarks:write'])}"}


def multipart(
    data: bytes, fields: dict[str, str], *, fields_after_file: bool = False
) -> tuple[str, bytes]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    file_part = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.csv"\r\n\r\n'
        ).encode()
        + data
        + b"\r\n"
    )
    parts = [*parts, file_part] if not fields_after_file else [file_part, *parts]
    return boundary, b"".join(parts) + f"--{boundary}--\r\n".encode()


def post(app: Any, headers: dict[str, str], boundary: str, body: bytes) -> tuple[int, dict]:
    headers = {**headers, "Content-Type": f"multipart/form-data; boundary={boundary}"}
    chunks = iter([body[i : i + 16 * 1024] for i in range(0, len(body), 16 * 1024)])
    status, answer, _ = _call(app, headers, chunks)
    return status, answer


FIELDS = {"target_column": TARGET, "input_columns": ",".join(INPUTS), "allow_pii": "false"}


@pytest.mark.parametrize("fields_after_file", [False, True])
def test_an_uploads_stored_fingerprints_are_the_sequential_builders(
    app: Any,
    key_headers: dict[str, str],
    settings: Settings,
    tmp_path: Path,
    fields_after_file: bool,
) -> None:
    data = file_bytes(CSV, benchmark_table())
    boundary, body = multipart(data, FIELDS, fields_after_file=fields_after_file)
    status, answer = post(app, key_headers, boundary, body)
    assert status == 201, answer
    stored = settings.objects_dir / "datasets" / "1" / "v1" / "b.csv"
    fingerprints = settings.objects_dir / "integrity" / "1" / "v1" / "benchmark.fingerprints"
    columns = list(benchmark_table().column_names)
    assert fingerprints.read_bytes() == sequential(stored, CSV, columns, tmp_path)
    assert fingerprint_threads() == []


@pytest.mark.parametrize(
    ("tail", "status"),
    [
        (b'1,2.0,"x",test,1,surplus\n', 400),  # a ragged row, refused while bytes arrive
        (b'1,2.0,"mail jane.doe@example.com",test,1\n', 422),  # PII, refused after the last
    ],
)
def test_a_refused_upload_stops_its_job_and_leaves_nothing(
    app: Any,
    key_headers: dict[str, str],
    db: Database,
    settings: Settings,
    tail: bytes,
    status: int,
) -> None:
    data = file_bytes(CSV, benchmark_table())
    data += tail + data.split(b"\n", 1)[1]  # the bad row in the middle
    boundary, body = multipart(data, FIELDS)
    answer_status, answer = post(app, key_headers, boundary, body)
    assert answer_status == status, answer
    assert "jane.doe" not in str(answer)
    assert fingerprint_threads() == []
    assert_nothing_stored(db, settings)
    assert counts(db) == (0, 0, 0)
    root = upload_tmp_root(settings)
    assert not root.exists() or list(root.iterdir()) == []
