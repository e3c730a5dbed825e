"""Receiving a dataset upload into a temporary file and profiling it while it arrives.

An upload is received into a temporary file (`DatasetIntake`). The format is decided by
content: Parquet starts and ends with the magic `PAR1`; anything else must be UTF-8 text that
pyarrow's CSV reader parses. A CSV file is checked by a background thread that reads the
bytes already written while the rest is still arriving, so the checks end soon after the
last byte; a Parquet file is read row group by row group once complete, its footer's claims
checked rather than trusted (`pipeline.store.bounded_read`). Only what the rules need is kept in
memory: the row count, which columns hold a value, and a bounded sample of distinct text
values for the PII scan.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import math
import os
import re
import shutil
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pipeline.core.config import Settings
from pipeline.core.errors import DomainError, InvalidInput, PayloadTooLarge, Unprocessable
from pipeline.core.tempfiles import locked_temp_dir
from pipeline.intake.formats import (
    CSV,
    EXTENSIONS,
    PARQUET,
    PARQUET_MAGIC,
    UPLOAD_FORMATS,
    FileFormat,
    extension,
    format_of,
    format_title,
)
from pipeline.store.bounded_read import (
    CSV_BLOCK_BYTES,
    DatasetBoundsError,
    ReadBudget,
    check_parquet_footer,
    iter_parquet_batches,
)

# The format is decided on the first bytes: at least this many (or the whole file) ...
HEAD_BYTES = 64 * 1024
# ... and for CSV up to a complete header line, which may not be longer than this.
MAX_HEAD_BYTES = 1024 * 1024
PARQUET_BUFFER_BYTES = 4 * 1024 * 1024

# The PII sample: MAX_SAMPLE_SIZE distinct values in all, shared equally by the text
# columns, each cut to this many characters (the scanner's own cut), and at most this many
# characters overall so that a file of long texts cannot fill the server's memory.
SAMPLE_VALUE_CHARS = 4096
SAMPLE_CHAR_BUDGET = 32 * 1024 * 1024

FILENAME_MAX_CHARS = 200

_CSV_PARSE = pacsv.ParseOptions(newlines_in_values=True)
# Text files hold no control characters other than tab, newlines and form feed.
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f]")


# Format sniffing.


def sniff_format(head: bytes, *, at_eof: bool) -> FileFormat:
    """Parquet or CSV from the first bytes; InvalidInput (400) for anything else."""
    if head.startswith(PARQUET_MAGIC):
        return PARQUET
    if not head.strip():
        raise InvalidInput("the file is empty; expected CSV or Parquet")
    text = head[3:] if head.startswith(codecs.BOM_UTF8) else head
    if _CONTROL_BYTES.search(text, 0, HEAD_BYTES):
        raise InvalidInput("the file is neither CSV nor Parquet (binary content)")
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        decoded = decoder.decode(text, final=at_eof)
    except UnicodeDecodeError:
        raise InvalidInput("the file is neither Parquet nor UTF-8 CSV text") from None
    if decoded.lstrip()[:1] in ("{", "["):
        raise InvalidInput("the file looks like JSON; expected CSV or Parquet")
    return CSV


def check_extension(filename: str | None, file_format: FileFormat) -> None:
    """A name ending in .csv or .parquet must match the content (InvalidInput otherwise)."""
    claimed = format_of(filename or "")
    if claimed in UPLOAD_FORMATS and claimed != file_format:
        suffix = extension(filename or "")
        raise InvalidInput(
            f"the file is named {suffix} but its content is {format_title(file_format)}"
        )


def stored_filename(filename: str | None, file_format: FileFormat) -> str:
    """A safe object name: base name only, [A-Za-z0-9._-], extension matching the format."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = unicodedata.normalize("NFKC", name)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    stem, suffix = os.path.splitext(name)
    if EXTENSIONS.get(suffix.lower()) != file_format:
        stem, suffix = name, f".{file_format}"
    stem = stem.strip("._-")[:FILENAME_MAX_CHARS] or "dataset"
    return stem + suffix


# Profiles: what the rules need to know about a file.


@dataclass
class DatasetProfile:
    file_format: FileFormat
    row_count: int
    columns: list[str]
    filled: set[str]  # columns holding at least one non-empty value
    text_samples: dict[str, list[str]]  # distinct text values, bounded (the PII sample)

    def sample_values(self) -> int:
        return sum(len(values) for values in self.text_samples.values())


