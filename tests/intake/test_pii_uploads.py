"""The PII rule holds for the whole uploaded file (spec §4.3 allow_pii): every text value counts.

Files are real CSV and Parquet, written by pyarrow, sent through the upload route; the PII sits
where a head sample never looks: the last rows, the last row group, a second text column. The
server's MAX_SAMPLE_SIZE is 2,000 here: a sample of the first 2,000 distinct values (the scan
before issue 20) would miss every one of them; now it only bounds how many distinct candidates
Presidio confirms.
"""

from __future__ import annotations

import io
import random
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline.core.config import Settings
from tests.intake.test_uploads import FEATURES, OWNER, TARGET, assert_nothing_stored, upload


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(max_sample_size=2_000)


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key(OWNER, scopes=['benchmarks:write'])}"}


CITIES = ["Lyon", "Porto", "Leeds", "Graz", "Turin", "Ghent", "Cork", "Brno"]

PII = {
    "EMAIL_ADDRESS": lambda i: f"write to jane.doe{i}@example.com, she knows",
    "PHONE_NUMBER": lambda i: f"call +1 212-555-{i % 10000:04d}, after 5pm",
    "CREDIT_CARD": lambda i: "paid with 4111 1111 1111 1111, thanks",
    "IBAN_CODE": lambda i: "refund to DE89 3704 0044 0532 0130 00, asap",
}


def churn_table(rows: int, seed: int = 3, **text: list[Any]) -> pa.Table:
    """Churn-shaped rows with a distinct, clean free-text `note` (ids and order numbers in it)."""
    rng = np.random.default_rng(seed)
    notes = [
        f"order {i} for customer {7000 + i % 9000}-VHV, to {CITIES[i % 8]}, ref ORD-{i % 97}"
        for i in range(rows)
    ]
    columns: dict[str, Any] = {
        "tenure_months": rng.integers(0, 121, rows),
        "monthly_charges": np.round(rng.uniform(20, 120, rows), 2),
        "contract": [("month-to-month", "one-year", "two-year")[i % 3] for i in range(rows)],
        "support_calls": rng.integers(0, 8, rows),
        "note": notes,
        TARGET: rng.integers(0, 2, rows),
    }
    columns.update(text)
    return pa.table(columns)


def with_tail(values: list[str], tail: list[str]) -> list[str]:
    return values[: len(values) - len(tail)] + tail


def csv_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pacsv.write_csv(table, sink)  # strings quoted: the commas inside notes stay in the value
    return sink.getvalue()


def parquet_bytes(table: pa.Table, row_group_size: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=row_group_size)
    return sink.getvalue()


def assert_refused(response: Any, column: str, entity: str, count: int) -> None:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert f"{column}: {entity} ({count})" in detail
    assert "@example.com" not in detail and "4111" not in detail and "DE89" not in detail


def test_emails_only_in_the_last_1000_of_151000_csv_rows_are_refused(
    client, key_headers, db, settings
) -> None:
    rows = 151_000
    base = churn_table(rows)
    notes = base.column("note").to_pylist()
    tail = [PII["EMAIL_ADDRESS"](i) for i in range(1000)]
    data = csv_bytes(base.set_column(4, "note", pa.array(with_tail(notes, tail))))

    response = upload(client, key_headers, data, "bench.csv", allow_pii="false")

    assert_refused(response, "note", "EMAIL_ADDRESS", 1000)
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("entity", sorted(PII))
def test_each_kind_in_the_last_csv_rows_inside_quoted_text_with_commas(
    client, key_headers, db, settings, entity
) -> None:
    rows = 5_000
    base = churn_table(rows)
    tail = [PII[entity](i) for i in range(5)]
    data = csv_bytes(
        base.set_column(4, "note", pa.array(with_tail(base.column("note").to_pylist(), tail)))
    )
    assert b'"' + tail[-1].encode() + b'"' in data  # quoted, commas inside

    response = upload(client, key_headers, data, "bench.csv")

    distinct = len(set(tail))
    assert_refused(response, "note", entity, distinct)
    assert_nothing_stored(db, settings)


