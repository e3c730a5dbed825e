"""API key lifecycle: issue, list, rotate and revoke; only a SHA-256 of each key is stored.

A key looks like `mk_live_<secret>` (`mk_test_…` outside production): the prefix makes a leaked
key recognisable, the secret carries 192 random bits from `secrets`. The full value exists only
in the create and rotate results. Checking a presented key is in `pipeline.auth.verification`,
quotas and last-use times in `pipeline.auth.usage`. Nothing here logs a key.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, cast

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from pipeline.auth.usage import billing_month
from pipeline.core.errors import Conflict, NotFound
from pipeline.core.tables import (
    INT32_MAX,
    ApiKey,
    KeyUsage,
    canonical_uuid,
    isoformat_utc,
    utcnow,
)
from pipeline.core.text import END, NO_CONTROL_CHARACTERS, printable

KEY_PREFIX = "mk"
SECRET_BYTES = 24  # 192 bits
DISPLAY_CHARS = 12

ServiceId = Literal["prediction", "platform"]
Environment = Literal["production", "test", "development"]

MAX_SCOPES = 50
MAX_SCOPE_CHARS = 100
MAX_ALLOWED_IPS = 100


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
# What `allowed_ips` entries the validator accepts, for the OpenAPI document: IPv4 and IPv6
# addresses, and IPv4 CIDR ranges. IPv6 ranges are accepted too but have no exact pattern here.
MAX_IP_ENTRY_CHARS = 64
IP_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_IP_ENTRY_CHARS,
    "anyOf": [
        {"format": "ipv4"},
        {"format": "ipv6"},
        {"pattern": rf"^{_IPV4}/(?:3[0-2]|[12]?[0-9]){END}"},
    ],
}


# Control characters are refused: NUL breaks PostgreSQL text; the rest break logs and UIs.
_printable = printable


class KeyCreate(BaseModel):
    """Create body, spec §4.6."""

    model_config = {"extra": "forbid"}

    # The patterns only document the validators below, which give the clearer messages.
    name: str = Field(
        min_length=1, max_length=100, json_schema_extra={"pattern": NO_CONTROL_CHARACTERS}
    )
    service_id: ServiceId
    scopes: list[str] = Field(
        default_factory=list,
        max_length=MAX_SCOPES,
        json_schema_extra={
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SCOPE_CHARS,
                "pattern": NO_CONTROL_CHARACTERS,
            }
        },
    )
    environment: Environment = "production"
    expires_in_days: int | None = Field(default=None, ge=1, le=365)
    rate_limit_per_hour: int = Field(default=1000, ge=10, le=100_000)
    monthly_prediction_limit: int | None = Field(default=None, ge=0, le=INT32_MAX)
    allowed_ips: list[str] | None = Field(
        default=None,
        max_length=MAX_ALLOWED_IPS,
        json_schema_extra={
            "anyOf": [
                {"type": "array", "items": IP_ENTRY_SCHEMA, "maxItems": MAX_ALLOWED_IPS},
                {"type": "null"},
            ]
        },
    )
    billing_plan: str = Field(
        default="free",
        min_length=1,
        max_length=50,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        json_schema_extra={"pattern": rf"^[A-Za-z0-9][A-Za-z0-9_.-]*{END}"},
    )

    @field_validator(
        "expires_in_days", "rate_limit_per_hour", "monthly_prediction_limit", mode="before"
    )
    @classmethod
    def _not_boolean(cls, value: Any) -> Any:
        # JSON true/false are not numbers, although Python's bool is an int.
        if isinstance(value, bool):
            raise ValueError("must be an integer, not a boolean")
        return value

    @field_validator("name")
    @classmethod
    def _printable_name(cls, value: str) -> str:
        return _printable(value, "name")

    @field_validator("scopes")
    @classmethod
    def _valid_scopes(cls, value: list[str]) -> list[str]:
        for scope in value:
            if not 1 <= len(scope) <= MAX_SCOPE_CHARS:
                raise ValueError(f"each scope must be 1 to {MAX_SCOPE_CHARS} characters")
            _printable(scope, "scopes")
        return list(dict.fromkeys(value))

    @field_validator("allowed_ips")
    @classmethod
    def _valid_networks(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for entry in value:
            if len(entry) > MAX_IP_ENTRY_CHARS:
                raise ValueError(f"an allowed_ips entry is longer than {MAX_IP_ENTRY_CHARS} chars")
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                shown = entry[:60] if entry.isprintable() else "entry"
                raise ValueError(f"{shown!r} is not an IP address or CIDR range") from None
        return [entry.strip() for entry in value]


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def generate_key(environment: str) -> str:
    tag = "live" if environment == "production" else "test"
    return f"{KEY_PREFIX}_{tag}_{secrets.token_urlsafe(SECRET_BYTES)}"


def display_prefix(api_key: str) -> str:
    return api_key[:DISPLAY_CHARS] + "***"


def key_info(key: ApiKey) -> dict[str, Any]:
    """APIKeyInfo, spec §2.8."""

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
        "created_at": isoformat_utc(key.created_at),
        "expires_at": isoformat_utc(key.expires_at),
        "last_used_at": isoformat_utc(key.last_used_at),
    }


@dataclass(frozen=True)
class IssuedKey:
    api_key: str
    key: ApiKey

    def response(self) -> dict[str, Any]:
        """APIKeyResponse, spec §2.9."""
        return {"api_key": self.api_key, "key_info": key_info(self.key)}


def _new_key_row(body: KeyCreate, user_id: str, org_id: str | None) -> tuple[str, ApiKey]:
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
    return value, row


def create_key(
    session: Session, body: KeyCreate, *, user_id: str, org_id: str | None = None
) -> IssuedKey:
    value, row = _new_key_row(body, user_id, org_id)
    session.add(row)
    session.flush()
    return IssuedKey(value, row)


def get_owned_key(session: Session, key_id: str, user_id: str) -> ApiKey:
    """A user's own key; any other key, an organization's key, or a malformed id, is NotFound."""
    canonical = canonical_uuid(key_id)
    key = session.get(ApiKey, canonical) if canonical else None
    if key is None or key.user_id != user_id or key.org_id is not None:
        raise NotFound("API key not found")
    return key


def get_org_key(session: Session, key_id: str, org_id: str) -> ApiKey:
    """A key of this organization; a key of another org, or a malformed id, is NotFound."""
    canonical = canonical_uuid(key_id)
    key = session.get(ApiKey, canonical) if canonical else None
    if key is None or key.org_id != org_id:
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
    # The key exists but is in a state that rules the request out: a conflict, not bad input.
    if not key.is_active:
        raise Conflict("only an active key can be rotated")
    if key.expires_at is not None and key.expires_at <= utcnow():
        raise Conflict("an expired key cannot be rotated")
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
    # Claim the old key with a conditional update: of two concurrent rotations only one
    # matches the still-active row, so a key never gets two successors.
    claimed = cast(
        "CursorResult[Any]",
        session.execute(
            update(ApiKey)
            .where(ApiKey.id == key.id, ApiKey.is_active.is_(True))
            .values(is_active=False, revoked_at=utcnow())
            .execution_options(synchronize_session="fetch"),
        ),
    ).rowcount
    if claimed != 1:
        raise Conflict("only an active key can be rotated")
    value, row = _new_key_row(body, key.user_id, key.org_id)
    row.expires_at = key.expires_at
    session.add(row)
    session.flush()
    key.replaced_by = row.id
    # The month's prediction count moves with the key, so rotating does not reset a quota.
    month = billing_month(utcnow())
    usage = session.get(KeyUsage, {"key_id": key.id, "month": month})
    if usage is not None and usage.count:
        session.add(KeyUsage(key_id=row.id, month=month, count=usage.count))
        session.flush()
    return IssuedKey(value, row)


def revoke_key(session: Session, key: ApiKey) -> None:
    key.is_active = False
    if key.revoked_at is None:
        key.revoked_at = utcnow()
