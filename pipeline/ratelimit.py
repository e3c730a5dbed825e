"""Per-key hourly rate limits: a `limits` moving window, in memory or in Redis (REDIS_URL).

The identifier is always the key_id, never the key value, so no secret reaches the storage (or
Redis' keyspace). With REDIS_URL set, every API process sharing that Redis shares each key's
window; without it the window is per process.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from limits import RateLimitItemPerHour
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from pipeline.config import Settings
from pipeline.errors import RateLimited

log = logging.getLogger(__name__)

NAMESPACE = "api-key"
REDIS_KEY_PREFIX = "marketplace:ratelimit"
# A Redis that stops answering must not hang requests for the default socket timeout.
REDIS_TIMEOUT_SECONDS = 0.5


def storage_for(redis_url: str | None) -> Storage:
    """Memory storage by default; Redis storage when a URL is given."""
    if not redis_url:
        return storage_from_string("memory://")  # type: ignore[return-value]
    options: dict[str, Any] = {
        "key_prefix": REDIS_KEY_PREFIX,
        "socket_timeout": REDIS_TIMEOUT_SECONDS,
        "socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
    }
    return storage_from_string(redis_url, **options)  # type: ignore[return-value]


class KeyRateLimiter:
    """`rate_limit_per_hour` per key_id over a moving one-hour window.

    If the storage fails (Redis down), the request is let through and a warning is logged at
    most once a minute: an outage of the limiter's storage must not take the API down with it.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.limiter = MovingWindowRateLimiter(storage)
        self._items: dict[int, RateLimitItemPerHour] = {}
        self._last_warning = 0.0

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRateLimiter:
        return cls(storage_for(settings.redis_url))

    @property
    def backend(self) -> str:
        return "memory" if type(self.storage).__name__ == "MemoryStorage" else "redis"

    def _item(self, per_hour: int) -> RateLimitItemPerHour:
        item = self._items.get(per_hour)
        if item is None:
            item = self._items[per_hour] = RateLimitItemPerHour(per_hour, namespace=NAMESPACE)
        return item

    def hit(self, key_id: str, per_hour: int) -> None:
        """Count one request for the key; RateLimited with Retry-After when over its limit."""
        item = self._item(per_hour)
        try:
            if self.limiter.hit(item, key_id):
                return
            reset_at, _remaining = self.limiter.get_window_stats(item, key_id)
        except Exception as exc:  # the storage's own errors (redis.RedisError, OSError, ...)
            self._warn(exc)
            return
        retry_after = max(1, math.ceil(reset_at - time.time()))
        raise RateLimited(
            f"rate limit of {per_hour} requests per hour exceeded for this key",
            retry_after=retry_after,
        )

    def remaining(self, key_id: str, per_hour: int) -> int:
        return int(self.limiter.get_window_stats(self._item(per_hour), key_id).remaining)

    def clear(self, key_id: str, per_hour: int) -> None:
        self.limiter.clear(self._item(per_hour), key_id)

    def _warn(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 60:
            self._last_warning = now
            log.warning("rate-limit storage unavailable, letting requests through: %s", exc)