class _ProfileBuilder:
    """Accumulates a profile batch by batch."""

    def __init__(self, columns: list[str], text_columns: Iterable[str], sample_size: int):
        duplicates = sorted({name for name in columns if columns.count(name) > 1})
        if duplicates:
            raise Unprocessable(f"duplicate column names: {', '.join(map(repr, duplicates))}")
        self.columns = columns
        self.rows = 0
        self.filled: set[str] = set()
        text = [name for name in columns if name in set(text_columns)]
        self.per_column = max(1, math.ceil(sample_size / len(text))) if text else 0
        self.samples: dict[str, dict[str, None]] = {name: {} for name in text}
        self.sample_chars = 0

    def add(self, batch: pa.RecordBatch, *, count_rows: bool = True) -> None:
        if count_rows:
            self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            if name not in self.filled and _has_value(column):
                self.filled.add(name)
            sample = self.samples.get(name)
            if sample is not None and len(sample) < self.per_column:
                self._sample(sample, column)

    def _sample(self, sample: dict[str, None], column: pa.Array) -> None:
        if self.sample_chars >= SAMPLE_CHAR_BUDGET:
            return
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if not _is_text_type(column.type):
            return
        distinct = pc.unique(column.drop_null()).slice(0, self.per_column)
        for value in distinct.to_pylist():
            text = value.strip()[:SAMPLE_VALUE_CHARS]
            if text and text not in sample:
                sample[text] = None
                self.sample_chars += len(text)
                if len(sample) >= self.per_column or self.sample_chars >= SAMPLE_CHAR_BUDGET:
                    return

    def done_learning(self) -> bool:
        """Nothing more to learn: every column filled and every sample full."""
        return len(self.filled) == len(self.columns) and (
            self.sample_chars >= SAMPLE_CHAR_BUDGET
            or all(len(s) >= self.per_column for s in self.samples.values())
        )

    def profile(self, file_format: FileFormat, rows: int | None = None) -> DatasetProfile:
        return DatasetProfile(
            file_format=file_format,
            row_count=self.rows if rows is None else rows,
            columns=list(self.columns),
            filled=set(self.filled),
            text_samples={name: list(values) for name, values in self.samples.items()},
        )


def _is_text_type(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    )


