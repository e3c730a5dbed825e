"""Per-key hourly rate limits: a `limits` moving window, in memory or in Redis (REDIS_URL).

The identifier is always the key_id, never the key value, so no secret reaches the storage (or
Redis' keyspace). With REDIS_URL set, every API process sharing that Redis shares each key's
window; without it the window is per process, and so it is while Redis is unreachable.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from limits import RateLimitItemPerHour
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from pipeline.core.config import Settings
from pipeline.core.errors import RateLimited

log = logging.getLogger(__name__)

NAMESPACE = "api-key"
REDIS_KEY_PREFIX = "marketplace:ratelimit"
# A Redis that stops answering must not hang requests for the default socket timeout.
REDIS_TIMEOUT_SECONDS = 0.5
# After a failure, requests are counted in memory for this long before Redis is tried again.
REDIS_RETRY_SECONDS = 10.0


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


def _count(
    limiter: MovingWindowRateLimiter, item: RateLimitItemPerHour, key_id: str
) -> float | None:
    """Count a hit; None when allowed, else the time (epoch seconds) the window frees a slot."""
    if limiter.hit(item, key_id):
        return None
    reset_at, _remaining = limiter.get_window_stats(item, key_id)
    return float(reset_at)


class KeyRateLimiter:
    """`rate_limit_per_hour` per key_id over a moving one-hour window.

    Policy when the shared storage (Redis) fails: the limiter falls back to a window in this
    process's memory, so every key's limit still holds per process (with N API processes a key
    gets at most N times its limit during the outage). Redis is tried again
    `retry_seconds` after a failure, so an outage costs one failed call per interval rather than a
    timeout per request. A warning is logged when the fallback starts (at most once a minute) and
    an info line when Redis answers again. See docs/operations.md.
    """

    def __init__(self, storage: Storage, retry_seconds: float = REDIS_RETRY_SECONDS) -> None:
        self.storage = storage
        self.limiter = MovingWindowRateLimiter(storage)
        self.retry_seconds = retry_seconds
        self._fallback: MovingWindowRateLimiter | None = None
        self._items: dict[int, RateLimitItemPerHour] = {}
        self._down_until = 0.0
        self._last_warning = -60.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> KeyRateLimiter:
        return cls(storage_for(settings.redis_url))

    @property
    def backend(self) -> str:
        return "memory" if type(self.storage).__name__ == "MemoryStorage" else "redis"

    @property
    def degraded(self) -> bool:
        """True while requests are counted in memory because the shared storage failed."""
        return time.monotonic() < self._down_until

    def _item(self, per_hour: int) -> RateLimitItemPerHour:
        item = self._items.get(per_hour)
        if item is None:
            item = self._items[per_hour] = RateLimitItemPerHour(per_hour, namespace=NAMESPACE)
        return item

    def _fallback_limiter(self) -> MovingWindowRateLimiter:
        with self._lock:
            if self._fallback is None:
                self._fallback = MovingWindowRateLimiter(storage_for(None))
            return self._fallback

    def hit(self, key_id: str, per_hour: int) -> None:
        """Count one request for the key; RateLimited with Retry-After when over its limit."""
        item = self._item(per_hour)
        if self.degraded:
            reset_at = _count(self._fallback_limiter(), item, key_id)
        else:
            try:
                reset_at = _count(self.limiter, item, key_id)
            except Exception as exc:  # the storage's own errors (redis.RedisError, OSError, ...)
                self._storage_failed(exc)
                reset_at = _count(self._fallback_limiter(), item, key_id)
            else:
                if self._down_until:
                    self._storage_recovered()
        if reset_at is None:
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

    def _storage_failed(self, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self._down_until = now + self.retry_seconds
            if now - self._last_warning < 60:
                return
            self._last_warning = now
        log.warning(
            "rate-limit storage unavailable (%s); counting in this process's memory until it "
            "answers again",
            type(exc).__name__,
        )

    def _storage_recovered(self) -> None:
        with self._lock:
            if not self._down_until:
                return
            self._down_until = 0.0
        log.info("rate-limit storage answers again; counting there")
