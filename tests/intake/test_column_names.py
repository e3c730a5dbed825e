"""Column names of an uploaded file: checked in linear time, and free of control characters.

A header of tens of thousands of names is read in time linear in its length (the duplicate check
counted each name over the whole list: 30,000 names took a minute). A name holding a control
character (NUL breaks PostgreSQL text; the others logs and column matching) is refused with 422,
as a form field holding one is refused.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from typing import Any

import pytest

from pipeline.core.config import Settings
from pipeline.core.db import Database
from pipeline.core.errors import Unprocessable
from pipeline.intake.profiles import _ProfileBuilder, check_column_names, read_csv_head
from tests.intake.test_hostile_files import cancer_table, upload
from tests.intake.test_uploads import assert_nothing_stored
from tests.support.hostile_parquet import parquet_bytes

# Column names: checked in linear time, and free of control characters.


@pytest.fixture
def key_headers(platform_key: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {platform_key('admin')}"}  # the demo model's owner


def header_only_csv(names: list[str]) -> bytes:
    return (",".join(f'"{name}"' for name in names) + "\n").encode()


# 10,000 names: a header wider than the fingerprints' 256 KiB blocks is another matter.
@pytest.mark.parametrize("width", [3, 10_000])
def test_a_header_of_distinct_names_is_read(client: Any, key_headers: Any, width: int) -> None:
    names = [f"c{i}" for i in range(width)]

    head = read_csv_head(header_only_csv(names), at_eof=True)
    response = client.post(
        "/api/v1/benchmarks/upload/1",
        headers=key_headers,
        files={"file": ("wide.csv", header_only_csv(names))},
        data={"target_column": "c0", "input_columns": "c1,c2"},
    )

    assert head.columns == names
    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": "the file has 0 rows; at least 50 are needed; "
        "column(s) entirely empty: 'c0', 'c1', 'c2'"
    }


def test_the_duplicates_of_a_50_000_name_header_are_named(client: Any, key_headers: Any) -> None:
    names = [f"c{i}" for i in range(50_000)] + ["c7", "c49999", "c7"]

    response = upload(client, key_headers, header_only_csv(names), "wide.csv")

    assert response.status_code == 422, response.text
    assert response.json() == {"detail": "duplicate column names: 'c49999', 'c7'"}


def test_a_long_list_of_bad_names_is_cut_short() -> None:
    names = [f"c{i}" for i in range(30)] * 2
    with pytest.raises(Unprocessable) as refused:
        check_column_names(names)
    listed = ", ".join(map(repr, sorted(f"c{i}" for i in range(30))[:10]))
    assert str(refused.value) == f"duplicate column names: {listed} and 20 more"


class CountedName(str):
    """A column name that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_duplicate_check_compares_each_name_a_bounded_number_of_times() -> None:
    # list.count per name compared every pair: 50,000 names took minutes (defect 4).
    names: list[str] = [CountedName(f"c{i}") for i in range(2_000)]
    CountedName.compared = 0

    _ProfileBuilder(names, names, None)

    assert CountedName.compared <= len(names)


CONTROL_NAMES = ["multi\nline", "car\rriage", "tab\tbed", "del\x7fete", "next\x85line", "ff\x0c"]


@pytest.mark.parametrize("name", CONTROL_NAMES)
def test_a_csv_column_name_with_a_control_character_is_refused(
    client: Any, key_headers: Any, db: Database, settings: Settings, name: str
) -> None:
    data = (
        cancer_table()
        .to_pandas()
        .rename(columns={"mean radius": name})
        .to_csv(index=False, quoting=csv.QUOTE_ALL)
    )

    response = upload(client, key_headers, data.encode(), "bench.csv")

    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": f"column names must not contain control characters: {name!r}"
    }
    assert_nothing_stored(db, settings)


@pytest.mark.parametrize("name", ["no\x00te", "bad\x1bname", *CONTROL_NAMES])
def test_a_parquet_column_name_with_a_control_character_is_refused(
    client: Any, key_headers: Any, db: Database, settings: Settings, name: str
) -> None:
    table = cancer_table().rename_columns(
        [name if column == "mean radius" else column for column in cancer_table().column_names]
    )

    response = upload(client, key_headers, parquet_bytes(table, row_group_size=200), "b.parquet")

    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": f"column names must not contain control characters: {name!r}"
    }
    assert_nothing_stored(db, settings)
