"""Profiling a dataset file: its format from its first bytes, then what the upload rules need.

The format is decided by content (`pipeline.intake.sniffing`): Parquet starts and ends with the
magic `PAR1`; anything else must be UTF-8 text that pyarrow's CSV reader parses. A CSV file is
read block by block (from a stream, which may still be growing: `pipeline.intake.receiving`); a
Parquet file row group by row group once complete and once a child process has read it whole
(`pipeline.store.parquet_probe`), its footer's claims checked rather than trusted
(`pipeline.store.bounded_read`). Only what the rules need is kept in memory: the row count, which
columns hold a value, and the PII scan's candidates: every value of every text column meets the
PII pre-filter as its batch is read (`pipeline.checks.pii_scan`), Presidio confirms later.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline.checks.pii_nested import holds_nested_text, is_text_type
from pipeline.checks.pii_numbers import holds_contact_numbers
from pipeline.checks.pii_scan import PiiReport, PiiScanner
from pipeline.core.config import Settings
from pipeline.core.errors import InvalidInput, Unprocessable
from pipeline.core.text import has_control_characters
from pipeline.intake.late_text import LateText, scan_before_turns
from pipeline.intake.parquet_refusals import check_natively_readable, parquet_reason
from pipeline.intake.sniffing import MAX_HEAD_BYTES, sniff_format
from pipeline.store.bounded_read import (
    CSV_BLOCK_BYTES,
    DatasetBoundsError,
    ReadBudget,
    check_parquet_footer,
    iter_parquet_batches,
)
from pipeline.store.csv_text import MalformedCsv, check_csv_file
from pipeline.store.dataset_batches import ByteStream, RetypeColumns
from pipeline.store.formats import CSV, PARQUET, PARQUET_MAGIC, FileFormat
from pipeline.store.parquet_envelope import ENCRYPTED, ENCRYPTED_FOOTER_MAGIC
from pipeline.store.parquet_probe import PARQUET_BUFFER_BYTES

_CSV_PARSE = pacsv.ParseOptions(newlines_in_values=True)
# How pyarrow's CSV reader says a value does not fit the column's type.
_CONVERSION_ERROR = "CSV conversion error"


# Profiles: what the rules need to know about a file.


@dataclass
class DatasetProfile:
    file_format: FileFormat
    row_count: int
    columns: list[str]
    filled: set[str]  # columns holding at least one non-empty value
    pii: PiiScanner | None = None  # every text value pre-filtered; None: detection is off

    def pii_report(self) -> PiiReport:
        """Presidio's verdict on the candidates the pre-filter kept (see pii_scan)."""
        return self.pii.report() if self.pii is not None else PiiReport(skipped=True)


class _ProfileBuilder:
    """Accumulates a profile batch by batch."""

    def __init__(
        self,
        columns: list[str],
        text_columns: Iterable[str],
        pii: Settings | None,
        other_types: Mapping[str, pa.DataType] | None = None,
    ):
        """`other_types`: a CSV head's types of its other columns, watched for later text."""
        check_column_names(columns)
        self.columns = columns
        self.rows = 0
        self.filled: set[str] = set()
        texts = set(text_columns)
        text = [name for name in columns if name in texts or holds_contact_numbers(name)]
        scan = pii is not None and pii.enable_pii_detection
        self.pii = PiiScanner(pii, text) if pii is not None and scan else None
        self.late = LateText(other_types, text) if self.pii is not None and other_types else None

    def add(
        self, batch: pa.RecordBatch, *, count_rows: bool = True, parsed: Collection[str] = ()
    ) -> None:
        """`parsed`: columns a CSV reader converted from text (numbers, booleans). Their nulls
        are the reader's null values (blank, "NaN", "NA"...), so any non-null value counts as
        filled, as a non-blank text value does in a text read."""
        if self.late is not None and self.pii is not None:
            for name in self.late.check(batch, self.rows):
                self.pii.add_column(name)
        if count_rows:
            self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            if name in self.filled:
                continue
            if column.null_count < len(column) if name in parsed else _has_value(column):
                self.filled.add(name)
        if self.pii is not None:
            self.pii.add_batch(batch)

    def profile(self, file_format: FileFormat, rows: int | None = None) -> DatasetProfile:
        return DatasetProfile(
            file_format=file_format,
            row_count=self.rows if rows is None else rows,
            columns=list(self.columns),
            filled=set(self.filled),
            pii=self.pii,
        )


def _is_text_type(kind: pa.DataType) -> bool:
    return is_text_type(kind) and not pa.types.is_dictionary(kind)


