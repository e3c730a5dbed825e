"""The PII scan of a CSV upload reads every column that holds text, wherever the text starts.

An upload's CSV columns are typed from its head, the bytes that arrived first (64 KiB or more, up
to a newline); a column the head types as numbers or booleans may turn to text far below it
(`pipeline/intake/late_text.py`). These files are sent as the network delivers them: in pieces,
to a real server or to the intake. A TestClient sends the body in one piece, which makes the
whole file the head and hides the case.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from pipeline.checks.pii_scan import PiiReport
from pipeline.checks.pii_tables import scan_table
from pipeline.core.config import Settings
from pipeline.intake.profiles import profile_csv, read_csv_head
from pipeline.intake.receiving import DatasetIntake, upload_tmp_root
from pipeline.intake.sniffing import HEAD_BYTES
from pipeline.intake.uploads import early_fingerprint_plan
from pipeline.store import dataset_batches
from tests.intake.test_uploads import FEATURES, OWNER, TARGET, URL, assert_nothing_stored


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key(OWNER, scopes=['benchmarks:write'])}"}


CHUNK = 64 * 1024
HEAD_VALUES: dict[str, Callable[[int], str]] = {
    "integers": lambda i: str(1000 + i),
    "floats": lambda i: f"{i * 0.25}",
    "booleans": lambda i: ("true", "false")[i % 2],
}
NO_PLAN = "fields after the file"
FEATURES_ONLY = "planned, notes not a feature"
EVERY_FEATURE = "planned, notes a feature"


def turning_csv(head: Callable[[int], str], tail: list[str], rows: int = 40_000) -> bytes:
    """Churn rows whose `notes` are `head(i)`, then `tail` in the last rows: below the 64 KiB
    head and below the 1 MiB the fingerprints' reader types its columns from."""
    lines = [",".join([*FEATURES, TARGET, "notes"])]
    for i in range(rows):
        note = head(i) if i < rows - len(tail) else tail[i - rows + len(tail)]
        lines.append(f"{i % 121},{20 + i * 0.5},month-to-month,{i % 7},{i % 2},{note}")
    data = ("\n".join(lines) + "\n").encode()
    first = data[: data.index(b"\n", dataset_batches.CSV_HEAD_BYTES)]
    assert not any(value.encode() in first for value in tail)
    return data


def plan_fields(plan: str) -> dict[str, str]:
    inputs = "" if plan == EVERY_FEATURE else ",".join(FEATURES)
    return {"target_column": TARGET, "input_columns": inputs, "allow_pii": "false"}


def stream_upload(base_url: str, headers: dict[str, str], data: bytes, plan: str) -> Any:
    """POST a benchmark upload to a live server in 64 KiB pieces; `plan`: where the fields go
    (before the file, the intake fingerprints it while it arrives)."""
    boundary = "late-text-boundary"
    fields = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in plan_fields(plan).items()
    ]
    file_part = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode()
        + data
        + b"\r\n"
    )
    parts = [file_part, *fields] if plan == NO_PLAN else [*fields, file_part]
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    content_type = f"multipart/form-data; boundary={boundary}"
    return httpx.post(
        base_url + URL,
        headers={**headers, "Content-Type": content_type},
        content=(body[i : i + CHUNK] for i in range(0, len(body), CHUNK)),
        timeout=120,
    )


def received_in_pieces(settings: Settings, data: bytes, plan: str) -> PiiReport:
    """The PII report of `data` written to the intake in 64 KiB pieces (as the route does)."""
    with DatasetIntake(upload_tmp_root(settings), max_bytes=len(data), pii=settings) as intake:
        if plan != NO_PLAN:
            fingerprints = early_fingerprint_plan(plan_fields(plan), "classification")
            assert fingerprints is not None
            intake.plan_fingerprints(fingerprints)
        for start in range(0, len(data), CHUNK):
            intake.write(data[start : start + CHUNK])
        return intake.finish().profile.pii_report()


@pytest.mark.parametrize("plan", [FEATURES_ONLY, NO_PLAN])
def test_emails_below_a_head_of_numbers_are_refused_by_a_live_server(
    live, key_headers, db, settings, plan
) -> None:
    emails = [f"user{i}@example.com" for i in range(50)]
    data = turning_csv(HEAD_VALUES["integers"], emails)

    response = stream_upload(live, key_headers, data, plan)

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail == "PII found in 1 column(s): notes: EMAIL_ADDRESS (50) (allow_pii is false)"
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("plan", [FEATURES_ONLY, EVERY_FEATURE, NO_PLAN])
@pytest.mark.parametrize("kind", sorted(HEAD_VALUES))
def test_a_column_turning_to_text_below_the_head_is_scanned(settings, kind, plan) -> None:
    emails = [f"user{i}@example.com" for i in range(30)]

    report = received_in_pieces(settings, turning_csv(HEAD_VALUES[kind], emails), plan)

    assert report.findings == {"notes": {"EMAIL_ADDRESS": 30}}


@pytest.mark.parametrize("plan", [FEATURES_ONLY, NO_PLAN])
def test_the_numbers_above_the_turn_are_scanned_as_a_text_read_would(settings, plan) -> None:
    # Read whole, `notes` is a text column, and its phone-like numbers are candidates; a number
    # column (the same numbers, never turning) is not scanned (test_timestamps_and_ids_...).
    phones = lambda i: str(2125550000 + i % 100)  # noqa: E731
    turning = turning_csv(phones, ["pending", "pending"])
    numbers = turning_csv(phones, ["2125550100", "2125550101"])
    whole = pacsv.read_csv(io.BytesIO(turning)).select(["notes"])
    assert whole.schema.field("notes").type == pa.string()

    report = received_in_pieces(settings, turning, plan)

    assert report.findings == scan_table(whole, settings).findings
    assert report.findings == {"notes": {"PHONE_NUMBER": 100}}
    assert received_in_pieces(settings, numbers, plan).findings == {}


def test_only_a_column_that_turns_costs_a_second_read(settings) -> None:
    opened: list[int] = []

    def profile(data: bytes) -> PiiReport:
        opened.clear()

        def open_stream() -> io.BytesIO:
            opened.append(1)
            return io.BytesIO(data)

        head = read_csv_head(data[: data.index(b"\n", HEAD_BYTES) + 1], at_eof=False)
        assert "notes" not in head.text_columns
        return profile_csv(open_stream, head, settings, text=True).pii_report()

    steady = turning_csv(HEAD_VALUES["integers"], [])
    assert profile(steady).scanned_columns == ("contract",) and len(opened) == 1
    turning = turning_csv(HEAD_VALUES["integers"], ["user0@example.com"])
    assert profile(turning).findings == {"notes": {"EMAIL_ADDRESS": 1}} and len(opened) == 2
