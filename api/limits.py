"""ASGI middleware that refuses request bodies over a size limit with 413, while streaming."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]


class BodySizeLimit:
    """Answers 413 on a too-large Content-Length, and stops reading a body once it passes the limit.

    `limit_for(path)` gives the limit per path, so uploads may be larger than JSON calls.
    """

    def __init__(self, app: Any, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await _reject(send, limit)
                    return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message: Message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, f"request body exceeds {limit} bytes")
            return message

        await self.app(scope, limited_receive, send)


async def _reject(send: Send, limit: int) -> None:
    body = json.dumps({"detail": f"request body exceeds {limit} bytes"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