def _has_value(column: pa.Array) -> bool:
    """A value that is not null, not NaN, and (for text) not blank."""
    if column.null_count == len(column):
        return False
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if pa.types.is_string_view(kind):  # the trim kernels take no views (pyarrow 26)
        column, kind = column.cast(pa.large_string()), pa.large_string()
    if _is_text_type(kind):
        return pc.any(pc.not_equal(pc.utf8_trim_whitespace(column), "")).as_py() is True
    if pa.types.is_floating(kind):
        return pc.any(pc.invert(pc.is_nan(column))).as_py() is True
    return True


# CSV.


@dataclass(frozen=True)
class CsvHead:
    """The header's column names, which columns look like text in the first rows, and the
    types the first rows give the others (numbers, booleans, dates)."""

    columns: list[str]
    text_columns: set[str]
    other_types: dict[str, pa.DataType] = field(default_factory=dict)
    header_bytes: int = 0  # the header line's length, its line end included


def read_csv_head(head: bytes, *, at_eof: bool) -> CsvHead:
    """Column names and inferred text columns from the first bytes (complete lines only;
    lines end with "\n", "\r\n" or a bare "\r")."""
    data = head if at_eof else head[: max(head.rfind(b"\n"), head.rfind(b"\r")) + 1]
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
        header = data[: _header_bytes(data)]
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
    check_column_names(columns)
    others = {f.name: f.type for f in table.schema if f.name not in text}
    return CsvHead(columns, text, others, header_bytes=_header_bytes(data))


def _header_bytes(data: bytes) -> int:
    """The first line's length with its line end ("\n", "\r\n" or "\r"); the whole of `data`
    when it holds none. (A name holding a line end is refused: `check_column_names`.)"""
    ends = [at for at in (data.find(b"\n"), data.find(b"\r")) if at >= 0]
    if not ends:
        return len(data)
    end = min(ends) + 1
    return end + 1 if data[end - 1 : end + 1] == b"\r\n" else end


def check_column_names(columns: list[str]) -> None:
    """Unprocessable (422) for a name given twice or holding a control character (NUL breaks
    PostgreSQL text, the others logs and column matching, as in form fields). Linear: a header
    may hold tens of thousands of names."""
    # Printable text holds no control character: one C-speed pass over the names first.
    printable = "".join(columns).isprintable()
    controls = [] if printable else [name for name in columns if has_control_characters(name)]
    if controls:
        raise Unprocessable(
            f"column names must not contain control characters: {_listed(controls)}"
        )
    duplicates = sorted(name for name, count in Counter(columns).items() if count > 1)
    if duplicates:
        raise Unprocessable(f"duplicate column names: {_listed(duplicates)}")


def _listed(names: list[str], shown: int = 10) -> str:
    """Names as their repr (control characters escaped), the first `shown` of them."""
    text = ", ".join(map(repr, names[:shown]))
    return text if len(names) <= shown else f"{text} and {len(names) - shown} more"


def csv_error_reason(exc: Exception, block_bytes: int = CSV_BLOCK_BYTES) -> str:
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
        return f"not a valid CSV file: a row is longer than {block_bytes} bytes"
    if "Empty CSV" in message:
        return "the file is empty; expected CSV or Parquet"
    return "not a valid CSV file"


def profile_csv(
    open_stream: Callable[[], ByteStream],
    head: CsvHead,
    pii: Settings | None,
    *,
    block_bytes: int = CSV_BLOCK_BYTES,
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
    typed: Mapping[str, pa.DataType] | None = None,
    text: bool = False,
) -> DatasetProfile:
    """Read the CSV stream `open_stream()` opens block by block into a profile.

    `pii`: the settings of the PII scan of the head's text columns and its contact-number
    columns (None: no scan).
    `on_batch` is given every batch once profiled (the fingerprints' reader, which needs the
    batches of its own `block_bytes`: `pipeline.intake.relayed_batches`).
    The head's number and boolean columns are read as float64 and booleans (parsing them so
    costs less than reading them as text), `typed`'s columns (the fingerprints' types) as
    `typed` says; the profile is the same. A value that does not convert means a column turns
    to text below the head: with `on_batch` that raises `RetypeColumns` (the caller reads the
    file again with `text`), otherwise the file is read again with `text` here.
    `text`: every column read as text; the columns the head typed otherwise are watched, and
    those that turn are PII-scanned, their earlier rows from a second `open_stream()`
    (`pipeline.intake.late_text`).
    """
    builder = _ProfileBuilder(head.columns, head.text_columns, pii, head.other_types)
    scanned = set(builder.pii.columns if builder.pii is not None else ())
    parsed: dict[str, pa.DataType] = {}
    if not text:
        numbers = {
            name: pa.float64() if pa.types.is_integer(kind) else kind
            for name, kind in head.other_types.items()
        }
        # Scanned columns stay text: as float64 a long card number would be rounded.
        columns = set(head.columns)  # a set: a header may hold 50,000 names
        parsed = {
            name: kind
            for name, kind in {**numbers, **(typed or {})}.items()
            if name in columns
            and name not in head.text_columns
            and name not in scanned
            and _parsed_type(kind)
        }
    convert = pacsv.ConvertOptions(
        column_types={name: parsed.get(name, pa.string()) for name in head.columns},
        strings_can_be_null=True,
    )
    options = pacsv.ReadOptions(block_size=block_bytes, use_threads=False)
    try:
        with closing(open_stream()) as stream:
            reader = pacsv.open_csv(
                stream, read_options=options, parse_options=_CSV_PARSE, convert_options=convert
            )
            if reader.schema.names != head.columns:
                raise InvalidInput("not a valid CSV file: the header could not be read")
            for batch in reader:
                builder.add(batch, parsed=parsed)
                if on_batch is not None:
                    on_batch(batch)
        if builder.late is not None and builder.pii is not None:
            scan_before_turns(
                open_stream,
                builder.late.turned,
                builder.pii,
                parse=_CSV_PARSE,
                block_bytes=block_bytes,
            )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        if not (parsed and _CONVERSION_ERROR in str(exc)):
            raise InvalidInput(csv_error_reason(exc, block_bytes)) from None
        if on_batch is not None:
            raise RetypeColumns from None
    else:
        return builder.profile(CSV)
    return profile_csv(open_stream, head, pii, block_bytes=block_bytes, text=True)


