"""Dataset file formats: the one table of names and extensions, and the Parquet magic.

A dataset file is CSV, Parquet or JSON (an array of row objects, or one object a line). The
extension decides which an object in the store is (`pipeline.triggers.arrival_keys`) and which a row
file of the CLI is read as (`cli.datafiles`); an upload's format is decided by its content
(`pipeline.intake.receiving`), and a name claiming another upload format is refused. The format
name is what a `DatasetVersion.file_format` holds and what `pipeline.store.reading.read_dataset`
reads. This module imports nothing heavy: the CLI reads it at start.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

FileFormat = Literal["csv", "parquet", "json"]
CSV: FileFormat = "csv"
PARQUET: FileFormat = "parquet"
JSON: FileFormat = "json"

EXTENSIONS: dict[str, FileFormat] = {
    ".csv": CSV,
    ".parquet": PARQUET,
    ".pq": PARQUET,
    ".json": JSON,
    ".jsonl": JSON,
    ".ndjson": JSON,
}
# Of the JSON extensions, those holding one row object a line (`.json` holds an array).
JSON_LINES_EXTENSIONS = frozenset({".jsonl", ".ndjson"})

# What a benchmark upload may be (spec §4.3).
UPLOAD_FORMATS: tuple[FileFormat, ...] = (CSV, PARQUET)

# A Parquet file starts and ends with these bytes.
PARQUET_MAGIC = b"PAR1"


def extension(filename: str) -> str:
    """The lower-case extension of a file name, with its dot; "" when it has none."""
    return PurePosixPath(filename).suffix.lower()


def format_of(filename: str) -> FileFormat | None:
    """The format a file name's extension names; None for any other name."""
    return EXTENSIONS.get(extension(filename))


_TITLES: dict[str, str] = {CSV: "CSV", PARQUET: "Parquet", JSON: "JSON"}


def format_title(file_format: str) -> str:
    """The name people know the format by, for messages."""
    return _TITLES.get(file_format, file_format)
