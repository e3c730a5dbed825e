"""API keys with the admin token (spec §2.8, §2.9, §3, §4.6, §5, §7) and the verify call."""

from __future__ import annotations

import hashlib
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.app import create_app
from pipeline.auth.usage import LastUsedRecorder, consume_prediction
from pipeline.core.errors import RateLimited
from pipeline.core.tables import ApiKey, KeyUsage, utcnow
from tests.conftest import TEST_ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {TEST_ADMIN_TOKEN}"}
INFO_FIELDS = {
    "key_id",
    "name",
    "key_prefix",
    "user_id",
    "service_id",
    "scopes",
    "environment",
    "is_active",
    "rate_limit_per_hour",
    "monthly_prediction_limit",
    "billing_plan",
    "created_at",
    "expires_at",
    "last_used_at",
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def create(client: TestClient, headers: dict[str, str] = ADMIN, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "test key")
    body.setdefault("service_id", "platform")
    response = client.post("/api/v1/keys", json=body, headers=headers)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def verify(client: TestClient, api_key: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/api/v1/keys/verify", json={"api_key": api_key, **extra})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# --- create (spec §4.6, §2.9) ------------------------------------------------------------------


def test_create_returns_the_full_key_once_with_key_info(client: TestClient) -> None:
    created = create(
        client,
        name="ci uploader",
        scopes=["benchmarks:upload"],
        expires_in_days=30,
        rate_limit_per_hour=500,
        allowed_ips=["10.0.0.0/8", "2001:db8::/32"],
        billing_plan="pro",
    )
    assert set(created) == {"api_key", "key_info"}
    info = created["key_info"]
    assert set(info) == INFO_FIELDS
    assert created["api_key"].startswith("mk_live_")
    assert len(created["api_key"]) >= len("mk_live_") + 32  # >= 192 bits of base64url
    assert info["key_prefix"] == created["api_key"][:12] + "***"
    assert info["user_id"] == "admin"  # the static ADMIN_TOKEN acts as ADMIN_USER_ID
    assert info["scopes"] == ["benchmarks:upload"]
    assert info["environment"] == "production"
    assert info["is_active"] is True
    assert info["rate_limit_per_hour"] == 500
    assert info["monthly_prediction_limit"] is None
    assert info["billing_plan"] == "pro"
    assert info["last_used_at"] is None
    assert info["expires_at"] is not None and info["expires_at"] > info["created_at"]


def test_create_defaults(client: TestClient) -> None:
    info = create(client, name="d", service_id="prediction")["key_info"]
    assert info["scopes"] == []
    assert info["environment"] == "production"
    assert info["rate_limit_per_hour"] == 1000
    assert info["monthly_prediction_limit"] is None
    assert info["billing_plan"] == "free"
    assert info["expires_at"] is None


@pytest.mark.parametrize("environment", ["test", "development"])
def test_non_production_keys_say_test(client: TestClient, environment: str) -> None:
    created = create(client, environment=environment)
    assert created["api_key"].startswith("mk_test_")
    assert created["key_info"]["environment"] == environment


def test_only_the_hash_is_stored(client: TestClient, db) -> None:
    created = create(client)
    value = created["api_key"]
    with db.session() as session:
        row = session.get(ApiKey, created["key_info"]["key_id"])
        assert row is not None
        assert row.key_hash == hashlib.sha256(value.encode()).hexdigest()
        stored = [str(getattr(row, c.key)) for c in ApiKey.__table__.columns]
    assert not any(value in cell for cell in stored)
    assert not any(value[len("mk_live_") :] in cell for cell in stored)


# Every constraint of the create table (spec §4.6, §8) is a 400 with {detail}.
INVALID_BODIES = [
    pytest.param({"service_id": "platform"}, id="name missing"),
    pytest.param({"name": "", "service_id": "platform"}, id="name empty"),
    pytest.param({"name": "x" * 101, "service_id": "platform"}, id="name 101 chars"),
    pytest.param({"name": 5, "service_id": "platform"}, id="name not a string"),
    pytest.param({"name": "a\x00b", "service_id": "platform"}, id="name with NUL"),
    pytest.param({"name": "k"}, id="service_id missing"),
    pytest.param({"name": "k", "service_id": "billing"}, id="service_id unknown"),
    pytest.param({"name": "k", "service_id": "platform", "environment": "staging"}, id="env"),
    pytest.param({"name": "k", "service_id": "platform", "scopes": "read"}, id="scopes not list"),
    pytest.param({"name": "k", "service_id": "platform", "scopes": [""]}, id="scope empty"),
    pytest.param({"name": "k", "service_id": "platform", "expires_in_days": 0}, id="expires 0"),
    pytest.param({"name": "k", "service_id": "platform", "expires_in_days": 366}, id="exp 366"),
    pytest.param({"name": "k", "service_id": "platform", "expires_in_days": 1.5}, id="exp 1.5"),
    pytest.param({"name": "k", "service_id": "platform", "expires_in_days": True}, id="exp bool"),
    pytest.param({"name": "k", "service_id": "platform", "rate_limit_per_hour": 9}, id="rate 9"),
    pytest.param(
        {"name": "k", "service_id": "platform", "rate_limit_per_hour": 100_001}, id="rate 100001"
    ),
    pytest.param(
        {"name": "k", "service_id": "prediction", "monthly_prediction_limit": -1}, id="monthly -1"
    ),
    pytest.param(
        {"name": "k", "service_id": "prediction", "monthly_prediction_limit": 2**31},
        id="monthly over int32",
    ),
    pytest.param({"name": "k", "service_id": "platform", "allowed_ips": ["300.1.1.1"]}, id="ip"),
    pytest.param({"name": "k", "service_id": "platform", "allowed_ips": ["10.0.0.0/33"]}, id="v4/"),
    pytest.param(
        {"name": "k", "service_id": "platform", "allowed_ips": ["2001:db8::/129"]}, id="6"
    ),
    pytest.param({"name": "k", "service_id": "platform", "allowed_ips": ["::g"]}, id="v6 bad"),
    pytest.param({"name": "k", "service_id": "platform", "allowed_ips": ["localhost"]}, id="host"),
    pytest.param({"name": "k", "service_id": "platform", "allowed_ips": "10.0.0.1"}, id="ips str"),
    pytest.param({"name": "k", "service_id": "platform", "billing_plan": ""}, id="plan empty"),
    pytest.param({"name": "k", "service_id": "platform", "billing_plan": "a b"}, id="plan space"),
    pytest.param({"name": "k", "service_id": "platform", "owner": "bob"}, id="unknown field"),
    pytest.param([], id="not an object"),
]


@pytest.mark.parametrize("body", INVALID_BODIES)
def test_every_create_constraint_is_400(client: TestClient, body: Any) -> None:
    response = client.post("/api/v1/keys", json=body, headers=ADMIN)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"detail"}
    assert isinstance(response.json()["detail"], str)


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post(
        "/api/v1/keys",
        content=b'{"name": ',
        headers={**ADMIN, "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert "detail" in response.json()


def test_boundary_values_are_accepted(client: TestClient) -> None:
    info = create(
        client,
        name="x" * 100,
        expires_in_days=365,
        rate_limit_per_hour=100_000,
        monthly_prediction_limit=0,
        allowed_ips=["192.0.2.7", "10.0.0.0/8", "::1", "2001:db8::/32", "10.1.2.3/8"],
    )["key_info"]
    assert info["rate_limit_per_hour"] == 100_000
    info = create(client, name="y", expires_in_days=1, rate_limit_per_hour=10)["key_info"]
    assert info["rate_limit_per_hour"] == 10


# --- admin authentication (spec §5, §7) ---------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": TEST_ADMIN_TOKEN},
        {"Authorization": f"Basic {TEST_ADMIN_TOKEN}"},
    ],
    ids=["missing", "wrong", "no scheme", "basic"],
)
def test_missing_or_invalid_admin_token_is_401(client: TestClient, headers) -> None:
    for method, path in [
        ("POST", "/api/v1/keys"),
        ("GET", "/api/v1/keys"),
        ("GET", "/api/v1/keys/00000000-0000-0000-0000-000000000000"),
        ("POST", "/api/v1/keys/00000000-0000-0000-0000-000000000000/rotate"),
        ("DELETE", "/api/v1/keys/00000000-0000-0000-0000-000000000000"),
    ]:
        body = {"name": "k", "service_id": "platform"} if method == "POST" else None
        response = client.request(method, path, json=body, headers=headers)
        assert response.status_code == 401, (method, path)
        assert set(response.json()) == {"detail"}


def test_session_token_without_admin_claim_is_401(client: TestClient, session_token) -> None:
    response = client.get("/api/v1/keys", headers=bearer(session_token("bob")))
    assert response.status_code == 401


def test_an_api_key_is_not_an_admin_token(client: TestClient, platform_key) -> None:
    response = client.get("/api/v1/keys", headers=bearer(platform_key()))
    assert response.status_code == 401


def test_admin_jwt_acts_as_its_user_and_sees_only_own_keys(client: TestClient, session_token):
    bob = bearer(session_token("bob", admin=True))
    carol = bearer(session_token("carol", admin=True))
    bobs = create(client, headers=bob, name="bob's")["key_info"]
    assert bobs["user_id"] == "bob"
    create(client, headers=carol, name="carol's")
    assert [k["name"] for k in client.get("/api/v1/keys", headers=bob).json()] == ["bob's"]
    key_id = bobs["key_id"]
    for method, path in [
        ("GET", f"/api/v1/keys/{key_id}"),
        ("POST", f"/api/v1/keys/{key_id}/rotate"),
        ("DELETE", f"/api/v1/keys/{key_id}"),
    ]:
        response = client.request(method, path, headers=carol)
        assert response.status_code == 404, (method, path)
        assert set(response.json()) == {"detail"}
    assert client.get(f"/api/v1/keys/{key_id}", headers=bob).json()["is_active"] is True


# --- list and get -------------------------------------------------------------------------------


def test_list_and_get_never_show_the_key(client: TestClient) -> None:
    created = create(client)
    listing = client.get("/api/v1/keys", headers=ADMIN)
    one = client.get(f"/api/v1/keys/{created['key_info']['key_id']}", headers=ADMIN)
    assert listing.status_code == 200 and one.status_code == 200
    assert [set(k) for k in listing.json()] == [INFO_FIELDS]
    assert set(one.json()) == INFO_FIELDS
    for text in (listing.text, one.text):
        assert created["api_key"] not in text
        assert created["api_key"][12:] not in text


def test_list_filters_by_service_and_activity(client: TestClient, db) -> None:
    platform = create(client, name="p")["key_info"]["key_id"]
    prediction = create(client, name="q", service_id="prediction")["key_info"]["key_id"]
    revoked = create(client, name="r")["key_info"]["key_id"]
    expired = create(client, name="e", expires_in_days=1)["key_info"]["key_id"]
    assert client.delete(f"/api/v1/keys/{revoked}", headers=ADMIN).status_code == 200
    with db.session() as session:
        session.execute(
            update(ApiKey)
            .where(ApiKey.id == expired)
            .values(expires_at=utcnow() - timedelta(minutes=1))
        )

    def ids(**params: Any) -> set[str]:
        response = client.get("/api/v1/keys", params=params, headers=ADMIN)
        assert response.status_code == 200
        return {k["key_id"] for k in response.json()}

    assert ids() == {platform, prediction, revoked, expired}
    assert ids(active_only="false") == {platform, prediction, revoked, expired}
    assert ids(active_only="true") == {platform, prediction}
    assert ids(service_id="prediction") == {prediction}
    assert ids(service_id="platform", active_only="true") == {platform}


@pytest.mark.parametrize(
    "params", [{"service_id": "billing"}, {"active_only": "maybe"}], ids=["service", "active"]
)
def test_bad_list_parameters_are_400(client: TestClient, params) -> None:
    response = client.get("/api/v1/keys", params=params, headers=ADMIN)
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


@pytest.mark.parametrize(
    "key_id",
    [
        "not-a-uuid",
        "00000000-0000-0000-0000-000000000000",
        "%00",
        "a%00b",
        "x" * 300,
        "1",
        "' OR 1=1 --",
        "%F0%9F%94%91",
    ],
)
def test_unknown_or_malformed_key_id_is_404_never_500(client: TestClient, key_id: str) -> None:
    for method, path in [
        ("GET", f"/api/v1/keys/{key_id}"),
        ("POST", f"/api/v1/keys/{key_id}/rotate"),
        ("DELETE", f"/api/v1/keys/{key_id}"),
    ]:
        response = client.request(method, path, headers=ADMIN)
        assert response.status_code == 404, (method, path, response.text)
        assert set(response.json()) == {"detail"}


def test_key_id_in_upper_case_finds_the_key(client: TestClient) -> None:
    key_id = create(client)["key_info"]["key_id"]
    response = client.get(f"/api/v1/keys/{key_id.upper()}", headers=ADMIN)
    assert response.status_code == 200
    assert response.json()["key_id"] == key_id


# --- rotate and revoke (spec §3) ----------------------------------------------------------------


def test_rotated_key_fails_on_next_request(client: TestClient) -> None:
    old = create(
        client,
        name="rotating",
        scopes=["a", "b"],
        rate_limit_per_hour=321,
        expires_in_days=10,
        billing_plan="team",
    )
    assert client.get("/api/v1/whoami", headers=bearer(old["api_key"])).status_code == 200
    response = client.post(f"/api/v1/keys/{old['key_info']['key_id']}/rotate", headers=ADMIN)
    assert response.status_code == 200
    new = response.json()
    assert set(new) == {"api_key", "key_info"}
    assert new["api_key"] != old["api_key"]
    assert new["key_info"]["key_id"] != old["key_info"]["key_id"]
    same = ["name", "user_id", "service_id", "scopes", "environment", "rate_limit_per_hour"]
    same += ["monthly_prediction_limit", "billing_plan", "expires_at"]
    assert {f: new["key_info"][f] for f in same} == {f: old["key_info"][f] for f in same}
    assert new["key_info"]["is_active"] is True
    # The very next request with the old value fails; the new one works.
    assert client.get("/api/v1/whoami", headers=bearer(old["api_key"])).status_code == 401
    assert verify(client, old["api_key"]) == {"valid": False, "reason": "invalid"}
    whoami = client.get("/api/v1/whoami", headers=bearer(new["api_key"]))
    assert whoami.status_code == 200
    assert whoami.json()["key_id"] == new["key_info"]["key_id"]
    old_info = client.get(f"/api/v1/keys/{old['key_info']['key_id']}", headers=ADMIN).json()
    assert old_info["is_active"] is False


def test_rotation_keeps_allowed_ips_and_links_the_keys(client: TestClient, db) -> None:
    old = create(client, allowed_ips=["192.0.2.0/24", "2001:db8::/32"])["key_info"]["key_id"]
    new = client.post(f"/api/v1/keys/{old}/rotate", headers=ADMIN).json()["key_info"]["key_id"]
    with db.session() as session:
        before, after = session.get(ApiKey, old), session.get(ApiKey, new)
        assert before is not None and after is not None
        assert after.allowed_ips == before.allowed_ips == ["192.0.2.0/24", "2001:db8::/32"]
        assert before.replaced_by == new and before.revoked_at is not None


def test_rotating_a_revoked_or_rotated_out_key_is_409(client: TestClient) -> None:
    # The request is well formed; the key's state rules it out (docs/api.md).
    key_id = create(client)["key_info"]["key_id"]
    assert client.delete(f"/api/v1/keys/{key_id}", headers=ADMIN).status_code == 200
    response = client.post(f"/api/v1/keys/{key_id}/rotate", headers=ADMIN)
    assert response.status_code == 409
    assert set(response.json()) == {"detail"}
    other = create(client)["key_info"]["key_id"]
    assert client.post(f"/api/v1/keys/{other}/rotate", headers=ADMIN).status_code == 200
    response = client.post(f"/api/v1/keys/{other}/rotate", headers=ADMIN)
    assert response.status_code == 409
    assert set(response.json()) == {"detail"}


def test_revoked_key_fails_on_next_request(client: TestClient) -> None:
    created = create(client)
    key_id = created["key_info"]["key_id"]
    assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 200
    response = client.delete(f"/api/v1/keys/{key_id}", headers=ADMIN)
    assert response.status_code == 200
    assert set(response.json()) == {"message"} and isinstance(response.json()["message"], str)
    assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 401
    assert verify(client, created["api_key"])["valid"] is False
    # Permanent: revoking again changes nothing, and the key stays inactive.
    assert client.delete(f"/api/v1/keys/{key_id}", headers=ADMIN).status_code == 200
    assert client.get(f"/api/v1/keys/{key_id}", headers=ADMIN).json()["is_active"] is False


def test_two_api_processes_see_revocation_and_rotation_at_once(make_settings) -> None:
    """Two apps over one database (on PostgreSQL: two API processes sharing it)."""
    first, second = create_app(make_settings()), create_app(make_settings())
    try:
        with TestClient(first) as a, TestClient(second) as b:
            created = create(a)
            key = bearer(created["api_key"])
            assert b.get("/api/v1/whoami", headers=key).status_code == 200
            assert a.delete(f"/api/v1/keys/{created['key_info']['key_id']}", headers=ADMIN)
            assert b.get("/api/v1/whoami", headers=key).status_code == 401
            assert verify(b, created["api_key"])["valid"] is False

            other = create(b)
            assert a.get("/api/v1/whoami", headers=bearer(other["api_key"])).status_code == 200
            rotated = b.post(f"/api/v1/keys/{other['key_info']['key_id']}/rotate", headers=ADMIN)
            assert a.get("/api/v1/whoami", headers=bearer(other["api_key"])).status_code == 401
            fresh = bearer(rotated.json()["api_key"])
            assert a.get("/api/v1/whoami", headers=fresh).status_code == 200
    finally:
        first.state.db.dispose()
        second.state.db.dispose()


def test_expired_key_fails(client: TestClient, db) -> None:
    created = create(client, expires_in_days=1)
    assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 200
    with db.session() as session:
        session.execute(
            update(ApiKey)
            .where(ApiKey.id == created["key_info"]["key_id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 401
    assert verify(client, created["api_key"]) == {"valid": False, "reason": "expired"}
    rotated = client.post(f"/api/v1/keys/{created['key_info']['key_id']}/rotate", headers=ADMIN)
    assert rotated.status_code == 409


# --- platform key dependency (spec §5) ----------------------------------------------------------


def test_whoami_names_the_key_principal(client: TestClient) -> None:
    created = create(client, scopes=["arrivals:read"])
    response = client.get("/api/v1/whoami", headers=bearer(created["api_key"]))
    assert response.status_code == 200
    assert response.json() == {
        "key_id": created["key_info"]["key_id"],
        "user_id": "admin",
        "org_id": None,
        "service_id": "platform",
        "scopes": ["arrivals:read"],
    }


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer mk_live_nope"}, {"Authorization": "Bearer " + "x" * 5000}],
    ids=["missing", "unknown", "huge"],
)
def test_platform_routes_refuse_missing_or_unknown_keys(client: TestClient, headers) -> None:
    response = client.get("/api/v1/whoami", headers=headers)
    assert response.status_code == 401
    assert set(response.json()) == {"detail"}


def test_prediction_key_cannot_call_platform_routes(client: TestClient) -> None:
    created = create(client, service_id="prediction")
    assert client.get("/api/v1/whoami", headers=bearer(created["api_key"])).status_code == 403


def test_scopes_are_enforced_and_empty_means_all(app, db, platform_key) -> None:
    from fastapi import Depends

    from api.deps import platform_key as platform_key_dependency

    @app.get("/test/scoped")
    def scoped(principal=Depends(platform_key_dependency("benchmarks:upload"))) -> dict:
        return {"key_id": principal.key_id}

    with TestClient(app) as client:
        for scopes, status in [([], 200), (["benchmarks:upload"], 200), (["arrivals:read"], 403)]:
            key = platform_key(scopes=scopes)
            assert client.get("/test/scoped", headers=bearer(key)).status_code == status, scopes


def test_allowed_ips_v4_and_v6_with_trusted_proxy(make_settings) -> None:
    # TestClient's peer is "testclient"; trusting it (and the inner proxy 10.0.0.1) makes
    # X-Forwarded-For the client address.
    app = create_app(make_settings(trusted_proxies=["testclient", "10.0.0.1"]))
    try:
        with TestClient(app) as client:
            created = create(client, allowed_ips=["192.0.2.0/24", "2001:db8::/32"])
            key = created["api_key"]
            for address, status in [
                ("192.0.2.77", 200),
                ("2001:db8::5", 200),
                ("198.51.100.1", 403),
                ("2001:db9::1", 403),
                ("not-an-ip", 403),
            ]:
                headers = {**bearer(key), "X-Forwarded-For": f"{address}, 10.0.0.1"}
                assert client.get("/api/v1/whoami", headers=headers).status_code == status
            allowed = client.post(
                "/api/v1/keys/verify",
                json={"api_key": key},
                headers={"X-Forwarded-For": "192.0.2.1"},
            )
            assert allowed.json()["valid"] is True
            refused = client.post(
                "/api/v1/keys/verify",
                json={"api_key": key},
                headers={"X-Forwarded-For": "203.0.113.9"},
            )
            assert refused.json() == {"valid": False, "reason": "ip_not_allowed"}
    finally:
        app.state.db.dispose()


@pytest.mark.parametrize(
    ("allowed", "address", "expected"),
    [
        (None, None, True),
        ([], "203.0.113.1", True),
        (["192.0.2.7"], "192.0.2.7", True),
        (["192.0.2.7"], "192.0.2.8", False),
        (["192.0.2.0/24"], "::ffff:192.0.2.9", True),
        (["2001:db8::/32"], "2001:db8:1::1", True),
        (["2001:db8::/32"], "192.0.2.1", False),
        (["192.0.2.0/24"], None, False),
        (["192.0.2.0/24"], "testclient", False),
    ],
)
def test_ip_allowed(allowed, address, expected) -> None:
    from pipeline.auth.verification import ip_allowed

    assert ip_allowed(allowed, address) is expected


def test_forwarded_for_left_of_an_untrusted_hop_is_not_believed(make_settings) -> None:
    # A client prepends an allowed address; the trusted proxy appends the real one.
    app = create_app(make_settings(trusted_proxies=["testclient"]))
    try:
        with TestClient(app) as client:
            key = create(client, allowed_ips=["192.0.2.0/24"])["api_key"]
            spoofed = {**bearer(key), "X-Forwarded-For": "192.0.2.77, 198.51.100.1"}
            assert client.get("/api/v1/whoami", headers=spoofed).status_code == 403
            honest = {**bearer(key), "X-Forwarded-For": "198.51.100.1, 192.0.2.77"}
            assert client.get("/api/v1/whoami", headers=honest).status_code == 200
    finally:
        app.state.db.dispose()


def test_forwarded_for_is_ignored_from_untrusted_peers(client: TestClient) -> None:
    key = create(client, allowed_ips=["192.0.2.0/24"])["api_key"]
    headers = {**bearer(key), "X-Forwarded-For": "192.0.2.77"}
    assert client.get("/api/v1/whoami", headers=headers).status_code == 403


# --- verify (beyond the spec) -------------------------------------------------------------------


def test_verify_valid_key(client: TestClient) -> None:
    created = create(client, service_id="prediction", scopes=["predict"])
    assert verify(client, created["api_key"]) == {
        "valid": True,
        "key_id": created["key_info"]["key_id"],
        "service_id": "prediction",
        "scopes": ["predict"],
        "user_id": "admin",
    }


def test_verify_needs_no_admin_token_and_answers_unknown_and_revoked_alike(client) -> None:
    created = create(client)
    unknown = client.post("/api/v1/keys/verify", json={"api_key": "mk_live_" + "A" * 32})
    client.delete(f"/api/v1/keys/{created['key_info']['key_id']}", headers=ADMIN)
    revoked = client.post("/api/v1/keys/verify", json={"api_key": created["api_key"]})
    assert unknown.status_code == revoked.status_code == 200
    assert unknown.json() == revoked.json() == {"valid": False, "reason": "invalid"}


def test_verify_checks_service_and_scope_when_asked(client: TestClient) -> None:
    key = create(client, service_id="prediction", scopes=["predict"])["api_key"]
    assert verify(client, key, service_id="prediction")["valid"] is True
    assert verify(client, key, service_id="platform") == {
        "valid": False,
        "reason": "wrong_service",
    }
    assert verify(client, key, scope="predict")["valid"] is True
    assert verify(client, key, scope="admin") == {"valid": False, "reason": "insufficient_scope"}


@pytest.mark.parametrize(
    "body",
    [{}, {"api_key": ""}, {"api_key": 5}, {"api_key": "x" * 257}, {"api_key": "k", "x": 1}],
    ids=["missing", "empty", "number", "too long", "extra"],
)
def test_verify_bad_body_is_400(client: TestClient, body) -> None:
    response = client.post("/api/v1/keys/verify", json=body)
    assert response.status_code == 400
    assert set(response.json()) == {"detail"}


def test_monthly_prediction_limit_on_verify(client: TestClient, db) -> None:
    created = create(client, service_id="prediction", monthly_prediction_limit=3)
    key = created["api_key"]
    for _ in range(3):
        assert verify(client, key)["valid"] is True
    response = client.post("/api/v1/keys/verify", json={"api_key": key})
    assert response.status_code == 429
    assert set(response.json()) == {"detail"}
    assert int(response.headers["Retry-After"]) >= 1
    with db.session() as session:
        usage = session.scalars(select(KeyUsage)).all()
    assert [(u.key_id, u.count) for u in usage] == [(created["key_info"]["key_id"], 3)]


def test_monthly_limit_survives_rotation(client: TestClient) -> None:
    created = create(client, service_id="prediction", monthly_prediction_limit=2)
    assert verify(client, created["api_key"])["valid"] is True
    rotated = client.post(f"/api/v1/keys/{created['key_info']['key_id']}/rotate", headers=ADMIN)
    new_key = rotated.json()["api_key"]
    assert verify(client, new_key)["valid"] is True
    assert client.post("/api/v1/keys/verify", json={"api_key": new_key}).status_code == 429


def test_zero_monthly_limit_refuses_every_prediction(client: TestClient) -> None:
    key = create(client, service_id="prediction", monthly_prediction_limit=0)["api_key"]
    assert client.post("/api/v1/keys/verify", json={"api_key": key}).status_code == 429


def test_platform_keys_do_not_count_predictions(client: TestClient, db) -> None:
    key = create(client, monthly_prediction_limit=1)["api_key"]
    for _ in range(3):
        assert verify(client, key)["valid"] is True
    with db.session() as session:
        assert session.scalars(select(KeyUsage)).all() == []


def test_monthly_count_is_atomic_under_concurrency(client: TestClient, db) -> None:
    key_id = create(client, service_id="prediction")["key_info"]["key_id"]
    limit, callers, attempts = 25, 8, 6  # 48 attempts race for 25 predictions
    granted: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(callers)

    def caller() -> None:
        start.wait()
        for _ in range(attempts):
            try:
                granted.append(consume_prediction(db, key_id, limit))
            except RateLimited:
                refused.append(1)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted) == list(range(1, limit + 1))
    assert len(refused) == callers * attempts - limit


def test_months_are_counted_separately(client: TestClient, db) -> None:
    from datetime import UTC, datetime

    key_id = create(client, service_id="prediction")["key_info"]["key_id"]
    january = datetime(2030, 1, 31, 23, 59, tzinfo=UTC)
    february = datetime(2030, 2, 1, 0, 0, tzinfo=UTC)
    assert consume_prediction(db, key_id, 1, now=january) == 1
    with pytest.raises(RateLimited) as refused:
        consume_prediction(db, key_id, 1, now=january)
    assert refused.value.retry_after == 60
    assert consume_prediction(db, key_id, 1, now=february) == 1


# --- last_used_at -------------------------------------------------------------------------------


def test_last_used_at_is_set_on_first_use_then_at_most_once_a_minute(client: TestClient) -> None:
    created = create(client)
    key_id = created["key_info"]["key_id"]
    assert client.get(f"/api/v1/keys/{key_id}", headers=ADMIN).json()["last_used_at"] is None
    client.get("/api/v1/whoami", headers=bearer(created["api_key"]))
    first = client.get(f"/api/v1/keys/{key_id}", headers=ADMIN).json()["last_used_at"]
    assert first is not None
    for _ in range(5):
        verify(client, created["api_key"])
    assert client.get(f"/api/v1/keys/{key_id}", headers=ADMIN).json()["last_used_at"] == first


def test_last_used_recorder_writes_once_per_interval(client: TestClient, db) -> None:
    key_id = create(client)["key_info"]["key_id"]
    now = [1000.0]
    recorder = LastUsedRecorder(interval=60, clock=lambda: now[0])
    writes: list[str] = []
    from sqlalchemy import event

    def count(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("UPDATE API_KEYS"):
            writes.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        for _ in range(20):
            recorder.touch(db, key_id)
        assert len(writes) == 1
        now[0] += 61
        recorder.touch(db, key_id)
        assert len(writes) == 2
    finally:
        event.remove(db.engine, "before_cursor_execute", count)


# --- secrets never logged -----------------------------------------------------------------------


def test_key_values_never_reach_the_logs(client: TestClient, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    sql_logger = logging.getLogger("sqlalchemy.engine")
    previous = sql_logger.level
    sql_logger.setLevel(logging.INFO)  # SQL statements and their bound parameters
    try:
        created = create(client, service_id="prediction", monthly_prediction_limit=5)
        values = [created["api_key"]]
        verify(client, created["api_key"])
        rotated = client.post(f"/api/v1/keys/{created['key_info']['key_id']}/rotate", headers=ADMIN)
        values.append(rotated.json()["api_key"])
        verify(client, values[-1])
        verify(client, values[0])  # refused: the old value
        platform = create(client)["api_key"]
        values.append(platform)
        client.get("/api/v1/whoami", headers=bearer(platform))
    finally:
        sql_logger.setLevel(previous)
    assert "api_keys" in caplog.text, "the capture saw no SQL; the test would prove little"
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    for value in values:
        assert value not in logged
        assert value.split("_", 2)[2] not in logged


def test_concurrent_rotations_give_a_key_only_one_successor(db) -> None:
    from pipeline.auth.keys import KeyCreate, create_key, rotate_key
    from pipeline.core.errors import Conflict

    with db.session() as session:
        key_id = create_key(session, KeyCreate(name="k", service_id="platform"), user_id="u").key.id
    first, second = db.sessionmaker(), db.sessionmaker()
    try:
        # Both callers have read the key while it was still active.
        stale_a, stale_b = first.get(ApiKey, key_id), second.get(ApiKey, key_id)
        assert stale_a is not None and stale_b is not None
        rotate_key(first, stale_a)
        first.commit()
        with pytest.raises(Conflict):
            rotate_key(second, stale_b)
        second.rollback()
    finally:
        first.close()
        second.close()
    with db.session() as session:
        active = session.scalars(
            select(ApiKey).where(ApiKey.user_id == "u", ApiKey.is_active.is_(True))
        ).all()
        assert len(active) == 1
