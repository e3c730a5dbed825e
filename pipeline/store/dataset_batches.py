"""Dataset files read as a restartable stream of Arrow record batches, with bounded memory.

Parquet is read by row groups; CSV is parsed with types guessed from its first block (numbers
as float64, booleans, text as dictionary) and restarted as text where a later value does not
fit (`RetypeColumns`); other formats are read whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline.store.parquet_probe import check_parquet_file
from pipeline.store.reading import read_dataset

CSV_BLOCK_BYTES = 256 * 1024
CSV_HEAD_BYTES = 1024 * 1024
PARQUET_BATCH_ROWS = 64 * 1024
_CSV_COLUMN = re.compile(r"CSV column #(\d+)")
# The CSV reader's defaults: its booleans are these spellings only, its numbers may be padded.
_CSV_TRUE = pa.array(["1", "True", "TRUE", "true"])
_CSV_BOOLEANS = pa.array(["1", "True", "TRUE", "true", "0", "False", "FALSE", "false"])
_CSV_NUMBER_PADDING = " \t"


class ByteStream(Protocol):
    """A readable binary stream (a file object, or `pipeline.intake.receiving`'s reader)."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class RetypeColumns(Exception):
    """A batch source must restart: a column's type (guessed from its first rows) was wrong."""


def file_batches(
    path: Path, file_format: str, columns: Sequence[str]
) -> Callable[[], Iterator[pa.RecordBatch]]:
    """A restartable stream of `columns` (those present) of a dataset file, batch by batch."""
    if file_format == "parquet":
        return lambda: _parquet_batches(path, columns)
    if file_format == "csv":
        return csv_batches(lambda: path.open("rb"), columns)
    return lambda: _whole_file_batches(path, file_format, columns)


def csv_batches(open_stream: Callable[[], ByteStream], columns: Sequence[str]) -> CsvSource:
    """A restartable stream of `columns` of the CSV file `open_stream()` opens (each start).

    The stream may be a file still being written (`pipeline.intake.receiving`): its batches
    are those of the complete file, as long as every `read(n)` returns n bytes until its end.
    """
    return CsvSource(open_stream, columns)


def _parquet_batches(path: Path, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
    check_parquet_file(path)  # a child process reads it first (`parquet_probe`)
    parquet = pq.ParquetFile(path)
    names = set(parquet.schema_arrow.names)
    wanted = [c for c in columns if c in names]
    yield from parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted)


def _whole_file_batches(
    path: Path, file_format: str, columns: Sequence[str]
) -> Iterator[pa.RecordBatch]:
    frame = read_dataset(path, file_format)
    wanted = [c for c in columns if c in frame.columns]
    table = pa.Table.from_pandas(frame[wanted], preserve_index=False)
    yield from table.to_batches(max_chunksize=PARQUET_BATCH_ROWS)


class CsvSource:
    """CSV batches, typed from the first rows: numbers as float64, booleans, text (dictionary).

    Typed parsing is several times faster than parsing text in Python; when a later value
    does not fit its column's type, the column becomes text and the stream restarts.
    """

    TEXT = pa.dictionary(pa.int32(), pa.string())

    def __init__(self, open_stream: Callable[[], ByteStream], columns: Sequence[str]) -> None:
        self.open_stream = open_stream
        self.pacsv = pacsv
        self.parse = pacsv.ParseOptions(newlines_in_values=True)
        with closing(open_stream()) as fh:
            head = pacsv.open_csv(
                fh,
                read_options=pacsv.ReadOptions(use_threads=False, block_size=CSV_HEAD_BYTES),
                parse_options=self.parse,
                convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
            ).schema
        self.header = list(head.names)
        fields = {f.name: f for f in head}  # a set lookup: a header may hold 50,000 names
        self.types: dict[str, pa.DataType] = {
            name: self._type(fields[name].type) for name in columns if name in fields
        }

    def _type(self, kind: pa.DataType) -> pa.DataType:
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return pa.float64()
        if pa.types.is_boolean(kind):
            return pa.bool_()
        return self.TEXT

    def __call__(self) -> Iterator[pa.RecordBatch]:
        return self._batches()

    def _batches(self) -> Iterator[pa.RecordBatch]:
        # A Python file object: given a path, Arrow reads ahead tens of MB it need not hold.
        with closing(self.open_stream()) as fh:
            reader = self.pacsv.open_csv(
                fh,
                read_options=self.pacsv.ReadOptions(use_threads=False, block_size=CSV_BLOCK_BYTES),
                parse_options=self.parse,
                convert_options=self.pacsv.ConvertOptions(
                    include_columns=list(self.types),
                    column_types=dict(self.types),
                    strings_can_be_null=True,
                ),
            )
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except pa.ArrowInvalid as exc:
                    self._retype(exc)
                    raise RetypeColumns from None
                yield batch

    def convert(self, text: pa.RecordBatch) -> pa.RecordBatch | None:
        """The batch this source reads from the block `text` holds (its columns read as text,
        or as this source's types, nulls as the typed reader sees them), or None where a value
        may not convert the way the CSV reader converts it (the caller reads the file with this
        source instead)."""
        arrays = []
        for name, kind in self.types.items():
            column = text.column(name)
            try:
                arrays.append(_convert_text(column, kind))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            if arrays[-1] is None:
                return None
        return pa.RecordBatch.from_arrays(arrays, names=list(self.types))

    def _retype(self, exc: Exception) -> None:
        found = _CSV_COLUMN.search(str(exc))
        name = self.header[int(found.group(1))] if found else None
        if name in self.types and self.types[name] != self.TEXT:
            self.types[name] = self.TEXT
            return
        if all(kind == self.TEXT for kind in self.types.values()):
            raise exc
        self.types = dict.fromkeys(self.types, self.TEXT)


def _convert_text(column: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """`column` (text) as the CSV reader's `kind`; None for a boolean it would not accept.
    A column of that type already (the checks read it typed) is the reader's own."""
    if column.type == kind:
        return column
    if pa.types.is_dictionary(kind):
        return pc.dictionary_encode(column)
    if pa.types.is_boolean(kind):
        known = pc.is_in(column, value_set=_CSV_BOOLEANS)
        if pc.any(pc.and_(pc.is_valid(column), pc.invert(known))).as_py():
            return None
        true = pc.is_in(column, value_set=_CSV_TRUE)
        return pc.if_else(pc.is_valid(column), true, pa.scalar(None, pa.bool_()))
    return pc.cast(pc.utf8_trim(column, _CSV_NUMBER_PADDING), kind)