def test_pii_only_in_the_last_parquet_row_group_of_a_second_text_column(
    client, key_headers, db, settings
) -> None:
    rows = 20_000
    contacts = [f"customer portal user {i}" for i in range(rows)]
    contacts = with_tail(contacts, [PII["PHONE_NUMBER"](i) for i in range(20)])
    data = parquet_bytes(churn_table(rows, contact=contacts), row_group_size=5_000)
    assert pq.ParquetFile(io.BytesIO(data)).num_row_groups == 4

    response = upload(client, key_headers, data, "bench.parquet")

    assert_refused(response, "contact", "PHONE_NUMBER", 20)
    assert "note" not in response.json()["detail"]
    assert_nothing_stored(db, settings)


def test_pii_only_in_the_last_dictionary_encoded_row_group(client, key_headers, db, settings):
    rows = 8_000
    codes = [f"segment {i % 3000}" for i in range(rows - 1)] + [PII["IBAN_CODE"](0)]
    table = churn_table(rows, segment=pa.array(codes).dictionary_encode())
    data = parquet_bytes(table, row_group_size=2_000)

    response = upload(client, key_headers, data, "bench.parquet")

    assert_refused(response, "segment", "IBAN_CODE", 1)
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_clean_file_with_order_numbers_and_ids_is_accepted(
    client, key_headers, file_format
) -> None:
    # Long digit runs that merely look like patterns reach Presidio and are not PII.
    rows = 2_000
    orders = [f"ORD-2024-{i % 300 * 3217:06d}, batch {i % 50}" for i in range(rows)]
    ids = [f"{7000 + i}-VHV{chr(65 + i % 26)}G" for i in range(rows)]
    table = churn_table(rows, order=orders, customer_id=ids)
    data = csv_bytes(table) if file_format == "csv" else parquet_bytes(table, 500)
    fields = {"input_columns": ",".join(FEATURES)}

    response = upload(client, key_headers, data, f"bench.{file_format}", **fields)

    assert response.status_code == 201, response.text


def test_emails_after_a_long_run_of_numbers_in_a_csv_column_are_refused(
    client, key_headers, db, settings
) -> None:
    # The CSV reader infers the column as numbers from its first block; the text further down
    # must still be scanned, not skipped as a number column.
    rows = 20_000
    refs: list[Any] = [str(100_000 + i) for i in range(rows)]
    refs = with_tail(refs, [PII["EMAIL_ADDRESS"](i) for i in range(10)])
    data = csv_bytes(churn_table(rows, ref=refs))
    head = data[: 256 * 1024].decode()
    assert "@example.com" not in head and head.count("\n") > 2_000

    response = upload(client, key_headers, data, "bench.csv")

    assert_refused(response, "ref", "EMAIL_ADDRESS", 10)
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_phone_numbers_written_as_integers_in_the_last_rows_are_refused(
    client, key_headers, db, settings, file_format
) -> None:
    rows = 20_000
    phones: list[int | None] = [None] * rows
    phones[-3:] = [4155550123, 3065551234, 2125550199]  # typed int64 in the file
    table = churn_table(rows, mobilePhone=pa.array(phones, pa.int64()))
    data = csv_bytes(table) if file_format == "csv" else parquet_bytes(table, 5_000)

    response = upload(client, key_headers, data, f"bench.{file_format}")

    assert_refused(response, "mobilePhone", "PHONE_NUMBER", 3)
    assert_nothing_stored(db, settings)


def test_phone_numbers_in_a_parquet_decimal_column_are_refused(
    client, key_headers, db, settings
) -> None:
    # Parquet's exact numbers: a phone column exported from a database's NUMERIC(12, 2).
    rows = 20_000
    phones: list[Decimal | None] = [None] * rows
    phones[-2:] = [Decimal("4155550123.00"), Decimal("3065551234.00")]
    table = churn_table(rows, contact_phone=pa.array(phones, pa.decimal128(12, 2)))

    response = upload(client, key_headers, parquet_bytes(table, 5_000), "bench.parquet")

    assert_refused(response, "contact_phone", "PHONE_NUMBER", 2)
    assert_nothing_stored(db, settings)


