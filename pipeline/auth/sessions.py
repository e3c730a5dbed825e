"""Session and admin tokens: HS256 JWTs signed with JWT_SECRET (PyJWT)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta

import jwt

from pipeline.core.config import Settings
from pipeline.core.errors import InvalidInput, Unauthenticated
from pipeline.core.tables import utcnow

ALGORITHM = "HS256"
MAX_USER_ID = 200


@dataclass(frozen=True)
class Identity:
    user_id: str
    admin: bool = False
    expires_at: int | None = None  # the token's `exp` (seconds since the epoch), when it has one


def issue_token(
    settings: Settings, user_id: str, *, admin: bool = False, ttl_seconds: int | None = None
) -> str:
    if not user_id or len(user_id) > MAX_USER_ID:
        raise InvalidInput(f"user id must be 1 to {MAX_USER_ID} characters")
    now = utcnow()
    ttl = ttl_seconds if ttl_seconds is not None else settings.jwt_ttl_seconds
    claims = {
        "sub": user_id,
        "iat": now,
        "exp": now + timedelta(seconds=ttl),
        "iss": settings.service_name,
        "adm": admin,
    }
    return jwt.encode(claims, settings.jwt_key(), algorithm=ALGORITHM)


def decode_token(settings: Settings, token: str) -> Identity:
    try:
        claims = jwt.decode(
            token,
            settings.jwt_key(),
            algorithms=[ALGORITHM],
            issuer=settings.service_name,
            options={"require": ["sub", "exp", "iat"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("token expired") from None
    except jwt.PyJWTError:
        raise Unauthenticated("invalid token") from None
    subject = claims.get("sub")
    # User ids are stored in 200-character columns; a longer subject cannot be a real user.
    if not isinstance(subject, str) or not subject or len(subject) > MAX_USER_ID:
        raise Unauthenticated("invalid token")
    expires = claims.get("exp")
    return Identity(
        user_id=subject,
        admin=bool(claims.get("adm", False)),
        expires_at=int(expires) if isinstance(expires, (int, float)) else None,
    )


def admin_identity(settings: Settings, token: str) -> Identity:
    """The user an admin token acts for: the static ADMIN_TOKEN, or a JWT minted with --admin."""
    static = settings.admin_token.get_secret_value() if settings.admin_token else None
    if static and hmac.compare_digest(token.encode(), static.encode()):
        return Identity(user_id=settings.admin_user_id, admin=True)
    identity = decode_token(settings, token)
    if not identity.admin:
        raise Unauthenticated("not an admin token")
    return identity