def _is_text_column(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return _is_text_type(kind)


def _has_value(column: pa.Array) -> bool:
    """A value that is not null, not NaN, and (for text) not blank."""
    if column.null_count == len(column):
        return False
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if _is_text_type(kind):
        return pc.any(pc.not_equal(pc.utf8_trim_whitespace(column), "")).as_py() is True
    if pa.types.is_floating(kind):
        return pc.any(pc.invert(pc.is_nan(column))).as_py() is True
    return True


# CSV.


@dataclass(frozen=True)
class CsvHead:
    """The header's column names, and which columns look like text in the first rows."""

    columns: list[str]
    text_columns: set[str]


def read_csv_head(head: bytes, *, at_eof: bool) -> CsvHead:
    """Column names and inferred text columns from the first bytes (complete lines only)."""
    data = head if at_eof else head[: head.rfind(b"\n") + 1]
    if not data.strip():
        raise InvalidInput(f"the CSV header line is longer than {MAX_HEAD_BYTES} bytes")
    options = pacsv.ReadOptions(use_threads=False, block_size=len(data) + 1)
    convert = pacsv.ConvertOptions(strings_can_be_null=True)
    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=options,
            parse_options=_CSV_PARSE,
            convert_options=convert,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as first_error:
        # A cut inside a quoted multi-line value can spoil the sample: fall back to the header.
        header = data[: data.find(b"\n") + 1] or data
        try:
            table = pacsv.read_csv(
                io.BytesIO(header),
                read_options=pacsv.ReadOptions(use_threads=False),
                parse_options=_CSV_PARSE,
                convert_options=convert,
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InvalidInput(csv_error_reason(first_error)) from None
    text = {
        f.name
        for f in table.schema
        if _is_text_type(f.type) or pa.types.is_binary(f.type) or pa.types.is_null(f.type)
    }
    columns = list(table.column_names)
    duplicates = sorted({name for name in columns if columns.count(name) > 1})
    if duplicates:
        raise Unprocessable(f"duplicate column names: {', '.join(map(repr, duplicates))}")
    return CsvHead(columns=columns, text_columns=text)


def csv_error_reason(exc: Exception) -> str:
    """pyarrow's CSV error as a reason that never quotes the file's content."""
    message = str(exc)
    ragged = re.search(r"Expected (\d+) columns, got (\d+)", message)
    if ragged:
        return (
            f"not a valid CSV file: a row has {ragged.group(2)} fields "
            f"where the header has {ragged.group(1)}"
        )
    if "invalid UTF8" in message:
        return "not a valid CSV file: it is not UTF-8 text"
    if "straddl" in message:
        return f"not a valid CSV file: a row is longer than {CSV_BLOCK_BYTES} bytes"
    if "Empty CSV" in message:
        return "the file is empty; expected CSV or Parquet"
    return "not a valid CSV file"


def profile_csv(stream: Any, head: CsvHead, sample_size: int) -> DatasetProfile:
    """Read a CSV stream block by block (every column as text) into a profile."""
    builder = _ProfileBuilder(head.columns, head.text_columns, sample_size)
    convert = pacsv.ConvertOptions(
        column_types={name: pa.string() for name in head.columns}, strings_can_be_null=True
    )
    options = pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False)
    try:
        reader = pacsv.open_csv(
            stream, read_options=options, parse_options=_CSV_PARSE, convert_options=convert
        )
        if reader.schema.names != head.columns:
            raise InvalidInput("not a valid CSV file: the header could not be read")
        for batch in reader:
            builder.add(batch)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInput(csv_error_reason(exc)) from None
    return builder.profile(CSV)


# Parquet.


def profile_parquet(path: Path, sample_size: int) -> DatasetProfile:
    """Profile a complete Parquet file without trusting its footer (`pipeline.store.bounded_read`).

    The footer's claims are checked against the file first; then every row group is read in
    bounded batches, so the row count is what the row groups really hold and emptiness is
    seen in the data, not in footer statistics. A file whose footer claims more rows or bytes
    than it holds, or that decodes beyond its budget, is Unprocessable (422); one pyarrow
    cannot parse is InvalidInput (400).
    """
    import pyarrow.parquet as pq

    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - len(PARQUET_MAGIC)))
        tail = fh.read()
    if size < 12 or tail != PARQUET_MAGIC:
        raise InvalidInput("not a valid Parquet file: it does not end with the Parquet magic")
    try:
        parquet = pq.ParquetFile(path, buffer_size=PARQUET_BUFFER_BYTES)
        schema = parquet.schema_arrow
        metadata = parquet.metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a valid Parquet file: {_first_line(exc)}") from None
    columns = list(schema.names)
    text_columns = [f.name for f in schema if _is_text_column(f.type)]
    builder = _ProfileBuilder(columns, text_columns, sample_size)
    budget = ReadBudget.for_file(size)
    rows = 0
    try:
        check_parquet_footer(metadata, size, budget)
        for batch in iter_parquet_batches(parquet, size, budget):
            rows += batch.num_rows
            if not builder.done_learning():
                builder.add(batch, count_rows=False)
    except DatasetBoundsError as exc:
        raise Unprocessable(f"not a trustworthy Parquet file: {exc}") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a valid Parquet file: {_first_line(exc)}") from None
    return builder.profile(PARQUET, rows=rows)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or ["unreadable"])[0][:200]


# Receiving a file while checking it.


class _Aborted(Exception):
    """The upload was abandoned while the checking thread waited for bytes."""


