"""Columns the data-spec does not pin to one scalar type, typed by the values sent.

A property whose type is not pinned by `type`/`enum` (`anyOf`, `$ref`, `const`, `if`/`then`,
an object or array type) and a member the data-spec does not declare at all get the Arrow type
that holds every value sent in the contribution exactly: int64, float64, string or boolean.
Integers and numbers together are float64 when every integer is exact as a float (JSON Schema
counts 5 and 5.0 as the same integer). Anything else (objects, arrays, strings mixed with
numbers, integers beyond 64 bits) is stored as the JSON text of each value, strings included,
so that `5` and `"5"` stay apart, and the column is marked as JSON in the Parquet field
metadata (`JSON_ENCODING`); the pipeline reads such cells back as the values they encode.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

# The Parquet field metadata of a column whose cells are JSON text.
ENCODING_KEY = b"marketplace:encoding"
JSON_ENCODING = b"json"
_EXACT_FLOAT = 2**53
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def is_json_field(field: pa.Field) -> bool:
    """Whether a stored column holds JSON text (see the module docstring)."""
    return bool(field.metadata) and field.metadata.get(ENCODING_KEY) == JSON_ENCODING


def json_field(name: str) -> pa.Field:
    return pa.field(name, pa.string(), metadata={ENCODING_KEY: JSON_ENCODING})


def json_columns(schema: pa.Schema) -> frozenset[str]:
    """The names of the JSON-text columns of a stored table."""
    return frozenset(f.name for f in schema if is_json_field(f))


class FreeColumn:
    """One column's values, batch by batch, typed once every batch is in."""

    def __init__(self, name: str, earlier_rows: int = 0) -> None:
        self.name = name
        # (array, is_json) per batch; rows before the column first appeared are nulls.
        self._parts: list[tuple[pa.Array, bool]] = []
        if earlier_rows:
            self._parts.append((pa.nulls(earlier_rows), False))

    def add(self, values: Sequence[Any]) -> None:
        self._parts.append(_cells(values))

    def add_nulls(self, count: int) -> None:
        """A batch of `count` rows without the column."""
        self._parts.append((pa.nulls(count), False))

    def finish(self) -> tuple[pa.Field, pa.ChunkedArray]:
        kinds = {array.type for array, is_json in self._parts if not is_json}
        kinds.discard(pa.null())
        if not any(is_json for _, is_json in self._parts):
            if len(kinds) <= 1:
                kind = kinds.pop() if kinds else pa.string()
                return pa.field(self.name, kind), self._cast(kind)
            if kinds == {pa.int64(), pa.float64()} and self._ints_exact():
                return pa.field(self.name, pa.float64()), self._cast(pa.float64())
        field = json_field(self.name)
        return field, pa.chunked_array([_as_json(a, j) for a, j in self._parts], pa.string())

    def _cast(self, kind: pa.DataType) -> pa.ChunkedArray:
        return pa.chunked_array([array.cast(kind) for array, _ in self._parts], kind)

    def _ints_exact(self) -> bool:
        for array, _ in self._parts:
            if array.type == pa.int64() and array.null_count < len(array):
                low, high = pc.min_max(array).values()
                if low.as_py() < -_EXACT_FLOAT or high.as_py() > _EXACT_FLOAT:
                    return False
        return True


def _cells(values: Sequence[Any]) -> tuple[pa.Array, bool]:
    """A batch of one column's values as a typed array, or as JSON text (then True)."""
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if not kinds:
        return pa.nulls(len(values)), False
    if kinds == {bool}:
        return pa.array(values, pa.bool_()), False
    if kinds == {str}:
        return pa.array(values, pa.string()), False
    if kinds == {int} and all(_INT64_MIN <= v <= _INT64_MAX for v in values if v is not None):
        return pa.array(values, pa.int64()), False
    if kinds == {float} or (
        kinds == {int, float}
        and all(-_EXACT_FLOAT <= v <= _EXACT_FLOAT for v in values if type(v) is int)
    ):
        return pa.array(values, pa.float64()), False
    return pa.array([_text(v) for v in values], pa.string()), True


def _text(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits, which orjson does not write
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _as_json(array: pa.Array, is_json: bool) -> pa.Array:
    if is_json:
        return array
    return pa.array([_text(v) for v in array.to_pylist()], pa.string())


def decode_json_cell(value: Any) -> Any:
    """A JSON-text cell as the value it encodes (None stays None); ValueError if it is not JSON."""
    if value is None:
        return None
    # The standard library, not orjson: orjson reads an integer beyond 64 bits as a float,
    # and the cell holds exactly what was sent. NaN and Infinity are not JSON.
    return json.loads(value, parse_constant=_not_json)


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")
