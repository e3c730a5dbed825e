"""Dataset files: contribution rows as Parquet, typed from the model's data-spec."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_ARROW_TYPES: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}


def _field_type(spec: dict[str, Any]) -> pa.DataType:
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
    return _ARROW_TYPES.get(str(kind), pa.string())


def arrow_schema_for(data_spec: dict[str, Any]) -> pa.Schema:
    """One column per data-spec property, in declaration order; nested values as JSON text."""
    properties: dict[str, Any] = data_spec.get("properties", {})
    return pa.schema([pa.field(name, _field_type(spec)) for name, spec in properties.items()])


def rows_to_table(rows: list[dict[str, Any]], data_spec: dict[str, Any]) -> pa.Table:
    schema = arrow_schema_for(data_spec)
    columns: dict[str, list[Any]] = {field.name: [] for field in schema}
    for row in rows:
        for field in schema:
            value = row.get(field.name)
            if field.type == pa.string() and value is not None and not isinstance(value, str):
                value = json.dumps(value)
            elif field.type == pa.float64() and value is not None:
                value = float(value)
            columns[field.name].append(value)
    return pa.Table.from_pydict(columns, schema=schema)


def rows_to_parquet_bytes(rows: list[dict[str, Any]], data_spec: dict[str, Any]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(rows_to_table(rows, data_spec), sink, compression="zstd")
    return sink.getvalue()
