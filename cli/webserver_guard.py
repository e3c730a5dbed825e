"""An ASGI guard in front of Dagster's webserver: no foreign Host, no mutation a web page can send.

Dagster's webserver has no authentication and runs a GraphQL mutation sent as a GET or as a
POST with a "simple" content type (text/plain, a form): a web page the data engineer opens can
send those without a CORS preflight, and a DNS name of the attacker's that resolves to 127.0.0.1
reaches a loopback webserver. The guard answers 403 (and a line saying why) to:

- a request (or websocket) whose Host is not one of the allowed names (DNS rebinding);
- a request or websocket with an `Origin` whose host differs from its Host (another site);
- a POST, PUT, PATCH or DELETE whose content type is not `application/json` or
  `application/graphql` (both need a preflight cross-site, which Dagster never grants);
- a GET or HEAD of GraphQL whose query holds a mutation (or cannot be read as queries only).

What the UI itself sends (JSON POSTs and websockets from its own origin) passes unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Names of this machine every loopback webserver answers to.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Content types a browser sends cross-site only after a preflight (Fetch standard, "CORS-
# safelisted request-header"); Dagster's webserver answers no preflight.
PREFLIGHTED_TYPES = frozenset({"application/json", "application/graphql"})


def host_name(value: str) -> str:
    """The host of a Host header or URL authority, lower-case, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, _, _port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return name


def is_mutation(query: str) -> bool:
    """Whether a GraphQL document may mutate: it holds a mutation, or is not readable."""
    try:
        document = parse(query)
    except GraphQLError:
        return True
    return any(
        isinstance(node, OperationDefinitionNode) and node.operation != OperationType.QUERY
        for node in document.definitions
    )


def refusal(scope: Scope, allowed_hosts: Collection[str]) -> str | None:
    """Why the guard refuses this request or websocket, or None."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    host = host_name(headers.get("host", ""))
    if host not in allowed_hosts:
        return f"Host {host or '(none)'!r} is not a name of this Dagster webserver"
    origin = headers.get("origin")
    if origin is not None and host_name(urlsplit(origin).netloc) != host:
        return f"Origin {origin!r} is another site"
    if scope["type"] == "websocket":
        return None
    method = scope["method"]
    if method not in SAFE_METHODS:
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in PREFLIGHTED_TYPES:
            return f"{method} with content type {content_type or '(none)'!r}: send application/json"
    elif scope["path"].rstrip("/").endswith("/graphql"):
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("query", [])
        if any(is_mutation(text) for text in query):
            return f"a GraphQL mutation by {method}: send it as an application/json POST"
    return None


class WebserverGuard:
    """The guard (module docstring) around an ASGI app; lifespan events pass through."""

    def __init__(self, app: ASGIApp, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.allowed_hosts = frozenset(host_name(h) for h in allowed_hosts) | LOOPBACK_HOSTS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            reason = refusal(scope, self.allowed_hosts)
            if reason is not None:
                await _refuse(scope, send, reason)
                return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, reason: str) -> None:
    if scope["type"] == "websocket":
        # Before the handshake is accepted: the client sees HTTP 403.
        await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
        return
    body = f"refused by the marketplace's Dagster guard: {reason}\n".encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"x-content-type-options", b"nosniff"),
    ]
    await send({"type": "http.response.start", "status": 403, "headers": headers})
    await send({"type": "http.response.body", "body": body})
