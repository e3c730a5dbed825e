"""Dataset files read whole: CSV empty fields as nulls, JSON arrays and lines, bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.store.reading import UnreadableDataset, read_dataset


def sample_table() -> pa.Table:
    return pa.table({"name": ["a", "b", None], "score": [1.5, None, 3.0], "n": [1, 2, 3]})


def test_read_csv_reads_empty_fields_as_nulls(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("name,score,n\na,1.5,1\nb,,2\n,3.0,3\n")

    df = read_dataset(path, "csv")

    assert list(df.columns) == ["name", "score", "n"]
    assert df.isna().sum().to_dict() == {"name": 1, "score": 1, "n": 0}


def test_read_parquet(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    pq.write_table(sample_table(), path)

    df = read_dataset(path, ".PARQUET")

    assert df.shape == (3, 3)
    assert df["n"].tolist() == [1, 2, 3]


def test_read_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    rows = [{"name": "a", "score": 1.5}, {"name": "b", "score": None}, {"name": None, "n": 3}]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")

    df = read_dataset(path, "jsonl")

    assert sorted(df.columns) == ["n", "name", "score"]
    assert len(df) == 3


def test_read_json_array_keeps_keys_missing_from_the_first_row(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_text(json.dumps([{"name": "a"}, {"name": "b", "extra": 2}]))

    df = read_dataset(path, "json")

    assert sorted(df.columns) == ["extra", "name"]
    assert df["extra"].isna().tolist() == [True, False]


@pytest.mark.parametrize("file_format", ["csv", "parquet", "jsonl", "json"])
def test_garbage_file_is_rejected_without_quoting_it(tmp_path: Path, file_format: str) -> None:
    path = tmp_path / f"garbage.{file_format}"
    path.write_bytes(b"\x89\xff\x00secret@example.com\xfe{[\n" * 20)

    with pytest.raises(UnreadableDataset) as raised:
        read_dataset(path, file_format)

    assert isinstance(raised.value, ValueError)
    assert "secret" not in str(raised.value)


def test_malformed_csv_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n3,4,alice@example.com\n")

    with pytest.raises(UnreadableDataset, match="CSV") as raised:
        read_dataset(path, "csv")

    assert "alice" not in str(raised.value)


def test_unsupported_format_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "data.xlsx"
    path.write_bytes(b"PK")

    with pytest.raises(UnreadableDataset, match="unsupported"):
        read_dataset(path, "xlsx")
    with pytest.raises(FileNotFoundError):
        read_dataset(tmp_path / "absent.csv", "csv")
