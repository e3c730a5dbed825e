"""Per-key rate_limit_per_hour (spec §8): moving window in memory, and in the real Redis."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from pipeline.auth.ratelimit import REDIS_KEY_PREFIX, KeyRateLimiter, storage_for
from pipeline.core.errors import RateLimited
from tests.conftest import TEST_ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {TEST_ADMIN_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest) -> Iterator[KeyRateLimiter]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    yield KeyRateLimiter(storage_for(url))


def test_storage_follows_redis_url(redis_url: str) -> None:
    assert KeyRateLimiter(storage_for(None)).backend == "memory"
    assert KeyRateLimiter(storage_for(redis_url)).backend == "redis"


def test_limit_then_429_with_retry_after(limiter: KeyRateLimiter) -> None:
    key_id = str(uuid.uuid4())
    for _ in range(10):
        limiter.hit(key_id, 10)
    with pytest.raises(RateLimited) as refused:
        limiter.hit(key_id, 10)
    # Moving window: the oldest hit leaves the window an hour after it was made.
    assert 3590 <= (refused.value.retry_after or 0) <= 3600
    assert limiter.remaining(key_id, 10) == 0
    # Other keys have their own windows.
    limiter.hit(str(uuid.uuid4()), 10)
    limiter.clear(key_id, 10)
    limiter.hit(key_id, 10)


def test_two_processes_share_the_window_through_redis(redis_url: str) -> None:
    first, second = KeyRateLimiter(storage_for(redis_url)), KeyRateLimiter(storage_for(redis_url))
    key_id = str(uuid.uuid4())
    for _ in range(5):
        first.hit(key_id, 10)
        second.hit(key_id, 10)
    with pytest.raises(RateLimited):
        first.hit(key_id, 10)
    with pytest.raises(RateLimited):
        second.hit(key_id, 10)
    first.clear(key_id, 10)


def test_memory_windows_are_per_process() -> None:
    first, second = KeyRateLimiter(storage_for(None)), KeyRateLimiter(storage_for(None))
    key_id = str(uuid.uuid4())
    for _ in range(10):
        first.hit(key_id, 10)
    second.hit(key_id, 10)


def test_redis_outage_warns_once_not_per_request(caplog) -> None:
    limiter = KeyRateLimiter(storage_for("redis://127.0.0.1:1/0"))
    with caplog.at_level(logging.WARNING, logger="pipeline.auth.ratelimit"):
        for _ in range(20):
            limiter.hit(str(uuid.uuid4()), 10)
    warnings = [r for r in caplog.records if r.name == "pipeline.auth.ratelimit"]
    assert len(warnings) == 1  # logged once, not per request


# --- through the API -----------------------------------------------------------------------------


def _app_client(settings: Any) -> Generator[TestClient, None, None]:
    app = create_app(settings)
    try:
        with TestClient(app) as client:
            yield client
    finally:
        app.state.db.dispose()


@pytest.fixture(params=["memory", "redis"])
def limited_client(request: pytest.FixtureRequest, make_settings) -> Iterator[TestClient]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    yield from _app_client(make_settings(redis_url=url))


def test_platform_key_over_its_hourly_limit_gets_429(limited_client: TestClient) -> None:
    created = limited_client.post(
        "/api/v1/keys",
        json={"name": "slow", "service_id": "platform", "rate_limit_per_hour": 10},
        headers=ADMIN,
    ).json()
    key = bearer(created["api_key"])
    for _ in range(6):
        assert limited_client.get("/api/v1/whoami", headers=key).status_code == 200
    for _ in range(4):  # verify counts as a use too
        response = limited_client.post("/api/v1/keys/verify", json={"api_key": created["api_key"]})
        assert response.json()["valid"] is True
    refused = limited_client.get("/api/v1/whoami", headers=key)
    assert refused.status_code == 429
    assert set(refused.json()) == {"detail"}
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    assert created["api_key"] not in refused.text
    verify = limited_client.post("/api/v1/keys/verify", json={"api_key": created["api_key"]})
    assert verify.status_code == 429 and "Retry-After" in verify.headers
    # Another key of the same user is unaffected.
    other = limited_client.post(
        "/api/v1/keys", json={"name": "other", "service_id": "platform"}, headers=ADMIN
    ).json()
    assert limited_client.get("/api/v1/whoami", headers=bearer(other["api_key"])).status_code == 200


def test_refused_requests_do_not_spend_the_budget(make_settings) -> None:
    clients = _app_client(make_settings(trusted_proxies=["testclient"]))
    client = next(clients)
    try:
        created = client.post(
            "/api/v1/keys",
            json={
                "name": "fenced",
                "service_id": "platform",
                "rate_limit_per_hour": 10,
                "allowed_ips": ["192.0.2.0/24"],
            },
            headers=ADMIN,
        ).json()
        key = bearer(created["api_key"])
        outside = {**key, "X-Forwarded-For": "203.0.113.1"}
        inside = {**key, "X-Forwarded-For": "192.0.2.1"}
        for _ in range(15):
            assert client.get("/api/v1/whoami", headers=outside).status_code == 403
        for _ in range(10):
            assert client.get("/api/v1/whoami", headers=inside).status_code == 200
        assert client.get("/api/v1/whoami", headers=inside).status_code == 429
    finally:
        clients.close()


def test_redis_keys_name_the_key_id_never_the_key(make_settings, redis_url: str) -> None:
    import redis

    client_gen = _app_client(make_settings(redis_url=redis_url))
    client = next(client_gen)
    try:
        created = client.post(
            "/api/v1/keys", json={"name": "r", "service_id": "platform"}, headers=ADMIN
        ).json()
        assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 200
        key_id = created["key_info"]["key_id"]
        server = redis.Redis.from_url(redis_url)
        names = [n.decode() for n in server.scan_iter(f"{REDIS_KEY_PREFIX}:*{key_id}*")]
        assert names, "the window is not in Redis"
        everything = [n.decode() for n in server.scan_iter(f"{REDIS_KEY_PREFIX}:*")]
        secret = created["api_key"].split("_", 2)[2]
        assert not any(secret in name for name in everything)
        server.delete(*names)
    finally:
        client_gen.close()


def test_two_apps_share_the_limit_through_redis(make_settings, redis_url: str) -> None:
    first = _app_client(make_settings(redis_url=redis_url))
    second = _app_client(make_settings(redis_url=redis_url))
    a, b = next(first), next(second)
    try:
        created = a.post(
            "/api/v1/keys",
            json={"name": "shared", "service_id": "platform", "rate_limit_per_hour": 10},
            headers=ADMIN,
        ).json()
        key = bearer(created["api_key"])
        for _ in range(5):
            assert a.get("/api/v1/whoami", headers=key).status_code == 200
            assert b.get("/api/v1/whoami", headers=key).status_code == 200
        assert a.get("/api/v1/whoami", headers=key).status_code == 429
        assert b.get("/api/v1/whoami", headers=key).status_code == 429
    finally:
        first.close()
        second.close()
