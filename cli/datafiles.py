"""Row files for the contributor commands: CSV, Parquet and JSON lines read as data-spec rows.

CSV cells are text; each is converted to the type its data-spec property declares (integer,
number, boolean, object/array as JSON, enum members by their text) so that validation sees
what the server would receive. A cell that does not convert stays text, and the validator then
reports it with the spec's own message. An empty cell (or a Parquet null) is an absent field,
or `null` where the property allows null.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.store.formats import JSON, JSON_LINES_EXTENSIONS, extension, format_of

_INTEGER = re.compile(r"[+-]?\d+")
_INTEGRAL_FLOAT = re.compile(r"[+-]?\d+\.0*")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


class RowFileError(ValueError):
    """The file cannot be read as rows; the message names the file or the row."""


@dataclass(frozen=True)
class RowFile:
    """Rows read from a file, with problems that belong to single rows (`rows[i]: …`)."""

    path: Path
    file_format: str
    rows: list[dict[str, Any]]
    problems: list[tuple[int, str]]
    sha256: str


def file_format(path: Path) -> str:
    """csv, parquet, jsonl (one row a line) or json (an array of rows), from the extension."""
    kind = format_of(path.name)
    if kind == JSON and extension(path.name) in JSON_LINES_EXTENSIONS:
        return "jsonl"
    if kind is None:
        raise RowFileError(
            f"{path.name}: unsupported file type {path.suffix or '(none)'}; "
            "expected .csv, .parquet, .jsonl (or .ndjson, .json)"
        )
    return kind


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- the data-spec's view of one property ------------------------------------------------


def resolve_property(schema: dict[str, Any], prop: Any) -> dict[str, Any]:
    """A property schema with local `$ref`s (`#/$defs/…`) merged in."""
    seen = 0
    while isinstance(prop, dict) and isinstance(prop.get("$ref"), str) and seen < 10:
        ref = prop["$ref"]
        if not ref.startswith("#/"):
            break
        target: Any = schema
        for part in ref[2:].split("/"):
            target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if target else {}
        prop = {**(target or {}), **{k: v for k, v in prop.items() if k != "$ref"}}
        seen += 1
    return prop if isinstance(prop, dict) else {}


def declared_types(prop: dict[str, Any]) -> list[str]:
    kind = prop.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [str(k) for k in kind]
    return []


def allows_null(prop: dict[str, Any]) -> bool:
    if "null" in declared_types(prop):
        return True
    return None in prop.get("enum", [object()])


def _cell_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


# --- converting one CSV cell -------------------------------------------------------------

_MISSING = object()


def convert_cell(text: str, prop: dict[str, Any]) -> Any:
    """The typed value of a CSV cell for `prop`; `_MISSING` for an absent field."""
    if text == "":
        return None if allows_null(prop) else _MISSING
    if "type" not in prop:
        for member in prop.get("enum", []):
            if member is not None and _cell_text(member) == text:
                return member
    for kind in declared_types(prop) or ["string"]:
        value = _convert_as(text, kind)
        if value is not _MISSING:
            return value
    return text


def _convert_as(text: str, kind: str) -> Any:
    stripped = text.strip()
    if kind == "integer":
        if _INTEGER.fullmatch(stripped):
            return int(stripped)
        if _INTEGRAL_FLOAT.fullmatch(stripped):  # "3.0" as pandas writes integer columns
            return int(float(stripped))
        return _MISSING
    if kind == "number":
        if _INTEGER.fullmatch(stripped):
            return int(stripped)
        try:
            number = float(stripped)
        except ValueError:
            return _MISSING
        return number if math.isfinite(number) else _MISSING
    if kind == "boolean":
        lowered = stripped.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        return _MISSING
    if kind in {"object", "array"}:
        try:
            value = json.loads(text)
        except ValueError:
            return _MISSING
        expected = dict if kind == "object" else list
        return value if isinstance(value, expected) else _MISSING
    if kind == "string":
        return text
    return _MISSING


# --- readers -------------------------------------------------------------------------------


def _csv_rows(path: Path, schema: dict[str, Any]) -> tuple[list[dict[str, Any]], list]:
    properties = schema.get("properties", {})
    rows: list[dict[str, Any]] = []
    problems: list[tuple[int, str]] = []
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            # strict: text after a closing quote (`"a \"b\" c"`) is an error, not glued to the
            # value; the server refuses such a file too (pipeline/store/csv_text.py).
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if header is None:
                raise RowFileError(f"{path.name}: the CSV file is empty (no header line)")
            header = [name.strip() for name in header]
            duplicates = sorted(n for n, count in Counter(header).items() if count > 1)
            if duplicates:
                raise RowFileError(
                    f"{path.name}: the header repeats column(s) {', '.join(duplicates)}"
                )
            props = [resolve_property(schema, properties.get(name, {})) for name in header]
            for cells in reader:
                if not cells:
                    continue  # a blank line
                index = len(rows)
                if len(cells) != len(header):
                    problems.append(
                        (index, f"has {len(cells)} cells, the header names {len(header)} columns")
                    )
                row: dict[str, Any] = {}
                for name, prop, text in zip(header, props, cells, strict=False):
                    value = convert_cell(text, prop)
                    if value is not _MISSING:
                        row[name] = value
                rows.append(row)
    except UnicodeDecodeError:
        raise RowFileError(f"{path.name}: not UTF-8 text") from None
    except csv.Error as exc:
        raise RowFileError(
            f"{path.name}: not a valid CSV file on line {reader.line_num} ({exc})"
        ) from None
    return rows, problems


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _parquet_rows(path: Path, schema: dict[str, Any]) -> tuple[list[dict[str, Any]], list]:
    # pyarrow takes about 0.6 s to import: only a Parquet file pays for it, not every command.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.store.parquet_envelope import (
        EncryptedParquet,
        UnsafeParquet,
        check_parquet_envelope,
    )

    try:
        # In Python first: pyarrow aborts the process on some files (encrypted columns).
        check_parquet_envelope(path)
        table = pq.read_table(path)
    except EncryptedParquet as exc:
        raise RowFileError(f"{path.name}: {exc}") from None
    except UnsafeParquet as exc:
        raise RowFileError(f"{path.name}: not a valid Parquet file ({exc})") from None
    except (pa.ArrowException, OSError) as exc:
        raise RowFileError(f"{path.name}: not a valid Parquet file ({exc})") from None
    properties = schema.get("properties", {})
    rows = []
    for record in table.to_pylist():
        row = {}
        for name, value in record.items():
            value = _plain(value)
            if value is None:
                prop = resolve_property(schema, properties.get(name, {}))
                if not allows_null(prop):
                    continue
            row[name] = value
        rows.append(row)
    return rows, []


def _jsonl_rows(path: Path) -> tuple[list[dict[str, Any]], list]:
    rows: list[dict[str, Any]] = []
    problems: list[tuple[int, str]] = []
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for line in handle:
                if not line.strip():
                    continue
                index = len(rows)
                try:
                    value = json.loads(line)
                except ValueError:
                    problems.append((index, "is not valid JSON"))
                    rows.append({})
                    continue
                if not isinstance(value, dict):
                    problems.append((index, "is not a JSON object"))
                    rows.append({})
                    continue
                rows.append(value)
    except UnicodeDecodeError:
        raise RowFileError(f"{path.name}: not UTF-8 text") from None
    return rows, problems


def _json_rows(path: Path) -> tuple[list[dict[str, Any]], list]:
    try:
        value = json.loads(path.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
        raise RowFileError(f"{path.name}: not a valid JSON file") from None
    if isinstance(value, dict) and isinstance(value.get("rows"), list):
        value = value["rows"]  # a contribution request body
    if not isinstance(value, list):
        raise RowFileError(f"{path.name}: expected a JSON array of row objects")
    problems = [
        (i, "is not a JSON object") for i, row in enumerate(value) if not isinstance(row, dict)
    ]
    rows = [row if isinstance(row, dict) else {} for row in value]
    return rows, problems


def read_rows(path: Path, schema: dict[str, Any]) -> RowFile:
    """Read every row of a CSV, Parquet, JSON-lines or JSON file as data-spec rows."""
    kind = file_format(path)
    if not path.is_file():
        raise RowFileError(f"{path}: no such file")
    if kind == "csv":
        rows, problems = _csv_rows(path, schema)
    elif kind == "parquet":
        rows, problems = _parquet_rows(path, schema)
    elif kind == "jsonl":
        rows, problems = _jsonl_rows(path)
    else:
        rows, problems = _json_rows(path)
    return RowFile(path, kind, rows, problems, file_sha256(path))


def batches(count: int, batch_size: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of ceil(count / batch_size) batches of nearly equal size.

    Equal sizes keep the last batch from being a small remainder (each batch is a contribution
    checked on its own against the spec §8 minimum of 100 rows).
    """
    if count <= 0:
        return
    number = math.ceil(count / batch_size)
    size, extra = divmod(count, number)
    start = 0
    for index in range(number):
        stop = start + size + (1 if index < extra else 0)
        yield start, stop
        start = stop
