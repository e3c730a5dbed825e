"""Row validation against a model's data-spec (JSON Schema draft 2020-12).

Whether a row is valid is decided by jsonschema-rs (compiled once per model and spec
version, formats asserted, remote references never fetched). Only failing rows are then
explained by python-jsonschema, whose messages are the ones the API has always returned.
Errors carry the row path the spec uses, `rows[<index>].<field>`, so clients can point at
the failing cell.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import operator
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from pipeline.core.errors import InvalidInput

log = logging.getLogger(__name__)

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


def compile_fast(schema: dict[str, Any]) -> Any:
    """The jsonschema-rs validator of a schema; ValueError when it cannot compile it."""
    # Formats are asserted as python-jsonschema's FormatChecker did; `offline` keeps a
    # `$ref` to a URL from making the server fetch it.
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=True, offline=True)


def _compile_batch(schema: dict[str, Any]) -> Any:
    """A validator for a list of rows, or None if the data-spec can't be embedded in one."""
    # With its own $id the data-spec is a resource of its own inside the wrapper, so its
    # "#/..." references still resolve against itself.
    row = {**schema, "$id": schema.get("$id") or "urn:marketplace:data-spec"}
    try:
        return compile_fast({"type": "array", "items": row})
    except ValueError:
        return None


def check_schema(schema: dict[str, Any]) -> None:
    """Reject a data-spec that is not a valid draft 2020-12 object schema."""
    dialect = foreign_dialect(schema)
    if dialect is not None:
        raise InvalidInput(
            f"data_spec declares the dialect {dialect!r}: only JSON Schema draft 2020-12 "
            f"({DIALECT!r}) is implemented; drop `$schema` or use that one"
        )
    try:
        # No format checker: `pattern`s are ECMA-262 regular expressions, which Python's `re`
        # does not read (`\p{Letter}`, `\cC`); jsonschema-rs compiles them below.
        Draft202012Validator.check_schema(schema, format_checker=None)
    except Exception as exc:  # jsonschema raises SchemaError with a readable message
        raise InvalidInput(f"data_spec is not a valid JSON Schema: {exc}") from None
    if schema.get("type") != "object":
        raise InvalidInput('data_spec must describe an object ("type": "object")')
    if _has_empty_enum(schema):
        # Valid JSON Schema that admits no value, and the web form's Ajv refuses to compile.
        raise InvalidInput("data_spec has an empty `enum`: it admits no value")
    try:
        compile_fast(schema)
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInput(f"data_spec cannot be compiled: {first}") from None


DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Keywords whose values are data, not schemas: a `$schema` member there names no dialect.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def foreign_dialect(schema: Any) -> str | None:
    """The first `$schema` in the data-spec (or a resource embedded in it) that is not 2020-12."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            declared = node.get("$schema")
            if isinstance(declared, str) and declared.rstrip("#") != DIALECT:
                return declared
            stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
    return None


def _has_empty_enum(schema: Any) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("enum") == []:
                return True
            stack.extend(v for k, v in node.items() if k not in _DATA_KEYWORDS)
    return False


def present(row: Any) -> Any:
    """A row without its null members: a null cell is an absent member, as the stored table
    and the pipeline's check read it (a Parquet or CSV cell cannot tell null from absent)."""
    if isinstance(row, dict) and None in row.values():
        return {name: value for name, value in row.items() if value is not None}
    return row


def _path(base: str, parts: Iterable[Any]) -> str:
    path = base
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


class RowValidator:
    """A compiled data-spec: `is_valid` per row, `errors_for` every failing row's errors."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self._explainer = Draft202012Validator(schema, format_checker=FormatChecker())
        try:
            self._fast: Any = compile_fast(schema)
        except ValueError as exc:
            # Specs registered before check_schema compiled them: correct, only slower.
            log.warning("data-spec not compiled by jsonschema-rs (%s); using jsonschema", exc)
            self._fast = None
        self._batch = _compile_batch(schema) if self._fast is not None else None

    def is_valid(self, row: Any) -> bool:
        row = present(row)
        if self._fast is None:
            return bool(self._explainer.is_valid(row))
        try:
            return bool(self._fast.is_valid(row))
        except ValueError:  # a value with no JSON counterpart (bytes, a lone surrogate)
            return False

    def invalid_indices(self, rows: Sequence[Any], *, nulls: bool = True) -> list[int]:
        """Positions of the rows that fail the data-spec (`nulls=False`: none holds a null)."""
        rows = list(map(present, rows)) if nulls else list(rows)
        if self._batch is not None:
            # One call for a whole batch of valid rows: the common case, and the cheapest.
            try:
                if self._batch.is_valid(rows):
                    return []
            except ValueError:
                pass
        if self._fast is None:
            verdicts = [bool(self._explainer.is_valid(row)) for row in rows]
        else:
            try:
                verdicts = list(map(self._fast.is_valid, rows))
            except ValueError:
                verdicts = [self.is_valid(row) for row in rows]
        if all(verdicts):
            return []
        return list(itertools.compress(range(len(rows)), map(operator.not_, verdicts)))

    def row_errors(self, index: int, row: Any) -> list[RowError]:
        """A failing row's errors (at most MAX_ERRORS_PER_ROW), at `rows[<index>]...` paths."""
        base = f"rows[{index}]"
        row = present(row)
        found: list[RowError] = []
        try:
            for error in self._explainer.iter_errors(row):
                found.extend(self._explain(base, index, error))
                if len(found) >= MAX_ERRORS_PER_ROW:
                    break
        except Exception:  # any failure to explain falls back to jsonschema-rs
            # python-jsonschema cannot follow everything jsonschema-rs can (a `$dynamicRef`
            # into an embedded meta-schema, an ECMA-262 pattern Python's `re` refuses).
            log.debug("python-jsonschema could not explain a row", exc_info=True)
            found = []
        if not found:
            # The two validators disagree only where jsonschema-rs is stricter (formats it
            # knows and python-jsonschema skips, ECMA-262 patterns), where python-jsonschema
            # cannot resolve a reference, or where the row holds a non-JSON value.
            found = self._fast_errors(base, index, row)
        return dedupe(found[:MAX_ERRORS_PER_ROW])

    def _fast_errors(self, base: str, index: int, row: Any) -> list[RowError]:
        if self._fast is not None:
            try:
                found = [
                    RowError(_path(base, error.instance_path), error.message, index)
                    for error in itertools.islice(self._fast.iter_errors(row), MAX_ERRORS_PER_ROW)
                ]
            except ValueError as exc:
                return [RowError(base, f"the row holds a value that is not JSON: {exc}", index)]
            if found:
                return found
        return [RowError(base, "the row does not match the data-spec", index)]

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

    def iter_errors(
        self, rows: Sequence[Any], start: int = 0, *, nulls: bool = True
    ) -> Iterator[RowError]:
        """Every failing row's errors, uncapped across rows; `start` is the first row's index."""
        for position in self.invalid_indices(rows, nulls=nulls):
            yield from self.row_errors(start + position, rows[position])

    def errors_for(self, rows: Sequence[Any], start: int = 0) -> list[RowError]:
        """Every failing row's errors, at most MAX_ERRORS_TOTAL of them."""
        errors = list(itertools.islice(self.iter_errors(rows, start), MAX_ERRORS_TOTAL))
        if len(errors) >= MAX_ERRORS_TOTAL:
            return errors
        return dedupe(errors)


def dedupe(errors: list[RowError]) -> list[RowError]:
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
