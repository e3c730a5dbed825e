"""Row validation against a model's data-spec (JSON Schema draft 2020-12).

Validators are compiled once per (model id, spec version) and reused. Errors carry the row
path the spec uses, `rows[<index>].<field>`, so clients can point at the failing cell.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from pipeline.errors import InvalidInput

# Error lists are capped so a bad 10,000-row batch yields a readable, bounded response.
MAX_ERRORS_PER_ROW = 20
MAX_ERRORS_TOTAL = 1000


@dataclass(frozen=True)
class RowError:
    path: str
    message: str
    rowIndex: int  # noqa: N815 - the spec's field name

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message, "rowIndex": self.rowIndex}


def check_schema(schema: dict[str, Any]) -> None:
    """Reject a data-spec that is not a valid draft 2020-12 object schema."""
    try:
        Draft202012Validator.check_schema(schema)
    except Exception as exc:  # jsonschema raises SchemaError with a readable message
        raise InvalidInput(f"data_spec is not a valid JSON Schema: {exc}") from None
    if schema.get("type") != "object":
        raise InvalidInput('data_spec must describe an object ("type": "object")')


def _path(base: str, parts: Iterable[Any]) -> str:
    path = base
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


class RowValidator:
    """A compiled data-spec; `errors_for` returns every failing row's errors."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._validator = Draft202012Validator(schema, format_checker=FormatChecker())
        self._properties = set(schema.get("properties", {}))

    def is_valid(self, row: Any) -> bool:
        return bool(self._validator.is_valid(row))

    def _row_errors(self, index: int, row: Any) -> list[RowError]:
        base = f"rows[{index}]"
        found: list[RowError] = []
        for error in self._validator.iter_errors(row):
            found.extend(self._explain(base, index, error))
            if len(found) >= MAX_ERRORS_PER_ROW:
                break
        return found[:MAX_ERRORS_PER_ROW]

    def _explain(self, base: str, index: int, error: ValidationError) -> list[RowError]:
        at = _path(base, error.absolute_path)
        instance = error.instance
        # Missing and unexpected fields are reported at the field's own path.
        if error.validator == "required" and isinstance(instance, dict):
            # jsonschema yields one error per missing name, with the name's repr first.
            for name in error.validator_value:
                if name not in instance and error.message.startswith(repr(name)):
                    return [RowError(f"{at}.{name}", f"'{name}' is a required property", index)]
            return [RowError(at, error.message, index)]
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            allowed = set(error.schema.get("properties", {}))
            return [
                RowError(f"{at}.{name}", f"'{name}' is not an allowed property", index)
                for name in instance
                if name not in allowed
            ] or [RowError(at, error.message, index)]
        return [RowError(at, error.message, index)]

    def errors_for(self, rows: Sequence[Any]) -> list[RowError]:
        errors: list[RowError] = []
        for index, row in enumerate(rows):
            if self._validator.is_valid(row):
                continue
            errors.extend(self._row_errors(index, row))
            if len(errors) >= MAX_ERRORS_TOTAL:
                return errors[:MAX_ERRORS_TOTAL]
        return _dedupe(errors)


def _dedupe(errors: list[RowError]) -> list[RowError]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for error in errors:
        key = (error.path, error.message)
        if key not in seen:
            seen.add(key)
            unique.append(error)
    return unique


_cache: dict[tuple[int, int, str], RowValidator] = {}
_cache_lock = threading.Lock()


def validator_for(model_id: int, spec_version: int, schema: dict[str, Any]) -> RowValidator:
    """The compiled validator for one model's data-spec version (compiled once per process)."""
    # The schema digest guards against two stores reusing a model id in one process (tests).
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
    key = (model_id, spec_version, digest)
    with _cache_lock:
        validator = _cache.get(key)
        if validator is None:
            validator = RowValidator(schema)
            _cache[key] = validator
        return validator