def test_timestamps_and_ids_written_as_integers_are_accepted(client, key_headers) -> None:
    # Most 10-digit numbers are valid phone numbers for some region: number columns not named
    # for contact numbers are not scanned, or every file with epoch seconds would be refused.
    rows = 2_000
    table = churn_table(
        rows,
        created_at=pa.array(range(1_732_579_200, 1_732_579_200 + rows), pa.int64()),
        account_id=pa.array(range(4_155_550_000, 4_155_550_000 + rows), pa.int64()),
    )
    fields = {"input_columns": ",".join(FEATURES)}

    response = upload(client, key_headers, csv_bytes(table), "bench.csv", **fields)

    assert response.status_code == 201, response.text


# Luhn-valid; Presidio's card pattern takes up to 17 digits.
CARDS = ["4111111111111111", "41111111111111113", "60110009901394249"]


@pytest.mark.parametrize("input_columns", ["", "card_number", ",".join([*FEATURES, "card_number"])])
def test_card_numbers_above_2_to_53_in_a_fingerprinted_column_are_refused(
    client, key_headers, db, settings, input_columns
) -> None:
    # A fingerprinted number column's reader parses float64: 41111111111111113 would reach the
    # scan as 41111111111111112, which fails Luhn. The scan must see the file's digits.
    rows = 60
    cards = [int(CARDS[i % 3]) for i in range(rows)]
    data = csv_bytes(churn_table(rows, card_number=pa.array(cards, pa.int64())))
    assert float(cards[1]) != cards[1] and float(cards[2]) != cards[2]

    response = upload(client, key_headers, data, "bench.csv", input_columns=input_columns)

    assert_refused(response, "card_number", "CREDIT_CARD", 3)
    assert_nothing_stored(db, settings)


def addresses(rows: int) -> list[str]:
    return [f"jane.doe{i % 5}@example.com" for i in range(rows)]


NESTED_COLUMNS: dict[str, Callable[[list[str]], pa.Array]] = {
    "list": lambda e: pa.array([["n/a", v] for v in e], pa.list_(pa.string())),
    "large_list": lambda e: pa.array([[v] for v in e], pa.large_list(pa.large_string())),
    "list_of_structs": lambda e: pa.array(
        [[{"kind": "work", "email": v}] for v in e],
        pa.list_(pa.struct([("kind", pa.string()), ("email", pa.string())])),
    ),
    "struct": lambda e: pa.array(
        [{"id": i, "email": v} for i, v in enumerate(e)],
        pa.struct([("id", pa.int64()), ("email", pa.string())]),
    ),
    "map_items": lambda e: pa.array([[("email", v)] for v in e], pa.map_(pa.string(), pa.string())),
    "map_keys": lambda e: pa.array([[(v, 1)] for v in e], pa.map_(pa.string(), pa.int32())),
    # A byte that is not UTF-8 in every value: the text around it is still read.
    "binary": lambda e: pa.array([b"\xff " + v.encode() for v in e], pa.binary()),
    "large_binary": lambda e: pa.array([v.encode() for v in e], pa.large_binary()),
    "fixed_size_binary": lambda e: pa.array([v.encode().ljust(24) for v in e], pa.binary(24)),
    "string_view": lambda e: pa.array(e, pa.string_view()),
}


@pytest.mark.parametrize("kind", sorted(NESTED_COLUMNS))
def test_emails_in_nested_binary_and_view_parquet_columns_are_refused(
    client, key_headers, db, settings, kind
) -> None:
    rows = 60
    column = NESTED_COLUMNS[kind](addresses(rows))
    data = parquet_bytes(churn_table(rows, contact_info=column), row_group_size=20)
    assert pq.read_schema(io.BytesIO(data)).field("contact_info").type == column.type

    response = upload(client, key_headers, data, "bench.parquet", allow_pii="false")

    assert_refused(response, "contact_info", "EMAIL_ADDRESS", 5)
    assert_nothing_stored(db, settings)


def test_a_phone_column_of_float16_is_a_valid_file(client, key_headers) -> None:
    # float16 holds no whole number of 8 digits (its largest is 65504): nothing to scan.
    table = churn_table(60, phone=pa.array(np.full(60, 1000.0, dtype=np.float16)))
    fields = {"input_columns": ",".join(FEATURES)}

    response = upload(client, key_headers, parquet_bytes(table, 20), "bench.parquet", **fields)

    assert response.status_code == 201, response.text


