"""Bounded reading of dataset files: a Parquet footer is a claim to check, never a fact.

A Parquet file describes itself in its footer: its row groups, their row counts, and where each
column chunk lies and how large it is. A hostile or broken file can claim anything there, and a
reader that sizes its buffers from the claim asks for memory the file never holds (a 1 KB file
claiming 10^12 rows makes `pyarrow.parquet.read_table` allocate terabytes). Here:

- `check_parquet_footer` compares the claims with the file before any data page is read: every
  column chunk lies between the leading magic and the footer, the chunks' compressed sizes add
  up to at most the data the file holds, the file's row count is the sum of its row groups'
  (or 0: not recorded),
  and the rows and uncompressed bytes claimed fit the read budget (one bit per cell is the least
  any decoded column takes, so more rows than `8 * budget / columns` cannot be read within it).
- `iter_parquet_batches` reads row group by row group in batches of about `BATCH_BYTES`
  (`batch_rows`: fewer rows for wide files; small batches cost time in the conversion to pandas),
  counts the rows actually decoded, and stops at the first row group that holds a different
  number of rows than it claims, or once the decoded bytes pass the budget. The row count of a
  file is therefore the sum of what its row groups really hold.
- The budget (`ReadBudget.for_file`) is derived from the file's size: decoded bytes at most
  `DECODED_BYTES_PER_FILE_BYTE` times the size, never less than `MIN_DECODED_BYTES`. Ordinary
  compression (Snappy, dictionaries: a few times, rarely 20x) passes; a small file expanding
  into gigabytes does not.
- CSV cannot claim rows it does not hold: every cell costs at least a byte of text (its
  separator) and decodes to at most about nine bytes (an 8-byte number and its validity bit),
  well within the budget. It is read in `CSV_BLOCK_BYTES` blocks (a longer row is an error) and
  its decoded size is held to the same budget all the same.

`DatasetBoundsError` messages name counts and sizes only, never the file's content.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import csv

from pipeline.store.formats import PARQUET_MAGIC

MB = 1024 * 1024
BATCH_BYTES = 64 * MB
MIN_BATCH_ROWS = 1024
MAX_BATCH_ROWS = 1024 * 1024
DECODED_BYTES_PER_FILE_BYTE = 32
MIN_DECODED_BYTES = 256 * MB
# pyarrow parses CSV in blocks; one row must fit in a block.
CSV_BLOCK_BYTES = 1 * MB
PARQUET_MAGIC_BYTES = len(PARQUET_MAGIC)
# After the footer: its 4-byte length and the closing magic.
PARQUET_TAIL_BYTES = 8


class DatasetBoundsError(ValueError):
    """A file claims more than it holds, or decodes to more than its read budget allows."""


@dataclass(frozen=True)
class ReadBudget:
    """How many decoded (Arrow) bytes reading one file may produce."""

    max_decoded_bytes: int

    @classmethod
    def for_file(cls, size_bytes: int) -> ReadBudget:
        return cls(max(MIN_DECODED_BYTES, DECODED_BYTES_PER_FILE_BYTE * size_bytes))

    def charge(self, decoded_bytes: int, file_size: int) -> None:
        if decoded_bytes > self.max_decoded_bytes:
            raise DatasetBoundsError(
                f"the file ({file_size:,} bytes) decodes to more than "
                f"{self.max_decoded_bytes:,} bytes, the most a file of its size may"
            )


def batch_rows(columns: int) -> int:
    """Rows per batch for a file of `columns` columns, counting 8 bytes a cell."""
    return max(MIN_BATCH_ROWS, min(MAX_BATCH_ROWS, BATCH_BYTES // (8 * max(1, columns))))


def check_parquet_footer(metadata: pq.FileMetaData, file_size: int, budget: ReadBudget) -> None:
    """DatasetBoundsError unless every footer claim fits the file and the budget (see module)."""
    data_end = file_size - PARQUET_TAIL_BYTES - metadata.serialized_size
    if data_end < PARQUET_MAGIC_BYTES:
        raise DatasetBoundsError("the footer is larger than the file")
    claimed_rows = 0
    claimed_bytes = 0
    compressed = 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)
        if group.num_rows < 0 or group.total_byte_size < 0:
            raise DatasetBoundsError(f"row group {index} claims a negative size")
        claimed_rows += group.num_rows
        claimed_bytes += group.total_byte_size
        for column in range(group.num_columns):
            chunk = group.column(column)
            start = _chunk_start(chunk)
            size = chunk.total_compressed_size
            if start < PARQUET_MAGIC_BYTES or size < 0 or start + size > data_end:
                raise DatasetBoundsError(
                    f"row group {index}, column {chunk.path_in_schema!r}: the footer places "
                    f"{size:,} bytes at offset {start:,}, beyond the {data_end:,} bytes of data "
                    "the file holds"
                )
            compressed += size
    if compressed > data_end:
        raise DatasetBoundsError(
            f"the footer claims {compressed:,} bytes of column data; the file holds {data_end:,}"
        )
    # A file-level count of 0 is one the writer did not record (some writers leave it so).
    if metadata.num_rows not in (0, claimed_rows):
        raise DatasetBoundsError(
            f"the footer claims {metadata.num_rows:,} rows; its row groups claim {claimed_rows:,}"
        )
    columns = max(1, metadata.num_columns)
    least_decoded = claimed_rows * columns // 8
    if max(least_decoded, claimed_bytes) > budget.max_decoded_bytes:
        raise DatasetBoundsError(
            f"the footer claims {claimed_rows:,} rows ({claimed_bytes:,} bytes uncompressed) "
            f"in a file of {file_size:,} bytes: more than it can hold within "
            f"{budget.max_decoded_bytes:,} decoded bytes"
        )


def _chunk_start(chunk: pq.ColumnChunkMetaData) -> int:
    """Where a column chunk's first page lies: its dictionary page, if it has one, else its
    first data page. A chunk of no values may have no data page: its offset is then 0."""
    offsets: list[int] = []
    if chunk.data_page_offset or chunk.num_values:
        offsets.append(chunk.data_page_offset)
    if chunk.has_dictionary_page and chunk.dictionary_page_offset:
        offsets.append(chunk.dictionary_page_offset)
    return min(offsets, default=int(chunk.data_page_offset))


def iter_parquet_batches(
    parquet: pq.ParquetFile,
    file_size: int,
    budget: ReadBudget,
    columns: Sequence[str] | None = None,
    rows_per_batch: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every row of the file in batches (of `rows_per_batch` rows, or `batch_rows`'), row
    group by row group, within the budget.

    Raises DatasetBoundsError when a row group holds a different number of rows than its
    footer entry claims, or the decoded bytes pass the budget. Call `check_parquet_footer`
    first: it refuses impossible claims without reading.
    """
    metadata = parquet.metadata
    size = rows_per_batch or batch_rows(
        len(columns) if columns is not None else metadata.num_columns
    )
    decoded = 0
    for index in range(metadata.num_row_groups):
        claimed = metadata.row_group(index).num_rows
        held = 0
        for batch in parquet.iter_batches(batch_size=size, row_groups=[index], columns=columns):
            held += batch.num_rows
            decoded += batch.nbytes
            budget.charge(decoded, file_size)
            yield batch
        if held != claimed:
            raise DatasetBoundsError(
                f"row group {index} claims {claimed:,} rows in the footer but holds {held:,}"
            )


def read_parquet_table(path: Path, budget: ReadBudget | None = None) -> pa.Table:
    """The whole file as a table, after the footer check, read within the budget."""
    size = path.stat().st_size
    budget = budget or ReadBudget.for_file(size)
    parquet = pq.ParquetFile(path)
    check_parquet_footer(parquet.metadata, size, budget)
    schema = parquet.schema_arrow
    batches = list(iter_parquet_batches(parquet, size, budget))
    return pa.Table.from_batches(batches, schema=schema)


def read_csv_table(path: Path, budget: ReadBudget | None = None) -> pa.Table:
    """A CSV file as a table (empty fields are nulls), held to the budget (see module)."""
    size = path.stat().st_size
    budget = budget or ReadBudget.for_file(size)
    table = csv.read_csv(
        path,
        read_options=csv.ReadOptions(block_size=CSV_BLOCK_BYTES),
        convert_options=csv.ConvertOptions(strings_can_be_null=True),
    )
    budget.charge(table.nbytes, size)
    return table
