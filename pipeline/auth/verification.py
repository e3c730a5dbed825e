"""Verifying a presented API key: the hash lookup, who it acts for, and one use of it.

`authenticate_key` answers whether a key may be used here and now (active, unexpired, allowed
from this address, with this scope, its organization creator still entitled); `KeyVerifier`
adds the rate limit, the monthly prediction quota and the last-use time. Lookups are by hash;
every call reads the database, so a revoked or rotated-out key stops at once.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select

from pipeline.auth.keys import hash_key
from pipeline.auth.orgs import key_holder_role
from pipeline.auth.ratelimit import KeyRateLimiter
from pipeline.auth.usage import LastUsedRecorder, consume_prediction
from pipeline.core.db import Database
from pipeline.core.errors import Forbidden, Unauthenticated
from pipeline.core.tables import ApiKey, OrgMember, utcnow

# Presented keys longer than this are refused without a lookup.
MAX_PRESENTED_KEY_CHARS = 256


@dataclass(frozen=True)
class KeyPrincipal:
    """Who a verified key acts for."""

    key_id: str
    user_id: str
    org_id: str | None
    service_id: str
    scopes: list[str] = field(default_factory=list)
    rate_limit_per_hour: int = 1000
    monthly_prediction_limit: int | None = None


def ip_allowed(allowed: list[str] | None, client_ip: str | None) -> bool:
    if not allowed:
        return True
    if client_ip is None:
        return False
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:192.0.2.1 from a dual-stack socket is 192.0.2.1
    return any(address in ipaddress.ip_network(entry, strict=False) for entry in allowed)


class KeyRefused(Unauthenticated):
    """A presented key does not verify (401); `reason` is the verify call's code."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


class KeyNotPermitted(Forbidden):
    """A valid key used where it may not be (403): wrong service, address or scope."""

    def __init__(self, detail: str, reason: str) -> None:
        super().__init__(detail)
        self.reason = reason


# The creator's current role in the key's organization rides along (NULL for a personal key or
# a creator who is no longer a member): membership changes apply on the next request.
_LOOKUP_BY_HASH = (
    select(
        ApiKey.id,
        ApiKey.key_hash,
        ApiKey.user_id,
        ApiKey.org_id,
        ApiKey.service_id,
        ApiKey.scopes,
        ApiKey.is_active,
        ApiKey.expires_at,
        ApiKey.allowed_ips,
        ApiKey.rate_limit_per_hour,
        ApiKey.monthly_prediction_limit,
        OrgMember.role.label("member_role"),
    )
    .outerjoin(
        OrgMember,
        (OrgMember.org_id == ApiKey.org_id) & (OrgMember.user_id == ApiKey.user_id),
    )
    .where(ApiKey.key_hash == bindparam("digest"))
)


def check_org_key_holder(role: str | None) -> None:
    """An organization key's creator must still be a member whose role may create keys."""
    if role is None:
        # Removing a member revokes their keys; this covers a membership row deleted otherwise.
        raise KeyRefused("invalid API key", "invalid")
    if not key_holder_role(role):
        raise KeyNotPermitted(
            f"the key's creator is now {role} in its organization and may not use its keys",
            "member_role",
        )


def authenticate_key(
    db: Database,
    api_key: str,
    *,
    client_ip: str | None = None,
    service_id: str | None = None,
    scope: str | None = None,
) -> KeyPrincipal:
    """Verify a presented key: known, active, unexpired, allowed from this address and scope.

    Unknown, revoked and rotated-out keys are refused alike (reason `invalid`). An organization
    key works only while its creator is a member whose role may create keys. Every call reads
    the database: there is no cache that could let a revoked key through.
    """
    if not api_key or len(api_key) > MAX_PRESENTED_KEY_CHARS:
        raise KeyRefused("invalid API key", "invalid")
    digest = hash_key(api_key)
    # A Core select of the needed columns: this runs on every authenticated request.
    with db.engine.connect() as conn:
        key = conn.execute(_LOOKUP_BY_HASH, {"digest": digest}).first()
    # The hash lookup already matched; compare again in constant time for defence in depth.
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        raise KeyRefused("invalid API key", "invalid")
    if not key.is_active:
        raise KeyRefused("invalid API key", "invalid")
    if key.expires_at is not None and key.expires_at <= utcnow():
        raise KeyRefused("API key expired", "expired")
    if key.org_id is not None:
        check_org_key_holder(key.member_role)
    if service_id is not None and key.service_id != service_id:
        raise KeyNotPermitted(f"this endpoint needs a {service_id!r} key", "wrong_service")
    if not ip_allowed(key.allowed_ips, client_ip):
        raise KeyNotPermitted("client address not allowed for this key", "ip_not_allowed")
    if scope is not None and key.scopes and scope not in key.scopes:
        raise KeyNotPermitted(f"key lacks scope {scope!r}", "insufficient_scope")
    return KeyPrincipal(
        key_id=key.id,
        user_id=key.user_id,
        org_id=key.org_id,
        service_id=key.service_id,
        scopes=list(key.scopes or []),
        rate_limit_per_hour=key.rate_limit_per_hour,
        monthly_prediction_limit=key.monthly_prediction_limit,
    )


class KeyVerifier:
    """One use of a key: authenticate, rate-limit, count a prediction, note the last use.

    One per app (see `api.app.create_app`). It holds no verification cache; only the rate-limit
    window and the last-used throttle live here.
    """

    def __init__(
        self, db: Database, limiter: KeyRateLimiter, recorder: LastUsedRecorder | None = None
    ) -> None:
        self.db = db
        self.limiter = limiter
        self.recorder = recorder or LastUsedRecorder()

    def use(
        self,
        api_key: str,
        *,
        client_ip: str | None,
        service_id: str | None = None,
        scope: str | None = None,
    ) -> KeyPrincipal:
        principal = authenticate_key(
            self.db, api_key, client_ip=client_ip, service_id=service_id, scope=scope
        )
        self.limiter.hit(principal.key_id, principal.rate_limit_per_hour)
        if principal.service_id == "prediction" and principal.monthly_prediction_limit is not None:
            consume_prediction(self.db, principal.key_id, principal.monthly_prediction_limit)
        self.recorder.touch(self.db, principal.key_id)
        return principal


def verify_result(principal: KeyPrincipal) -> dict[str, Any]:
    """The verify call's answer for a valid key."""
    return {
        "valid": True,
        "key_id": principal.key_id,
        "service_id": principal.service_id,
        "scopes": list(principal.scopes),
        "user_id": principal.user_id,
    }
