"""API keys: issue, list, rotate, revoke and verify; only a SHA-256 of each key is stored.

A key looks like `mk_live_<secret>` (`mk_test_…` outside production): the prefix makes a leaked
key recognisable, the secret carries 192 random bits from `secrets`. The full value exists only
in the create and rotate results. Lookups are by hash; nothing here logs a key.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from pydantic import BaseModel, Field, field_validator
from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from pipeline.auth.orgs import key_holder_role
from pipeline.auth.ratelimit import KeyRateLimiter
from pipeline.core.db import Database
from pipeline.core.errors import (
    Conflict,
    Forbidden,
    NotFound,
    RateLimited,
    Unauthenticated,
)
from pipeline.core.tables import ApiKey, KeyUsage, OrgMember, canonical_uuid, isoformat_utc, utcnow
from pipeline.core.text import END, NO_CONTROL_CHARACTERS, has_control_characters

log = logging.getLogger(__name__)

KEY_PREFIX = "mk"
SECRET_BYTES = 24  # 192 bits
DISPLAY_CHARS = 12

ServiceId = Literal["prediction", "platform"]
Environment = Literal["production", "test", "development"]

MAX_SCOPES = 50
MAX_SCOPE_CHARS = 100
MAX_ALLOWED_IPS = 100
INT32_MAX = 2_147_483_647  # the columns are 32-bit integers on PostgreSQL
# Presented keys longer than this are refused without a lookup.
MAX_PRESENTED_KEY_CHARS = 256


_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
# What `allowed_ips` entries the validator accepts, for the OpenAPI document: IPv4 and IPv6
# addresses, and IPv4 CIDR ranges. IPv6 ranges are accepted too but have no exact pattern here.
IP_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "string",
    "anyOf": [
        {"format": "ipv4"},
        {"format": "ipv6"},
        {"pattern": rf"^{_IPV4}/(?:3[0-2]|[12]?[0-9]){END}"},
    ],
}


def _printable(value: str, what: str) -> str:
    """Refuse control characters (NUL breaks PostgreSQL text; the rest break logs and UIs)."""
    if has_control_characters(value):
        raise ValueError(f"{what} must not contain control characters")
    return value


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


def billing_month(moment: datetime) -> str:
    """The calendar month (UTC) a use counts towards, as YYYY-MM."""
    return moment.astimezone(UTC).strftime("%Y-%m")


def _next_month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


_COUNT_STATEMENTS: dict[str, Any] = {}


def _count_prediction_statement(db: Database) -> Any:
    """The upsert of `consume_prediction`, built once per dialect (building costs more)."""
    name = db.engine.dialect.name
    statement = _COUNT_STATEMENTS.get(name)
    if statement is None:
        dialect = postgresql if name == "postgresql" else sqlite
        statement = (
            dialect.insert(KeyUsage)
            .values(key_id=bindparam("key_id"), month=bindparam("month"), count=1)
            .on_conflict_do_update(
                index_elements=[KeyUsage.key_id, KeyUsage.month],
                set_={"count": KeyUsage.count + 1},
                where=KeyUsage.count < bindparam("limit"),
            )
            .returning(KeyUsage.count)
        )
        _COUNT_STATEMENTS[name] = statement
    return statement


def consume_prediction(
    db: Database, key_id: str, limit: int, *, now: datetime | None = None
) -> int:
    """Count one prediction for the key this month; RateLimited once `limit` is reached.

    One atomic upsert: INSERT … ON CONFLICT DO UPDATE SET count = count + 1 WHERE count < limit
    RETURNING count. PostgreSQL locks the row and re-checks the WHERE on the latest version;
    SQLite serialises writers; so concurrent callers never push the count past the limit.
    """
    now = now or utcnow()
    if limit > 0:
        params = {"key_id": key_id, "month": billing_month(now), "limit": limit}
        with db.engine.begin() as conn:
            count = conn.execute(_count_prediction_statement(db), params).scalar()
        if count is not None:
            return int(count)
    retry_after = max(1, math.ceil((_next_month_start(now) - now).total_seconds()))
    raise RateLimited(
        f"monthly prediction limit of {limit} reached for this key", retry_after=retry_after
    )


def predictions_this_month(session: Session, key_id: str, *, now: datetime | None = None) -> int:
    usage = session.get(KeyUsage, {"key_id": key_id, "month": billing_month(now or utcnow())})
    return usage.count if usage else 0


class LastUsedRecorder:
    """Writes `last_used_at` at most once per `interval` seconds per key.

    A process skips the write when it wrote for the key within the interval; the UPDATE itself
    only changes a row whose value is older than the interval, so several processes together
    still write about once per interval. `last_used_at` is therefore accurate to `interval`.
    """

    def __init__(self, interval: float = 60.0, clock: Any = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._written: dict[str, float] = {}
        self._lock = threading.Lock()

    def _due(self, key_id: str) -> bool:
        now = self.clock()
        with self._lock:
            last = self._written.get(key_id)
            if last is not None and now - last < self.interval:
                return False
            self._written[key_id] = now
            if len(self._written) > 50_000:
                cutoff = now - self.interval
                self._written = {k: t for k, t in self._written.items() if t >= cutoff}
            return True

    def touch(self, db: Database, key_id: str) -> None:
        if not self._due(key_id):
            return
        now = utcnow()
        stmt = (
            update(ApiKey)
            .where(ApiKey.id == key_id)
            .where(
                ApiKey.last_used_at.is_(None)
                | (ApiKey.last_used_at < now - timedelta(seconds=self.interval))
            )
            .values(last_used_at=now)
        )
        try:
            with db.engine.begin() as conn:
                conn.execute(stmt)
        except Exception as exc:  # best effort: a failed timestamp must not fail the request
            log.warning("could not record last use of key %s: %s", key_id, type(exc).__name__)


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
