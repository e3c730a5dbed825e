"""The PII scan of every Arrow column type a Parquet file can hold: each width of number in a
contact-number column (`pii_numbers.long_numbers`), and the text leaves of nested and binary
columns, with their number leaves under contact names (`pii_nested`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.checks import pii_nested, pii_numbers, pii_tables
from pipeline.core.config import Settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(marketplace_data_dir=tmp_path_factory.mktemp("pii"))


@pytest.mark.parametrize(
    ("column", "digits"),
    [
        (
            pa.array([2**64 - 1, 4155550123, 12, None], pa.uint64()),
            ["18446744073709551615", "4155550123"],
        ),
        (pa.array([-4155550123, 4155550123, 7], pa.int64()), ["-4155550123", "4155550123"]),
        (pa.array([100, 27], pa.int8()), []),
        (pa.array([65504.0, float("nan"), None], pa.float16()), []),
    ],
    ids=["uint64", "int64", "int8", "float16"],
)
def test_long_numbers_of_every_number_type(column: pa.Array, digits: list[str]) -> None:
    assert pii_numbers.long_numbers(column).to_pylist() == digits


def test_nested_text_reads_every_text_leaf_of_a_slice_and_contact_numbers_only(
    settings: Settings,
) -> None:
    emails = pa.array(["a@example.com", "b@example.com", None, "c@example.com"])
    # A number leaf is scanned when a name on its path says it holds contact numbers (the
    # struct field "phone"), as its long values' digits; other number leaves ("visits") are not.
    struct = pa.StructArray.from_arrays(
        [emails, pa.array([4155550123, 4155550124, 12, None]), pa.array([20240101123] * 4)],
        names=["email", "phone", "visits"],
    )
    listed = pa.ListArray.from_arrays(pa.array([0, 1, 3, 4]), struct)
    mapped = pa.array(
        [[("k0", "x@example.com")], [("k1", None)], [("k2", "y@example.com")]],
        pa.map_(pa.string(), pa.string()),
    )

    # A slice's leaves only: map keys and items, struct fields, list values past its offset.
    assert pii_nested.nested_text(mapped.slice(1)).to_pylist() == [
        "k1",
        "k2",
        None,
        "y@example.com",
    ]
    assert pii_nested.nested_text(listed.slice(1)).to_pylist() == [
        "b@example.com",
        None,
        "c@example.com",
        "4155550124",
    ]
    assert not pii_nested.holds_nested_text(pa.list_(pa.int64()))
    assert pii_nested.holds_nested_text(pa.list_(pa.int64()), "phones")
    assert pii_nested.holds_nested_text(pa.struct([("mobile", pa.int64())]))
    assert not pii_nested.holds_nested_text(pa.struct([("visits", pa.int64())]), "stats")
    assert not pii_nested.holds_nested_text(pa.string())

    report = pii_tables.scan_table(pa.table({"contacts": listed.slice(1)}), settings)

    assert report.findings == {"contacts": {"EMAIL_ADDRESS": 2, "PHONE_NUMBER": 1}}
