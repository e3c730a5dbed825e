"""Bounded HTTP/1.1 requests: uvicorn's httptools protocol with size limits and read deadlines.

uvicorn 0.54 on httptools bounds neither the request line nor the header block (a 100 MB
header held the event loop for seconds, its cost growing with the square of the size), and
it has no deadline before a request's headers are complete or while its body arrives: a
connection that sends nothing, or one byte a second, is held for ever. h11 has a header cap
but no deadlines either, and parses in pure Python. So the protocol uvicorn already uses is
kept, and this subclass adds, per connection (limits in `HttpBounds`, from the settings):

- request line longer than `max_request_line` bytes: 414, before any header is read;
- more than `max_headers` header fields, or more than `max_header_bytes` of them (or a head
  still incomplete past both limits together): 431, before the body is read;
- headers not complete `header_timeout` seconds after the connection opened or the request's
  first byte arrived: the connection is closed (408 first when part of a head came);
- a body slower than `body_min_rate` bytes/s on average after `body_timeout` seconds of grace
  (Apache mod_reqtimeout's `body=20,MinRate=500`), time while the app is not reading excepted:
  the connection is closed;
- more than `max_connections` open connections in this process: the new one gets 503 and is
  closed at once, so silent connections cannot pile up to the open-file limit.

Between requests uvicorn's own keep-alive timeout applies. One timer per connection, moved
only when it fires, keeps the cost per request to a few attribute updates.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from pipeline.core.config import Settings

log = logging.getLogger("uvicorn.error")

HEAD, BODY, IDLE = "head", "body", "idle"


@dataclass(frozen=True)
class HttpBounds:
    """What one request and one process may take; docs/operations.md states the defaults."""

    max_request_line: int = 8 * 1024
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    header_timeout: float = 10.0
    body_timeout: float = 20.0
    body_min_rate: int = 500
    max_connections: int = 1000

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpBounds:
        return cls(
            max_request_line=settings.http_max_request_line_bytes,
            max_header_bytes=settings.http_max_header_bytes,
            max_headers=settings.http_max_headers,
            header_timeout=settings.http_header_timeout_seconds,
            body_timeout=settings.http_body_timeout_seconds,
            body_min_rate=settings.http_body_min_bytes_per_second,
            max_connections=settings.http_max_connections,
        )


class Refused(Exception):
    """A request refused by a bound; raised inside the parser's callbacks to stop parsing."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def refusal_bytes(status: int, detail: str) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    if status == 503:
        headers.append(b"retry-after: 5")
    return STATUS_LINE[status] + b"\r\n".join(headers) + b"\r\n\r\n" + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with `HttpBounds` (read from `config.http_bounds`)."""

    def __init__(self, config: Any, server_state: Any, app_state: Any, _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.bounds: HttpBounds = getattr(config, "http_bounds", None) or HttpBounds()
        self._phase = HEAD
        self._since = 0.0  # when the current head began, or the body's credit started
        self._received = 0  # bytes of the current head, or of the body since `_since`
        self._header_count = 0
        self._header_bytes = 0
        self._refusal: Refused | None = None
        self._timer: asyncio.TimerHandle | None = None

    # Connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.bounds.max_connections:
            log.warning("refused a connection: %d open", len(self.connections) - 1)
            self._send_refusal(Refused(503, "the server has too many connections; retry shortly"))
            return
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        super().data_received(data)
        if self._phase == HEAD and not self.transport.is_closing():
            limit = self.bounds.max_request_line + self.bounds.max_header_bytes
            if self._received > limit:
                self._send_refusal(Refused(431, f"request head larger than {limit} bytes"))

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers 400 to every parser error; a bound that stopped the parser says its own.
        if self._refusal is not None:
            self._send_refusal(self._refusal)
        else:
            super().send_400_response(msg)

    # Parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase != HEAD:
            self._start_head()
            self._received = 1  # this request's first byte is here: a stall now earns a 408

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.bounds.max_request_line:
            self._stop(Refused(414, f"request target longer than {self.bounds.max_request_line}"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._header_bytes += len(name) + len(value) + 4
        if self._header_count > self.bounds.max_headers:
            self._stop(Refused(431, f"more than {self.bounds.max_headers} header fields"))
        if self._header_bytes > self.bounds.max_header_bytes:
            self._stop(Refused(431, f"header fields larger than {self.bounds.max_header_bytes}"))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._phase, self._since, self._received = BODY, self.loop.time(), 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._phase = IDLE
        super().on_message_complete()

    # Bounds

    def _stop(self, refusal: Refused) -> None:
        self._refusal = refusal
        raise refusal

    def _send_refusal(self, refusal: Refused) -> None:
        self._cancel_timer()
        if self.transport.is_closing():
            return
        log.info(
            "refused a request from %s: %d %s", _peer(self.client), refusal.status, refusal.detail
        )
        self.transport.write(refusal_bytes(refusal.status, refusal.detail))
        self.transport.close()

    def _start_head(self) -> None:
        self._phase, self._since, self._received = HEAD, self.loop.time(), 0
        self._header_count = self._header_bytes = 0
        deadline = self._since + self.bounds.header_timeout
        if self._timer is not None and self._timer.when() > deadline:
            self._cancel_timer()
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _reading_paused(self) -> bool:
        """True while the app, not the client, holds up the body (flow control, 100-continue)."""
        cycle = self.cycle
        return self.flow.read_paused or bool(cycle and cycle.waiting_for_100_continue)

    def _deadline(self) -> float | None:
        if self._phase == HEAD:
            return self._since + self.bounds.header_timeout
        if self._phase == BODY:
            credit = self._received / self.bounds.body_min_rate if self.bounds.body_min_rate else 0
            return self._since + self.bounds.body_timeout + credit
        return None

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._phase == BODY and self._reading_paused():
            self._since, self._received = now, 0  # a fresh grace once the app reads again
        deadline = self._deadline()
        if deadline is None:
            return  # between requests: uvicorn's keep-alive timeout applies
        if now < deadline:
            self._timer = self.loop.call_at(deadline, self._on_timer)
            return
        self._expire()

    def _expire(self) -> None:
        if self._phase == HEAD and self._received:
            self._send_refusal(Refused(408, "request headers not received in time"))
            return
        if self._phase == BODY:
            log.info("closed a connection from %s: request body too slow", _peer(self.client))
        self.transport.close()


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "?"
