"""Dataset files: contribution rows as Parquet, typed from the model's data-spec."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.errors import RowValidationFailed
from pipeline.models.dataspec import MAX_ERRORS_TOTAL, RowError

_ARROW_TYPES: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Arrow raises these when a Python value does not fit the column's type.
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)


def _kind(spec: dict[str, Any]) -> str | None:
    kind = spec.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and "enum" in spec:
        values = [v for v in spec["enum"] if v is not None]
        if values and all(isinstance(v, bool) for v in values):
            kind = "boolean"
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            kind = "integer"
        elif values and all(isinstance(v, str) for v in values):
            kind = "string"
    return kind if isinstance(kind, str) else None


def _field_type(spec: dict[str, Any]) -> pa.DataType:
    return _ARROW_TYPES.get(str(_kind(spec)), pa.string())


def arrow_schema_for(data_spec: dict[str, Any]) -> pa.Schema:
    """One column per data-spec property, in declaration order; nested values as JSON text."""
    properties: dict[str, Any] = data_spec.get("properties", {})
    return pa.schema(
        [pa.field(name, _field_type(_as_dict(spec))) for name, spec in properties.items()]
    )


class RowTableBuilder:
    """Valid rows to an Arrow table, a batch at a time, column-wise.

    Typed columns are converted by Arrow from the row dicts in one call (no Python loop per
    cell). Columns whose values the data-spec does not pin to one scalar type hold JSON text
    (a string stays as it is); only those are converted value by value.
    """

    def __init__(self, data_spec: dict[str, Any]) -> None:
        properties: dict[str, Any] = data_spec.get("properties", {})
        self.schema = arrow_schema_for(data_spec)
        self._text = {
            f.name
            for f in self.schema
            if f.type == pa.string() and _kind(_as_dict(properties[f.name])) != "string"
        }
        self._typed = pa.struct([f for f in self.schema if f.name not in self._text])
        self._batches: list[pa.RecordBatch] = []

    def add(self, rows: Sequence[Any], start: int = 0) -> list[RowError]:
        """Append valid rows (row `start` first); errors for values no column type can hold."""
        try:
            struct = pa.array(rows, type=self._typed)
            typed = dict(zip(self._typed.names, struct.flatten(), strict=True))
        except _CONVERSION_ERRORS:
            typed, errors = self._typed_by_column(rows, start)
            if errors:
                return errors
        columns = [
            _text_column(rows, f.name) if f.name in self._text else typed[f.name]
            for f in self.schema
        ]
        self._batches.append(pa.RecordBatch.from_arrays(columns, schema=self.schema))
        return []

    def _typed_by_column(
        self, rows: Sequence[Any], start: int
    ) -> tuple[dict[str, pa.Array], list[RowError]]:
        """The slow way, only when Arrow refused a batch: find the cells that do not fit."""
        arrays: dict[str, pa.Array] = {}
        errors: list[RowError] = []
        for f in self._typed:
            values = [row.get(f.name) for row in rows]
            try:
                arrays[f.name] = pa.array(values, type=f.type)
                continue
            except _CONVERSION_ERRORS:
                pass
            for offset, value in enumerate(values):
                fitted, message = _fit(value, f.type)
                values[offset] = fitted
                if message:
                    index = start + offset
                    errors.append(RowError(f"rows[{index}].{f.name}", message, index))
                    if len(errors) >= MAX_ERRORS_TOTAL:
                        return arrays, errors
            if not errors:
                arrays[f.name] = pa.array(values, type=f.type)
        return arrays, errors

    def table(self) -> pa.Table:
        return pa.Table.from_batches(self._batches, schema=self.schema)


def _as_dict(spec: Any) -> dict[str, Any]:
    return spec if isinstance(spec, dict) else {}


def _text_column(rows: Sequence[Any], name: str) -> pa.Array:
    values = [row.get(name) for row in rows]
    return pa.array(
        [v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string()
    )


def _fit(value: Any, kind: pa.DataType) -> tuple[Any, str | None]:
    """A value made to fit an int64/float64 column, or the reason it cannot be stored."""
    if value is None or isinstance(value, bool):
        return value, None
    if kind == pa.int64() and isinstance(value, int | float):
        if isinstance(value, float):
            if not value.is_integer():
                return None, f"{value} is not an integer"
            value = int(value)
        if _INT64_MIN <= value <= _INT64_MAX:
            return value, None
        return None, f"{value} is outside the range of a 64-bit integer"
    if kind == pa.float64() and isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if math.isfinite(number):
            return number, None
        return None, f"{value} is not a finite number (must fit a 64-bit float)"
    return None, f"{value!r} cannot be stored as {kind}"


def rows_to_table(rows: Sequence[Any], data_spec: dict[str, Any]) -> pa.Table:
    """Valid rows as the typed table a contribution stores (RowValidationFailed if one can't)."""
    builder = RowTableBuilder(data_spec)
    errors = builder.add(rows)
    if errors:
        raise RowValidationFailed(
            f"{len({e.rowIndex for e in errors})} rows hold values their column cannot store",
            [e.as_dict() for e in errors],
        )
    return builder.table()


def table_to_parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data: bytes = sink.getvalue().to_pybytes()
    return data


def rows_to_parquet_bytes(rows: Sequence[Any], data_spec: dict[str, Any]) -> bytes:
    return table_to_parquet_bytes(rows_to_table(rows, data_spec))
