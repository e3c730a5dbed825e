"""The strength floor of the service's own secrets (JWT_SECRET, ADMIN_TOKEN) in production.

`marketplace serve` refuses to start when a secret that is set falls below the floor
(docs/configuration.md, "Production secrets"); `marketplace dev` only warns. The floor:

- at least `MIN_SECRET_CHARS` characters (HS256 wants a key of at least 256 bits, RFC 7518
  §3.2; 32 random bytes give 43 characters in base64 and 64 in hex);
- at least `MIN_SECRET_BITS` bits by a character-frequency estimate (length × the Shannon
  entropy of the secret's own characters). It cannot prove a secret random, but it refuses
  what people type: repeated characters or words ("secretsecret…", "aaaa…"), short
  alphabets, and padding a short secret to length. 32 random bytes score at least about 190
  bits in base64 and 225 in hex (2,000 samples each); 24 or 16 random bytes often do not, as
  the documented floor is 32 random bytes.

Unset secrets are not checked: JWT_SECRET then comes from a file generated with 48 random
bytes, and without ADMIN_TOKEN the static admin token is off (admin JWTs remain).
"""

from __future__ import annotations

import math
from collections import Counter

from pipeline.core.config import Settings

MIN_SECRET_CHARS = 32
MIN_SECRET_BITS = 160.0
HOW_TO_GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def estimated_bits(secret: str) -> float:
    """Length × Shannon entropy (bits per character) of the secret's character frequencies."""
    if not secret:
        return 0.0
    counts = Counter(secret)
    total = len(secret)
    per_char = -sum(n / total * math.log2(n / total) for n in counts.values())
    return per_char * total


def secret_problem(name: str, secret: str) -> str | None:
    """Why `secret` is below the floor, naming the variable but never showing the value."""
    if len(secret) < MIN_SECRET_CHARS:
        return f"{name} has {len(secret)} characters; at least {MIN_SECRET_CHARS} are required"
    bits = estimated_bits(secret)
    if bits < MIN_SECRET_BITS:
        return (
            f"{name} looks guessable (about {bits:.0f} bits by its character frequencies; "
            f"at least {MIN_SECRET_BITS:.0f} are required)"
        )
    return None


def weak_secrets(settings: Settings) -> list[str]:
    """One line per secret that is set and below the floor; empty when all pass."""
    given = {"JWT_SECRET": settings.jwt_secret, "ADMIN_TOKEN": settings.admin_token}
    problems = []
    for name, value in given.items():
        if value is None:
            continue
        problem = secret_problem(name, value.get_secret_value())
        if problem is not None:
            problems.append(problem)
    return problems
