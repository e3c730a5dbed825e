"""A streaming multipart/form-data reader: small text fields in memory, one file part to a sink.

Starlette's `request.form()` spools files to temp files but has no size limit for them and
writes every chunk through the thread pool. This reader feeds python-multipart's parser from
`request.stream()`, hands the file's bytes to a synchronous sink in batches (in a worker
thread, one batch in flight while the next is parsed), and stops reading with 413 as soon
as the file passes its limit, whatever the request's framing (Content-Length or chunked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from python_multipart.multipart import MultipartParseError, MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from pipeline.core.errors import InvalidInput, PayloadTooLarge

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FLUSH_BYTES = 1024 * 1024
MAX_FIELD_BYTES = 64 * 1024
MAX_BOUNDARY_BYTES = 200


@dataclass
class StreamedForm:
    """The text fields, and whether (and under which client name) the file part came."""

    fields: dict[str, str] = field(default_factory=dict)
    file_received: bool = False
    filename: str | None = None
    file_bytes: int = 0


class _FormCollector:
    """python-multipart callbacks: route each part to the fields or the file buffer."""

    def __init__(
        self,
        file_field: str,
        text_fields: Collection[str],
        on_file: Callable[[str | None, Mapping[str, str]], None],
        max_file_bytes: int,
    ) -> None:
        self.form = StreamedForm()
        self.file_field = file_field
        self.text_fields = text_fields
        self.on_file = on_file
        self.max_file_bytes = max_file_bytes
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.ended = False
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._part: str | None = None  # the current text field's name; None for the file
        self._value = bytearray()

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self.on_part_begin,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_end": self.on_end,
        }

    def take(self) -> list[bytes]:
        """The file bytes gathered since the last call, as received: joining them would copy
        every byte once more (into fresh pages: hundreds of MB per large upload)."""
        chunks = self.pending
        self.pending = []
        self.pending_bytes = 0
        return chunks

    def on_part_begin(self) -> None:
        self._disposition = b""
        self._part = None
        self._value = bytearray()

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        if self._header_name.strip().lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name = b""
        self._header_value = b""

    def on_headers_finished(self) -> None:
        kind, options = parse_options_header(self._disposition)
        if kind != b"form-data" or b"name" not in options:
            raise InvalidInput("a multipart part lacks `Content-Disposition: form-data; name=…`")
        name = options[b"name"].decode("utf-8", "replace")
        if name == self.file_field:
            if self.form.file_received:
                raise InvalidInput(f"only one {self.file_field!r} part is allowed")
            self.form.file_received = True
            raw = options.get(b"filename")
            # The header arrives as bytes; browsers and curl send UTF-8 names.
            self.form.filename = raw.decode("utf-8", "replace") if raw is not None else None
            self.on_file(self.form.filename, dict(self.form.fields))
            self._part = None
        elif name in self.text_fields:
            if name in self.form.fields:
                raise InvalidInput(f"form field {name!r} is given twice")
            self._part = name
        else:
            expected = ", ".join([self.file_field, *self.text_fields])
            raise InvalidInput(f"unexpected form field {name[:100]!r}; expected: {expected}")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._part is None:
            chunk = data[start:end]
            self.pending.append(chunk)
            self.pending_bytes += len(chunk)
            self.form.file_bytes += len(chunk)
            if self.form.file_bytes > self.max_file_bytes:
                raise PayloadTooLarge(f"the file exceeds {self.max_file_bytes} bytes")
        else:
            self._value += data[start:end]
            if len(self._value) > MAX_FIELD_BYTES:
                raise InvalidInput(f"form field {self._part!r} exceeds {MAX_FIELD_BYTES} bytes")

    def on_part_end(self) -> None:
        if self._part is not None:
            try:
                self.form.fields[self._part] = self._value.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput(f"form field {self._part!r} is not UTF-8 text") from None

    def on_end(self) -> None:
        self.ended = True


def multipart_boundary(content_type: str | None) -> bytes:
    kind, params = parse_options_header(content_type or "")
    if kind != b"multipart/form-data":
        raise InvalidInput("the request body must be multipart/form-data")
    boundary = params.get(b"boundary", b"")
    if not boundary or len(boundary) > MAX_BOUNDARY_BYTES:
        raise InvalidInput("the multipart/form-data body has no valid boundary")
    return boundary


async def read_streaming_form(
    request: Request,
    *,
    file_field: str,
    text_fields: Collection[str],
    sink: Callable[[list[bytes]], None],
    on_file: Callable[[str | None, Mapping[str, str]], None] = lambda _name, _fields: None,
    max_file_bytes: int,
) -> StreamedForm:
    """Read the whole body: text fields returned, the file part's bytes given to `sink` (a
    list of consecutive chunks at a time).

    Raises InvalidInput (400) for a malformed body or an unexpected field, PayloadTooLarge
    (413) as soon as the file passes `max_file_bytes`. `on_file(filename, fields)` is called
    when the file part starts, with the text fields sent before it. When this returns or
    raises, no `sink` call is running any more.
    """
    collector = _FormCollector(file_field, text_fields, on_file, max_file_bytes)
    try:
        parser = MultipartParser(
            multipart_boundary(request.headers.get("content-type")), collector.callbacks()
        )
    except ValueError:
        raise InvalidInput("the multipart/form-data body has no valid boundary") from None
    loop = asyncio.get_running_loop()
    in_flight: asyncio.Future[None] | None = None

    async def flush() -> None:
        nonlocal in_flight
        chunks = collector.take()
        if in_flight is not None:
            await in_flight
            in_flight = None
        if chunks:
            in_flight = loop.run_in_executor(None, sink, chunks)

    try:
        try:
            async for chunk in request.stream():
                try:
                    parser.write(chunk)
                except MultipartParseError as exc:
                    raise InvalidInput(f"malformed multipart body: {exc}") from None
                if collector.pending_bytes >= FLUSH_BYTES:
                    await flush()
        except ClientDisconnect:
            raise InvalidInput("the client disconnected before the body was complete") from None
        if not collector.ended:
            raise InvalidInput("the multipart body ends before its closing boundary")
        await flush()
        if in_flight is not None:
            await in_flight
            in_flight = None
    finally:
        if in_flight is not None:
            # Let the running write end before the caller cleans up; its error is secondary.
            await asyncio.wait([in_flight])
            if not in_flight.cancelled():
                in_flight.exception()
    return collector.form
