"""Canonical cells: one value written differently is one cell, before rows are hashed.

Each cell is put in canonical form:

- missing: null, NaN, an empty or blank string, `NA`/`null`/`none`;
- a number: a numeric or boolean cell, or text that parses as a finite number (`1`, `1.0`,
  ` 1e0 `, `True` are all 1.0); -0.0 is 0.0; ±inf is the text `inf`/`-inf`;
- text: anything else, NFKC-normalised, trimmed and case-folded (kept as a 64-bit hash).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# Text columns with more distinct values than this per batch are parsed by Arrow first.
PARSE_IN_PYTHON_MAX = 50_000
_NAN_TOKENS = {"", "nan", "-nan", "na", "n/a", "#n/a", "null", "none"}
_BOOL_WORDS = {"true": 1.0, "false": 0.0}


def text_hash(text: str) -> int:
    """A text's 64-bit token."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def canonical_text(value: str) -> str:
    return unicodedata.normalize("NFKC", value).strip().casefold()


# --- canonical cells ------------------------------------------------------------------------

MISSING, NUMBER, TEXT = 0, 1, 2


@dataclass
class CanonicalColumn:
    """One column's cells: kind (MISSING, NUMBER, TEXT), number value, text token hash."""

    kind: np.ndarray  # uint8
    number: np.ndarray  # float64, 0.0 where not a number
    token: np.ndarray  # uint64, 0 where not text

    def take(self, rows: np.ndarray | slice) -> CanonicalColumn:
        return CanonicalColumn(self.kind[rows], self.number[rows], self.token[rows])

    @classmethod
    def missing(cls, rows: int) -> CanonicalColumn:
        return cls(np.zeros(rows, np.uint8), np.zeros(rows), np.zeros(rows, dtype=np.uint64))


def _from_numbers(values: np.ndarray, valid: np.ndarray | None) -> CanonicalColumn:
    """Numbers (`valid`: which cells hold one; None: all) as canonical cells."""
    n = len(values)
    if valid is not None and not valid.all():
        values = np.where(valid, values, np.nan)
    finite = np.isfinite(values)
    token = np.zeros(n, dtype=np.uint64)
    if finite.all():
        return CanonicalColumn(np.full(n, NUMBER, np.uint8), values + 0.0, token)
    kind = finite.astype(np.uint8)  # NUMBER is 1, MISSING 0
    infinite = np.isinf(values)
    if infinite.any():
        kind[infinite] = TEXT
        token[infinite] = np.where(
            values[infinite] > 0, np.uint64(text_hash("inf")), np.uint64(text_hash("-inf"))
        )
    number = np.where(finite, values, 0.0) + 0.0  # -0.0 becomes 0.0
    return CanonicalColumn(kind, number, token)


def _numbers(array: pa.Array) -> CanonicalColumn:
    """Canonical cells of a numeric or boolean Arrow array."""
    if not pa.types.is_float64(array.type):
        array = pc.cast(array, pa.float64())
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        values = np.asarray(array.fill_null(0.0).to_numpy(zero_copy_only=False))
        return _from_numbers(values, valid)
    return _from_numbers(np.asarray(array.to_numpy(zero_copy_only=False)), None)


def _parse_text(value: str) -> tuple[int, float, int]:
    text = canonical_text(value)
    if text in _NAN_TOKENS:
        return MISSING, 0.0, 0
    if text in _BOOL_WORDS:
        return NUMBER, _BOOL_WORDS[text], 0
    try:
        number = float(text)
    except ValueError:
        return TEXT, 0.0, text_hash(text)
    if math.isnan(number):
        return MISSING, 0.0, 0
    if math.isinf(number):
        return TEXT, 0.0, text_hash("inf" if number > 0 else "-inf")
    return NUMBER, number + 0.0, 0


def _parse_dictionary(values: pa.Array) -> CanonicalColumn:
    """Canonical cells of distinct strings (one each), plus a last "missing" entry."""
    python = values.to_pylist()
    if len(python) > PARSE_IN_PYTHON_MAX:
        with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # Many distinct values that are all plain numbers: Arrow parses them at once.
            parsed = _numbers(pc.cast(pc.utf8_trim_whitespace(values), pa.float64()))
            return CanonicalColumn(
                np.append(parsed.kind, np.uint8(MISSING)),
                np.append(parsed.number, 0.0),
                np.append(parsed.token, np.uint64(0)),
            )
    cells = [_parse_text(v) if v is not None else (MISSING, 0.0, 0) for v in python]
    cells.append((MISSING, 0.0, 0))
    return CanonicalColumn(
        np.array([c[0] for c in cells], dtype=np.uint8),
        np.array([c[1] for c in cells], dtype=np.float64),
        np.array([c[2] for c in cells], dtype=np.uint64),
    )


def _from_dictionary(array: pa.DictionaryArray) -> CanonicalColumn:
    dictionary = array.dictionary
    if not (pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)):
        dictionary = pc.cast(dictionary, pa.string())
    table = _parse_dictionary(dictionary)
    indices = array.indices.fill_null(len(dictionary))
    index = np.asarray(indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return table.take(index)


def canonical_column(array: pa.Array | pa.ChunkedArray) -> CanonicalColumn:
    """The canonical cells of an Arrow column of any type (see the module docstring)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _from_dictionary(array)
    if pa.types.is_null(kind):
        return CanonicalColumn.missing(len(array))
    if (
        pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_decimal(kind)
    ):
        return _numbers(array)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        array = pc.cast(array, pa.string())
    return _from_dictionary(pc.dictionary_encode(array))


def arrow_column(series: pd.Series) -> pa.Array:
    """A pandas column as Arrow; a mixed object column becomes text (nulls kept)."""
    try:
        return pa.array(series, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        values = [None if _is_missing(v) else str(v) for v in series.tolist()]
        return pa.array(values, type=pa.string())


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def canonical_batch(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[str]
) -> list[CanonicalColumn | None]:
    """Canonical cells of `columns` in an Arrow batch; None for a column it lacks."""
    names = set(batch.schema.names)
    return [canonical_column(batch.column(name)) if name in names else None for name in columns]