def _parsed_type(kind: pa.DataType) -> bool:
    return bool(pa.types.is_floating(kind) or pa.types.is_boolean(kind))


# Parquet.


def profile_parquet(
    path: Path, pii: Settings | None, *, on_checked: Callable[[list[str]], None] | None = None
) -> DatasetProfile:
    """Profile a complete Parquet file without trusting its footer (`pipeline.store.bounded_read`).

    Encryption is refused (400) before pyarrow sees the file, and the file is read natively
    here only once a child process has read it whole and survived; a child that died or ran
    out of time is Unprocessable (422) (`pipeline.store.parquet_probe`).

    The footer's claims are checked against the file first (then `on_checked(columns)` is
    called: another reader may start); then every row group is read in
    bounded batches, so the row count is what the row groups really hold and emptiness is
    seen in the data, not in footer statistics. A file whose footer claims more rows or bytes
    than it holds, or that decodes beyond its budget, is Unprocessable (422); one pyarrow
    cannot parse is InvalidInput (400).
    """
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(max(0, size - len(PARQUET_MAGIC)))
        tail = fh.read()
    if tail == ENCRYPTED_FOOTER_MAGIC:
        raise InvalidInput(f"{ENCRYPTED} (its footer is encrypted)")
    if size < 12 or tail != PARQUET_MAGIC:
        raise InvalidInput("not a valid Parquet file: it does not end with the Parquet magic")
    check_natively_readable(path)
    try:
        parquet = pq.ParquetFile(path, buffer_size=PARQUET_BUFFER_BYTES)
        schema = parquet.schema_arrow
        metadata = parquet.metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a valid Parquet file: {parquet_reason(exc)}") from None
    columns = list(schema.names)
    text_columns = [
        f.name for f in schema if is_text_type(f.type) or holds_nested_text(f.type, f.name)
    ]
    builder = _ProfileBuilder(columns, text_columns, pii)
    budget = ReadBudget.for_file(size)
    rows = 0
    try:
        check_parquet_footer(metadata, size, budget)
        if on_checked is not None:
            on_checked(columns)
        for batch in iter_parquet_batches(parquet, size, budget):
            rows += batch.num_rows
            builder.add(batch, count_rows=False)
    except DatasetBoundsError as exc:
        raise Unprocessable(f"not a trustworthy Parquet file: {exc}") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a valid Parquet file: {parquet_reason(exc)}") from None
    return builder.profile(PARQUET, rows=rows)


def profile_path(path: Path, pii: Settings | None) -> DatasetProfile:
    """Sniff and profile a complete file (the same checks as an upload, without streaming)."""
    with path.open("rb") as fh:
        head = fh.read(MAX_HEAD_BYTES)
        at_eof = not fh.read(1)
    file_format = sniff_format(head, at_eof=at_eof)
    if file_format == PARQUET:
        return profile_parquet(path, pii)
    csv_head = read_csv_head(head, at_eof=at_eof)
    try:
        check_csv_file(path)  # what the upload checks as its bytes arrive
    except MalformedCsv as exc:
        raise InvalidInput(str(exc)) from None
    return profile_csv(lambda: path.open("rb"), csv_head, pii)
