"""Contribution bodies: one JSON object split into its members and raw rows, parsed in chunks.

msgspec splits the body into its top-level members and the `rows` array into one raw slice
per row (`msgspec.Raw` points into the body: no Python object per row yet). orjson then
parses the rows a chunk at a time, so the server holds the body, the slices and one chunk of
row objects, never every row as a Python dict (those alone take about 3.6x the body).

Numbers that are not finite (NaN, ±Infinity, or beyond a 64-bit float such as 1e400) are not
JSON that orjson reads. A row or member that fails the fast parse is read again by the
standard library with hooks that mark such numbers, so each one is reported at its own path
(`rows[<i>].<field>`); a body that cannot be split at all is scanned member by member and
row by row the same way. Bad bodies end in RowValidationFailed (the spec §2.4 body).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from pipeline.core.errors import RowValidationFailed
from pipeline.models.dataspec import MAX_ERRORS_TOTAL, RowError

BODY_MESSAGE = "invalid contribution request"
NOT_AN_OBJECT = "the body must be a JSON object (spec §2.2)"
# Rows parsed and validated at a time: large enough that per-chunk costs vanish, small enough
# that one chunk of Python objects is a few MB.
ROW_CHUNK = 8192

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True)
class RowChunk:
    """Rows `start`, `start + 1`, ... parsed; a row with `problems` is None in `rows`.

    `nulls` is False when no row of the chunk can hold a `null` (its JSON text has none), so
    the validator need not look for null members to leave out.
    """

    start: int
    rows: list[Any]
    problems: list[RowError] = field(default_factory=list)
    nulls: bool = True


class RowSource:
    """The rows of one contribution, handed out in chunks."""

    def __len__(self) -> int:
        raise NotImplementedError

    def chunks(self, size: int = ROW_CHUNK) -> Iterator[RowChunk]:
        raise NotImplementedError

    def release(self) -> None:
        """Drop what holds the rows (and the body) once the rows are no longer needed."""


class ListRows(RowSource):
    """Rows already parsed (tests, in-process callers)."""

    def __init__(self, rows: Sequence[Any]) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def chunks(self, size: int = ROW_CHUNK) -> Iterator[RowChunk]:
        for start in range(0, len(self._rows), size):
            yield RowChunk(start, list(self._rows[start : start + size]))


class RawRows(RowSource):
    """Rows as raw JSON slices of the body, parsed by orjson one chunk at a time."""

    def __init__(self, raws: list[msgspec.Raw]) -> None:
        self._raws = raws
        self._count = len(raws)

    def __len__(self) -> int:
        return self._count

    def chunks(self, size: int = ROW_CHUNK) -> Iterator[RowChunk]:
        for start in range(0, self._count, size):
            part = self._raws[start : start + size]
            text = b"[" + b",".join(part) + b"]"
            try:
                rows = orjson.loads(text)
            except orjson.JSONDecodeError:
                yield _chunk_row_by_row(start, part)
            else:
                yield RowChunk(start, rows, nulls=b"null" in text)

    def release(self) -> None:
        self._raws = []


def _chunk_row_by_row(start: int, part: list[msgspec.Raw]) -> RowChunk:
    rows: list[Any] = []
    problems: list[RowError] = []
    for offset, raw in enumerate(part):
        index = start + offset
        value, found = parse_value(raw, f"rows[{index}]", index)
        rows.append(None if found else value)
        problems.extend(found)
    return RowChunk(start, rows, problems)


@dataclass
class SplitBody:
    """A contribution body: its members but `rows` parsed, and the rows as a RowSource.

    `rows` is None when the member is missing or not an array; then `rows_value` holds what
    was sent, so the envelope check can say what is wrong with it.
    """

    members: dict[str, Any]
    rows: RowSource | None = None
    rows_value: Any = None
    has_rows: bool = False

    def envelope(self) -> dict[str, Any]:
        """The members with a stand-in for `rows`, for checking the request's own shape."""
        envelope = dict(self.members)
        if self.rows is not None:
            # Row shapes are the data-spec's business (each must be an object there too).
            envelope["rows"] = [{}] if len(self.rows) else []
        elif self.has_rows:
            envelope["rows"] = self.rows_value
        return envelope


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The members spec §2.2 names, each left raw, and `rows` as one raw slice per row."""

    modelId: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # noqa: N815 - spec names
    benchmarkSpecId: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # noqa: N815
    rows: list[msgspec.Raw] | msgspec.UnsetType = msgspec.UNSET
    schemaVersion: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # noqa: N815
    templateId: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # noqa: N815
    manifest: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAW_ROWS = msgspec.json.Decoder(list[msgspec.Raw])


def split_body(data: bytes | bytearray | memoryview) -> SplitBody:
    """Split a JSON body into members and raw rows; RowValidationFailed when it is unreadable."""
    try:
        # One pass over a well-formed body; anything unusual goes the general way below.
        envelope = _ENVELOPE.decode(data)
    except msgspec.ValidationError:
        return _split_members(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise scan_body(data, reason=str(exc)) from None
    body = SplitBody(members={})
    for name in envelope.__struct_fields__:
        raw = getattr(envelope, name)
        if raw is msgspec.UNSET:
            continue
        if name == "rows":
            body.has_rows = True
            body.rows = RawRows(raw)
        else:
            body.members[name] = _member(raw, name)
    return body


def _split_members(data: bytes | bytearray | memoryview) -> SplitBody:
    """The general split: any member names (the envelope check names the unknown ones)."""
    try:
        members = _MEMBERS.decode(data)
    except msgspec.ValidationError:
        raise _body_error(NOT_AN_OBJECT) from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise scan_body(data, reason=str(exc)) from None
    body = SplitBody(members={})
    for name, raw in members.items():
        if name != "rows":
            body.members[name] = _member(raw, name)
            continue
        body.has_rows = True
        if bytes(memoryview(raw)[:1]) == b"[":
            try:
                body.rows = RawRows(_RAW_ROWS.decode(raw))
            except (msgspec.DecodeError, RecursionError) as exc:
                raise scan_body(data, reason=str(exc)) from None
        else:
            body.rows_value = _member(raw, "rows")
    return body


def _member(raw: msgspec.Raw, name: str) -> Any:
    value, problems = parse_value(raw, name, -1)
    if problems:
        raise RowValidationFailed(BODY_MESSAGE, [p.as_dict() for p in problems])
    return value


def _body_error(message: str) -> RowValidationFailed:
    return RowValidationFailed(BODY_MESSAGE, [{"path": "body", "message": message, "rowIndex": -1}])


# The slow reader: the standard library with hooks that mark numbers orjson refuses.


class _NonFinite:
    """Stands where a NaN, ±Infinity or out-of-range number was written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _parse_int(text: str) -> Any:
    # As orjson: an integer that fits 64 bits stays one, a longer one is read as a float.
    if len(text) <= 20:
        value = int(text)
        if _INT64_MIN <= value <= _UINT64_MAX:
            return value
    return _parse_float(text)


