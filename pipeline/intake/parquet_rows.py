"""Dataset files: contribution rows as Parquet, typed from the model's data-spec and the values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core.errors import RowValidationFailed
from pipeline.core.text import has_control_characters
from pipeline.models.dataspec import MAX_ERRORS_TOTAL, RowError
from pipeline.store.json_columns import FreeColumn

_ARROW_TYPES: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Each member a data-spec does not declare becomes a stored column: this many at most, and
# at most this many cells in those columns together (rows x undeclared columns, nulls
# included): 1,000 names spread one a row over a 50 MiB body would otherwise be 4 billion
# cells, minutes of CPU and gigabytes of nulls (issue 33 review).
MAX_UNDECLARED_MEMBERS = 1000
MAX_UNDECLARED_CELLS = 10_000_000
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

    Columns the data-spec pins to one scalar type are converted by Arrow from the row dicts
    in one call (no Python loop per cell). The other properties, and members the data-spec
    does not declare, are typed by the values sent (pipeline.store.json_columns), so the
    stored file holds what the supplier sent, with its type; undeclared members come after the
    declared columns, in the order they first appear.
    """

    def __init__(self, data_spec: dict[str, Any]) -> None:
        properties: dict[str, Any] = data_spec.get("properties", {})
        self._declared = list(properties)
        self._known = set(self._declared)
        pinned = [
            pa.field(name, _ARROW_TYPES[kind])
            for name, spec in properties.items()
            if (kind := str(_kind(_as_dict(spec)))) in _ARROW_TYPES
        ]
        self._typed = pa.struct(pinned)
        self._typed_parts: dict[str, list[pa.Array]] = {f.name: [] for f in pinned}
        self._free = {
            name: FreeColumn(name) for name in self._declared if name not in self._typed_parts
        }
        self._rows = 0

    def add(self, rows: Sequence[Any], start: int = 0) -> list[RowError]:
        """Append valid rows (row `start` first); errors for values no column type can hold."""
        present = set().union(*map(dict.keys, rows))
        extra = present - self._known
        if extra:
            errors = self._check_undeclared(rows, extra, start)
            if errors:
                return errors
        errors = self._check_undeclared_cells(len(rows), len(extra), start)
        if errors:
            return errors
        try:
            struct = pa.array(rows, type=self._typed)
            typed = dict(zip(self._typed.names, struct.flatten(), strict=True))
        except _CONVERSION_ERRORS:
            typed, errors = self._typed_by_column(rows, start)
            if errors:
                return errors
        if extra:
            for name in dict.fromkeys(n for row in rows for n in row if n in extra):
                self._free[name] = FreeColumn(name, self._rows)
                self._known.add(name)
        for name, array in typed.items():
            self._typed_parts[name].append(array)
        for name, column in self._free.items():
            if name in present:
                column.add([row.get(name) for row in rows])
            else:  # a sparse member: no look into each row
                column.add_nulls(len(rows))
        self._rows += len(rows)
        return []

    def _check_undeclared_cells(self, count: int, new: int, start: int) -> list[RowError]:
        """An error once the undeclared columns would hold more than MAX_UNDECLARED_CELLS."""
        columns = len(self._known) - len(self._declared) + new
        cells = columns * (self._rows + count)
        if cells <= MAX_UNDECLARED_CELLS:
            return []
        index = start + count - 1
        message = (
            f"the rows' {columns} members the data-spec does not declare would be "
            f"{cells:,} stored cells with the rows up to this one (a column each, a cell per "
            f"row); at most {MAX_UNDECLARED_CELLS:,} are taken"
        )
        return [RowError(f"rows[{index}]", message, index)]

    def _check_undeclared(self, rows: Sequence[Any], extra: set[str], start: int) -> list[RowError]:
        """Errors for undeclared member names no stored column may have, or too many of them."""
        errors = []
        for offset, row in enumerate(rows):
            bad = [name for name in row if name in extra and has_control_characters(name)]
            if bad:
                index = start + offset
                message = f"member names must not contain control characters: {bad[0]!r}"
                errors.append(RowError(f"rows[{index}]", message, index))
        if errors:
            return errors[:MAX_ERRORS_TOTAL]
        undeclared = len(self._known) - len(self._declared) + len(extra)
        if undeclared <= MAX_UNDECLARED_MEMBERS:
            return []
        index = start + len(rows) - 1
        return [
            RowError(
                f"rows[{index}]",
                f"the rows hold {undeclared} members the data-spec does not declare; each "
                f"becomes a stored column, and at most {MAX_UNDECLARED_MEMBERS} are taken",
                index,
            )
        ]

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
        fields: list[pa.Field] = []
        columns: list[pa.ChunkedArray] = []
        declared = set(self._declared)
        for name in self._declared + [n for n in self._free if n not in declared]:
            if name in self._typed_parts:
                kind = self._typed.field(name).type
                field = pa.field(name, kind)
                column = pa.chunked_array(self._typed_parts[name], kind)
            else:
                field, column = self._free[name].finish()
            fields.append(field)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _as_dict(spec: Any) -> dict[str, Any]:
    return spec if isinstance(spec, dict) else {}


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
