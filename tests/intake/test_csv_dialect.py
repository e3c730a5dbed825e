"""CSV a reader would misread is refused the same way on every path (issue 33 §9, §12).

Through the benchmark upload route (the bytes checked as they arrive), `profile_path` (a complete
file) and the pipeline's `read_dataset`: a backslash-escaped quote, text after a closing quote, a
quote never closed and a NUL byte past the first 64 KiB are 400 with the documented body, and
nothing is stored; bare-CR line ends, quotes inside unquoted fields, a first column named
`[id]` and a header of 50,000 names are read as what they are.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pipeline.core.errors import InvalidInput
from pipeline.intake.profiles import profile_csv, profile_path, read_csv_head
from pipeline.intake.sniffing import HEAD_BYTES, MAX_HEAD_BYTES
from pipeline.store.dataset_batches import CsvSource
from pipeline.store.reading import UnreadableDataset, read_dataset
from tests.intake.test_uploads import (
    OWNER,
    SECRET_EMAIL,
    assert_nothing_stored,
    csv_bytes,
    no_temp_files_left,  # noqa: F401 (autouse: no refusal leaves a temp file)
    table,
    upload,
)


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key(OWNER, scopes=['benchmarks:write'])}"}


QUOTE_FAULT = "a quoted value is followed by other text before the next comma or line end"


def long_csv(rows: int = 8_000, **columns: list[Any]) -> bytes:
    """A churn CSV well past the 64 KiB head (the format sniffing's sample)."""
    data = csv_bytes(table(rows, **columns))
    assert len(data) > HEAD_BYTES
    return data


def with_row(data: bytes, row: bytes, at: int) -> bytes:
    """`data` with `row` (a line, its "\\n" included) as its data row number `at` (from 1)."""
    lines = data.splitlines(keepends=True)
    return b"".join([*lines[:at], row, *lines[at:]])


def refused_everywhere(client: Any, headers: Any, db: Any, settings: Any, data: bytes) -> str:
    """The reason the upload route gives (400, nothing stored), the same as `profile_path`'s and
    the pipeline's."""
    response = upload(client, headers, data)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert set(response.json()) == {"detail"}
    assert SECRET_EMAIL not in detail
    assert_nothing_stored(db, settings)
    path = settings.data_dir / "refused.csv"
    path.write_bytes(data)
    with pytest.raises(InvalidInput) as profiled:
        profile_path(path, settings)
    with pytest.raises(UnreadableDataset) as read:
        read_dataset(path, "csv")
    assert str(profiled.value) == str(read.value) == detail
    return str(detail)


# Refused (400).


@pytest.mark.parametrize("at", [1, 6_000], ids=["in-the-head", "past-the-head"])
def test_a_backslash_escaped_quote_is_400_naming_its_line(
    client, key_headers, db, settings, at
) -> None:
    # RFC 4180 doubles a quote inside a quoted value; pyarrow read this one as
    # 'some \escaped\" value"' and stored it (issue 33 §9).
    row = f'1,2,"some \\"escaped\\" value, {SECRET_EMAIL}",4,1\n'.encode()
    data = with_row(long_csv(), row, at)
    assert (data.index(b"\\") > HEAD_BYTES) == (at > 1)

    detail = refused_everywhere(client, key_headers, db, settings, data)

    assert detail == (
        f"not a valid CSV file: on line {at + 1}, {QUOTE_FAULT} (a quote inside a quoted value "
        'is written twice: "", not \\")'
    )


@pytest.mark.parametrize(
    "row",
    [b'1,2,"x" ,4,1\n', b'1,2,"a"b"c",4,1\n', b'1,2,"x""y"z,4,1\n'],
    ids=["space-after-the-quote", "text-between-quotes", "text-after-a-doubled-quote"],
)
def test_text_after_a_closing_quote_is_400(client, key_headers, db, settings, row) -> None:
    detail = refused_everywhere(client, key_headers, db, settings, with_row(long_csv(), row, 6_000))

    assert f"on line 6001, {QUOTE_FAULT}" in detail


def test_a_quote_never_closed_is_400(client, key_headers, db, settings) -> None:
    # pyarrow took the rest of the file as one value.
    data = long_csv() + f'1,2,"{SECRET_EMAIL} and all that follows,4,1\n'.encode()

    detail = refused_everywhere(client, key_headers, db, settings, data)

    assert detail.startswith("not a valid CSV file: a quoted value is not closed")


@pytest.mark.parametrize("byte", [b"\x00", b"\x1b"], ids=["NUL", "ESC"])
def test_a_control_byte_past_the_first_64_kib_is_400_like_one_in_the_head(
    client, key_headers, db, settings, byte
) -> None:
    data = with_row(long_csv(), b"1,2,month" + byte + b"-to-month,4,1\n", 6_000)
    assert data.index(byte) > HEAD_BYTES
    in_the_head = with_row(long_csv(), b"1,2,month" + byte + b"-to-month,4,1\n", 5)

    detail = refused_everywhere(client, key_headers, db, settings, data)

    assert detail == (
        f"the file is neither CSV nor Parquet (binary content: byte 0x{byte[0]:02x} on line 6001)"
    )
    head_detail = upload(client, key_headers, in_the_head).json()["detail"]
    assert head_detail.startswith("the file is neither CSV nor Parquet (binary content")


# Accepted as what they are.


def stored_rows(settings: Any, response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 201, response.text
    stored = settings.objects_dir / response.json()["s3_uri"]
    return list(read_dataset(stored, "csv").to_dict("records"))


def test_quotes_inside_unquoted_fields_and_doubled_quotes_are_read_as_written(
    client, key_headers, settings
) -> None:
    data = with_row(long_csv(), b'1,2,12" pipe,4,1\n', 10)
    data = with_row(data, b'1,2,"a ""quoted"" word, and a comma",4,1\n', 6_000)

    rows = stored_rows(settings, upload(client, key_headers, data))

    assert rows[9]["contract"] == '12" pipe'
    assert rows[5999]["contract"] == 'a "quoted" word, and a comma'


@pytest.mark.parametrize("rows", [60, 50_000], ids=["small", "over-1-mib"])
def test_bare_cr_line_ends_are_accepted(client, key_headers, settings, rows) -> None:
    # Old Mac files end lines with "\r" alone: pyarrow, Python's csv and Papa Parse read them.
    # Over 1 MiB, the head waited for a "\n" that never came (issue 33 §12).
    data = csv_bytes(table(rows)).replace(b"\n", b"\r")
    assert b"\n" not in data and (rows == 60 or len(data) > MAX_HEAD_BYTES)

    stored = stored_rows(settings, upload(client, key_headers, data))

    assert len(stored) == rows
    assert stored[-1]["contract"] == table(rows).column("contract")[-1].as_py()


@pytest.mark.parametrize("rows", [60, 8_000], ids=["whole-file-head", "cut-head"])
def test_a_first_column_named_in_brackets_is_csv_not_json(
    client, key_headers, settings, rows
) -> None:
    churn = table(rows)
    source = pa.table(
        {"[id]": list(range(rows)), **dict(zip(churn.column_names, churn.columns, strict=True))}
    )

    stored = stored_rows(settings, upload(client, key_headers, csv_bytes(source)))

    assert list(stored[0]) == source.column_names and len(stored) == rows


@pytest.mark.parametrize(
    "data",
    [
        json.dumps([{"a": i, "note": "x" * 40} for i in range(3_000)], indent=1).encode(),
        b"".join(json.dumps({"a": i, "b": "y"}).encode() + b"\n" for i in range(4_000)),
        b'[{"a": 1}, {"a": 2}]',
    ],
    ids=["array-past-the-head", "json-lines", "small-array"],
)
def test_json_is_still_refused_as_json(client, key_headers, db, settings, data) -> None:
    response = upload(client, key_headers, data)

    assert response.status_code == 400
    assert response.json() == {"detail": "the file looks like JSON; expected CSV or Parquet"}
    assert_nothing_stored(db, settings)


# A header of 50,000 names.


def test_a_header_only_csv_of_50_000_columns_is_refused_quickly_for_its_rows(
    client, key_headers, db, settings
) -> None:
    # Its header (338 KB) is longer than the fingerprints' 256 KiB blocks: it was refused as
    # "empty" after 46 s, most of them a quadratic column lookup (issue 33 §12).
    names = [f"c{i}" for i in range(50_000)]
    data = (",".join(names) + "\n").encode()
    started = time.perf_counter()

    response = upload(client, key_headers, data, target_column="c0", input_columns="c1")

    assert time.perf_counter() - started < 30
    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": "the file has 0 rows; at least 50 are needed; "
        "column(s) entirely empty: 'c0', 'c1'"
    }
    assert_nothing_stored(db, settings)


def test_the_fingerprints_reader_types_a_wide_header_in_linear_time() -> None:
    names = [f"c{i}" for i in range(50_000)]
    data = (",".join(names) + "\n1" + "," * (len(names) - 1) + "\n").encode()
    started = time.perf_counter()

    source = CsvSource(lambda: io.BytesIO(data), names)

    assert time.perf_counter() - started < 10  # 43 s with a list lookup per name
    assert list(source.types) == names
    assert source.types["c0"] == pa.float64()


def test_the_checks_read_a_wide_header_with_the_fingerprints_types_in_linear_time() -> None:
    # With a fingerprint plan the checks take the job's types for every column: a list lookup
    # per name made that quadratic too (30,000 names: 5 s of 8).
    names = [f"c{i}" for i in range(50_000)]
    data = (",".join(names) + "\n").encode()
    head = read_csv_head(data, at_eof=True)
    started = time.perf_counter()

    profile = profile_csv(
        lambda: io.BytesIO(data), head, None, typed=dict.fromkeys(names, pa.float64())
    )

    assert time.perf_counter() - started < 10
    assert (profile.row_count, profile.columns) == (0, names)


def test_profile_path_reads_a_cr_only_file_over_1_mib(tmp_path: Path) -> None:
    path = tmp_path / "cr.csv"
    path.write_bytes(csv_bytes(table(50_000)).replace(b"\n", b"\r"))

    assert profile_path(path, None).row_count == 50_000