_DECODER = json.JSONDecoder(
    parse_float=_parse_float, parse_int=_parse_int, parse_constant=_NonFinite
)


def _shown(text: str) -> str:
    return text if len(text) <= 32 else f"{text[:24]}… ({len(text)} characters)"


def _marks(value: Any, base: str, index: int) -> list[RowError]:
    """Every marked number in a parsed value, at its path (walked without recursion)."""
    found: list[RowError] = []
    stack: list[tuple[str, Any]] = [(base, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _NonFinite):
            message = f"{_shown(item.text)} is not a finite number (must fit a 64-bit float)"
            found.append(RowError(path, message, index))
        elif isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else key, v) for key, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(item))
    found.reverse()
    return found


def parse_value(raw: Any, path: str, index: int) -> tuple[Any, list[RowError]]:
    """A JSON value parsed fast; when orjson refuses it, the problems at their own paths."""
    view = memoryview(raw)
    try:
        return orjson.loads(view), []
    except orjson.JSONDecodeError as fast:
        reason = fast.msg
    data = bytes(view)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [RowError(path, f"is not UTF-8 text (byte {exc.start})", index)]
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        return None, [RowError(path, "is nested too deeply to be read", index)]
    except json.JSONDecodeError as exc:
        return None, [RowError(path, f"is not valid JSON: {exc.msg}", index)]
    found = _marks(value, path, index)
    # Without a marked number the standard library accepted what orjson did not (for
    # instance an escaped lone surrogate): report orjson's reason.
    return None, found or [RowError(path, f"is not valid JSON: {reason}", index)]