def test_a_uint64_phone_column_above_2_to_63_is_scanned_and_never_quoted(
    client, key_headers, db, settings
) -> None:
    phones = [2**64 - 1] * 59 + [4155550123]
    table = churn_table(60, phone=pa.array(phones, pa.uint64()))

    response = upload(client, key_headers, parquet_bytes(table, 20), "bench.parquet")

    assert_refused(response, "phone", "PHONE_NUMBER", 1)
    assert str(2**64 - 1) not in response.text
    assert_nothing_stored(db, settings)


NESTED_PHONES: dict[str, Callable[[list[int | None]], pa.Array]] = {
    "struct<phone:int64>": lambda p: pa.array(
        [{"phone": v, "visits": 20240101123} for v in p],
        pa.struct([("phone", pa.int64()), ("visits", pa.int64())]),
    ),
    "list<struct<mobile:uint64>>": lambda p: pa.array(
        [[{"mobile": v}] for v in p], pa.list_(pa.struct([("mobile", pa.uint64())]))
    ),
}


@pytest.mark.parametrize("kind", sorted(NESTED_PHONES))
def test_phone_numbers_in_number_leaves_of_nested_parquet_columns_are_refused(
    client, key_headers, db, settings, kind
) -> None:
    # The field's name says what its numbers are, as a column's does (issue 33 §12); only the
    # last row group holds them.
    rows = 6_000
    phones: list[int | None] = [None] * rows
    phones[-3:] = [4155550123, 3065551234, 2125550199]
    table = churn_table(rows, contact=NESTED_PHONES[kind](phones))

    response = upload(client, key_headers, parquet_bytes(table, 2_000), "bench.parquet")

    assert_refused(response, "contact", "PHONE_NUMBER", 3)
    assert "4155550123" not in response.text
    assert_nothing_stored(db, settings)


def test_number_leaves_under_other_names_are_not_scanned(client, key_headers) -> None:
    # 10-digit ids in a struct field not named for contact numbers: as in a number column.
    ids = pa.array(
        [{"account_id": 4_155_550_000 + i, "visits": i} for i in range(60)],
        pa.struct([("account_id", pa.int64()), ("visits", pa.int64())]),
    )
    fields = {"input_columns": ",".join(FEATURES)}

    data = parquet_bytes(churn_table(60, stats=ids), 20)

    response = upload(client, key_headers, data, "bench.parquet", **fields)

    assert response.status_code == 201, response.text


def test_a_column_of_10_000_uuids_is_not_pii(client, key_headers) -> None:
    # Seeded UUIDs, like the UUID column of parquet-testing's lz4_raw_compressed_larger.parquet:
    # their digit groups held 13 valid phone numbers ("06206166", "4940-8881") and a Luhn-valid
    # card ("55797805-6403-4830"), and the clean file was refused (issue 33 §11).
    rng = random.Random(33)
    ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(10_000)]
    table = churn_table(10_000, request_id=pa.array(ids))
    fields = {"input_columns": ",".join(FEATURES)}

    response = upload(client, key_headers, parquet_bytes(table, 5_000), "bench.parquet", **fields)

    assert response.status_code == 201, response.text


def test_card_numbers_in_full_width_digits_are_refused(client, key_headers, db, settings) -> None:
    # As East Asian input methods type them (U+FF10..FF19), with ASCII, ideographic (U+3000)
    # or full-width hyphen (U+FF0D) separators (issue 33 §12).
    cards = [
        "４１１１１１１１１１１１１１１１",
        "カード ５５００ ００００ ００００ ０００４",
        "３７８２　８２２４６３　１０００５",
        "６０１１－０００９－９０１３－９４２４",
    ]
    rows = 2_000
    table = churn_table(rows, note=with_tail([f"order {i}" for i in range(rows)], cards))

    response = upload(client, key_headers, csv_bytes(table), "bench.csv")

    assert_refused(response, "note", "CREDIT_CARD", 4)
    assert "４１１１" not in response.text
    assert_nothing_stored(db, settings)
