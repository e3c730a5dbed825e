"""Which number columns the PII scan reads, and how: phone or card numbers written as numbers.

A number column is scanned only when its name says it holds contact or payment numbers
(`holds_contact_numbers`): a bare number of 8 digits or more is a valid phone number for some
region as often as not (85 % of epoch-second timestamps, 90 % of 10-digit ids), so scanning every
number column would refuse most clean files, as a free-text "ticket 1234567890" already is. Its
whole values of 8 digits or more (`long_numbers`) then meet the text pre-filter as the text of
their digits.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.checks import pii

# A phone number has at least `pii.PHONE_MIN_DIGITS` (8) digits and every other entity a bare
# number can be (a card, an SSN) more: a number below this holds none.
LONG_NUMBER = 10 ** (pii.PHONE_MIN_DIGITS - 1)

# Column names that say a number column holds phone or card numbers: whole words of the name
# (snake_case, kebab-case, camelCase and spaces split it), or parts of the name with its other
# characters dropped (`contact_number` holds "contactnumber").
_CONTACT_WORDS = frozenset({"tel", "cell", "fax", "card", "cc", "ccn", "pan", "ssn"})
_CONTACT_PARTS = (
    "phone",
    "mobile",
    "msisdn",
    "whatsapp",
    "cardnumber",
    "creditcard",
    "contactnumber",
    "contactno",
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def holds_contact_numbers(name: str) -> bool:
    """Whether a number column called `name` is scanned for PII (see the module doc)."""
    words = {word.lower() for word in _WORD.findall(name)}
    letters = "".join(character for character in name.lower() if character.isalnum())
    return bool(words & _CONTACT_WORDS) or any(part in letters for part in _CONTACT_PARTS)


def is_number_type(kind: pa.DataType) -> bool:
    """Integers, floats and decimals (Parquet's exact numbers: a phone column may be one)."""
    return bool(
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    )


def long_numbers(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The whole numbers of a number column with 8 digits or more, as the text of their digits
    (what a phone or card number written as a number reads as); NaN, fractions and nulls drop.
    Floats and decimals count when whole ("4155550123.0" is the number 4155550123)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    # Compared as int64, a uint64 above 2^63 fails the comparison; float16 has no kernels.
    if pa.types.is_integer(kind):
        column = column.cast(pa.uint64() if pa.types.is_unsigned_integer(kind) else pa.int64())
    elif pa.types.is_float16(kind):
        column = column.cast(pa.float32())
    big = pc.greater_equal(column, pa.scalar(LONG_NUMBER, _bound_type(column.type)))
    if not pa.types.is_unsigned_integer(column.type):
        big = pc.or_(big, pc.less_equal(column, -LONG_NUMBER))
    column = column.filter(big)  # NaN compares false and null masks drop: both leave
    if pa.types.is_floating(column.type):
        whole = pc.and_(pc.equal(pc.floor(column), column), pc.less(pc.abs(column), 2.0**63))
        column = column.filter(whole).cast(pa.int64())  # float's own text would be 4.1e+09
    elif pa.types.is_decimal(column.type):
        # A whole decimal's own text keeps its scale ("4155550123.00"); at scale 0 it is the
        # digits alone, and exact however many there are.
        kind = column.type
        column = column.filter(pc.equal(pc.floor(column), column))
        column = column.cast(_scale_zero(kind))
    return column.cast(pa.string())


def _bound_type(kind: pa.DataType) -> pa.DataType:
    """The type to write the bound in: the column's own for integers (no cast of the column to a
    common type), int64 otherwise (floats and decimals take it)."""
    return kind if pa.types.is_integer(kind) else pa.int64()


def _scale_zero(kind: pa.DataType) -> pa.DataType:
    """The decimal type of `kind`'s width and precision with no digits after the point."""
    if pa.types.is_decimal256(kind):
        return pa.decimal256(kind.precision, 0)
    return pa.decimal128(kind.precision, 0)
