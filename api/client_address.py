"""The caller's address, decided once per request from the peer and TRUSTED_PROXIES.

uvicorn's own proxy-header handling is off (`api.server`): by default it believes
`X-Forwarded-For` from 127.0.0.1, so any local caller could claim any address, and its access
log showed the claim. Here `TRUSTED_PROXIES` alone decides, and the decision replaces the ASGI
scope's `client`, so key checks (`allowed_ips`), rate limits and uvicorn's access log all see
the same address.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

Scope = dict[str, Any]


def decide_client_address(
    peer: str | None, forwarded_for: str | None, trusted: Collection[str]
) -> str | None:
    """The peer, unless it is a trusted proxy: then the rightmost X-Forwarded-For hop that is not.

    Each trusted proxy appends the address it received from, so entries left of the first
    untrusted one (reading from the right) are the client's own, spoofable, claims.
    """
    if not (forwarded_for and peer and peer in trusted):
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if hop not in trusted:
            return hop
    return hops[0] if hops else peer


def _header(scope: Scope, name: bytes) -> str | None:
    """All lines of a header joined with commas (RFC 9110 §5.3), or None."""
    values = [value.decode("latin-1") for key, value in scope.get("headers", []) if key == name]
    return ",".join(values) if values else None


class ClientAddress:
    """ASGI middleware: `scope["client"]` becomes the decided address (port 0 when forwarded).

    A trusted proxy's `X-Forwarded-Proto` (`http` or `https`) also sets the scheme. Without
    TRUSTED_PROXIES nothing is read and the peer stays as it is.
    """

    def __init__(self, app: Any, trusted_proxies: Collection[str]) -> None:
        self.app = app
        self.trusted = frozenset(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if self.trusted and scope["type"] in {"http", "websocket"}:
            self._decide(scope)
        await self.app(scope, receive, send)

    def _decide(self, scope: Scope) -> None:
        client = scope.get("client")
        peer = client[0] if client else None
        if peer not in self.trusted:
            return
        decided = decide_client_address(peer, _header(scope, b"x-forwarded-for"), self.trusted)
        if decided is not None and decided != peer:
            scope["client"] = (decided, 0)
        proto = (_header(scope, b"x-forwarded-proto") or "").rsplit(",", 1)[-1].strip().lower()
        if proto in {"http", "https"}:
            scope["scheme"] = proto
