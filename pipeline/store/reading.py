"""Dataset files read whole into a DataFrame: CSV, Parquet, a JSON array or JSON lines.

"Valid CSV/JSON/Parquet" (spec §8) is decided here: `read_dataset` raises UnreadableDataset
before any check runs. A CSV's bytes first meet the upload's text check (control bytes, quotes
outside RFC 4180: `pipeline.store.csv_text`), so a file the upload refuses is unreadable here
too. CSV and Parquet are read within a memory budget derived from the file's
size, and a Parquet footer that claims more rows or bytes than the file holds makes the file
unreadable (`pipeline.store.bounded_read`), so a hostile file fails instead of exhausting memory.
A Parquet file is read here only after a child process has read it whole and survived
(`pipeline.store.parquet_probe`), so a file that stops the native reader fails the read, not
the process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
from pyarrow import json as pa_json

from pipeline.store.bounded_read import DatasetBoundsError, read_csv_table, read_parquet_table
from pipeline.store.csv_text import MalformedCsv, check_csv_file
from pipeline.store.formats import EXTENSIONS
from pipeline.store.json_columns import json_columns
from pipeline.store.parquet_envelope import EncryptedParquet
from pipeline.store.parquet_probe import ParquetReaderFailed, check_parquet_file


class UnreadableDataset(ValueError):
    """The file is not valid in the format it claims; the message never quotes its content."""


# The frame attribute naming a stored contribution's JSON-text columns
# (pipeline.store.json_columns).
JSON_COLUMNS_ATTR = "json_columns"


def read_dataset(path: str | Path, file_format: str) -> pd.DataFrame:
    """Read a CSV, Parquet, JSON array or JSON-lines file into a DataFrame with pyarrow.

    Empty CSV fields are read as nulls, so that they count against completeness.
    Raises UnreadableDataset (a ValueError) for an unsupported format or an unreadable file,
    FileNotFoundError when there is no file.
    """
    # A format name ("csv") or an extension (".csv", ".jsonl"): the one table says which.
    kind = EXTENSIONS.get("." + file_format.lower().lstrip("."))
    if kind is None:
        raise UnreadableDataset(
            f"unsupported dataset format {file_format!r}: expected one of "
            + ", ".join(sorted(name.lstrip(".") for name in EXTENSIONS))
        )
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no dataset file at {source}")
    try:
        table = _READERS[kind](source)
        frame = table.to_pandas()
        frame.attrs[JSON_COLUMNS_ATTR] = sorted(json_columns(table.schema))
        return frame
    except MalformedCsv as exc:
        # Its message names the line and what is wrong, so it is kept whole.
        raise UnreadableDataset(str(exc)) from None
    except (DatasetBoundsError, ParquetReaderFailed) as exc:
        # Its message names counts and sizes only, so it is kept whole.
        raise UnreadableDataset(f"not a trustworthy {kind.upper()} file: {exc}") from None
    except EncryptedParquet as exc:
        raise UnreadableDataset(str(exc)) from None
    except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
        raise UnreadableDataset(f"not a valid {kind.upper()} file ({_reason(exc)})") from None


# Readers.


def _read_csv(path: Path) -> pa.Table:
    check_csv_file(path)
    return read_csv_table(path)


def _read_parquet(path: Path) -> pa.Table:
    # Read natively here only once a child process has read it whole and survived.
    check_parquet_file(path)
    return read_parquet_table(path)


def _read_json(path: Path) -> pa.Table:
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
    if head.startswith(b"["):
        # A JSON array of row objects; pyarrow's reader only takes one object per line.
        rows = json.loads(path.read_bytes())
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ValueError("a JSON dataset must be an array of objects")
        if not rows:
            return pa.table({})
        # pa.array infers one struct type over all rows; from_pylist would keep only the
        # keys of the first row.
        return pa.Table.from_struct_array(pa.array(rows))
    return pa_json.read_json(path)


_READERS = {"csv": _read_csv, "parquet": _read_parquet, "json": _read_json}


def _reason(exc: BaseException) -> str:
    # Parser messages end with the offending line or value ("...: got 'x,y'"): keep the head.
    text = str(exc).split(":", 1)[0].strip() or type(exc).__name__
    return text[:120]