def scan_body(data: bytes | bytearray | memoryview, *, reason: str) -> RowValidationFailed:
    """The error for a body msgspec could not split: every unreadable member or row located.

    Members and rows are read one at a time and dropped, so a broken 50 MB body costs its
    text once more, not a Python object per row.
    """
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return _body_error(f"the body is not UTF-8 text (byte {exc.start})")
    problems: list[RowError] = []
    try:
        _scan_object(text, problems)
    except _Malformed as exc:
        problems.append(RowError(exc.path, exc.message, exc.index))
    if not problems:
        return _body_error(f"malformed JSON body: {reason}")
    return RowValidationFailed(BODY_MESSAGE, [p.as_dict() for p in problems[:MAX_ERRORS_TOTAL]])


class _Malformed(Exception):
    def __init__(self, path: str, message: str, index: int = -1) -> None:
        super().__init__(message)
        self.path, self.message, self.index = path, message, index


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _expect(text: str, at: int, token: str, path: str) -> int:
    at = _skip(text, at)
    if not text.startswith(token, at):
        where = f" (after {path})" if path != "body" else ""
        raise _Malformed("body", f"malformed JSON body: expected {token!r} at char {at}{where}")
    return _skip(text, at + len(token))


def _read(text: str, at: int, path: str, index: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, at)
    except RecursionError:
        raise _Malformed(path, "is nested too deeply to be read", index) from None
    except json.JSONDecodeError as exc:
        # Broken syntax is the body's fault as a whole, wherever the parser noticed it.
        where = f" (in {path})" if path != "body" else ""
        raise _Malformed(
            "body", f"malformed JSON body: {exc.msg} at char {exc.pos}{where}"
        ) from None


def _check_value(text: str, at: int, path: str, index: int, problems: list[RowError]) -> int:
    """Read one member or row, add its problems, and return where it ends."""
    value, end = _read(text, at, path, index)
    found = _marks(value, path, index)
    if not found:
        # The standard library reads a few things orjson refuses (an escaped lone surrogate).
        try:
            orjson.loads(text[at:end])
        except orjson.JSONDecodeError as exc:
            found = [RowError(path, f"is not valid JSON: {exc.msg}", index)]
    problems.extend(found)
    return end


def _scan_object(text: str, problems: list[RowError]) -> None:
    at = _skip(text, 0)
    if not text.startswith("{", at):
        raise _Malformed("body", NOT_AN_OBJECT)
    at = _skip(text, at + 1)
    if text.startswith("}", at):
        return
    while len(problems) < MAX_ERRORS_TOTAL:
        name, at = _read(text, at, "body", -1)
        if not isinstance(name, str):
            raise _Malformed("body", f"malformed JSON body: expected a member name at char {at}")
        at = _expect(text, at, ":", name)
        if name == "rows" and text.startswith("[", at):
            at = _scan_rows(text, at, problems)
        else:
            at = _check_value(text, at, name, -1, problems)
        at = _skip(text, at)
        if text.startswith("}", at):
            return
        at = _expect(text, at, ",", "body")


def _scan_rows(text: str, at: int, problems: list[RowError]) -> int:
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return at + 1
    index = 0
    while len(problems) < MAX_ERRORS_TOTAL:
        at = _check_value(text, at, f"rows[{index}]", index, problems)
        at = _skip(text, at)
        if text.startswith("]", at):
            return at + 1
        at = _expect(text, at, ",", f"rows[{index}]")
        index += 1
    return at