class _Progress:
    """How many bytes of the temp file are written, shared by the writer and the checker."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.written = 0
        self.done = False
        self.aborted = False

    def advance(self, count: int) -> None:
        with self._cond:
            self.written += count
            self._cond.notify_all()

    def finish(self) -> None:
        with self._cond:
            self.done = True
            self._cond.notify_all()

    def abort(self) -> None:
        with self._cond:
            self.aborted = True
            self._cond.notify_all()

    def wait_for(self, position: int, count: int) -> int:
        """Block until `count` bytes past `position` are written or the file is complete."""
        with self._cond:
            while self.written < position + count and not self.done and not self.aborted:
                self._cond.wait()
            if self.aborted:
                raise _Aborted
            return self.written


class _GrowingFileReader:
    """A read-only file object over a file another thread is still appending to.

    `read(n)` returns exactly n bytes unless the file is complete (pyarrow takes a short read
    for the end of the stream).
    """

    def __init__(self, path: Path, progress: _Progress) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._progress = progress
        self._position = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = 1 << 62
        written = self._progress.wait_for(self._position, size)
        count = min(size, written - self._position)
        if count <= 0:
            return b""
        data = os.pread(self._fd, count, self._position)
        self._position += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self._fd)

    def __enter__(self) -> _GrowingFileReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass
class ReceivedDataset:
    path: Path
    size_bytes: int
    file_format: FileFormat
    sha256: str
    profile: DatasetProfile


class DatasetIntake:
    """One upload's temp file: `write` chunks in order (from one thread), then `finish`.

    CSV is checked by a background thread while the bytes arrive; once a check fails, later
    bytes are counted (for the size limit) but no longer kept. `close` always removes the
    temp folder and stops the thread; use the intake as a context manager. `filename` (the
    client's name, if any) must match the content when it ends in .csv or .parquet.
    """

    def __init__(self, tmp_root: Path, *, max_bytes: int, sample_size: int) -> None:
        self.max_bytes = max_bytes
        self.sample_size = sample_size
        self.filename: str | None = None
        self.size_bytes = 0
        self.file_format: FileFormat | None = None
        self._head = bytearray()
        self._failure: BaseException | None = None
        self._profile: DatasetProfile | None = None
        self._thread: threading.Thread | None = None
        self._progress = _Progress()
        self._hash = hashlib.sha256()
        # Locked while this intake lives, so a restart removes it only if its process died.
        self.dir, lock = locked_temp_dir(tmp_root, UPLOAD_DIR_PREFIX)
        self._dir_lock: int | None = lock
        self.path = self.dir / "upload.part"
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)

    def __enter__(self) -> DatasetIntake:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def write(self, data: bytes) -> None:
        self.size_bytes += len(data)
        if self.size_bytes > self.max_bytes:
            raise PayloadTooLarge(f"the file exceeds {self.max_bytes} bytes")
        if self._failure is not None:
            return
        if self.file_format is None:
            self._head += data
            if not self._head_complete():
                return
            data = bytes(self._head)
            self._head = bytearray()
            self._start(data, at_eof=False)
            if self._failure is not None:
                return
        self._append(data)

    def finish(self) -> ReceivedDataset:
        """Wait for the checks; the received file and its profile, or the first failure."""
        if self.file_format is None and self._failure is None:
            data = bytes(self._head)
            self._head = bytearray()
            self._start(data, at_eof=True)
            if self._failure is None:
                self._append(data)
        self._close_writer()
        self._progress.finish()
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            raise self._failure
        assert self.file_format is not None
        if self.file_format == PARQUET:
            self._profile = profile_parquet(self.path, self.sample_size)
        assert self._profile is not None
        return ReceivedDataset(
            self.path, self.size_bytes, self.file_format, self._hash.hexdigest(), self._profile
        )

    def close(self) -> None:
        """Stop the checking thread and remove the temp folder; safe to call twice."""
        self._progress.abort()
        if self._thread is not None:
            self._thread.join()
        self._close_writer()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._dir_lock is not None:
            os.close(self._dir_lock)
            self._dir_lock = None

    def _head_complete(self) -> bool:
        if len(self._head) >= MAX_HEAD_BYTES:
            return True
        if len(self._head) < HEAD_BYTES:
            return False
        return self._head.startswith(PARQUET_MAGIC) or b"\n" in self._head

    def _start(self, head: bytes, *, at_eof: bool) -> None:
        try:
            file_format = sniff_format(head, at_eof=at_eof)
            check_extension(self.filename, file_format)
            csv_head = read_csv_head(head, at_eof=at_eof) if file_format == CSV else None
        except DomainError as exc:
            self._failure = exc
            return
        self.file_format = file_format
        if csv_head is not None:
            self._thread = threading.Thread(
                target=self._check_csv, args=(csv_head,), name="upload-csv-check", daemon=True
            )
            self._thread.start()

    def _check_csv(self, head: CsvHead) -> None:
        try:
            with _GrowingFileReader(self.path, self._progress) as stream:
                self._profile = profile_csv(stream, head, self.sample_size)
        except _Aborted:
            pass
        except BaseException as exc:
            if not self._progress.aborted:
                self._failure = exc

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        self._hash.update(data)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._progress.advance(len(data))

    def _close_writer(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


UPLOAD_DIR_PREFIX = "upload-"


def upload_tmp_root(settings: Settings) -> Path:
    """Where uploads are received: inside the data dir, not a possibly RAM-backed /tmp."""
    return settings.data_dir / "tmp" / "uploads"


def profile_path(path: Path, sample_size: int) -> DatasetProfile:
    """Sniff and profile a complete file (the same checks as an upload, without streaming)."""
    with path.open("rb") as fh:
        head = fh.read(MAX_HEAD_BYTES)
        at_eof = not fh.read(1)
    file_format = sniff_format(head, at_eof=at_eof)
    if file_format == PARQUET:
        return profile_parquet(path, sample_size)
    csv_head = read_csv_head(head, at_eof=at_eof)
    with path.open("rb") as fh:
        return profile_csv(fh, csv_head, sample_size)
