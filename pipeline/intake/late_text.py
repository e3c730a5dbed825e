"""CSV columns that are numbers, booleans or dates in the file's head but text further on.

An upload's CSV columns are typed from its head (the first 64 KiB or more, as it arrived), and
the PII scan reads the text columns. A column whose head values are numbers may hold e-mails
below it: read whole, the file would make it a text column, scanned value by value. So the
profile's read watches the columns the head typed otherwise (`LateText`): from the first batch
holding a value the head's type does not take, the column is scanned; and the batches before
it are read once more for that column alone (`scan_before_turns`), since a text read would have
scanned them too (a long number is a phone or card candidate as text). A file whose types hold
is read once, as before: only a turn costs a second read, of the turned columns up to the turn.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import closing

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pipeline.checks.pii_nested import is_text_type
from pipeline.checks.pii_scan import PiiScanner
from pipeline.store.dataset_batches import ByteStream

# The CSV reader takes numbers padded with these (`dataset_batches._convert_text` likewise).
_NUMBER_PADDING = " \t"
# The CSV reader's time values (Arrow has no cast from text to a time type).
_TIME = r"^[0-9]{1,2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?$"


class LateText:
    """Watches the columns the head did not read as text (see the module doc)."""

    def __init__(self, types: Mapping[str, pa.DataType], scanned: Collection[str]) -> None:
        # Columns the scanner reads already (contact numbers) need no watch.
        self.watched = {name: kind for name, kind in types.items() if name not in scanned}
        self.turned: dict[str, int] = {}  # column -> the first row of its first text batch

    def check(self, batch: pa.RecordBatch, first_row: int) -> list[str]:
        """The watched columns that `batch` (starting at row `first_row`) turns to text."""
        turned = []
        for name, kind in list(self.watched.items()):
            index = batch.schema.get_field_index(name)
            # A column read typed (the fingerprints' types) fails its read instead: the caller
            # reads the whole file as text then.
            if index < 0 or not is_text_type(batch.schema.field(index).type):
                continue
            if not _takes(batch.column(index), kind):
                del self.watched[name]
                self.turned[name] = first_row
                turned.append(name)
        return turned


def _takes(column: pa.Array, kind: pa.DataType) -> bool:
    """Whether every value of the text `column` reads as `kind` (integers as any number, as
    the CSV reader widens an integer column that meets a fraction)."""
    if column.null_count == len(column):
        return True
    if pa.types.is_time(kind):
        valid = column.drop_null()
        return bool(pc.all(pc.match_substring_regex(valid, _TIME)).as_py())
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        column, kind = pc.utf8_trim(column, _NUMBER_PADDING), pa.float64()
    try:
        pc.cast(column, kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def scan_before_turns(
    open_stream: Callable[[], ByteStream],
    turned: Mapping[str, int],
    scanner: PiiScanner,
    *,
    parse: pacsv.ParseOptions,
    block_bytes: int,
) -> None:
    """Feed `scanner` each turned column's values above the row where it turned, as text."""
    end = max(turned.values(), default=0)
    if end == 0:
        return
    convert = pacsv.ConvertOptions(
        include_columns=list(turned),
        column_types=dict.fromkeys(turned, pa.string()),
        strings_can_be_null=True,
    )
    options = pacsv.ReadOptions(block_size=block_bytes, use_threads=False)
    row = 0
    with closing(open_stream()) as stream:
        reader = pacsv.open_csv(
            stream, read_options=options, parse_options=parse, convert_options=convert
        )
        for batch in reader:
            for name, turn in turned.items():
                if row < turn:
                    scanner.add(name, batch.column(name).slice(0, turn - row))
            row += batch.num_rows
            if row >= end:
                return
