"""API keys: issue, list, rotate, revoke and verify; only a SHA-256 of each key is stored.

A key looks like `mk_live_<secret>` (`mk_test_…` outside production): the prefix makes a leaked
key recognisable, the secret carries 192 random bits from `secrets`. The full value exists only
in the create and rotate results. Lookups are by hash; nothing here logs a key.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.db import Database
from pipeline.errors import Forbidden, InvalidInput, NotFound, Unauthenticated
from pipeline.tables import ApiKey, utcnow

KEY_PREFIX = "mk"
SECRET_BYTES = 24  # 192 bits
DISPLAY_CHARS = 12

ServiceId = Literal["prediction", "platform"]
Environment = Literal["production", "test", "development"]


class KeyCreate(BaseModel):
    """Create body, spec §4.6."""

    model_config = {"extra": "forbid"}

    name: str = Field(min_length=1, max_length=100)
    service_id: ServiceId
    scopes: list[str] = Field(default_factory=list)
    environment: Environment = "production"
    expires_in_days: int | None = Field(default=None, ge=1, le=365)
    rate_limit_per_hour: int = Field(default=1000, ge=10, le=100_000)
    monthly_prediction_limit: int | None = Field(default=None, ge=0)
    allowed_ips: list[str] | None = None
    billing_plan: str = Field(default="free", min_length=1, max_length=50)

    @field_validator("allowed_ips")
    @classmethod
    def _valid_networks(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or CIDR range") from None
        return value


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_key(environment: str) -> str:
    tag = "live" if environment == "production" else "test"
    return f"{KEY_PREFIX}_{tag}_{secrets.token_urlsafe(SECRET_BYTES)}"


def display_prefix(api_key: str) -> str:
    return api_key[:DISPLAY_CHARS] + "***"


def key_info(key: ApiKey) -> dict[str, Any]:
    """APIKeyInfo, spec §2.8."""

    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "key_id": key.id,
        "name": key.name,
        "key_prefix": key.key_prefix,
        "user_id": key.user_id,
        "service_id": key.service_id,
        "scopes": list(key.scopes or []),
        "environment": key.environment,
        "is_active": key.is_active,
        "rate_limit_per_hour": key.rate_limit_per_hour,
        "monthly_prediction_limit": key.monthly_prediction_limit,
        "billing_plan": key.billing_plan,
        "created_at": iso(key.created_at),
        "expires_at": iso(key.expires_at),
        "last_used_at": iso(key.last_used_at),
    }


@dataclass(frozen=True)
class IssuedKey:
    api_key: str
    key: ApiKey

    def response(self) -> dict[str, Any]:
        """APIKeyResponse, spec §2.9."""
        return {"api_key": self.api_key, "key_info": key_info(self.key)}


def _new_key_row(
    body: KeyCreate, user_id: str, org_id: str | None, created_by: str | None
) -> tuple[str, ApiKey]:
    value = generate_key(body.environment)
    now = utcnow()
    row = ApiKey(
        name=body.name,
        key_hash=hash_key(value),
        key_prefix=display_prefix(value),
        user_id=user_id,
        org_id=org_id,
        service_id=body.service_id,
        scopes=list(body.scopes),
        environment=body.environment,
        is_active=True,
        rate_limit_per_hour=body.rate_limit_per_hour,
        monthly_prediction_limit=body.monthly_prediction_limit,
        allowed_ips=list(body.allowed_ips) if body.allowed_ips else None,
        billing_plan=body.billing_plan,
        created_at=now,
        expires_at=now + timedelta(days=body.expires_in_days) if body.expires_in_days else None,
    )
    _ = created_by
    return value, row


def create_key(
    session: Session, body: KeyCreate, *, user_id: str, org_id: str | None = None
) -> IssuedKey:
    value, row = _new_key_row(body, user_id, org_id, None)
    session.add(row)
    session.flush()
    return IssuedKey(value, row)


def get_owned_key(session: Session, key_id: str, user_id: str) -> ApiKey:
    """A user's own key; any other key, or a malformed id, is NotFound."""
    key = session.get(ApiKey, key_id) if len(key_id) <= 36 else None
    if key is None or key.user_id != user_id or key.org_id is not None:
        raise NotFound("API key not found")
    return key


def list_keys(
    session: Session,
    *,
    user_id: str | None = None,
    org_id: str | None = None,
    service_id: str | None = None,
    active_only: bool = False,
) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if org_id is not None:
        query = query.where(ApiKey.org_id == org_id)
    else:
        query = query.where(ApiKey.user_id == user_id, ApiKey.org_id.is_(None))
    if service_id is not None:
        query = query.where(ApiKey.service_id == service_id)
    if active_only:
        now = utcnow()
        query = query.where(ApiKey.is_active.is_(True)).where(
            (ApiKey.expires_at.is_(None)) | (ApiKey.expires_at > now)
        )
    return list(session.scalars(query))


def rotate_key(session: Session, key: ApiKey) -> IssuedKey:
    """New value and key_id with the same configuration; the old key stops at once."""
    if not key.is_active:
        raise InvalidInput("only an active key can be rotated")
    body = KeyCreate(
        name=key.name,
        service_id=key.service_id,  # type: ignore[arg-type]
        scopes=list(key.scopes or []),
        environment=key.environment,  # type: ignore[arg-type]
        rate_limit_per_hour=key.rate_limit_per_hour,
        monthly_prediction_limit=key.monthly_prediction_limit,
        allowed_ips=key.allowed_ips,
        billing_plan=key.billing_plan,
    )
    value, row = _new_key_row(body, key.user_id, key.org_id, None)
    row.expires_at = key.expires_at
    key.is_active = False
    key.revoked_at = utcnow()
    session.add(row)
    session.flush()
    key.replaced_by = row.id
    return IssuedKey(value, row)


def revoke_key(session: Session, key: ApiKey) -> None:
    key.is_active = False
    if key.revoked_at is None:
        key.revoked_at = utcnow()


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
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(entry, strict=False) for entry in allowed)


def authenticate_key(
    db: Database,
    api_key: str,
    *,
    client_ip: str | None = None,
    service_id: str | None = None,
    scope: str | None = None,
) -> KeyPrincipal:
    """Verify a presented key: known, active, unexpired, allowed from this address and scope."""
    digest = hash_key(api_key)
    with db.session() as session:
        key = session.scalar(select(ApiKey).where(ApiKey.key_hash == digest))
        # The hash lookup already matched; compare again in constant time for defence in depth.
        if key is None or not hmac.compare_digest(key.key_hash, digest):
            raise Unauthenticated("invalid API key")
        if not key.is_active:
            raise Unauthenticated("invalid API key")
        if key.expires_at is not None and key.expires_at <= utcnow():
            raise Unauthenticated("API key expired")
        if service_id is not None and key.service_id != service_id:
            raise Forbidden(f"this endpoint needs a {service_id!r} key")
        if not ip_allowed(key.allowed_ips, client_ip):
            raise Forbidden("client address not allowed for this key")
        if scope is not None and key.scopes and scope not in key.scopes:
            raise Forbidden(f"key lacks scope {scope!r}")
        return KeyPrincipal(
            key_id=key.id,
            user_id=key.user_id,
            org_id=key.org_id,
            service_id=key.service_id,
            scopes=list(key.scopes or []),
            rate_limit_per_hour=key.rate_limit_per_hour,
            monthly_prediction_limit=key.monthly_prediction_limit,
        )
